package temporal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Jobs that outlive their turn (Spec.JobsAcrossTurns), as
// subagent.WithJobsAcrossTurns in process.
//
// Every turn of a thread runs under one workflow id, ThreadWorkflowID of
// its owner and thread: the turns are successive runs of it (a thread
// has one turn running at a time), and the thread's jobs are child
// workflows started with parent-close policy ABANDON under ids of the
// thread (that id, "/job_", the job's number in the thread), never of a
// run. A job tells its parent where it stands by a signal to that id,
// which reaches whichever turn runs now.
//
// How a turn learns the thread's jobs: Agent, before it starts the turn,
// reads them from the thread's last turn (a query of its closed run,
// ThreadJobsQuery, which the server answers by replaying that run's
// history), asks the server which of those still running have ended and
// with what (the jobs' own results), and passes the whole in the turn's
// RunInput.Thread, with the notes of the jobs that ended meanwhile
// already written (Agent.JobNote). Chosen because it is the plainest
// that replays: the turn's workflow reads what happened between turns
// from its input, which its history holds, and nothing else; a listing
// of child workflows by id prefix would read the server's visibility
// store, which lags and is not in the history. A job still running when
// the turn starts is waited for by an activity (AwaitJobActivityName)
// that returns the job's outcome once its workflow has closed, which the
// history records in turn.
//
// A last turn the server no longer has (its history is past the
// namespace's retention, or was deleted), or whose jobs it cannot tell,
// leaves the next turn to start the thread afresh, knowing none of the
// earlier jobs, some of which may still run. Their ids stay theirs: a
// job whose id the server finds taken by a running workflow starts under
// the next number (jobIDsChange), as a Go user would expect of ids that
// name one job each; the forgotten jobs end at their Spec.JobTime.

const (
	// ThreadJobsQuery returns what a turn of a thread knows of the
	// thread's jobs (a ThreadJobs), at its end for a closed run: Agent
	// reads it from the thread's last turn.
	ThreadJobsQuery = "deputy.thread_jobs"

	// AwaitJobActivityName is the activity that waits for a job an
	// earlier turn of the thread started to end and returns its outcome.
	AwaitJobActivityName = "deputy.AwaitJob"

	// OwnerJobsActivityName is the activity by which a turn of a thread
	// counts, as a step's spawns are to start their jobs, the jobs alive
	// in the owner's other threads (ThreadJobs.ElsewhereThreads), for
	// Spec.MaxOwnerJobs.
	OwnerJobsActivityName = "deputy.OwnerJobs"

	// jobHelloSignal is a turn asking a job an earlier turn of its thread
	// started where it stands: the job answers with a progress signal to
	// the thread (jobProgress.Hello), which reaches the turn, since what
	// it told while no turn ran was lost.
	jobHelloSignal = "deputy.job_hello"

	// jobStandingQuery returns where a job of a thread stood when it
	// last told its thread (a jobStanding): Agent reads it from a job
	// that ended while no turn ran, since what the job told then was
	// lost.
	jobStandingQuery = "deputy.job_standing"

	// greetTime bounds how long a turn waits for its thread's running
	// jobs to answer its hello before its first model call.
	greetTime = 10 * time.Second

	// maxHelloDelivered bounds the message ids a job of a thread keeps
	// to tell a turn that asks.
	maxHelloDelivered = 256

	// maxKeptJobs bounds the jobs a thread keeps once they are handed
	// over (collected): the oldest go first, as in process.
	maxKeptJobs = 64

	// maxKeptBytes bounds what the jobs a thread keeps once they are
	// handed over weigh (as JSON, their answers with them): the oldest go
	// first, so that a turn's input stays well below the server's limit
	// on a payload (2 MiB by default) however long the jobs' answers.
	maxKeptBytes = 512 << 10
)

// ThreadWorkflowID is the workflow id under which every turn of the
// thread runs, for the owner (agent.WithOwner) and thread
// (agent.WithThread): Jobs, SendToJob, CancelJob, StartJob and WaitJobs
// act through it on the thread's jobs while a turn runs. It is one to
// one: the owner's name goes in with its length, so no two pairs of names
// share an id (a
// separator alone let an owner's name that holds it meet another's
// thread).
func ThreadWorkflowID(owner, thread string) string {
	h := sha256.Sum256([]byte(strconv.Itoa(len(owner)) + ":" + owner + thread))
	return "deputy-thread-" + hex.EncodeToString(h[:16])
}

