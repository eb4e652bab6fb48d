package temporal

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Agent is an agent.Agent whose runs are AgentWorkflow runs on Temporal:
// each Run starts one on TaskQueue through Client and waits for it, so
// that what serves or calls an agent in process — the AG-UI handler, a
// sub-agent tool, a test — runs a tree on workers instead. A cancelled
// context cancels the workflow, and with it every child, and Run waits
// for it to end (at most 30 seconds), so that its stream ends every
// sub-agent it started and its Output counts what the tree spent.
//
// Run emits RUN_STARTED and RUN_FINISHED (or RUN_ERROR) to the sink of its
// context; with Events, the Hub that the workers' Runtime.Events is in
// this process, it also hands on every event of its tree, as an
// in-process run emits them. An AG-UI client then watches a tree on
// Temporal as it watches any other.
type Agent struct {
	Client    client.Client
	TaskQueue string
	Spec      Spec
	// Events is the Hub the workers publish to (nil: no events but the
	// run's own start and end).
	Events *Hub
	// JobNote, when the Spec has JobsAcrossTurns, is what the model reads
	// of a job of the thread that ended between turns, as the note
	// function of subagent.WithJobsAcrossTurns (nil:
	// subagent.DefaultJobNote); a blank note shows nothing, and the job
	// stays for a wait to collect.
	JobNote func(subagent.JobResult) string
}

// Run runs the Spec on in as a workflow and returns its outcome. A failed
// run reports the usage it spent before it failed.
//
// A question a tool of the tree asks (see Pending) ends Run with a
// *tool.Interrupted, its questions attributed to the child workflows that
// ask them, and leaves the workflow waiting; run again with the answers
// (tool.Resume) under the same journal (agent.WithJournal), as the AG-UI
// handler does, Run finds the same workflow, hands it the answers and goes
// on waiting for it. Without a journal, Run again starts a new workflow.
func (a *Agent) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	if a.Client == nil || a.TaskQueue == "" {
		return agent.Output{}, errors.New("temporal: Agent needs a Client and a TaskQueue")
	}
	em := event.From(ctx)
	sh := &shaper{em: em, steps: map[string]bool{}, subs: map[string]event.Event{}}
	watch := a.Events != nil && em.Enabled()
	var announce []event.Event // the thread's jobs running on from earlier turns
	var unannounced []string   // the workflows of the thread's jobs the turn is not told of
	var unsubscribe func()
	runCtx := ctx
	defer func() {
		if unsubscribe != nil {
			unsubscribe()
		}
	}()
	// The workflow is started once per turn: a run resumed under the
	// turn's journal finds the one the first run started.
	raw, err := tool.Once(ctx, "temporal.start", func(ctx context.Context) (json.RawMessage, error) {
		id := newWorkflowID()
		opts := client.StartWorkflowOptions{ID: id, TaskQueue: a.TaskQueue}
		var thread *ThreadJobs
		if th := agent.Thread(ctx); th != "" && a.Spec.Background && a.Spec.JobsAcrossTurns && agent.Depth(ctx) == 0 {
			// A turn of a thread whose jobs outlive it: every turn of
			// the thread runs under the thread's id (ThreadJobs).
			id = ThreadWorkflowID(agent.Owner(ctx), th)
			opts.ID = id
			opts.WorkflowExecutionErrorWhenAlreadyStarted = true
			opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
			if watch {
				// Heard from before the thread's jobs are read, and held
				// until the turn's stream is told of them: what a job
				// read as running publishes before the turn starts (its
				// end among it) is not lost.
				sh.hold()
				unsubscribe = a.Events.Subscribe(event.WithSink(runCtx, sh), id)
			}
			var err error
			if thread, err = a.threadJobs(ctx, id); err != nil {
				return nil, err
			}
			// The jobs alive in the owner's other threads, for
			// Spec.MaxOwnerJobs.
			key := ownerKey(a.TaskQueue, agent.Owner(ctx))
			var gone []string
			others := ownerThreadsOf(key, id)
			if thread.Elsewhere, gone, err = a.jobsElsewhere(ctx, others); err != nil {
				return nil, err
			}
			forgetThreads(key, gone)
			// Counted again as a spawn is to start a job, those idle now
			// included: one may start a job meanwhile.
			thread.ElsewhereThreads = others
			thread.Owner = key
			announce = thread.announcements()
			for _, k := range thread.Jobs {
				if k.Ended {
					unannounced = append(unannounced, k.WorkflowID)
				}
			}
		}
		if watch && unsubscribe == nil {
			// Heard from before the run starts, and held until its stream
			// has begun: its first model call's events (its usage among
			// them) are not lost to a subscription made after.
			sh.hold()
			unsubscribe = a.Events.Subscribe(event.WithSink(runCtx, sh), id)
		}
		_, err := a.Client.ExecuteWorkflow(ctx, opts, AgentWorkflowName,
			RunInput{Spec: a.Spec, Text: in.Text, Messages: in.Messages, Thread: thread})
		if err != nil {
			return nil, fmt.Errorf("temporal: starting the run: %w", err)
		}
		return json.Marshal(id)
	})
	var id string
	if err == nil {
		err = json.Unmarshal(raw, &id)
	}
	if err != nil {
		em.Emit(event.Event{Type: event.RunError, Message: err.Error()})
		return agent.Output{}, err
	}
	em.Emit(event.Event{Type: event.RunStarted, RunID: id})
	if watch {
		// The turn's stream is told of each job of its thread that an
		// earlier turn started and that runs on, as in process, before any
		// event of theirs reaches it, then what was heard meanwhile. (A
		// run resumed after a round of questions announces them with the
		// round's open sub-agents.)
		sh.release(announce, unannounced)
		if unsubscribe == nil {
			unsubscribe = a.Events.Subscribe(event.WithSink(ctx, sh), id)
		}
	}
	run := a.Client.GetWorkflow(ctx, id, "")
	for {
		out, pending, err := a.wait(ctx, run, id)
		if err == nil && len(pending) > 0 {
			if err = a.answer(ctx, sh, id, pending); err == nil {
				continue
			}
			var asked *tool.Interrupted
			if errors.As(err, &asked) {
				// The workflow waits on; this run's stream ends here,
				// reporting what the tree's model calls spent in it, as a
				// run in process that asks does (the run resumed with the
				// answers reports the whole turn, this part earlier).
				o := sh.suspend(asked)
				o.RunID = id
				for _, m := range sh.paid() {
					ledger.Record(ctx, m, false)
				}
				return o, err
			}
		}
		return a.finish(ctx, em, sh, id, out, err)
	}
}

