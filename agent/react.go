package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// React is the ReAct loop: it calls the model, runs the tools it asks for (in
// parallel), and repeats until the model answers with text. It keeps its
// conversation across runs; a failed run leaves it as it was. It is safe for
// concurrent use: runs take turns, a waiting caller giving up with its ctx.
type React struct {
	p            provider.Provider
	streamer     provider.Streamer // p, when it streams
	name         string
	system       string
	model        string
	tools        *tool.Registry
	maxSteps     int
	toolRetries  int
	output       *output // OutputOf
	tokenLimit   int64
	prices       *provider.Prices // set by WithPrices
	costLimit    float64          // set by WithCostLimit
	policy       *policy.Policy   // set by WithPolicy
	guards       *guardrail.Set   // set by WithGuardrails; nil: none
	historyLimit int
	maxTokens    int
	temperature  *float64
	cacheKey     string       // set by WithCacheKey; else the name
	tracer       trace.Tracer // set by WithTracerProvider
	parallelism  int          // set by WithParallelism; 0 leaves the registry's
	logger       *slog.Logger // set by WithLogger; nil logs nothing
	compaction   *Compaction  // with defaults; nil: WithoutCompaction
	window       int64        // set by WithContextWindow; 0: unknown

	turn   *semaphore.Weighted // held for a whole run
	mu     sync.Mutex          // guards kept and epochs
	kept   kept
	epochs uint64 // the last epoch given (newEpoch)
}

// kept is the conversation a React keeps between runs. It is a value:
// a checkpoint is a copy, and restoring one puts the copy back.
type kept struct {
	msgs  []provider.Message
	bytes int64 // compact.MsgsBytes(msgs)
	// spare reports that no one wrote past the end of msgs in its array,
	// so that the next run may append in place instead of copying the
	// whole history (a checkpoint or a failed run may have: then the run
	// copies).
	spare bool
	// reported is the input plus output tokens the provider reported for
	// the last reply of the conversation, which covered its first
	// reportedBytes bytes; zero when none did.
	reported, reportedBytes int64
	// epoch changes whenever the conversation changes other than by
	// messages added at its end (Mark).
	epoch uint64
}

// newEpoch returns an epoch no conversation of r had. Call it with r.mu
// held.
func (r *React) newEpoch() uint64 {
	r.epochs++
	return r.epochs
}