// ThreadJobs is what a turn of a thread knows of the thread's jobs when
// it starts: Agent builds it (see ThreadWorkflowID); a program that
// starts AgentWorkflow itself leaves RunInput.Thread nil.
type ThreadJobs struct {
	Jobs []keptJob `json:"jobs,omitempty"`
	// Next is the number of jobs the thread has started, for the ids of
	// the next; Sent the messages sent to them, for the messages' ids.
	Next int `json:"next,omitempty"`
	Sent int `json:"sent,omitempty"`
	// Notes are what the turn's model reads, before its first model
	// call, of the jobs that ended since the last turn: each note's ID is
	// its job's, its Usage what the job spent, counted by the turn.
	Notes []tool.Note `json:"notes,omitempty"`
	// NoteCosts are, note by note, the dollars the notes' jobs spent,
	// counted by the turn in RunOutput.Cost as their tokens in ChildUsage
	// (noteCostChange).
	NoteCosts []float64 `json:"note_costs,omitempty"`
	// NoteModels are, note by note, what the notes' jobs spent per
	// provider and model, which the turn counts under them, as in
	// process ("" in a turn recorded before turns kept them: one entry
	// without a model).
	NoteModels [][]provider.ModelUsage `json:"note_models,omitempty"`
	// Elsewhere is how many jobs were alive in the owner's other threads
	// as the turn started, as Agent found them (ownerThreads): the turn
	// counts them against Spec.MaxOwnerJobs.
	Elsewhere int `json:"elsewhere,omitempty"`
	// ElsewhereThreads are the workflow ids of the owner's other threads
	// Agent counted them in: a spawn counts the jobs alive in them again
	// (OwnerJobsActivityName, ownerRecountChange), so that a job another
	// thread started since the turn began counts.
	ElsewhereThreads []string `json:"elsewhere_threads,omitempty"`
	// Owner names the thread's owner on its task queue: a spawn takes its
	// job's place among the jobs of all the owner's threads from the
	// owner's workflow (ownerSlotChange), which Agent names so ("": the
	// turn counts as above).
	Owner string `json:"owner,omitempty"`
}

// keptJob is one job of a thread, as a turn hands it to the next.
type keptJob struct {
	ID         string             `json:"id"`
	Agent      string             `json:"agent"`
	Task       string             `json:"task"`
	WorkflowID string             `json:"workflow_id"`
	Ended      bool               `json:"ended,omitempty"`
	Collected  bool               `json:"collected,omitempty"`
	Cancelled  bool               `json:"cancelled,omitempty"`
	Outcome    *jobOutcome        `json:"outcome,omitempty"`
	Step       int                `json:"step,omitempty"`
	Last       string             `json:"last,omitempty"`
	Usage      provider.Usage     `json:"usage"`
	Cost       float64            `json:"cost,omitempty"`
	Receipts   []subagent.Receipt `json:"receipts,omitempty"`
	// Dropped counts the receipts of its oldest messages, dropped past
	// maxJobReceipts.
	Dropped int `json:"receipts_dropped,omitempty"`
	// Announce is its SUBAGENT_STARTED and deputy.job_started as first
	// published: a later turn's stream is told of it with them.
	Announce []event.Event `json:"announce,omitempty"`
}

// jobOutcome is how a job ended, as data: its output, or its failure's
// message, type and what it spent.
type jobOutcome struct {
	Out       RunOutput      `json:"out"`
	Failed    string         `json:"failed,omitempty"` // "": it answered
	Type      string         `json:"type,omitempty"`
	Cancelled bool           `json:"cancelled,omitempty"`
	TimedOut  bool           `json:"timed_out,omitempty"`
	Usage     provider.Usage `json:"usage"`
	Cost      float64        `json:"cost,omitempty"`
	// Model is the model that answered the first call of a job that
	// failed or was cancelled, which its SUBAGENT_ERROR names ("" in an
	// outcome recorded before outcomes kept it).
	Model string `json:"model,omitempty"`
	// Refused counts the spawns a job that failed or was cancelled had
	// refused (RunOutput.Refused), which its parent counts.
	Refused int `json:"refused,omitempty"`
	// Models and Earlier are what a job that failed or was cancelled
	// spent per provider and model, and the part of it spent before the
	// last answer (none in an outcome recorded before outcomes kept
	// them).
	Models  []provider.ModelUsage `json:"models,omitempty"`
	Earlier []provider.ModelUsage `json:"earlier,omitempty"`
}