// shaper hands a tree's events on to a run's stream so that each run's
// stream is whole, as an in-process run's: a run that ends waiting for
// answers closes the steps it opened and ends its sub-agents as
// suspended, and the run resumed after them announces those sub-agents
// again and does not close what an earlier run's stream closed.
type shaper struct {
	em    event.Emitter
	mu    sync.Mutex
	steps map[string]bool        // steps open in this stream, by sub-agent and name
	subs  map[string]event.Event // sub-agents open in this stream, by run id: their start
	order []string               // the order they started in
	// done is the sub-agents this stream has seen end, by run id: a
	// second terminal event of one (a turn publishes a job's end again
	// when it adopted the job, adoptedEndChange) is not handed on.
	done  map[string]bool
	ended bool // the stream has ended: nothing more is handed on
	// holding: what comes is kept in held, not handed on, until release.
	holding bool
	held    []event.Event
	// spent is what the model calls of the tree spent in this stream
	// (agent.UsageEvent), per provider and model; own and children what
	// of it the run's own calls and its sub-agents' spent.
	spent         []provider.ModelUsage
	own, children provider.Usage
	cost          float64
}

// maxHeld bounds the events a shaper holds (hold) of every kind.
const maxHeld = 4096

// hold keeps what comes from now on until release.
func (s *shaper) hold() {
	s.mu.Lock()
	s.holding = true
	s.mu.Unlock()
}

// release hands on first, then what came since hold, but for the events
// of the sub-agent runs not (the workflows of jobs the stream is not told
// of, and their descendants'), and from then on what comes.
func (s *shaper) release(first []event.Event, not []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.held
	s.holding, s.held = false, nil
	for _, e := range first {
		s.emit(e)
	}
	for _, e := range held {
		if !slices.ContainsFunc(not, func(wf string) bool { return ofRun(e, wf) }) {
			s.emit(e)
		}
	}
}

// ofRun reports whether e is an event of the sub-agent run wf, or of one
// of its descendants: one they publish, or a job's CUSTOM event that
// names one.
func ofRun(e event.Event, wf string) bool {
	in := func(id string) bool { return id == wf || strings.HasPrefix(id, wf+"/") }
	if in(e.SubagentRunID) {
		return true
	}
	if e.Type != event.Custom || !strings.HasPrefix(e.Name, "deputy.job_") {
		return false
	}
	var v struct {
		RunID string `json:"subagent_run_id"`
	}
	return json.Unmarshal(e.Value, &v) == nil && in(v.RunID)
}