// NewReact returns a ReAct agent over p. It fails on a nil provider or a bad
// option value, saying which.
func NewReact(p provider.Provider, opts ...Option) (*React, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: pass a provider, such as fake.NewProvider(...) or openai.New()", ErrNilProvider)
	}
	st, _ := p.(provider.Streamer)
	r := &React{
		p:           p,
		streamer:    st,
		name:        DefaultName,
		maxSteps:    DefaultMaxSteps,
		toolRetries: DefaultToolRetries,
		compaction:  new(Compaction{}.withDefaults()),
		turn:        semaphore.NewWeighted(1),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.parallelism > 0 {
		if r.tools == nil {
			return nil, fmt.Errorf("%w: WithParallelism(%d) on an agent without tools: give it tools (WithTools or WithRegistry) or leave the option out", ErrInvalidOption, r.parallelism)
		}
		if err := r.tools.SetParallelism(r.parallelism); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Name returns the agent's name.
func (r *React) Name() string { return r.name }

// Tools returns the agent's tool registry (nil when it has no tools).
func (r *React) Tools() *tool.Registry { return r.tools }

// Provider returns the agent's provider.
func (r *React) Provider() provider.Provider { return r.p }

// SystemPrompt returns the agent's system prompt.
func (r *React) SystemPrompt() string { return r.system }

// Run asks the agent in and returns its answer; a failed run's Output holds
// its id, messages and usage. Under an event sink (event.WithSink) it emits
// AG-UI events, RUN_STARTED to RUN_FINISHED or RUN_ERROR, with a step per
// model call, its reply (streamed) and its tool calls, closing all it opens.
func (r *React) Run(ctx context.Context, in Input) (out Output, err error) {
	if len(in.Messages) > 0 {
		open, err := conversation.CheckOpen(in.Messages)
		if err == nil && len(open) > 0 && in.Text != "" {
			err = errors.New("the conversation ends with tool calls left without a result, and Text would follow them: leave Text empty to run those calls")
		}
		if err != nil {
			return Output{}, fmt.Errorf("agent %q: %w: %v", r.name, ErrBadMessages, err)
		}
	}
	if f := in.Fork; f != nil {
		if open, err := conversation.CheckOpen(f.Messages); err != nil || len(open) > 0 || len(f.Messages) == 0 {
			return Output{}, fmt.Errorf("agent %q: %w: Input.Fork holds no conversation a fork can go on from (%d messages, %d calls without a result, %v): give it the request a parent sent",
				r.name, ErrBadMessages, len(f.Messages), len(open), err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Output{}, fmt.Errorf("agent %q: not started: %w", r.name, err)
	}
	if t, ok := ctx.Value(heldKey{}).(*Turn); ok && t != nil && t.r == r && !t.released {
		// The caller holds the turn (Hold). The run's tools do not.
		return r.run(context.WithValue(ctx, heldKey{}, (*Turn)(nil)), in)
	}
	if err := r.turn.Acquire(ctx, 1); err != nil {
		return Output{}, fmt.Errorf("agent %q: waiting for the previous run to end: %w", r.name, err)
	}
	defer r.turn.Release(1)
	return r.run(ctx, in)
}

// run is Run once the turn is held.
func (r *React) run(ctx context.Context, in Input) (out Output, err error) {
	r.mu.Lock()
	base := r.kept
	inPlace := base.spare
	r.kept.spare = false // this run may write past its end
	r.mu.Unlock()
	if in.Fork != nil && len(base.msgs) > 0 {
		return Output{}, fmt.Errorf("agent %q: %w: a context fork (Input.Fork) starts from its parent's conversation, and this agent holds one of its own: build a fresh agent for each fork",
			r.name, ErrBadMessages)
	}

	// A background child's mailbox is this run's alone: the runs its
	// tools start do not see it.
	box := mailbox.From(ctx)
	if box != nil {
		ctx = mailbox.With(ctx, nil)
	}
	ctx = policy.With(ctx, r.policy)
	em := event.From(ctx) // the scope is looked up once for the run's events
	events := em.Enabled()
	runID := id.New("run_")
	tr := r.tracerFor(ctx)
	var s *runState
	if tr != nil {
		var span trace.Span
		ctx, span = startRunSpan(ctx, tr, r, runID)
		defer func() { endRunSpan(span, out, s.ownEarlier, err) }()
	}
	ctx = run.Start(ctx, runID, r.name, r.tokenLimit)
	run.SetPrices(ctx, r.prices)
	run.SetCostLimit(ctx, r.costLimit)
	s = &runState{r: r, ctx: ctx, toolCtx: ctx, runID: runID, em: em, events: events, tracer: tr, policy: policy.From(ctx),
		schema: in.ResponseSchema, cacheKey: in.CacheKey, limit: run.Limit(ctx), readBack: run.ReadBack(ctx), box: box}
	if s.schema == nil && r.output != nil {
		s.schema = r.output.schema.Raw()
	}
	if f := in.Fork; f != nil && s.cacheKey == "" {
		s.cacheKey = f.CacheKey // where the parent's prefix is cached
		s.fork = f
	} else if f != nil {
		s.fork = f
	}
	if s.cacheKey == "" {
		s.cacheKey = r.cacheKey
	}
	if s.cacheKey == "" {
		s.cacheKey = r.name
	}
	// Under a sub-agent the run-level events are not forwarded (the
	// SUBAGENT_* events stand for them), so they are not built either.
	runEvents := s.events && em.SubagentRunID() == ""
	if tr != nil {
		s.traceHook = toolSpans{tr}.hook
		s.toolCtx = tool.WithCallHook(ctx, s.traceHook)
	}
	s.journal = r.journalFor(ctx)
	if s.journal != nil {
		s.summariesRead = map[string]bool{}
	}
	if s.fork != nil {
		// The parent's messages are shared, not copied: clipped, so that
		// the first message the fork adds copies their headers into a
		// slice of its own, and the parent's are never written.
		s.msgs = slices.Clip(s.fork.Messages)
		base.bytes, base.reported, base.reportedBytes = compact.MsgsBytes(s.msgs), 0, 0
		base.msgs = s.msgs
	} else if inPlace {
		// Appending in place keeps a call's cost flat as the history
		// grows: the history before it is neither copied nor changed.
		s.msgs = base.msgs
	} else {
		s.msgs = make([]provider.Message, len(base.msgs), len(base.msgs)+len(in.Messages)+4)
		copy(s.msgs, base.msgs)
	}
	s.bytes, s.reported, s.reportedBytes = base.bytes, base.reported, base.reportedBytes
	s.start = len(base.msgs)
	for _, m := range in.Messages {
		s.add(m)
	}
	if len(in.Messages) > 0 && in.Text == "" {
		s.open, _ = conversation.CheckOpen(in.Messages) // checked above
	}
	if len(s.open) == 0 && (in.Text != "" || len(in.Messages) == 0) {
		s.add(provider.UserMessage(in.Text))
	}

	if runEvents {
		em.Emit(event.Event{Type: event.RunStarted, RunID: runID, ParentRunID: ParentRunID(ctx)})
	}
	var began time.Time
	if r.logger != nil {
		began = time.Now()
		defer func() { s.logEnd(s.steps, time.Since(began), err) }()
	}
	var answer string
	if r.guards.Has(policy.Input) {
		err = s.guardInput(inputText(in))
	}
	if err == nil {
		answer, err = s.loop()
	}
	s.respendUnread()
	s.child = s.child.Add(run.Finish(ctx))
	if ParentRunID(ctx) == "" && Depth(ctx) == 0 && (err == nil || isInterrupted(err)) {
		// A resumed top-level run (not one a tool runs inside another)
		// that did not reach a call it was given an answer for is not the
		// turn that asked: say so, rather than ask again.
		if uerr := unusedAnswers(ctx); uerr != nil {
			err = uerr
		}
	}
	if err == nil {
		// Cancelled while the run wound up (its background work still
		// running): the caller gave up before the run ended, and is told so.
		err = ctx.Err()
	}
	// Clipped, like the requests' messages: whoever appends to it gets a
	// slice of their own rather than writing into the agent's.
	out = Output{RunID: runID, Answer: answer, Messages: slices.Clip(s.msgs[s.start:]), Usage: s.usage, ChildUsage: s.child, Value: s.value,
		Compactions: s.compactions, Partial: s.partial}
	out.Queued, out.Refused = run.Counts(ctx)
	out.Cost, out.Unpriced = run.Cost(ctx)
	out.CacheSaved = run.Saved(ctx)
	out.Earlier, out.EarlierCost = run.Earlier(ctx)
	if s.policy != nil {
		out.Denials = denials(ctx)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// Whatever else went wrong, the caller cancelled: say so first.
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		err = fmt.Errorf("agent %q: %w", r.name, err)
		if runEvents {
			em.Emit(failedRunEvent(runID, err))
		}
		return out, err
	}
	k := kept{msgs: s.msgs, bytes: s.bytes, spare: true, reported: s.reported, reportedBytes: s.reportedBytes, epoch: base.epoch}
	trimmed := trimHistory(s.msgs, r.historyLimit)
	if len(trimmed) < len(s.msgs) {
		k = kept{msgs: trimmed, bytes: compact.MsgsBytes(trimmed), spare: true}
	}
	r.mu.Lock()
	if s.compactions > 0 || len(trimmed) < len(s.msgs) {
		k.epoch = r.newEpoch() // no longer the same conversation with more at its end
	}
	r.kept = k
	r.mu.Unlock()
	if runEvents {
		em.Emit(event.Event{Type: event.RunFinished, RunID: runID, Result: event.JSONString(answer)})
	}
	return out, nil
}

// runState is one run in progress.
type runState struct {
	r       *React
	ctx     context.Context
	toolCtx context.Context // ctx, with the tracing hook when traced
	runID   string
	em      event.Emitter // of ctx
	events  bool          // em.Enabled()
	tracer  trace.Tracer  // nil when not traced
	msgs    []provider.Message
	usage   provider.Usage
	child   provider.Usage
	// ownEarlier is the part of usage replayed from the journal: the
	// model answers and summaries an earlier run of the turn paid for.
	ownEarlier provider.Usage
	// start is where the run's own messages begin in msgs, bytes what
	// msgs weigh (compact.MsgBytes), and reported and reportedBytes the last
	// reply's reported tokens and the bytes they covered (see kept).
	start                          int
	bytes, reported, reportedBytes int64
	// compactions counts the run's compactions; nothingToCompact is set
	// once a compaction found nothing before the run to fold in.
	compactions      int
	nothingToCompact bool
	// summariesRead holds the journal keys of the summaries the run
	// replayed or made (see respendUnread).
	summariesRead map[string]bool
	// schema is the run's Input.ResponseSchema, cacheKey the key of its
	// model calls: both the same on every call of the run.
	schema   json.RawMessage
	cacheKey string
	// fork is the parent's request a context fork starts from (nil: the
	// run is no fork), and prefix the request of the step whose tool
	// calls run now, which the forks they start send (run.WithPrefix).
	fork   *provider.Request
	prefix *provider.Request
	// value is the answer's value under OutputOf, corrected whether the
	// model was told once that its answer did not fit.
	value     any
	corrected bool
	// journal is the run's part of its turn's journal (nil: none), and
	// traceHook the tools' tracing hook (nil: not traced).
	journal   *runJournal
	traceHook tool.CallHook
	// policy binds the run (policy.From of its context), nil when none;
	// modelCheck is its model calls' check (guardModel), made on the first.
	policy     *policy.Policy
	modelCheck *modelCheck
	steps      int // model calls begun
	// answered and called are the last step whose model answer the run
	// replayed or received, and the last whose recorded call results it
	// read (under a journal; see respendUnread).
	answered, called int
	// callsRun holds the index of each call of step called that the run
	// replayed or began (guarded by the recorder's mutex while they run).
	callsRun map[int]bool
	// limit is the run's token limit (0: none): the agent's, or less when
	// the tool that started the run gave it less. lastOut is the output
	// tokens of the last reply, for the estimate of the next call's cost;
	// partial is set when the run answered in a wrap-up turn.
	// open is the calls of the input's last turn left without a result,
	// which the run runs first.
	open      []provider.ToolCall
	limit     int64
	lastOut   int64
	lastModel string // the model that answered last, for the price of the next call
	partial   bool
	// readBack: the run's answer goes back to a parent that reads it out
	// of the same budget (run.ReadBack).
	readBack bool
	// box is the mailbox of a background child's run (nil: none), read at
	// each step boundary (see inbox.go).
	box *mailbox.Box
}

func (s *runState) loop() (string, error) {
	if s.r.costLimit > 0 && !run.Priced(s.ctx) {
		return "", fmt.Errorf("%w: WithCostLimit without prices: give this agent, or the one that starts it, WithPrices", ErrInvalidOption)
	}
	failures := 0
	if len(s.open) > 0 {
		if err := s.runOpen(); err != nil {
			return "", err
		}
	}
	for step := 1; ; step++ {
		if step > s.r.maxSteps {
			return "", fmt.Errorf("%w: no answer after %d model calls: raise WithMaxSteps or give a narrower task", ErrMaxSteps, s.r.maxSteps)
		}
		if err := s.ctx.Err(); err != nil {
			return "", err
		}
		s.steps = step
		if err := s.deliver(step); err != nil {
			return "", err
		}
		var stepName, firstResult string
		if s.events {
			stepName, firstResult = s.stepNames(step)
			s.em.Emit(event.Event{Type: event.StepStarted, StepName: stepName})
		}
		answer, done, err := s.step(step, stepName, firstResult, &failures)
		if s.events {
			s.em.Emit(event.Event{Type: event.StepFinished, StepName: stepName})
		}
		s.reached(step)
		if err != nil || done {
			return answer, err
		}
	}
}

// step makes one model call and runs the tools it asks for. It reports
// done with the answer when the model answered with text. With events on,
// stepName names the step (loop emits its STEP_* events), and is the
// message id of the reply; firstResult is the message id of the first
// tool result.
func (s *runState) step(step int, stepName, firstResult string, failures *int) (answer string, done bool, err error) {
	r := s.r
	msgID := stepName
	tools := s.tools()
	fixed := int64(len(s.system())+len(s.schema)) + toolsBytes(tools)
	if err := s.fit(step, fixed, false); err != nil {
		return "", false, err
	}
	var stepKey string
	var resp provider.Response
	replayed := false
	if s.journal != nil {
		stepKey = s.journal.stepKey(step)
		if resp, replayed = s.journal.answer(stepKey); replayed {
			s.respendAnswer(resp)
			// The run that recorded the answer may have had the provider
			// refuse the request as too long first, and compacted: so
			// does this one, with the summary it recorded.
			if s.journal.has(s.summaryKey(step)) {
				if err := s.fit(step, fixed, true); err != nil {
					return "", false, err
				}
			}
		}
	}
	// The call's tokens and dollars are reserved before it is made (plan);
	// a call after which another would not fit is the run's last: the
	// model gets no tools and is asked to answer with what it has. A
	// replayed answer was the wrap-up's if its reply was.
	var pl callPlan
	if replayed {
		pl.wrapUp = s.journal.wrappedUp(stepKey)
	} else if pl, err = s.plan(fixed); err != nil {
		return "", false, err
	}
	wrapUp := pl.wrapUp
	if wrapUp {
		tools = nil
	}
	s.answered = step
	for retried := false; !replayed; retried = true {
		var began time.Time
		if r.logger != nil {
			began = time.Now()
		}
		req := s.request(tools, pl)
		if s.policy != nil {
			if req, err = s.guardModel(req); err != nil {
				return "", false, err
			}
		}
		resp, err = s.complete(req, msgID)
		s.usage = s.usage.Add(resp.Usage)
		s.account(req, resp)
		if r.logger != nil {
			s.logModelCall(step, resp, time.Since(began), err)
		}
		if err == nil {
			break
		}
		// A request the provider finds too long for the window, though
		// the estimate let it through, is compacted and sent once more.
		var pe *provider.Error
		if retried || r.compaction == nil || s.nothingToCompact || !errors.As(err, &pe) || pe.Kind != provider.KindContextWindow {
			return "", false, err
		}
		if ferr := s.fit(step, fixed, true); ferr != nil {
			return "", false, ferr
		}
		if s.nothingToCompact {
			return "", false, err
		}
		if pl, err = s.plan(fixed); err != nil { // the summary was paid for
			return "", false, err
		}
		wrapUp = wrapUp || pl.wrapUp
		if wrapUp {
			tools = nil
		}
	}
	if !replayed && pl.bounded && resp.StopReason == provider.StopMaxTokens {
		// Cut at the output bound its budget set: the run has nothing
		// left for another call, and its words are what it has.
		wrapUp = true
	}
	msg := resp.Message
	msg.Role = provider.RoleAssistant
	empty := msg.Content == "" && len(msg.ToolCalls) == 0
	msg.ToolCalls = withIDs(msg.ToolCalls)
	if s.journal != nil && !replayed && !empty {
		// Recorded even when the run was cancelled as the reply came: it
		// is paid for, and the turn run again replays it instead of
		// asking the model again.
		if err := s.journal.recordAnswer(context.WithoutCancel(s.ctx), stepKey, resp, msg, wrapUp); err != nil && s.ctx.Err() == nil {
			return "", false, err
		}
	}
	if err := s.ctx.Err(); err != nil {
		// A reply that arrives after cancellation is not acted on.
		return "", false, err
	}
	if empty {
		return "", false, fmt.Errorf("%w (stop reason %q): check the model and its max tokens", ErrEmptyReply, resp.StopReason)
	}
	s.lastOut = resp.Usage.OutputTokens
	if resp.Model != "" {
		s.lastModel = resp.Model
	}
	if wrapUp {
		answer, done, err := s.wrappedUp(msg, resp.Usage)
		if err == nil && done && s.r.guards.Has(policy.Output) {
			// A wrap-up's answer is the run's last: it cannot be corrected.
			s.corrected = true
			if done, err = s.guardAnswer(answer); err != nil {
				answer, s.msgs = "", s.msgs[:len(s.msgs)-1]
			}
		}
		return answer, done, err
	}
	s.add(msg)
	s.noteReply(resp.Usage)
	if len(msg.ToolCalls) > 0 {
		// Over the limit with tools still to run: the run is cut short.
		if err := s.checkLimit(); err != nil {
			return "", false, err
		}
	} else {
		s.setUsed()
	}
	if len(msg.ToolCalls) == 0 {
		if r.output != nil {
			done, err := s.checkAnswer(msg.Content)
			if !done {
				return "", false, nil // the next step may be a wrap-up turn
			}
			if err != nil {
				return msg.Content, true, err
			}
		}
		if r.guards.Has(policy.Output) {
			done, err := s.guardAnswer(msg.Content)
			if err != nil {
				// The answer goes no further: not to the caller, not in
				// the run's messages.
				s.msgs = s.msgs[:len(s.msgs)-1]
				return "", true, err
			}
			if !done {
				return "", false, nil
			}
		}
		return msg.Content, true, nil
	}

	var began time.Time
	if r.logger != nil {
		began = time.Now()
	}
	// The forks the calls start send the conversation as this step sent
	// it (replayed or not), without the reply that started them.
	prefix := s.request(tools, callPlan{})
	prefix.Messages = prefix.Messages[:len(prefix.Messages)-1]
	s.prefix = &prefix
	results, fromJournal, err := s.runCalls(step, stepKey, msg.ToolCalls)
	if r.logger != nil {
		s.logToolCalls(step, msg.ToolCalls, results, time.Since(began))
	}
	var failed error
	for i, res := range results {
		s.child = s.child.Add(res.Usage)
		call := msg.ToolCalls[i]
		s.add(provider.ToolMessage(call.ID, res.Content, res.IsError))
		if res.IsError {
			failed = res.Err
			if failed == nil {
				failed = errors.New(res.Content)
			}
		}
		// The client has the result of a call answered from the journal
		// (the run that made it showed it), and a call that waits for an
		// answer has none yet.
		if s.events && (fromJournal == nil || !fromJournal[i]) && (res.Err == nil || !isInterrupted(res.Err)) {
			resultID := firstResult
			if i > 0 {
				resultID = stepName + "/result-" + strconv.Itoa(i+1)
			}
			s.em.Emit(event.Event{Type: event.ToolCallResult, MessageID: resultID, ToolCallID: call.ID, Content: res.Content, Role: "tool"})
		}
	}
	if err != nil {
		return "", false, err
	}
	if failed != nil {
		*failures++
		if *failures > r.toolRetries {
			return "", false, fmt.Errorf("%w: %d steps in a row had a failed tool call, the last: %w", ErrToolRetries, *failures, failed)
		}
	} else {
		*failures = 0
	}
	s.setUsed()
	return "", false, nil // past the limit, the next step is a wrap-up turn
}

// runOpen runs the calls of the input's open turn, those left without a
// result, and adds their results to the conversation, as a step whose model
// call was made before the run.
func (s *runState) runOpen() error {
	var stepName, firstResult string
	if s.events {
		stepName, firstResult = s.stepNames(0)
		s.em.Emit(event.Event{Type: event.StepStarted, StepName: stepName})
		defer s.em.Emit(event.Event{Type: event.StepFinished, StepName: stepName})
	}
	stepKey := ""
	if s.journal != nil {
		stepKey = s.journal.stepKey(0)
	}
	results, fromJournal, err := s.runCalls(0, stepKey, s.open)
	for i, res := range results {
		s.child = s.child.Add(res.Usage)
		call := s.open[i]
		s.add(provider.ToolMessage(call.ID, res.Content, res.IsError))
		if s.events && (fromJournal == nil || !fromJournal[i]) && (res.Err == nil || !isInterrupted(res.Err)) {
			resultID := firstResult
			if i > 0 {
				resultID = stepName + "/result-" + strconv.Itoa(i+1)
			}
			s.em.Emit(event.Event{Type: event.ToolCallResult, MessageID: resultID, ToolCallID: call.ID, Content: res.Content, Role: "tool"})
		}
	}
	s.setUsed()
	return err
}

// system is the system prompt the run's model calls send: a context
// fork's parent's, else the agent's.
func (s *runState) system() string {
	if s.fork != nil {
		return s.fork.System
	}
	return s.r.system
}

// tools are the tool definitions the run's model calls offer: a context
// fork's parent's, as the parent offered them, else those of the agent's
// registry available under the run's context.
func (s *runState) tools() []provider.ToolDef {
	if s.fork != nil {
		return s.fork.Tools
	}
	return s.r.tools.Definitions(s.ctx)
}

// request is the step's model request, over the conversation so far.
func (s *runState) request(tools []provider.ToolDef, pl callPlan) provider.Request {
	r := s.r
	req := provider.Request{
		Model:          r.model,
		System:         r.system,
		Messages:       slices.Clip(s.msgs), // a provider that appends must not write where the next message goes
		Tools:          tools,
		MaxTokens:      pl.maxTokens,
		Temperature:    r.temperature,
		ResponseSchema: s.schema,
		CacheKey:       s.cacheKey,
	}
	if f := s.fork; f != nil {
		req.System, req.SharedPrefix = f.System, len(f.Messages)
		if f.Model != "" {
			req.Model = f.Model // the cache is the model's
		}
	}
	if note := pl.note; note != "" {
		// The note changes from call to call, so it goes last, after the
		// conversation, where it leaves the cached prefix as it was; it is
		// not kept in the conversation.
		req.Messages = append(req.Messages, provider.UserMessage(note))
	}
	return req
}

// runCalls runs the step's tool calls, and returns their results by index
// and, under a journal, which of them were answered from it (nil: none).
// Under a journal each call that finishes is recorded, and a call recorded
// before is not run again.
//
// Under a token limit, an equal share of what the run has left is set aside
// for each call's sub-agent before the calls start (run.WithShares).
//
// Each call knows its place in the run's tree (run.AtStep): a run it
// starts is placed under the step and the call's index.
func (s *runState) runCalls(step int, stepKey string, calls []provider.ToolCall) (results []tool.Result, replayed []bool, err error) {
	ids := make([]string, len(calls))
	for i := range calls {
		ids[i] = calls[i].ID
	}
	toolCtx := run.AtStep(s.toolCtx, step, ids)
	if s.limit > 0 || s.costLimited() {
		// The run keeps back what its next call reads before the results
		// and one share for its reply: its wrap-up is paid for before the
		// calls' sub-agents get their shares.
		keep, keepCost := s.keep(int64(len(s.system())+len(s.schema)) + toolsBytes(s.tools()))
		var release func()
		toolCtx, release = run.WithShares(toolCtx, len(calls), keep, keepCost)
		defer release()
	}
	if s.prefix != nil {
		toolCtx = run.WithPrefix(toolCtx, s.prefix)
		s.prefix = nil // each step's calls get the step's own
	}
	if s.journal == nil {
		results, err = s.r.tools.Execute(toolCtx, calls)
		return results, nil, err
	}
	results, replayed = s.journal.replayed(s.ctx, stepKey, calls)
	s.called = s.steps
	rec := &callRecorder{j: s.journal, step: stepKey, tools: s.r.tools, inner: s.traceHook, index: make(map[string]int, len(calls)),
		started: make(map[int]bool, len(calls)), extra: map[int]provider.Usage{}}
	s.callsRun = rec.started
	todo := make([]provider.ToolCall, 0, len(calls))
	for i, c := range calls {
		if replayed[i] {
			rec.started[i] = true
		} else {
			rec.index[c.ID] = i
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return results, replayed, nil
	}
	got, err := s.r.tools.Execute(tool.WithCallHook(toolCtx, rec.hook), todo)
	for k, c := range todo {
		i := rec.index[c.ID]
		results[i] = got[k]
		results[i].Usage = results[i].Usage.Add(rec.extra[i])
	}
	// The writes are waited for even when the run was cancelled: a call
	// that ran must be found recorded by the run that recovers this one.
	if werr := rec.wait(context.WithoutCancel(s.ctx)); werr != nil && (err == nil || isInterrupted(err)) {
		err = werr
	}
	return results, replayed, err
}

// isInterrupted reports whether err is a run's wait for answers.
func isInterrupted(err error) bool {
	var in *tool.Interrupted
	return errors.As(err, &in)
}

// stepNames returns the names of a step's events: its step name, which is
// also the message id of the reply's text (AG-UI keeps the two apart), and
// the message id of its first tool result; a later result's id is the step
// name and "/result-<n>". Run ids are unique, so step names are unique among
// all open steps, whoever owns them (older AG-UI clients key steps by name
// alone).
func (s *runState) stepNames(step int) (stepName, firstResult string) {
	stepName = s.runID + "/step-" + strconv.Itoa(step)
	return stepName, stepName + "/result-1"
}

// complete makes one model call: streamed when the provider streams and
// someone listens to events, plain otherwise; inside a chat span when traced.
// A provider that panics fails the run with ErrProviderPanic instead of
// taking the program down.
func (s *runState) complete(req provider.Request, msgID string) (resp provider.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = provider.Response{}, fmt.Errorf("%w: %v", ErrProviderPanic, p)
		}
	}()
	return s.call(req, msgID)
}

func (s *runState) call(req provider.Request, msgID string) (resp provider.Response, err error) {
	ctx := s.ctx
	if s.tracer != nil {
		var span trace.Span
		providerName, _ := s.r.spanIdentity()
		ctx, span = startChatSpan(ctx, s.tracer, req.Model, providerName)
		defer func() {
			dollars, saved, priced := s.price(req, resp)
			endChatSpan(span, resp, err, dollars, saved, priced)
		}()
	}
	if !s.events {
		return s.r.p.Complete(ctx, req)
	}
	if st := s.r.streamer; st != nil {
		sr := &streamReply{em: s.em, msgID: msgID}
		defer sr.closeAll() // on a panic too
		resp, err = st.Stream(ctx, req, sr.delta)
		if err != nil {
			return provider.Response{}, err
		}
		resp.Message.ToolCalls = sr.finish(resp.Message.ToolCalls)
		return resp, nil
	}
	resp, err = s.r.p.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	// The calls get their ids now, so that the events announce them.
	resp.Message.ToolCalls = withIDs(resp.Message.ToolCalls)
	m := resp.Message
	em := s.em
	parent := ""
	if m.Content != "" {
		parent = msgID
		em.Emit(event.Event{Type: event.TextMessageStart, MessageID: msgID, Role: "assistant"})
		em.Emit(event.Event{Type: event.TextMessageContent, MessageID: msgID, Delta: m.Content})
		em.Emit(event.Event{Type: event.TextMessageEnd, MessageID: msgID})
	}
	for i := range m.ToolCalls {
		emitCall(em, &m.ToolCalls[i], parent)
	}
	return resp, nil
}