func outcomeOf(out RunOutput, err error) *jobOutcome {
	if err == nil {
		return &jobOutcome{Out: out}
	}
	o := &jobOutcome{Failed: messageOf(err), Usage: usageOf(err), Cost: costOf(err), Model: modelOf(err), Refused: refusedOf(err), Cancelled: sdktemporal.IsCanceledError(err)}
	o.Models, o.Earlier = modelsOf(err)
	if o.Failed == "" {
		o.Failed = "failed"
	}
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) {
		o.Type = app.Type()
	}
	var timeout *sdktemporal.TimeoutError
	o.TimedOut = errors.As(err, &timeout)
	return o
}

// result is the outcome as a child's Get returns it.
func (o *jobOutcome) result() (RunOutput, error) {
	switch {
	case o.Failed == "":
		return o.Out, nil
	case o.Cancelled:
		return RunOutput{}, sdktemporal.NewCanceledError(o.details()...)
	case o.TimedOut:
		return RunOutput{}, sdktemporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, errors.New(o.Failed))
	}
	typ := o.Type
	if typ == "" {
		typ = "deputy.failed"
	}
	return RunOutput{}, sdktemporal.NewNonRetryableApplicationError(o.Failed, typ, nil, o.details()...)
}

// details are the details of the error a failed or cancelled job's
// outcome makes, in the order spent gives them.
func (o *jobOutcome) details() []any {
	return []any{o.Usage, o.Cost, o.Model, o.Models, o.Earlier, o.Refused}
}

// kept is the job as the thread keeps it.
func (j *bgJob) kept() keptJob {
	k := keptJob{ID: j.id, Agent: j.agent, Task: j.task, WorkflowID: j.wfID, Ended: j.ended, Collected: j.collected, Cancelled: j.cancelled,
		Step: j.step, Last: j.last, Usage: j.usage, Cost: j.cost, Receipts: slices.Clone(j.receipts), Dropped: j.dropped,
		Announce: j.announce}
	// A turn recorded before the bound, or under a greater one, kept more.
	k.Receipts, k.Dropped = trimReceipts(k.Receipts, k.Dropped, maxJobReceipts)
	if j.ended {
		k.Outcome = outcomeOf(j.out, j.err)
	}
	return k
}

// job is the kept job as a turn acts on it: one that ended with its
// outcome, one still running without a way to stop it yet (adopt).
func (k keptJob) job() *bgJob {
	j := &bgJob{id: k.ID, agent: k.Agent, task: k.Task, wfID: k.WorkflowID, ended: k.Ended, collected: k.Collected, cancelled: k.Cancelled,
		step: k.Step, last: k.Last, usage: k.Usage, cost: k.Cost, receipts: slices.Clone(k.Receipts), dropped: k.Dropped, told: true, inherited: true,
		announce: k.Announce}
	if k.Ended && k.Outcome != nil {
		j.out, j.err = k.Outcome.result()
	}
	return j
}

// threaded reports whether the run's jobs are its thread's.
func (js *jobs) threaded() bool { return js != nil && js.thread != nil }

// numbersLate reports whether the run's background spawns in a thread
// take their numbers as their jobs start (jobNumberChange), asked once.
func (js *jobs) numbersLate(ctx workflow.Context) bool {
	if !js.numberAsked {
		js.numberAsked = true
		js.numberLate = workflow.GetVersion(ctx, jobNumberChange, workflow.DefaultVersion, 1) >= 1
	}
	return js.numberLate
}

// number gives d, a background spawn of a thread's run, its job's ids
// now, or, from jobNumberChange on, marks it to take them as its job
// starts (jobs.start).
func (js *jobs) number(ctx workflow.Context, d *delegation) {
	if js.numbersLate(ctx) {
		d.numberLate = true
		return
	}
	d.jobID, d.id = js.nextIDs()
}