func (s *shaper) Emit(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holding {
		// Bounded: past maxHeld, only what opens or ends a sub-agent, or
		// tells of a job (deputy.job_*), is kept, not the CUSTOM events a
		// tool of the tree may emit without end.
		if len(s.held) < maxHeld || e.Type == event.SubagentStarted || e.Type == event.SubagentFinished || e.Type == event.SubagentError ||
			e.Type == event.Custom && strings.HasPrefix(e.Name, "deputy.job_") {
			s.held = append(s.held, e)
		}
		return
	}
	s.emit(e)
}

// emit is Emit, s.mu held.
func (s *shaper) emit(e event.Event) {
	if s.ended {
		return // published after the run's end: a model call's reply that came back late
	}
	key := e.SubagentRunID + "\x1f" + e.StepName
	switch e.Type {
	case event.StepStarted:
		s.steps[key] = true
	case event.StepFinished:
		if !s.steps[key] {
			return // opened in an earlier run's stream, and closed there
		}
		delete(s.steps, key)
	case event.SubagentStarted:
		if _, open := s.subs[e.SubagentRunID]; open {
			return // announced again on resume already
		}
		s.subs[e.SubagentRunID] = e
		s.order = append(s.order, e.SubagentRunID)
	case event.Custom:
		if e.Name == agent.UsageEvent {
			s.pay(e)
		}
	case event.SubagentFinished, event.SubagentError:
		if s.done[e.SubagentRunID] {
			return
		}
		if s.done == nil {
			s.done = map[string]bool{}
		}
		s.done[e.SubagentRunID] = true
		delete(s.subs, e.SubagentRunID)
	}
	s.em.Emit(e)
}

// maxPaidModels bounds the providers and models a stream counts apart.
const maxPaidModels = 256

// pay counts one model call's usage event, s.mu held.
func (s *shaper) pay(e event.Event) {
	var v struct{ Usage json.RawMessage }
	if json.Unmarshal(e.Value, &v) != nil {
		return
	}
	ms, _, _ := ledger.Decode(v.Usage)
	for _, m := range ms {
		m.Usage.Requests = 1 // the event is one call's
		if len(s.spent) >= maxPaidModels && !slices.ContainsFunc(s.spent, func(p provider.ModelUsage) bool { return p.Provider == m.Provider && p.Model == m.Model }) {
			m.Provider, m.Model = "", "" // counted, not apart
		}
		s.spent = addModels(s.spent, m)
		if e.SubagentRunID == "" {
			s.own = s.own.Add(m.Usage)
		} else {
			s.children = s.children.Add(m.Usage)
		}
		s.cost += m.Cost
	}
}

// paid returns what the tree's model calls spent in the stream, per
// provider and model.
func (s *shaper) paid() []provider.ModelUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spent)
}

// suspend ends the stream of a run that waits for answers: its open steps
// close, and its open sub-agents, the deepest first, finish suspended,
// each naming the questions it asked itself. It returns what the run's
// and its sub-agents' model calls spent in the stream.
func (s *shaper) suspend(asked *tool.Interrupted) agent.Output {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.subs, s.order = map[string]event.Event{}, nil }()
	s.closeSteps()
	s.ended = true
	for i := len(s.order) - 1; i >= 0; i-- {
		id := s.order[i]
		if _, open := s.subs[id]; !open {
			continue
		}
		var own []string
		for _, it := range asked.Interrupts {
			if it.SubagentRunID == id {
				own = append(own, it.ID)
			}
		}
		s.em.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: id, Outcome: suspendedOutcome(own)})
	}
	return agent.Output{Usage: s.own, ChildUsage: s.children, Cost: s.cost}
}

// closeSteps ends the steps open in the stream.
func (s *shaper) closeSteps() {
	for _, key := range slices.Sorted(maps.Keys(s.steps)) {
		sub, step, _ := strings.Cut(key, "\x1f")
		s.em.Emit(event.Event{Type: event.StepFinished, StepName: step, SubagentRunID: sub})
	}
	s.steps = map[string]bool{}
}

// end ends the stream before its RUN_FINISHED or RUN_ERROR: what the tree
// publishes after is not handed on, and the steps a run that failed left
// open (failed) end, as a failed run's steps do in process.
func (s *shaper) end(failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if failed {
		s.closeSteps()
	}
	s.ended = true
}