// nextIDs returns the ids of the next job of a thread's run: its number
// in the thread and its workflow id under the thread's.
func (js *jobs) nextIDs() (string, string) {
	js.thread.Next++
	return js.idsOf(js.thread.Next)
}

// idsOf returns the ids of the thread's job numbered n: its number in the
// thread and its workflow id under the thread's.
func (js *jobs) idsOf(n int) (string, string) {
	id := "job_" + strconv.Itoa(n)
	return id, workflow.GetInfo(js.ctx).WorkflowExecution.ID + "/" + id
}

// inherit takes the thread's jobs as the turn starts: those that ended
// come with their outcomes (those noted are handed over as the turn reads
// the notes, threadNotes), and each one still running is waited for by an
// activity of its own.
func (js *jobs) inherit(th *ThreadJobs) {
	js.thread = th
	js.sent = th.Sent
	// The turn publishes its jobs' events from the start: those of the
	// jobs it inherits too (a new field: no history recorded before it).
	js.eventsChecked, js.publishing = true, js.trace != nil
	for _, k := range th.Jobs {
		j := k.job()
		js.list = append(js.list, j)
		if !j.ended {
			js.adopt(j)
		}
	}
}

// adopt waits, in a coroutine, for a job an earlier turn started to end,
// and gives the turn a way to cancel it.
func (js *jobs) adopt(j *bgJob) {
	if js.progress == nil {
		js.progress = workflow.GetSignalChannel(js.ctx, jobProgressSignal)
	}
	actx, stop := workflow.WithCancel(js.ctx)
	j.unwatch = stop
	j.cancel = func() {
		_ = workflow.RequestCancelExternalWorkflow(js.ctx, j.wfID, "")
	}
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		StartToCloseTimeout: js.spec.jobTime() + 10*time.Minute,
		HeartbeatTimeout:    HeartbeatTimeout,
		RetryPolicy:         &sdktemporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	// Where it stands now: what it told while no turn ran was lost.
	_ = workflow.SignalExternalWorkflow(js.ctx, j.wfID, "", jobHelloSignal, nil)
	workflow.Go(js.ctx, func(gctx workflow.Context) {
		var o jobOutcome
		if err := workflow.ExecuteActivity(actx, AwaitJobActivityName, j.wfID).Get(gctx, &o); err != nil {
			return // the turn ended first: the next one waits for it
		}
		js.drain()
		j.out, j.err = o.result()
		j.ended, j.told = true, false
		for i := range j.receipts {
			if j.receipts[i].State == subagent.MessageQueued {
				j.receipts[i].State = subagent.MessageUndelivered
			}
		}
		// Its SUBAGENT_ERROR too, if it failed or was cancelled, as for a
		// job of this turn; its SUBAGENT_FINISHED again if it answered.
		evs := j.endEvents()
		if js.publishing && j.err == nil && workflow.GetVersion(gctx, adoptedEndChange, workflow.DefaultVersion, 1) >= 1 {
			evs = append([]event.Event{j.adoptedEnd()}, evs...)
		}
		js.publish(gctx, evs...)
		j.told = true
	})
}

// greet waits, for at most greetTime, until each job of an earlier turn
// still running has said where it stands (its hello), so that the turn's
// first model call reads its step, last words and receipts as they are.
func (js *jobs) greet(ctx workflow.Context) {
	if !js.threaded() || js.progress == nil {
		return
	}
	waiting := func() bool {
		return slices.ContainsFunc(js.list, func(j *bgJob) bool { return j.inherited && !j.ended && !j.heard })
	}
	until := workflow.Now(ctx).Add(greetTime)
	for {
		js.drain()
		left := until.Sub(workflow.Now(ctx))
		if !waiting() || left <= 0 {
			return
		}
		if ok, err := js.awaitTimed(ctx, left, func() bool { return js.progress.Len() > 0 || !waiting() }); err != nil || !ok {
			return
		}
	}
}

// answerHellos answers, for a job of a thread, each turn that asks where
// it stands: with what it told last and every message it took, and asks
// again the questions no one has answered (q), its own and its
// descendants', which a turn that ended, or none, heard; and jobStandingQuery, for the next turn of
// a thread it ended without.
func (ib *inbox) answerHellos(ctx workflow.Context, q *questions) error {
	ib.kept = true
	if err := workflow.SetQueryHandler(ctx, jobStandingQuery, func() (jobStanding, error) {
		st := jobStanding{Step: ib.latest.Step, Last: ib.latest.Last, Delivered: map[string]int{}}
		for i, id := range ib.delivered {
			st.Delivered[id] = ib.deliveredAt[i]
		}
		return st, nil
	}); err != nil {
		return err
	}
	ch := workflow.GetSignalChannel(ctx, jobHelloSignal)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var v any
			ch.Receive(gctx, &v)
			for ch.ReceiveAsync(&v) {
			}
			p := ib.latest
			// Its questions first, and its descendants': the turn has them
			// once it has heard it; not those answered meanwhile.
			q.answered(gctx)
			q.reask(gctx)
			p.Job, p.Hello, p.Delivered = ib.job, true, slices.Clone(ib.delivered)
			ib.tell(gctx, p)
		}
	})
	return nil
}

// jobStanding is where a job of a thread stood when it last told its
// thread: its step, its last words and the messages it took, each with
// the step it took it before.
type jobStanding struct {
	Step      int            `json:"step"`
	Last      string         `json:"last,omitempty"`
	Delivered map[string]int `json:"delivered,omitempty"`
}

// jobStandingNow is where the job whose workflow is wfID, ended, stood at
// its end; ok is false when the query fails (a job of code before
// jobStandingQuery), and its receipts then stay as the last turn heard
// them.
func jobStandingNow(ctx context.Context, c client.Client, wfID string) (jobStanding, bool, error) {
	var st jobStanding
	var v converter.EncodedValue
	err := whileNotReady(ctx, func() error {
		var err error
		v, err = c.QueryWorkflow(ctx, wfID, "", jobStandingQuery)
		return err
	})
	if err == nil {
		err = v.Get(&st)
	}
	if ctx.Err() != nil {
		return st, false, ctx.Err()
	}
	return st, err == nil, nil
}

// standAt takes where an ended job stood at its end: its last step and
// words, and its messages, delivered at the step it took them, or, those
// it never took, undelivered, as a turn marks them when it hears of the
// job's end (adopt).
func (k *keptJob) standAt(st jobStanding) {
	k.Step = max(k.Step, st.Step)
	if st.Last != "" {
		k.Last = st.Last
	}
	for i := range k.Receipts {
		r := &k.Receipts[i]
		if r.State != subagent.MessageQueued {
			continue
		}
		if step, ok := st.Delivered[r.MessageID]; ok {
			r.State, r.Step = subagent.MessageDelivered, step
		} else {
			r.State = subagent.MessageUndelivered
		}
	}
}

// state is what the thread keeps of its jobs as the turn stands now: of
// the jobs handed over, the newest maxKeptJobs that weigh at most
// maxKeptBytes.
func (js *jobs) state() ThreadJobs {
	th := ThreadJobs{Next: js.thread.Next, Sent: js.sent}
	keep := make([]bool, len(js.list))
	n, weight := 0, 0
	for i := len(js.list) - 1; i >= 0; i-- {
		j := js.list[i]
		if !j.ended || !j.collected {
			keep[i] = true // still to be handed over
			continue
		}
		raw, err := json.Marshal(j.kept())
		if err != nil || n+1 > maxKeptJobs || weight+len(raw) > maxKeptBytes {
			continue
		}
		keep[i], n, weight = true, n+1, weight+len(raw)
	}
	for i, j := range js.list {
		if keep[i] {
			th.Jobs = append(th.Jobs, j.kept())
		}
	}
	return th
}

// leave ends a thread's turn: its jobs work on; only the waits for
// those an earlier turn started stop, and the turn waits until the end
// of every job that ended in it is published.
func (js *jobs) leave() {
	for _, j := range js.list {
		if j.unwatch != nil && !j.ended {
			j.unwatch()
		}
	}
	ctx, _ := workflow.NewDisconnectedContext(js.ctx)
	_ = workflow.Await(ctx, func() bool {
		return !slices.ContainsFunc(js.list, func(j *bgJob) bool { return j.ended && !j.told })
	})
	js.drain() // what the jobs told of where they stand, for the next turn
}