// open returns the starts of the sub-agents open in the stream, parents
// first.
func (s *shaper) open() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.Event
	for _, id := range s.order {
		if e, ok := s.subs[id]; ok {
			out = append(out, e)
		}
	}
	return out
}

func suspendedOutcome(ids []string) json.RawMessage {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(map[string]any{"type": "suspended", "interruptIds": ids})
	return b
}

// wait waits for the workflow to end, or to wait on questions.
func (a *Agent) wait(ctx context.Context, run client.WorkflowRun, id string) (RunOutput, []tool.Interrupt, error) {
	var out RunOutput
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run.Get(gctx, &out) }()
	tick := time.NewTicker(pollQuestions)
	defer tick.Stop()
	var (
		seen  string    // the ids of the questions last seen
		since time.Time // when they were first seen as they are
	)
	for {
		select {
		case err := <-done:
			return out, nil, err
		case <-tick.C:
			pending, err := Pending(ctx, a.Client, id)
			if err != nil || len(pending) == 0 {
				seen = ""
				continue // the run may have ended; done says
			}
			// Other branches of the tree may be about to ask too: the
			// questions are handed on once no branch is working (idle),
			// so that one round carries them all; or, when the tree
			// cannot be read, once they have stayed the same for
			// settleQuestions.
			now := questionIDs(pending)
			if now != seen {
				seen, since = now, time.Now()
			}
			if still, ok := idle(ctx, a.Client, id); ok {
				if !still {
					continue
				}
				// Asked meanwhile: read the tree again at the next tick.
				if again, err := Pending(ctx, a.Client, id); err != nil || questionIDs(again) != now {
					continue
				}
			} else if time.Since(since) < settleQuestions {
				continue
			}
			cancel()
			if err := <-done; err == nil {
				return out, nil, nil // it ended as it was asked
			}
			return out, pending, nil
		}
	}
}

// questionIDs is the ids of questions, as one string.
func questionIDs(qs []tool.Interrupt) string {
	ids := make([]string, len(qs))
	for i, it := range qs {
		ids[i] = it.ID
	}
	return strings.Join(ids, "\x1f")
}

// round is a round of questions as the journal keeps it.
type round struct {
	Questions []tool.Interrupt `json:"questions"`
	Open      []event.Event    `json:"open,omitempty"`
}

// pollQuestions is how often Run looks for questions while it waits.
// Once there are some, it hands them on when no branch of the tree is
// working (idle), so that a round of questions carries every question
// the tree asks before it can go no further: a fork that asks after its
// sibling, however much later, is asked in the same round
// (TestParallelChildrenAskInOneRound), and a branch that works for an
// hour holds the round for an hour; a branch that waits on a timer before
// it works on (its wait for its jobs, with a timeout) works
// (TestSiblingWaitingOnATimerHoldsTheRound). settleQuestions is the window Run
// falls back to when it cannot read the tree (a workflow it cannot
// describe, or a tree of more than maxIdleWalk workflows): it hands the
// questions on once they have stayed the same that long, so that a
// branch still working when the window closes asks in a later round,
// after the first round's answers. Which round a question comes in
// changes no outcome (each is answered once, and its call runs once),
// only how many times the person is asked to come back.
const (
	pollQuestions   = 250 * time.Millisecond
	settleQuestions = time.Second
)