// threadNotes returns the user message of a thread's turn's notes and
// what the jobs they tell of spent, in tokens and dollars (ok false:
// none), and hands those jobs
// over. Only then: a turn that fails before it reads them (its input
// guardrail trips) leaves them to the next turn, to be told of and
// counted there.
func (js *jobs) threadNotes(ctx workflow.Context) (provider.Message, provider.Usage, float64, []provider.ModelUsage, bool) {
	if !js.threaded() || len(js.thread.Notes) == 0 {
		return provider.Message{}, provider.Usage{}, 0, nil, false
	}
	var b strings.Builder
	var u provider.Usage
	var c float64
	var ms []provider.ModelUsage
	told := 0
	for i, n := range js.thread.Notes {
		j := js.find(n.ID)
		if j != nil && j.collected && workflow.GetVersion(ctx, goNoteChange, workflow.DefaultVersion, 1) >= 1 {
			continue // a program's wait collected it: its usage is the program's (fold)
		}
		if told++; told > 1 {
			b.WriteString("\n\n")
		}
		b.WriteString(n.Text)
		u = u.Add(n.Usage)
		if i < len(js.thread.NoteCosts) {
			c += js.thread.NoteCosts[i]
		}
		if i < len(js.thread.NoteModels) {
			ms = addModels(ms, js.thread.NoteModels[i]...)
		}
		if j != nil {
			j.collected = true // its usage is the note's
		}
	}
	if told == 0 {
		return provider.Message{}, provider.Usage{}, 0, nil, false
	}
	return provider.UserMessage(b.String()), u, c, ms, true
}

// checkNotes asks the workers' policy about the notes of the thread's
// turn, each as the result of a subagent_jobs call (notesPolicyChange),
// before threadNotes hands them to the model: a denied note is replaced
// by the denial, a rewritten one by what the rule made of it. The check
// is one local activity of the turn, recorded, so a replay reads the
// notes as checked.
func (js *jobs) checkNotes(ctx workflow.Context, depth int, path string, trace *Trace) error {
	if !js.threaded() || len(js.thread.Notes) == 0 ||
		workflow.GetVersion(ctx, notesPolicyChange, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	ins := make([]Delegation, len(js.thread.Notes))
	for i, n := range js.thread.Notes {
		ins[i] = Delegation{Call: provider.ToolCall{ID: n.ID, Name: subagent.JobsToolName}, Depth: depth, Path: path, After: true, Result: n.Text, Trace: trace}
	}
	var checks Checks
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, js.spec), ChecksActivityName, ins).Get(ctx, &checks); err != nil {
		return err
	}
	if !checks.Policy || len(checks.Decided) != len(ins) {
		return nil // no policy: the notes go as they are
	}
	for i := range js.thread.Notes {
		js.thread.Notes[i].Text = checks.Decided[i].Result
	}
	return nil
}

// threadJobs is what the next turn of the thread whose workflow is id
// knows of its jobs: the last turn's, each still running then asked
// about now, with the notes of those that ended and were not handed over.
func (a *Agent) threadJobs(ctx context.Context, id string) (*ThreadJobs, error) {
	th := &ThreadJobs{}
	d, err := describeRun(ctx, a.Client, id)
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing):
		return th, nil // the thread's first turn
	case err != nil:
		return nil, fmt.Errorf("temporal: reading the thread's last turn %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, fmt.Errorf("temporal: the thread's last turn (workflow %s) is still running: a thread has one turn at a time; wait for it, answer its questions or cancel it first", id)
	}
	var v converter.EncodedValue
	err = whileNotReady(ctx, func() error {
		var err error
		v, err = a.Client.QueryWorkflow(ctx, id, info.GetExecution().GetRunId(), ThreadJobsQuery)
		return err
	})
	var failed *serviceerror.QueryFailed
	switch {
	case errors.As(err, &failed):
		return th, nil // a turn that kept no jobs (Spec without JobsAcrossTurns)
	case err != nil:
		return nil, fmt.Errorf("temporal: reading the jobs of the thread's last turn %s: %w", id, err)
	}
	if err := v.Get(th); err != nil {
		return nil, fmt.Errorf("temporal: reading the jobs of the thread's last turn %s: %w", id, err)
	}
	th.Notes, th.NoteCosts, th.NoteModels = nil, nil, nil
	for i := range th.Jobs {
		k := &th.Jobs[i]
		if k.Ended {
			continue
		}
		o, err := jobOutcomeNow(ctx, a.Client, k.WorkflowID)
		if err != nil {
			return nil, fmt.Errorf("temporal: reading job %s of the thread: %w", k.ID, err)
		}
		if o == nil {
			continue
		}
		k.Ended, k.Outcome = true, o
		// What it told after the last turn ended was lost: it says now.
		st, ok, err := jobStandingNow(ctx, a.Client, k.WorkflowID)
		if err != nil {
			return nil, fmt.Errorf("temporal: reading job %s of the thread: %w", k.ID, err)
		}
		if ok {
			k.standAt(st)
		}
	}
	note := a.JobNote
	if note == nil {
		note = subagent.DefaultJobNote
	}
	for _, k := range th.Jobs {
		if !k.Ended || k.Collected {
			continue
		}
		j := k.job()
		st := j.status()
		res := j.collect(a.Spec.maxOutput())
		text, err := noteOf(note, subagent.JobResult{JobStatus: st, Result: tool.Result{Content: res.Content, IsError: res.IsError, Usage: res.Usage}, Err: j.err})
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(text) != "" {
			th.Notes = append(th.Notes, tool.Note{ID: k.ID, Text: text, Usage: res.Usage})
			th.NoteCosts = append(th.NoteCosts, res.Cost)
			th.NoteModels = append(th.NoteModels, res.Models)
		}
	}
	return th, nil
}

// announcements are the events that tell a turn's stream of the thread's
// jobs still running (keptJob.Announce), in the order they started.
func (th *ThreadJobs) announcements() []event.Event {
	var out []event.Event
	for _, k := range th.Jobs {
		if !k.Ended {
			out = append(out, k.Announce...)
		}
	}
	return out
}

// noteOf is what note says of r, or why it could not say it.
func noteOf(note func(subagent.JobResult) string, r subagent.JobResult) (text string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("temporal: Agent.JobNote panicked on job %s: %v", r.ID, v)
		}
	}()
	return note(r), nil
}

// jobOutcomeNow returns how the job whose workflow is wfID ended, or nil
// while it runs.
func jobOutcomeNow(ctx context.Context, c client.Client, wfID string) (*jobOutcome, error) {
	d, err := describeRun(ctx, c, wfID)
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing):
		return &jobOutcome{Failed: "its workflow " + wfID + " is no longer kept by the server"}, nil
	case err != nil:
		return nil, err
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, nil
	}
	var out RunOutput
	err = c.GetWorkflow(ctx, wfID, info.GetExecution().GetRunId()).Get(ctx, &out)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return outcomeOf(out, err), nil
}

// AwaitJob is the activity that waits for the job whose workflow is
// wfID, one an earlier turn of the thread started, to end, and returns
// its outcome. It heartbeats while it waits: the turn that ends first
// cancels it.
func (a *Activities) AwaitJob(ctx context.Context, wfID string) (jobOutcome, error) {
	c := activity.GetClient(ctx)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(HeartbeatTimeout / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()
	d, err := describeRun(ctx, c, wfID)
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing):
		return jobOutcome{Failed: "its workflow " + wfID + " is no longer kept by the server"}, nil
	case err != nil:
		return jobOutcome{}, err
	}
	var out RunOutput
	// Get follows the run it names to its end, a run it continued as new
	// included, and blocks until then.
	err = c.GetWorkflow(ctx, wfID, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()).Get(ctx, &out)
	if ctx.Err() != nil {
		return jobOutcome{}, ctx.Err()
	}
	return *outcomeOf(out, err), nil
}

// maxOwnerThreads bounds the threads of one owner, and maxOwners the
// owners, whose jobs Agent counts against Spec.MaxOwnerJobs
// (ownerThreads): the most recently run first. elsewhereTime bounds how
// long a turn reads them.
const (
	maxOwnerThreads = 16
	maxOwners       = 1024
	elsewhereTime   = 5 * time.Second
)

// ownerThreads is, by task queue and owner (ownerKey), the workflow ids
// of the threads Agent ran a turn of in this process that may have jobs
// alive, the newest last: a turn counts the jobs alive in the owner's
// others (ThreadJobs.Elsewhere).
var ownerThreads = struct {
	sync.Mutex
	m map[string][]string
}{m: map[string][]string{}}

// ownerKey names an owner's threads on a task queue in ownerThreads.
func ownerKey(queue, owner string) string { return strconv.Itoa(len(queue)) + ":" + queue + owner }