// answer asks the caller's person the questions the tree waits on, and
// hands the answers to the tree. Each round's questions, and its answers
// sent, are recorded in the turn's journal (tool.Once), so that a resumed
// run asks the same questions in the same order and sends nothing twice.
//
// The round also records the sub-agents open when it was asked: the run
// resumed with the answers announces them again before the tree goes on,
// as an in-process run announces the sub-agents it resumes.
func (a *Agent) answer(ctx context.Context, sh *shaper, id string, pending []tool.Interrupt) error {
	raw, err := tool.Once(ctx, "temporal.questions", func(context.Context) (json.RawMessage, error) {
		return json.Marshal(round{Questions: pending, Open: sh.open()})
	})
	if err != nil {
		return err
	}
	var r round
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("temporal: a journaled round of questions is damaged: %w", err)
	}
	for _, e := range r.Open {
		sh.Emit(e) // announced again when this run resumes an earlier one
	}
	qs := r.Questions
	var answers []tool.Answer
	var waiting []tool.Interrupt
	for _, q := range qs {
		call := tool.Call{ID: "temporal_" + q.ID, Name: cmp.Or(a.Spec.Name, "temporal"), Arguments: json.RawMessage(`{}`)}
		payload, err := tool.Ask(ctx, call, tool.Question{Reason: q.Reason, Message: q.Message, ResponseSchema: q.ResponseSchema})
		var asked *tool.Interrupted
		switch {
		case errors.As(err, &asked):
			for _, it := range asked.Interrupts {
				it.SubagentRunID = q.SubagentRunID // where the tree asks it
				waiting = append(waiting, it)
			}
		case errors.Is(err, tool.ErrCancelled):
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Cancelled})
		case err != nil:
			return err
		default:
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: payload})
		}
	}
	if len(waiting) > 0 {
		return &tool.Interrupted{Interrupts: waiting}
	}
	_, err = tool.Once(ctx, "temporal.answers", func(ctx context.Context) (json.RawMessage, error) {
		return nil, Answer(ctx, a.Client, id, answers...)
	})
	return err
}

// finish ends a run: its outcome, and RUN_FINISHED or RUN_ERROR, the last
// event of its stream (sh).
func (a *Agent) finish(ctx context.Context, em event.Emitter, sh *shaper, id string, out RunOutput, err error) (agent.Output, error) {
	if ctx.Err() != nil {
		// The caller is gone: so is the run, and every child under it.
		// The run is waited for, as a run in process waits for its
		// sub-agents, so that the stream has the end of each sub-agent
		// it saw start, and the run reports what it spent.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
		if a.Client.CancelWorkflow(cctx, id, "") == nil {
			var ended RunOutput
			if werr := a.Client.GetWorkflow(cctx, id, "").Get(cctx, &ended); cctx.Err() == nil {
				// Cancelled, it reports what it spent; or it answered
				// before the cancel reached it: the run still ends
				// cancelled, with what the answer spent.
				out = ended
				if werr != nil {
					err = werr
				}
			}
		}
		cancel()
	}
	o := agent.Output{RunID: id, Answer: out.Answer, Messages: out.Messages, Usage: out.Usage, ChildUsage: out.ChildUsage, Cost: out.Cost, Refused: out.Refused}
	for _, e := range out.Earlier {
		o.Earlier, o.EarlierCost = o.Earlier.Add(e.Usage), o.EarlierCost+e.Cost
	}
	if len(out.Value) > 0 {
		o.Value = json.RawMessage(out.Value)
	}
	sh.end(err != nil)
	if u := UsageOf(err); err != nil && (!u.IsZero() || out.TotalUsage().IsZero()) {
		o.Usage, o.Cost, o.Refused = u, costOf(err), refusedOf(err)
	}
	if err != nil {
		em.Emit(event.Event{Type: event.RunError, Message: err.Error()})
		return o, fmt.Errorf("temporal: run %s: %w", id, err)
	}
	record(ctx, out.Models, out.Earlier)
	em.Emit(event.Event{Type: event.RunFinished, RunID: id, Result: event.JSONString(out.Answer),
		Usage: usageJSON(out.Models, out.Earlier, o.TotalUsage(), o.Cost)})
	return o, nil
}

// record counts what the tree spent per provider and model (models, of
// which earlier was spent before the last answer) in what the caller of
// Run reports of its run per model: the AG-UI handler's RUN_FINISHED, a
// sub-agent tool's SUBAGENT_FINISHED. The tree counted its cost and its
// limits itself, on the workers.
func record(ctx context.Context, models, earlier []provider.ModelUsage) {
	for _, m := range models {
		var e provider.ModelUsage
		for _, p := range earlier {
			if p.Provider == m.Provider && p.Model == m.Model {
				e = e.Add(p)
			}
		}
		e.Provider, e.Model = m.Provider, m.Model
		ledger.Record(ctx, e, true)
		u := m.Usage
		ledger.Record(ctx, provider.ModelUsage{Provider: m.Provider, Model: m.Model, Cost: max(m.Cost-e.Cost, 0), CacheSaved: m.CacheSaved - e.CacheSaved, Usage: usage.Less(u, e.Usage)}, false)
	}
}

// cancelWait bounds how long a run whose caller is gone waits for its
// workflow to end once cancelled: its model calls in flight are waited
// for (see the package doc).
const cancelWait = 30 * time.Second

func newWorkflowID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "deputy-" + hex.EncodeToString(b[:])
}