// ownerThreadsOf records that the owner runs a turn of thread id, and
// returns the owner's other threads.
func ownerThreadsOf(key, id string) []string {
	ot := &ownerThreads
	ot.Lock()
	defer ot.Unlock()
	ids, known := ot.m[key]
	if !known && len(ot.m) >= maxOwners {
		for k := range ot.m { // one goes, any
			delete(ot.m, k)
			break
		}
	}
	ids = slices.DeleteFunc(ids, func(s string) bool { return s == id })
	others := slices.Clone(ids)
	if ids = append(ids, id); len(ids) > maxOwnerThreads {
		ids = ids[len(ids)-maxOwnerThreads:]
	}
	ot.m[key] = ids
	return others
}

// forgetThreads drops threads of ownerThreads' key: threads whose last
// turn has ended with no job alive gain none until a turn of theirs,
// which Agent records again.
func forgetThreads(key string, gone []string) {
	if len(gone) == 0 {
		return
	}
	ot := &ownerThreads
	ot.Lock()
	defer ot.Unlock()
	if ids := slices.DeleteFunc(ot.m[key], func(s string) bool { return slices.Contains(gone, s) }); len(ids) > 0 {
		ot.m[key] = ids
	} else {
		delete(ot.m, key)
	}
}

// jobsElsewhere counts the jobs alive in the threads others, as their
// turns, running or last, know them, each told running asked about now,
// and returns the threads whose last turn has ended with none alive. What
// cannot be read within elsewhereTime counts none (it does not hold up
// the turn), and is not returned: a thread whose first turn is starting
// has no workflow yet.
func (a *Agent) jobsElsewhere(ctx context.Context, others []string) (int, []string, error) {
	return jobsElsewhere(ctx, a.Client, others)
}

func jobsElsewhere(ctx context.Context, c client.Client, others []string) (int, []string, error) {
	if len(others) == 0 {
		return 0, nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, elsewhereTime)
	defer cancel()
	n := 0
	var gone []string
	for _, id := range others {
		alive, running, err := aliveIn(rctx, c, id)
		switch {
		case ctx.Err() != nil:
			return 0, nil, ctx.Err()
		case err == nil && len(alive) == 0 && !running:
			// (One that cannot be read is kept: its first turn may be
			// starting, its workflow not yet there.)
			gone = append(gone, id)
		}
		n += len(alive)
	}
	return n, gone, nil
}

// aliveIn returns the workflow ids of the jobs alive in the thread whose
// workflow is id, and reports whether a turn of it runs.
func aliveIn(ctx context.Context, c client.Client, id string) ([]string, bool, error) {
	d, err := describeRun(ctx, c, id)
	if err != nil {
		return nil, false, err
	}
	info := d.GetWorkflowExecutionInfo()
	var v converter.EncodedValue
	err = whileNotReady(ctx, func() error {
		var err error
		v, err = c.QueryWorkflow(ctx, id, info.GetExecution().GetRunId(), ThreadJobsQuery)
		return err
	})
	var th ThreadJobs
	if err == nil {
		err = v.Get(&th)
	}
	if err != nil {
		return nil, false, err
	}
	running := info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	var alive []string
	for _, k := range th.Jobs {
		switch {
		case k.Ended:
		case running:
			alive = append(alive, k.WorkflowID) // its turn hears of its end
		default:
			jd, err := describeRun(ctx, c, k.WorkflowID)
			if err != nil {
				return alive, running, err
			}
			if jd.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				alive = append(alive, k.WorkflowID)
			}
		}
	}
	return alive, running, nil
}

// OwnerJobs counts the jobs alive in the threads whose workflows are ids,
// the owner's others, as Agent counts them as a turn starts (a thread
// that cannot be read within elsewhereTime counts none): the activity
// OwnerJobsActivityName, run as a spawn of a thread's turn is to start a
// job. It fails when it has no client: the turn then counts what it was
// told as it started.
func (a *Activities) OwnerJobs(ctx context.Context, ids []string) (int, error) {
	c := activity.GetClient(ctx)
	if c == nil {
		return 0, errors.New("no client to read the owner's threads with")
	}
	n, _, err := jobsElsewhere(ctx, c, ids)
	return n, err
}
