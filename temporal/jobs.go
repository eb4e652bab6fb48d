package temporal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Background children on Temporal (Spec.Background), with the meaning
// subagent.WithBackground gives them in process: spawn_subagent with
// background=true starts the child workflow and returns its job id at
// once, and subagent_jobs acts on the run's jobs with the same arguments
// and results. A message is a signal to the child workflow, which takes
// the messages waiting before each model call (its step boundary), never
// during one, in the order they were sent, each once; the child tells its
// parent by a signal of its own what it took and where it stands after
// each model reply. A wait is a durable timer. Cancelling a job cancels
// its child workflow, and with it the child's own children; the job hands
// back a partial report and its usage. Jobs still running when their run
// ends are cancelled, and what every job spent that no wait or cancel
// collected is counted in the run's ChildUsage.

const (
	// backgroundChange names the workflow version from which a spawn
	// with background=true, in a run whose Spec has Background, starts a
	// job; a history recorded before it never started one.
	backgroundChange = "deputy.background-jobs"

	// jobAsksChange names the workflow version from which a wait that
	// meets a job waiting for a person's answer waits with it until the
	// person answers, as a wait in process suspends with the job, instead
	// of saying the job is still running when its time is up; asked at
	// each wait of a run at the top of its tree.
	jobAsksChange = "deputy.job-asks"

	// goWaitAsksChange names the workflow version from which a
	// program's wait (JobsWaitUpdate) counts a target waiting for a
	// person's answer as ended and returns it at once, suspended with its
	// questions and not collected, as subagent.Jobs.Wait does in process;
	// before it the wait waited on until the person answered or its time
	// was up. Asked at a program's wait in the run at the top of its
	// tree, where a target asks or the wait would wait.
	goWaitAsksChange = "deputy.go-wait-asks"

	// holdChange names the workflow version from which a run under a
	// limit holds back its jobs' shares (jobs.held); asked only where a
	// share is held.
	holdChange = "deputy.background-hold"

	// jobEventsChange names the workflow version from which a run
	// publishes the events of its jobs (PublishActivityName): asked at
	// its first job's start; a history recorded before it published none.
	jobEventsChange = "deputy.job-events"

	// jobIDsChange names the workflow version from which a thread's job
	// whose id is taken by a job of the thread's the turn does not know
	// (its last turn could not be read: ThreadJobs) starts under the
	// next, at most maxIDTries times; before it the start failed. Asked
	// where an id is found taken.
	jobIDsChange = "deputy.thread-job-ids"
	maxIDTries   = 64

	// jobNumberChange names the workflow version from which a thread's
	// spawn takes its job's number as its job starts, so that a spawn
	// refused before (by a cap, the policy, Spec.MaxSpawns or its
	// arguments) takes none, as in process; before it the number was
	// taken as the call was read. Asked at a run's first background spawn
	// in a thread.
	jobNumberChange = "deputy.thread-job-number"

	// jobsPolicyChange names the workflow version from which a run's
	// calls of subagent_jobs are checked by the workers' policy as plain
	// calls (before, and their results after: a job's answer among them),
	// and a background spawn's receipt as its result, as in process;
	// asked once a run, at its first such call.
	jobsPolicyChange = "deputy.jobs-policy"

	// receiptsChange names the workflow version from which a run keeps
	// the receipts of a job's newest oldMaxJobReceipts messages only;
	// asked where one is first dropped, in a run that did not take
	// receiptsBoundChange.
	receiptsChange    = "deputy.job-receipts-bound"
	oldMaxJobReceipts = maxHelloDelivered

	// receiptsBoundChange names the workflow version from which a run
	// keeps the receipts of a job's newest maxJobReceipts messages, as
	// many as a job in process lists (mailbox.MaxReceipts), where before
	// it kept oldMaxJobReceipts; asked where a job first has more.
	receiptsBoundChange = "deputy.job-receipts-as-in-process"

	// maxJobReceipts bounds the message receipts a run keeps for one
	// job: past it, the oldest of those no longer queued go first, then
	// the oldest queued, counted (bgJob.dropped, JobStatus.Dropped), so
	// that a job sent messages without end weighs no more in the run's
	// memory, its status and, for a thread's job, the input of the
	// thread's next turn. At most as many as a thread's job keeps of the
	// messages it took (maxHelloDelivered): an older receipt could not be
	// brought up to date by what the job tells a turn that asks.
	maxJobReceipts = mailbox.MaxReceipts

	// timerWaitChange names the workflow version from which a run that
	// waits on a timer before it works on (a wait with a timeout, a
	// turn's greeting of its thread's jobs) says so in its memo while it
	// waits (waitingMemo), so that Run reads it as working (idle); asked
	// only where a run is about to wait so.
	timerWaitChange = "deputy.timer-wait-memo"

	// jobMessagesChange names the workflow version from which a job
	// takes at most maxJobMessages messages in its life, as in process
	// (mailbox.MaxMessages): a send past them is refused; asked where a
	// job has been sent that many.
	jobMessagesChange = "deputy.job-messages-bound"
	maxJobMessages    = mailbox.MaxMessages

	// jobQueueChange names the workflow version from which a send to a
	// job that has maxJobQueued messages waiting, as far as its run has
	// heard, is refused, as in process (mailbox.MaxQueued, with
	// mailbox.ErrFull's words): the model is told to wait for the job's
	// next step; before it every send was let in. Asked where a job has
	// that many waiting.
	jobQueueChange = "deputy.job-queue-bound"
	maxJobQueued   = mailbox.MaxQueued

	// notesPolicyChange names the workflow version from which the notes
	// of a thread's jobs that ended between turns are checked by the
	// workers' policy as results (policy.AfterResult, as subagent_jobs's,
	// the job's id the call's) before the turn's model reads them, as in
	// process; asked once a turn, where it has notes.
	notesPolicyChange = "deputy.thread-notes-policy"

	// adoptedEndChange names the workflow version from which a turn
	// publishes, when a job an earlier turn of its thread started ends
	// with an answer, the job's SUBAGENT_FINISHED itself (adoptedEnd),
	// before its deputy.job_ended: the job's own, published by the
	// activity of its last model call while its workflow was still open,
	// may have gone out before the turn listened, and been lost (the
	// turn, reading the job as running, had announced it). Agent.Run's
	// stream hands on one terminal event per sub-agent. Asked where such
	// a job answers, in a turn that publishes its jobs' events.
	adoptedEndChange = "deputy.adopted-job-finished"

	// noteCostChange names the workflow version from which a turn told
	// of its thread's jobs that ended between turns counts their dollars
	// (ThreadJobs.NoteCosts) in its RunOutput.Cost, as their tokens in
	// its ChildUsage; before it the dollars were counted by no turn.
	// Asked where a turn's notes cost anything.
	noteCostChange = "deputy.thread-note-cost"

	// goNoteChange names the workflow version from which a turn's note
	// of a job that a program's wait (JobsWaitUpdate) collected as the
	// turn started, before its notes were read, is left out: the program
	// has the job, and the turn counts what it spent once (fold), where
	// the model was told of it and the turn counted it twice. Asked only
	// for such a note.
	goNoteChange = "deputy.thread-note-collected"

	// jobLimitsChange names the workflow version from which a job is
	// bounded by its Spec's JobTokens, JobCost, JobSteps and, for a run's
	// job, JobTime, as subagent.WithJobLimits in process; asked where a
	// job starts under a Spec that sets one.
	jobLimitsChange = "deputy.job-limits"

	// ownerJobsChange names the workflow version from which a thread's
	// spawn past Spec.MaxOwnerJobs is refused; asked where one would be.
	ownerJobsChange = "deputy.owner-jobs"

	// ownerRecountChange names the workflow version from which a thread's
	// spawn counts the jobs alive in the owner's other threads as it is to
	// start one (ownerAliveNow), not only as the turn started; asked where
	// that count could refuse it.
	ownerRecountChange = "deputy.owner-recount"

	// refusedEventChange names the workflow version from which a spawn a
	// cap refuses (MaxBackground, MaxOwnerJobs) publishes a deputy.refused
	// event, as in process; asked where one is refused, in a run that
	// publishes its jobs' events.
	refusedEventChange = "deputy.job-refused-event"

	// goRefusedChange names the workflow version from which a program's
	// start a cap refuses (Spec.MaxBackground, MaxOwnerJobs, MaxSpawns)
	// takes the path of a model's background spawn, which refuses it
	// there: counted in RunOutput.Refused and, for a cap of jobs alive,
	// published as a deputy.refused event, as a start in process is.
	// Before it the update's validator refused it, and, where a start or
	// a step took the room after the validator, its handler did, counting
	// nothing. Asked where the handler finds a cap reached.
	goRefusedChange = "deputy.go-start-refused"

	// maxSpawnsEventChange names the workflow version from which a spawn
	// past Spec.MaxSpawns, a model's or a program's (StartJob), publishes
	// a deputy.refused event of reason max_spawns where the run has a
	// trace, as in process; before it only a cap of jobs alive published
	// one. Asked where a spawn is refused so, in a run with a trace.
	maxSpawnsEventChange = "deputy.max-spawns-refused-event"

	// goBudgetChange names the workflow version from which a program's
	// start in a run with nothing left of its token or cost limit is
	// refused by the start's handler, counted in RunOutput.Refused and
	// published as a deputy.refused event of reason no_budget, as
	// subagent.Jobs.Start refuses it in process. Before it the update's
	// validator refused it, and, where a step took what was left after
	// the validator, its handler did, counting nothing. Asked where the
	// handler finds nothing left.
	goBudgetChange = "deputy.go-start-no-budget"

	// jobOrderChange names the workflow version from which a job takes
	// the messages of one sender in the order sent, which their receipts
	// number, as in process: the server delivers the signals a workflow
	// sends in any order, and a job sent two messages in one step took
	// the second first at times. A run numbers each job's messages
	// (jobMessage.Order), and a job holds one that came before the one
	// sent before it until that one has come. Asked where a run sends its
	// first message, and where a job starts.
	jobOrderChange = "deputy.job-message-order"

	jobMessageSignal  = "deputy.job_message"  // a parent sends its job a message
	jobProgressSignal = "deputy.job_progress" // a job tells its parent where it stands
)

// jobMessage is a message a run sends one of its jobs.
type jobMessage struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	Seq  int    `json:"seq,omitempty"` // its place among the job's messages
	// From and Order, from jobOrderChange: the run id of the workflow
	// that sent it and its place, from 1, among the messages that
	// workflow sent the job.
	From  string `json:"from,omitempty"`
	Order int    `json:"order,omitempty"`
	// TraceID and SpanID name the span of the model call whose reply
	// sent it, where the worker traced it (ModelReply.TraceID).
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// Told, in what a factory's job's workflow hands its activity
	// (factoryInboxQuery): an attempt before told the workflow the agent
	// took it, and its deputy.job_delivered is published.
	Told bool `json:"told,omitempty"`
}

// jobProgress is where a job stands, as it tells its parent: the step it
// began, its last words and what it spent so far, and the messages it
// took before that step.
type jobProgress struct {
	Job       string         `json:"job"`
	Step      int            `json:"step"`
	Last      string         `json:"last,omitempty"`
	Usage     provider.Usage `json:"usage"`
	Cost      float64        `json:"cost,omitempty"`
	Delivered []string       `json:"delivered,omitempty"`
	// Hello: the job answers a turn of its thread that asked where it
	// stands (jobHelloSignal); Delivered is then every message it took.
	Hello bool `json:"hello,omitempty"`
}

// jobs is the background children of one run.
type jobs struct {
	ctx workflow.Context // the run's: the jobs' children live under it
	// sender names the span of the model call whose reply the step's
	// calls come from, for the messages they send (its ID unused).
	sender MessageLink
	// numberAsked: jobNumberChange was asked, numberLate its answer.
	numberAsked, numberLate bool
	// slotting: a spawn is taking its job's place from the owner's
	// workflow (ownerSlotChange); the others wait their turn.
	slotting bool
	spec     Spec
	list     []*bgJob
	progress workflow.ReceiveChannel
	args     *jsonschema.Schema
	sent     int // messages sent, for their ids
	on       bool
	checked  bool // backgroundChange asked for
	// trace places the run in its tree (nil: none); publishing: the run
	// publishes its jobs' events (jobEventsChange), asked with the first
	// job's start.
	trace         *Trace
	publishing    bool
	eventsChecked bool
	// recount is the count of the jobs alive in the owner's other
	// threads the spawns of a step wait for (ownerAliveNow).
	recount workflow.Future
	// q is the run's questions: at the top of the tree, every question
	// the tree waits on, a job's among them (see asking).
	q *questions
	// policy, once policyAsked: the run's jobs calls and receipts are
	// checked (jobsPolicyChange).
	policy, policyAsked bool
	// thread, for a turn of a thread (Spec.JobsAcrossTurns): its jobs
	// are the thread's, and outlive the turn (see ThreadJobs).
	thread *ThreadJobs
	// timers counts the run's waits on a timer under way (awaitTimed).
	timers int
	// For the jobs a program starts and waits for (JobStartUpdate,
	// JobsWaitUpdate): the run's place (depth, path, idPrefix), its
	// output so far and count of spawns (run's, read only), the jobs
	// started so, and the starts and waits under way.
	depth             int
	path, idPrefix    string
	out               *RunOutput
	spawns            *int
	goStarts          int
	starting, waiting int
	// closing: the run is settling its jobs; no job starts (see settle
	// and waitFromGo).
	closing bool
	// fromGo is what the jobs a program collected spent, and the starts a
	// cap refused, not yet counted in the run's output (fold).
	fromGo ToolResult
}

// waitingMemo is the memo key of an agent workflow that waits on a
// durable timer after which it works on (a wait for its background jobs
// with a timeout, a turn's greeting of its thread's jobs): true while it
// waits, false once it no longer does. Run reads such a branch as working,
// since what it does next (a model call) may ask a person a question.
const waitingMemo = "deputy.waiting"

// awaitTimed is workflow.AwaitWithTimeout, the run's memo saying it waits
// (waitingMemo) while it does.
func (js *jobs) awaitTimed(ctx workflow.Context, d time.Duration, cond func() bool) (bool, error) {
	mark := !cond() && workflow.GetVersion(ctx, timerWaitChange, workflow.DefaultVersion, 1) >= 1
	if mark {
		js.timed(ctx, 1)
		defer js.timed(ctx, -1)
	}
	return workflow.AwaitWithTimeout(ctx, d, cond)
}

// timed counts a wait on a timer starting (1) or ending (-1), and upserts
// the memo when the run starts or stops waiting.
func (js *jobs) timed(ctx workflow.Context, delta int) {
	js.timers += delta
	if js.timers == 1 && delta > 0 || js.timers == 0 {
		_ = workflow.UpsertMemo(ctx, map[string]any{waitingMemo: js.timers > 0})
	}
}

// bgJob is one background child.
type bgJob struct {
	id, agent, task, wfID string
	cancel                workflow.CancelFunc
	ended, collected      bool
	cancelled             bool
	told                  bool // its end is published (or nothing is)
	out                   RunOutput
	err                   error
	step                  int
	last                  string
	usage                 provider.Usage
	cost                  float64
	receipts              []subagent.Receipt
	dropped               int // receipts dropped, the oldest (maxJobReceipts)
	sentTo                int // messages this run sent it, numbered (jobOrderChange)
	// tokens and dollars are the job's shares of its run's token and
	// cost limits (0: none), held back from the run until it is collected.
	tokens  int64
	dollars float64
	// asks are the questions the job, or a child of its own, waits on a
	// person for (see jobs.asking).
	asks []tool.Interrupt
	// inherited: an earlier turn of the thread started it; unwatch stops
	// the turn's wait for its end (adopt).
	inherited bool
	unwatch   workflow.CancelFunc
	heard     bool // it answered the turn's hello
	// announce is its SUBAGENT_STARTED and deputy.job_started as the run
	// that started it published them, for a later turn of its thread
	// (see threadAnnouncements).
	announce []event.Event
}

func newJobs(ctx workflow.Context, spec Spec, trace *Trace) *jobs {
	return &jobs{ctx: ctx, spec: spec, trace: trace}
}

// checkEvents asks, once a run, whether it publishes its jobs' events
// (jobEventsChange), where a job first starts or is refused.
func (js *jobs) checkEvents(ctx workflow.Context, d *delegation) {
	if !js.eventsChecked {
		var t *Trace
		switch a := d.arg.(type) {
		case RunInput:
			t = a.Trace
		case FactoryCall:
			t = a.Trace
		}
		js.eventsChecked = true
		js.publishing = js.trace != nil && t != nil && workflow.GetVersion(ctx, jobEventsChange, workflow.DefaultVersion, 1) >= 1
	}
}

// publish publishes evs as the run's (a local activity), when it
// publishes its jobs' events; what it cannot publish is dropped.
func (js *jobs) publish(ctx workflow.Context, evs ...event.Event) {
	if !js.publishing || len(evs) == 0 {
		return
	}
	// Under a context of its own: a job's end is published after the
	// run was cancelled too.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
	_ = workflow.ExecuteLocalActivity(lctx, PublishActivityName, jobEvents(ctx, &Trace{Tree: js.trace.Tree, Subagent: js.trace.Subagent}, evs)).Get(dctx, nil)
}

// statusEvent is a job's CUSTOM event name with its status now.
func (j *bgJob) statusEvent(name string) event.Event {
	return jobEvent(name, "", jobStatusEvent{JobStatus: j.status(), RunID: j.wfID})
}

// offered reports whether the run offers background jobs.
func (js *jobs) offered() bool { return js != nil && js.spec.Background }

// enabled reports, asked once a run where a job would start, whether the
// run's code starts jobs (backgroundChange).
func (js *jobs) enabled(ctx workflow.Context) bool {
	if !js.checked {
		js.checked = true
		js.on = workflow.GetVersion(ctx, backgroundChange, workflow.DefaultVersion, 1) >= 1
	}
	return js.on
}

// policed reports, asked once a run at its first call of subagent_jobs
// or background spawn, whether the run checks them with the workers'
// policy (jobsPolicyChange).
func (js *jobs) policed(ctx workflow.Context) bool {
	if !js.policyAsked {
		js.policyAsked = true
		js.policy = workflow.GetVersion(ctx, jobsPolicyChange, workflow.DefaultVersion, 1) >= 1
	}
	return js.policy
}

// alive counts the jobs not ended.
func (js *jobs) alive() int {
	n := 0
	for _, j := range js.list {
		if !j.ended {
			n++
		}
	}
	return n
}

// start starts d's child workflow as job id and returns once the server
// has it, with what the model reads.
func (js *jobs) start(ctx workflow.Context, d *delegation) (ToolResult, error) {
	if js.threaded() && js.thread.Owner != "" && workflow.GetVersion(ctx, ownerSlotChange, workflow.DefaultVersion, 1) >= 1 {
		// One spawn of the run at a time takes its job's place from the
		// owner's workflow, and numbers its job, so that a refused spawn
		// takes no number.
		if err := workflow.Await(ctx, func() bool { return !js.slotting }); err != nil {
			return ToolResult{}, err
		}
		js.slotting = true
		defer func() { js.slotting = false }()
		if n := js.alive(); n >= js.spec.maxBackground() {
			return js.refuseSpawn(ctx, d, "max_background", js.tooManyJobs(n)), nil
		}
		if g, ok := js.ownerSlot(ctx, d); ok {
			if !g.Granted {
				return js.refuseSpawn(ctx, d, "max_owner_jobs", tooManyOwnerJobs(g.Alive)), nil
			}
			return js.startNow(ctx, d)
		}
	}
	if n := js.alive(); n >= js.spec.maxBackground() {
		return js.refuseSpawn(ctx, d, "max_background", js.tooManyJobs(n)), nil
	}
	n := js.ownerAliveNow(ctx)
	if m := js.alive(); m >= js.spec.maxBackground() {
		// Its spawns of one step started jobs while it counted the
		// owner's (ownerAliveNow waits for an activity): counted
		// again, with nothing to wait for before it starts.
		return js.refuseSpawn(ctx, d, "max_background", js.tooManyJobs(m)), nil
	}
	if js.threaded() && n >= js.spec.maxOwnerJobs() && workflow.GetVersion(ctx, ownerJobsChange, workflow.DefaultVersion, 1) >= 1 {
		return js.refuseSpawn(ctx, d, "max_owner_jobs", tooManyOwnerJobs(n)), nil
	}
	return js.startNow(ctx, d)
}

// ownerSlot takes the place of d's job among the jobs alive in the
// threads of the run's owner from the owner's workflow (ownerWorkflow),
// naming the thread's jobs alive now: whether it may start, and how many
// are alive. ok is false when the owner's workflow could not be asked:
// the spawn then counts the owner's jobs as before (ownerAliveNow).
func (js *jobs) ownerSlot(ctx workflow.Context, d *delegation) (g ownerGrant, ok bool) {
	s := ownerSlot{Owner: js.thread.Owner, Job: d.id, Cap: js.spec.maxOwnerJobs(), Threads: js.thread.ElsewhereThreads}
	if d.numberLate {
		_, s.Job = js.idsOf(js.thread.Next + 1) // as nextIDs will number it
	}
	for _, j := range js.list {
		if !j.ended && j.wfID != "" {
			s.Alive = append(s.Alive, j.wfID)
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2*elsewhereTime + 5*time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 2}})
	if err := workflow.ExecuteActivity(actx, ownerSlotActivityName, s).Get(ctx, &g); err != nil {
		return g, false
	}
	return g, true
}

// startNow starts d's job, its caps passed.
func (js *jobs) startNow(ctx workflow.Context, d *delegation) (ToolResult, error) {
	if fc, ok := d.arg.(FactoryCall); ok {
		return js.startFactory(ctx, d, fc)
	}
	a := d.arg.(RunInput)
	if d.numberLate {
		// Its number, now that it starts (jobNumberChange).
		d.jobID, d.id = js.nextIDs()
		if d.started != "" {
			d.started = d.id
		}
		if a.Trace != nil {
			ct := *a.Trace
			ct.Subagent = d.id
			a.Trace = &ct
		}
	}
	id := d.jobID // a thread's, numbered in the thread
	if id == "" {
		id = "job_" + strconv.Itoa(len(js.list)+1)
	}
	j := &bgJob{id: id, agent: d.name(), task: a.Text, wfID: d.id}
	d.job = j
	js.list = append(js.list, j) // at once: starts of one step run side by side
	a.Job = j.id
	js.checkEvents(ctx, d)
	if js.publishing {
		// Announced before it starts, as in process: its SUBAGENT_STARTED
		// and deputy.job_started come before anything the job publishes.
		ct := *a.Trace
		ct.Announced = true
		a.Trace = &ct
		j.announce = []event.Event{startedEvent(&ct), j.statusEvent(subagent.JobStartedEvent)}
		js.publish(ctx, j.announce...)
	}
	// The Spec's own bounds of a job (JobTokens, JobCost, JobSteps,
	// JobTime), as WithJobLimits in process: a share is cut to them.
	limited := (js.spec.jobLimited() || js.spec.JobTime > 0 && !js.threaded()) &&
		workflow.GetVersion(ctx, jobLimitsChange, workflow.DefaultVersion, 1) >= 1
	// The job names the limits that are the run's bounds of a job, not
	// its share of the run's, in what it says when it stops at one.
	a.JobBounds = nil
	if limited {
		if l := js.spec.JobTokens; l > 0 && (a.Spec.TokenLimit == 0 || a.Spec.TokenLimit > l) {
			a.JobBounds = append(a.JobBounds, jobBoundTokens)
		}
		if l := js.spec.JobCost; l > 0 && (a.Spec.CostLimit == 0 || a.Spec.CostLimit > l) {
			a.JobBounds = append(a.JobBounds, jobBoundCost)
		}
		a.Spec.within(js.spec.JobTokens, js.spec.JobCost)
	}
	if js.spec.TokenLimit > 0 {
		j.tokens = a.Spec.TokenLimit
	}
	if js.spec.CostLimit > 0 {
		j.dollars = a.Spec.CostLimit
	}
	if limited && js.spec.JobSteps > 0 {
		a.Spec.MaxSteps = js.spec.JobSteps
		a.JobBounds = append(a.JobBounds, jobBoundSteps)
	} else if a.Spec.MaxSteps == 0 || a.Spec.MaxSteps > subagent.DefaultJobSteps {
		a.Spec.MaxSteps = subagent.DefaultJobSteps
		a.JobBounds = append(a.JobBounds, jobBoundSteps)
	}
	if js.threaded() {
		// A job that outlives its turn is bounded on its own, as in
		// process: past an unlimited run, the default limits of a job.
		if a.Spec.TokenLimit == 0 {
			a.Spec.TokenLimit = subagent.DefaultJobTokens
			a.JobBounds = append(a.JobBounds, jobBoundTokens)
		}
		if a.Spec.CostLimit == 0 {
			a.Spec.CostLimit = subagent.DefaultJobCost
			a.JobBounds = append(a.JobBounds, jobBoundCost)
		}
	}
	if js.progress == nil {
		js.progress = workflow.GetSignalChannel(js.ctx, jobProgressSignal)
	}
	jctx, cancel := workflow.WithCancel(js.ctx)
	j.cancel = cancel
	// A cancelled job is waited for until its workflow has ended, so that
	// what it spent, a model call in flight included, comes back with it
	// (jobSettleChange; before it, its usage was dropped).
	settle := workflow.GetVersion(ctx, jobSettleChange, workflow.DefaultVersion, 1) >= 1
	// A job's workflow is the only child with an execution timeout: Run
	// knows it by that as a branch not to wait for (idle).
	opts := workflow.ChildWorkflowOptions{WorkflowID: d.id, WorkflowExecutionTimeout: subagent.DefaultJobTime, WaitForCancellation: settle}
	if js.threaded() {
		opts.ParentClosePolicy = enumspb.PARENT_CLOSE_POLICY_ABANDON // it outlives the turn
	}
	if js.threaded() || limited {
		// It ends by itself at its time; the server's bound is a backstop.
		a.JobTime, a.RunJob = js.spec.jobTime(), !js.threaded()
		opts.WorkflowExecutionTimeout = a.JobTime + time.Minute
	}
	renumber := func() {
		a.Job = j.id
		if a.Trace != nil {
			ct := *a.Trace
			ct.Subagent = j.wfID
			a.Trace = &ct
			if js.publishing {
				j.announce = []event.Event{startedEvent(&ct), j.statusEvent(subagent.JobStartedEvent)}
				js.publish(ctx, j.announce...)
			}
		}
	}
	f, err := js.startChild(ctx, jctx, d, opts, AgentWorkflowName, func() any { return a }, renumber, func() bool {
		return workflow.GetVersion(ctx, jobIDsChange, workflow.DefaultVersion, 1) >= 1
	})
	return js.started(ctx, d, j, f, err, func(gctx workflow.Context) error { return f.Get(gctx, &j.out) })
}

// startChild starts the workflow wfName of job d.job under opts, its
// input what input returns. A thread's job whose id the server finds
// taken (by a job of the thread the thread no longer knows: its last
// turn could not be read) starts under the next, at most maxIDTries
// times, while again says so: renumber gives the input the job's new ids
// and announces it anew.
func (js *jobs) startChild(ctx, jctx workflow.Context, d *delegation, opts workflow.ChildWorkflowOptions, wfName string, input func() any, renumber func(), again func() bool) (workflow.ChildWorkflowFuture, error) {
	j := d.job
	f := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(jctx, opts), wfName, input())
	err := f.GetChildWorkflowExecution().Get(ctx, nil)
	for tries := 0; js.threaded() && sdktemporal.IsWorkflowExecutionAlreadyStartedError(err) && tries < maxIDTries && again(); tries++ {
		js.publish(ctx, event.Event{Type: event.SubagentError, SubagentRunID: j.wfID, Code: "error",
			Message: "the job could not start under " + j.wfID + ", the workflow of a job of this thread it no longer knows: it starts under the next id"})
		j.id, j.wfID = js.nextIDs()
		d.jobID, d.id = j.id, j.wfID
		if d.started != "" {
			d.started = d.id
		}
		opts.WorkflowID = j.wfID
		renumber()
		f = workflow.ExecuteChildWorkflow(workflow.WithChildOptions(jctx, opts), wfName, input())
		err = f.GetChildWorkflowExecution().Get(ctx, nil)
	}
	return f, err
}

// started goes on with job j once the server has its workflow f, or
// refused it (err): the job is ended at once then, and the model told;
// else it is watched until it ends, by end, which reads its outcome.
func (js *jobs) started(ctx workflow.Context, d *delegation, j *bgJob, f workflow.ChildWorkflowFuture, err error, end func(workflow.Context) error) (ToolResult, error) {
	if err != nil {
		j.cancel()
		j.ended, j.collected, j.err = true, true, err
		js.publish(ctx, event.Event{Type: event.SubagentError, SubagentRunID: j.wfID, Message: "the job could not start: " + err.Error(), Code: "error"})
		j.told = true
		return ToolResult{Content: capText(fmt.Sprintf("%s could not start in the background: %v", d.call.Name, err), js.spec.maxOutput()), IsError: true}, nil
	}
	workflow.Go(js.ctx, func(gctx workflow.Context) {
		err := end(gctx)
		js.drain()
		j.err, j.ended = err, true
		js.q.withdraw(gctx, j.wfID)
		for i := range j.receipts {
			if j.receipts[i].State == subagent.MessageQueued {
				j.receipts[i].State = subagent.MessageUndelivered
			}
		}
		js.publish(gctx, j.endEvents()...)
		j.told = true
	})
	return ToolResult{Content: runtime.JobStarted(j.id)}, nil
}

// factoryJobsChange names the workflow version from which a spawn with
// background=true of a roster member that is a factory's agent
// (SubAgent.Factory) starts it as a job: a FactoryJobWorkflow whose
// activity takes the job's messages at the agent's step boundaries.
// Before it the spawn was refused. Asked where such a spawn is read.
const factoryJobsChange = "deputy.factory-jobs"

// startFactory is start for a roster member that is a factory's agent,
// a: its FactoryJobWorkflow is the job, bounded by its share of the run's
// limits, the Spec's JobTokens and JobCost (in a thread, the defaults of
// a job past an unlimited run), and its JobTime (a factory's agent has
// steps of its own, which JobSteps does not bound, as a member's job in
// process is not bounded by JobLimits.Steps).
func (js *jobs) startFactory(ctx workflow.Context, d *delegation, a FactoryCall) (ToolResult, error) {
	if d.numberLate {
		// Its number, now that it starts (jobNumberChange).
		d.jobID, d.id = js.nextIDs()
		if d.started != "" {
			d.started = d.id
		}
	}
	setIDs := func(job, wfID string) {
		a.Job = job
		if a.Trace != nil {
			ct := *a.Trace
			ct.Subagent = wfID
			a.Trace = &ct
		}
	}
	id := d.jobID // a thread's, numbered in the thread
	if id == "" {
		id = "job_" + strconv.Itoa(len(js.list)+1)
	}
	j := &bgJob{id: id, agent: d.name(), task: a.Task, wfID: d.id}
	d.job = j
	js.list = append(js.list, j) // at once: starts of one step run side by side
	setIDs(j.id, j.wfID)
	js.checkEvents(ctx, d)
	announce := func() {
		if js.publishing {
			// Announced before it starts, as an agent's job is.
			ct := *a.Trace
			ct.Announced = true
			a.Trace = &ct
			j.announce = []event.Event{startedEvent(&ct), j.statusEvent(subagent.JobStartedEvent)}
			js.publish(ctx, j.announce...)
		}
	}
	announce()
	if js.spec.JobTokens > 0 && (a.TokenLimit == 0 || a.TokenLimit > js.spec.JobTokens) {
		a.TokenLimit = js.spec.JobTokens
	}
	if js.spec.JobCost > 0 && (a.CostLimit == 0 || a.CostLimit > js.spec.JobCost) {
		a.CostLimit = js.spec.JobCost
	}
	if js.spec.TokenLimit > 0 {
		j.tokens = a.TokenLimit
	}
	if js.spec.CostLimit > 0 {
		j.dollars = a.CostLimit
	}
	a.JobTime, a.Thread = js.spec.jobTime(), js.threaded()
	opts := workflow.ChildWorkflowOptions{WorkflowID: d.id, WorkflowExecutionTimeout: a.JobTime + 2*time.Minute, WaitForCancellation: true}
	if js.threaded() {
		// A job that outlives its turn is bounded on its own, as an
		// agent's is: past an unlimited run, the default limits of a job.
		a.TokenLimit = cmp.Or(a.TokenLimit, subagent.DefaultJobTokens)
		a.CostLimit = cmp.Or(a.CostLimit, subagent.DefaultJobCost)
		opts.ParentClosePolicy = enumspb.PARENT_CLOSE_POLICY_ABANDON
	}
	if js.progress == nil {
		js.progress = workflow.GetSignalChannel(js.ctx, jobProgressSignal)
	}
	jctx, cancel := workflow.WithCancel(js.ctx)
	j.cancel = cancel
	f, err := js.startChild(ctx, jctx, d, opts, FactoryJobWorkflowName, func() any { return a }, func() {
		setIDs(j.id, j.wfID)
		announce()
	}, func() bool { return true })
	return js.started(ctx, d, j, f, err, func(gctx workflow.Context) error { return f.Get(gctx, &j.out) })
}

// refuseFactory says why roster member name, a factory's agent, cannot
// start as a job of the run ("": it can): a run recorded before
// factoryJobsChange refused it.
func (js *jobs) refuseFactory(ctx workflow.Context, name string) string {
	if workflow.GetVersion(ctx, factoryJobsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return fmt.Sprintf("%v for %s: %q runs a factory's agent in one activity, which cannot take messages, so it does not start in the background: start it without background", tool.ErrInvalidArguments, SpawnToolName, name)
	}
	return ""
}

// factoryOutcome is what a factory's job ended with, read as an agent's
// job's: its answer as a RunOutput, or its failure as the error of a run
// that failed so (the type of its code: codeOf read back), carrying what
// it spent.
func factoryOutcome(res ToolResult) (RunOutput, error) {
	out := RunOutput{Answer: res.Content, Usage: res.Usage, Cost: res.Cost, Model: res.Model, Models: res.Models, Earlier: res.Earlier, Refused: res.Refused}
	if !res.IsError {
		return out, nil
	}
	typ := "deputy.failed"
	if i := slices.IndexFunc(typeCodes, func(tc typeCode) bool { return tc.code == res.Code }); i >= 0 {
		typ = typeCodes[i].typ
	} else if res.Code == "provider_error" {
		typ = ErrTypeProvider + "factory"
	}
	return RunOutput{}, sdktemporal.NewNonRetryableApplicationError(res.Content, typ, nil, spent(out)...)
}

// tooManyJobs is the refusal of a job past Spec.MaxBackground, n alive.
func (js *jobs) tooManyJobs(n int) string {
	where := "one run"
	if js.threaded() {
		where = "one thread"
	}
	return fmt.Sprintf("%v: %d are running, the most %s may have: wait for one, or cancel one, first", subagent.ErrMaxBackground, n, where)
}

// tooManyOwnerJobs is the refusal of a job past Spec.MaxOwnerJobs, n
// alive in the threads of the run's owner.
func tooManyOwnerJobs(n int) string {
	return fmt.Sprintf("%v: %d are running in the threads of this owner, the most one owner may have: wait for one, or cancel one, first", subagent.ErrMaxBackground, n)
}

// refuseSpawn is what the model reads of a spawn a cap refused (reason,
// as subagent.RefusedEvent names it): msg, and, where the run publishes
// its jobs' events, a deputy.refused event, as in process.
func (js *jobs) refuseSpawn(ctx workflow.Context, d *delegation, reason, msg string) ToolResult {
	d.tn.refuse()
	js.checkEvents(ctx, d)
	if js.publishing && workflow.GetVersion(ctx, refusedEventChange, workflow.DefaultVersion, 1) >= 1 {
		js.publish(ctx, refusedEvent(reason, d.call.ID, d.name(), msg))
	}
	return ToolResult{Content: msg, IsError: true}
}

// refusedEvent is the deputy.refused event of a spawn a limit refused
// (reason, as subagent.RefusedEvent names it), as in process: the call's
// id (none for a program's start), the name of the sub-agent it would
// have started, and msg, what the model or the program read.
func refusedEvent(reason, callID, name, msg string) event.Event {
	return jobEvent(subagent.RefusedEvent, "", map[string]string{"reason": reason, "toolCallId": callID, "name": name, "message": msg})
}

// publishRefused publishes evs, the deputy.refused events of spawns a
// limit refused, as the run of trace (a local activity), from the
// workflow version change names on; a run without a trace publishes
// none, and asks no version.
func publishRefused(ctx workflow.Context, trace *Trace, change string, evs ...event.Event) {
	if trace == nil || len(evs) == 0 || workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
	_ = workflow.ExecuteLocalActivity(lctx, PublishActivityName, jobEvents(ctx, &Trace{Tree: trace.Tree, Subagent: trace.Subagent}, evs)).Get(ctx, nil)
}

// ownerAlive counts the jobs alive in the threads of the run's owner:
// its thread's, and those of its other threads as the turn started.
func (js *jobs) ownerAlive() int {
	n := js.alive()
	if js.threaded() {
		n += max(js.thread.Elsewhere, 0)
	}
	return n
}

// ownerAliveNow is ownerAlive with the jobs of the owner's other threads
// counted now (OwnerJobsActivityName), as a job is to start, unless its
// thread's own are at the cap already: a job another thread started
// since the turn began counts (ownerRecountChange). The spawns of one
// step share one count (an activity, not a local one: its workflow task
// ends as it waits, so the other threads, which count this one's jobs as
// they spawn, can read it meanwhile). What cannot be counted now counts
// as the turn started. It waits for the count: its caller counts its own
// thread's jobs again after it.
func (js *jobs) ownerAliveNow(ctx workflow.Context) int {
	n := js.ownerAlive()
	if !js.threaded() || n >= js.spec.maxOwnerJobs() || len(js.thread.ElsewhereThreads) == 0 ||
		workflow.GetVersion(ctx, ownerRecountChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return n
	}
	if js.recount == nil || js.recount.IsReady() {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: elsewhereTime + 5*time.Second,
			RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
		js.recount = workflow.ExecuteActivity(actx, OwnerJobsActivityName, js.thread.ElsewhereThreads)
	}
	var elsewhere int
	if err := js.recount.Get(ctx, &elsewhere); err != nil {
		return js.ownerAlive()
	}
	return js.alive() + elsewhere
}

// endEvents are the events of the job's end: its SUBAGENT_ERROR, if it
// failed or was cancelled (one that answered published its end itself;
// one that failed or was cancelled could not), then its
// deputy.job_ended.
func (j *bgJob) endEvents() []event.Event {
	var evs []event.Event
	if j.err != nil {
		// Its code is the one its SUBAGENT_ERROR has in process (codeOf):
		// a limit's, a provider's, "timeout" past its time.
		code := codeOf(j.err)
		if j.cancelled {
			code = "cancelled"
		}
		evs = append(evs, event.Event{Type: event.SubagentError, SubagentRunID: j.wfID, Message: messageOf(j.err), Code: code, Usage: j.spentJSON(), Model: modelOf(j.err)})
	}
	return append(evs, j.statusEvent(subagent.JobEndedEvent))
}

// adoptedEnd is the SUBAGENT_FINISHED of a job that answered, as its last
// model call's activity published it (emitter.after): what a turn that
// adopted the job publishes in case that one was lost (adoptedEndChange).
func (j *bgJob) adoptedEnd() event.Event {
	u, c := j.spent()
	return event.Event{Type: event.SubagentFinished, SubagentRunID: j.wfID, Result: event.JSONString(childContent(j.out)),
		Usage: usageJSON(j.out.Models, j.out.Earlier, u, c), Model: j.out.Model}
}

// held is what the run's jobs not collected yet may spend of their
// shares of its limits: the run keeps it back from its own calls and
// later children, as in process a job's share stays held until it is
// collected. It is zero without jobs.
func (js *jobs) held() (int64, float64) {
	if js == nil {
		return 0, 0
	}
	t, c := js.shares()
	if (t > 0 || c > 0) && workflow.GetVersion(js.ctx, holdChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return 0, 0 // a run recorded before it held nothing back
	}
	return t, c
}

// shares is the sum of the shares of the run's jobs not collected yet.
func (js *jobs) shares() (int64, float64) {
	var t int64
	var c float64
	for _, j := range js.list {
		if !j.collected {
			t, c = t+j.tokens, c+j.dollars
		}
	}
	return t, c
}

// drain takes what the jobs told of where they stand.
func (js *jobs) drain() {
	if js.progress == nil {
		return
	}
	for {
		var p jobProgress
		if !js.progress.ReceiveAsync(&p) {
			return
		}
		j := js.find(p.Job)
		if j == nil || j.ended {
			continue
		}
		if p.Hello {
			j.heard = true
		}
		j.step, j.usage, j.cost = max(j.step, p.Step), p.Usage, p.Cost
		if p.Last != "" {
			j.last = p.Last
		}
		for _, id := range p.Delivered {
			for i := range j.receipts {
				if j.receipts[i].MessageID == id && j.receipts[i].State == subagent.MessageQueued {
					j.receipts[i].State, j.receipts[i].Step = subagent.MessageDelivered, p.Step
				}
			}
		}
	}
}

func (js *jobs) find(id string) *bgJob {
	for _, j := range js.list {
		if j.id == id {
			return j
		}
	}
	return nil
}

// stop cancels the job, if it runs, and waits until it has ended.
func (js *jobs) stop(ctx workflow.Context, j *bgJob) error {
	if !js.stopping(ctx, j) {
		return nil
	}
	return workflow.Await(ctx, func() bool { return j.ended })
}

// stopping cancels the job, if it runs, and reports whether it has yet
// to end.
func (js *jobs) stopping(ctx workflow.Context, j *bgJob) bool {
	if j.ended {
		return false
	}
	js.publish(ctx, j.statusEvent(subagent.JobCancelledEvent))
	if j.ended {
		return false // it ended while the cancel was published
	}
	j.cancelled = true
	j.cancel()
	return true
}

// state is the job's state, as subagent.JobStatus names it.
func (j *bgJob) state() string {
	switch {
	case !j.ended && len(j.asks) > 0:
		return subagent.JobSuspended
	case !j.ended:
		return subagent.JobRunning
	case j.err == nil:
		return subagent.JobDone
	case j.cancelled || sdktemporal.IsCanceledError(j.err):
		return subagent.JobCancelled
	default:
		return subagent.JobFailed
	}
}

func (j *bgJob) status() subagent.JobStatus {
	st := subagent.JobStatus{ID: j.id, Agent: j.agent, Task: j.task, State: j.state(), Step: j.step, LastWords: j.last, Usage: j.usage, Cost: j.cost,
		Messages: slices.Clone(j.receipts), Dropped: j.dropped, Questions: slices.Clone(j.asks)}
	if j.ended {
		st.Usage, st.Cost = j.spent()
	}
	return st
}

// spentJSON is the usage of an ended job's end, from its outcome, per
// provider and model as a child's is.
func (j *bgJob) spentJSON() json.RawMessage {
	u, c := j.spent()
	if j.err != nil {
		models, earlier := modelsOf(j.err)
		return usageJSON(models, earlier, u, c)
	}
	return usageJSON(j.out.Models, j.out.Earlier, u, c)
}

// models is what an ended job spent per provider and model, and the part
// of it spent before the last answer, from its outcome.
func (j *bgJob) models() (models, earlier []provider.ModelUsage) {
	if j.err != nil {
		return modelsOf(j.err)
	}
	return j.out.Models, j.out.Earlier
}

// spent is what an ended job spent, from its outcome.
func (j *bgJob) spent() (provider.Usage, float64) {
	if j.err != nil {
		return usageOf(j.err), costOf(j.err)
	}
	return j.out.TotalUsage(), j.out.Cost
}

// collect hands over an ended job: its usage the first time.
func (j *bgJob) collect(maxOut int) ToolResult {
	st := j.status()
	var res ToolResult
	switch {
	case st.State == subagent.JobCancelled:
		res.Content = runtime.JobPartial(j.id, "", st.Step, st.Usage.Tokens(), st.LastWords)
	case pastLimit(j.err):
		// Stopped at one of its bounds: a partial report, as in process.
		res.Content = runtime.JobPartial(j.id, clipTask(messageOf(j.err), 200), st.Step, st.Usage.Tokens(), st.LastWords)
	case j.err != nil:
		res = ToolResult{Content: "job " + j.id + " failed: " + messageOf(j.err), IsError: true}
	default:
		res.Content = childContent(j.out)
	}
	res.Content = capText(res.Content, maxOut)
	if !j.collected {
		j.collected = true
		res.Usage, res.Cost, res.Refused = st.Usage, st.Cost, j.out.Refused
		if j.err != nil {
			res.Refused = refusedOf(j.err)
		}
		res.Models, res.Earlier = j.models()
	}
	return res
}

// pastLimit reports whether a job's run stopped at one of its bounds:
// its steps, its token or cost limit, its time.
func pastLimit(err error) bool {
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) && (app.Type() == ErrTypeMaxSteps || app.Type() == ErrTypeUsageLimit || app.Type() == ErrTypeJobTime) {
		return true
	}
	var timeout *sdktemporal.TimeoutError
	return errors.As(err, &timeout)
}

type jobsArgs struct {
	Action  string   `json:"action"`
	JobID   string   `json:"job_id"`
	JobIDs  []string `json:"job_ids"`
	Mode    string   `json:"mode"`
	Message string   `json:"message"`
	Timeout *float64 `json:"timeout_seconds"`
}

func toolError(format string, a ...any) ToolResult {
	return ToolResult{Content: fmt.Sprintf(format, a...), IsError: true}
}

// act runs one call of the jobs tool.
func (js *jobs) act(ctx workflow.Context, call provider.ToolCall) ToolResult {
	res, _ := js.step(ctx, call, false)
	return res
}

// parked is a call of the jobs tool that waits — a wait for jobs, a
// cancel for its job to end — set aside on its turn's pool of coroutines
// (jobWaitPoolChange) rather than holding one while it waits: it goes on
// (resume) once ready reports true, or at deadline (zero: none), or with
// the error that ended the wait, and may be set aside again. timed: it
// waits on a timer after which it works on, and the run's memo says so
// while it does (timerWaitChange).
type parked struct {
	ready    func() bool
	deadline time.Time
	timed    bool
	resume   func(ctx workflow.Context, err error) (ToolResult, *parked)
}

// actOrPark is act, but a wait or a cancel that would wait returns what
// it waits for instead (parked).
func (js *jobs) actOrPark(ctx workflow.Context, call provider.ToolCall) (ToolResult, *parked) {
	return js.step(ctx, call, true)
}

// step runs one call of the jobs tool, waiting where it must, or, with
// park, returning what it would wait for.
func (js *jobs) step(ctx workflow.Context, call provider.ToolCall, park bool) (ToolResult, *parked) {
	raw := call.Arguments
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if js.args == nil {
		s, err := jsonschema.Compile(runtime.JobsTool().Parameters)
		if err != nil {
			return toolError("%s: %v", subagent.JobsToolName, err), nil
		}
		js.args = s
	}
	var a jobsArgs
	if err := js.args.Validate(raw); err != nil {
		return toolError("%v for %s: %v: %s", tool.ErrInvalidArguments, subagent.JobsToolName, err, runtime.JobsUsage), nil
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return toolError("%v for %s: %v: %s", tool.ErrInvalidArguments, subagent.JobsToolName, err, runtime.JobsUsage), nil
	}
	js.drain()
	js.asking(nil) // for the jobs' states
	if a.Action == "list" {
		return ToolResult{Content: js.listText()}, nil
	}
	if len(js.list) == 0 {
		return toolError("%v %q: this run has no jobs", subagent.ErrUnknownJob, a.JobID), nil
	}
	switch a.Action {
	case "status":
		if a.JobID == "" {
			all := make([]subagent.JobStatus, len(js.list))
			evs := make([]event.Event, len(js.list))
			for i, j := range js.list {
				all[i], evs[i] = j.status(), j.statusEvent(subagent.JobStatusEvent)
			}
			js.publish(ctx, evs...)
			return jsonToolResult(all), nil
		}
		j, bad := js.named(a.JobID)
		if j == nil {
			return bad, nil
		}
		js.publish(ctx, j.statusEvent(subagent.JobStatusEvent))
		return jsonToolResult(j.status()), nil
	case "send":
		return js.send(ctx, a.JobID, a.Message), nil
	case "cancel":
		j, bad := js.named(a.JobID)
		if j == nil {
			return bad, nil
		}
		running := !j.ended
		ended := func(err error) ToolResult {
			if err != nil {
				return toolError("%s: %v", subagent.JobsToolName, err)
			}
			res := j.collect(js.spec.maxOutput())
			if !running {
				res.Content = "job " + j.id + " had already ended; its result:\n" + res.Content
			}
			return res
		}
		if !park {
			return ended(js.stop(ctx, j)), nil
		}
		if !js.stopping(ctx, j) {
			return ended(nil), nil
		}
		return ToolResult{}, &parked{ready: func() bool { return j.ended }, resume: func(_ workflow.Context, err error) (ToolResult, *parked) {
			return ended(err), nil
		}}
	}
	if park {
		return js.waitParked(ctx, a)
	}
	return js.wait(ctx, a), nil
}

func (js *jobs) named(id string) (*bgJob, ToolResult) {
	if j := js.find(id); j != nil {
		return j, ToolResult{}
	}
	ids := make([]string, len(js.list))
	for i, j := range js.list {
		ids[i] = j.id
	}
	return nil, toolError("%v %q: this run's jobs are: %s", subagent.ErrUnknownJob, id, strings.Join(ids, ", "))
}

func (js *jobs) listText() string {
	if len(js.list) == 0 {
		return "no jobs in this run"
	}
	var b strings.Builder
	for _, j := range js.list {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", j.id, j.agent, j.state(), clipTask(j.task, 80))
	}
	return b.String()
}

// send signals the message to the job's workflow, which takes it before
// its next model call.
func (js *jobs) send(ctx workflow.Context, id, text string) ToolResult {
	r, bad := js.deliver(ctx, id, text, js.sender)
	if bad != "" {
		return ToolResult{Content: bad, IsError: true}
	}
	return jsonToolResult(r)
}

// refuse says what is wrong with sending text to job id ("": nothing).
func (js *jobs) refuse(id, text string) string {
	j, bad := js.named(id)
	switch {
	case j == nil:
		return bad.Content
	case runtime.JobMessageRefused(id, text) != "":
		return fmt.Sprintf("%v: %s", tool.ErrInvalidArguments, runtime.JobMessageRefused(id, text))
	case j.ended:
		return fmt.Sprintf("%v: %s", subagent.ErrJobEnded, runtime.JobEnded(id, j.state()))
	}
	return ""
}

// deliver sends text to job id and returns its receipt, or what was
// wrong. from names the span of the model call whose reply sent it (zero:
// a program sent it, and no call did).
func (js *jobs) deliver(ctx workflow.Context, id, text string, from MessageLink) (subagent.Receipt, string) {
	if bad := js.refuse(id, text); bad != "" {
		return subagent.Receipt{}, bad
	}
	j := js.find(id)
	if j.queued() >= maxJobQueued && workflow.GetVersion(ctx, jobQueueChange, workflow.DefaultVersion, 1) >= 1 {
		// What the job told of the messages it took since, first.
		if js.drain(); j.queued() >= maxJobQueued {
			return subagent.Receipt{}, j.queueFull()
		}
	}
	if j.full() && workflow.GetVersion(ctx, jobMessagesChange, workflow.DefaultVersion, 1) >= 1 {
		return subagent.Receipt{}, j.tooMany()
	}
	js.sent++
	r := subagent.Receipt{JobID: j.id, MessageID: "msg_" + strconv.Itoa(js.sent), State: subagent.MessageQueued, Seq: j.dropped + len(j.receipts) + 1}
	m := jobMessage{ID: r.MessageID, Text: text, TraceID: from.TraceID, SpanID: from.SpanID}
	if js.publishing {
		m.Seq = r.Seq // for the job's deliveries
	}
	if workflow.GetVersion(ctx, jobOrderChange, workflow.DefaultVersion, 1) >= 1 {
		// Named by the run's first run id, which a reset of the run
		// keeps: the reset run numbers its messages on from where the
		// history it replays left them.
		j.sentTo++
		m.From, m.Order = workflow.GetInfo(ctx).OriginalRunID, j.sentTo
	}
	j.receipts = append(j.receipts, r)
	// Published queued before the job can take it.
	js.publish(ctx, jobEvent(subagent.JobMessageEvent, "", jobMessageEvent{Receipt: r, RunID: j.wfID, Text: text}))
	if err := workflow.SignalExternalWorkflow(ctx, j.wfID, "", jobMessageSignal, m).Get(ctx, nil); err != nil {
		if m.Order > 0 {
			j.sentTo-- // not sent: the next message takes its place
		}
		j.receipts = j.receipts[:len(j.receipts)-1]
		return subagent.Receipt{}, fmt.Sprintf("%v: %s", subagent.ErrJobEnded, runtime.JobEnded(id, ""))
	}
	switch {
	case len(j.receipts) > maxJobReceipts && workflow.GetVersion(ctx, receiptsBoundChange, workflow.DefaultVersion, 1) >= 1:
		j.receipts, j.dropped = trimReceipts(j.receipts, j.dropped, maxJobReceipts)
	case len(j.receipts) > oldMaxJobReceipts && workflow.GetVersion(ctx, receiptsChange, workflow.DefaultVersion, 1) >= 1:
		// A run recorded before receiptsBoundChange.
		extra := len(j.receipts) - oldMaxJobReceipts
		j.receipts, j.dropped = slices.Delete(j.receipts, 0, extra), j.dropped+extra
	}
	js.drain()
	for _, x := range j.receipts {
		if x.MessageID == m.ID {
			r = x
		}
	}
	return r, ""
}

// full reports whether the job has been sent maxJobMessages messages,
// those whose receipts were dropped included.
func (j *bgJob) full() bool { return j.dropped+len(j.receipts) >= maxJobMessages }

// queued counts the job's messages waiting for it to take them, as its
// run has heard: a message it took is queued until it tells so.
func (j *bgJob) queued() int {
	n := 0
	for _, r := range j.receipts {
		if r.State == subagent.MessageQueued {
			n++
		}
	}
	return n
}

// queueFull is the refusal of a message to a job that has maxJobQueued
// waiting, as in process.
func (j *bgJob) queueFull() string { return fmt.Sprintf("job %s: %v", j.id, mailbox.ErrFull) }

// tooMany is the refusal of a message to a job that is full, as in
// process.
func (j *bgJob) tooMany() string { return fmt.Sprintf("job %s: %v", j.id, mailbox.ErrTooMany) }

// trimReceipts drops from rs, the receipts of a job of which dropped are
// dropped already, the oldest past bound, those no longer queued first,
// as a job's mailbox does in process, and returns what is left and the
// count dropped.
func trimReceipts(rs []subagent.Receipt, dropped, bound int) ([]subagent.Receipt, int) {
	for len(rs) > bound {
		i := slices.IndexFunc(rs, func(r subagent.Receipt) bool { return r.State != subagent.MessageQueued })
		if i < 0 {
			i = 0 // every one is queued: the oldest
		}
		rs = slices.Delete(rs, i, i+1)
		dropped++
	}
	return rs, dropped
}

// waitTargets is the jobs a wait with a is for and how long it waits,
// or what the model reads instead (ok false).
func (js *jobs) waitTargets(a jobsArgs) (targets []*bgJob, d time.Duration, res ToolResult, ok bool) {
	ids := a.JobIDs
	if a.JobID != "" {
		ids = append([]string{a.JobID}, ids...)
	}
	d, bad := runtime.JobWait(a.Timeout)
	if bad != "" {
		return nil, 0, toolError("%v for %s: %s", tool.ErrInvalidArguments, subagent.JobsToolName, bad), false
	}
	if len(ids) == 0 {
		for _, j := range js.list {
			if !j.collected {
				targets = append(targets, j)
			}
		}
	} else {
		for _, id := range ids {
			j, bad := js.named(id)
			if j == nil {
				return nil, 0, bad, false
			}
			if !slices.Contains(targets, j) {
				targets = append(targets, j)
			}
		}
	}
	if len(targets) == 0 {
		return nil, 0, ToolResult{Content: "no job to wait for: every job of this run has been collected (list them with action list)"}, false
	}
	return targets, d, ToolResult{}, true
}

// endedOf returns whether targets have ended, all of them or, first, one.
func endedOf(targets []*bgJob, first bool) func() bool {
	return func() bool {
		n := 0
		for _, j := range targets {
			if j.ended {
				n++
			}
		}
		return n == len(targets) || first && n > 0
	}
}

// wait waits, on a durable timer, for the jobs a names to end, and
// collects those that did.
func (js *jobs) wait(ctx workflow.Context, a jobsArgs) ToolResult {
	targets, d, res, ok := js.waitTargets(a)
	if !ok {
		return res
	}
	if js.q != nil && js.q.top && workflow.GetVersion(ctx, jobAsksChange, workflow.DefaultVersion, 1) >= 1 {
		if bad := js.awaitAsking(ctx, targets, a.Mode == "any", d); bad != "" {
			return toolError("%s: %s", subagent.JobsToolName, bad)
		}
	} else {
		done := endedOf(targets, a.Mode == "any")
		if !done() && d > time.Nanosecond {
			if _, err := js.awaitTimed(ctx, d, done); err != nil {
				return toolError("%s: %v", subagent.JobsToolName, err)
			}
		}
	}
	return js.waited(targets, d)
}

// waitParked is wait, returning what it would wait for (parked): for at
// most d, the targets' end (any or all), and, at the top of the tree, a
// target waiting for a person counting as ended, then until the person
// has answered, and again, as awaitAsking waits.
func (js *jobs) waitParked(ctx workflow.Context, a jobsArgs) (ToolResult, *parked) {
	targets, d, res, ok := js.waitTargets(a)
	if !ok {
		return res, nil
	}
	first := a.Mode == "any"
	// timer sets the wait aside until cond holds or d has passed, then goes
	// on with then.
	timer := func(ctx workflow.Context, cond func() bool, then func(ctx workflow.Context) (ToolResult, *parked)) (ToolResult, *parked) {
		if cond() || d <= time.Nanosecond {
			return then(ctx)
		}
		timed := workflow.GetVersion(ctx, timerWaitChange, workflow.DefaultVersion, 1) >= 1
		return ToolResult{}, &parked{ready: cond, deadline: workflow.Now(ctx).Add(d), timed: timed, resume: func(ctx workflow.Context, err error) (ToolResult, *parked) {
			if err != nil {
				return toolError("%s: %v", subagent.JobsToolName, err), nil
			}
			return then(ctx)
		}}
	}
	if !(js.q != nil && js.q.top && workflow.GetVersion(ctx, jobAsksChange, workflow.DefaultVersion, 1) >= 1) {
		return timer(ctx, endedOf(targets, first), func(workflow.Context) (ToolResult, *parked) { return js.waited(targets, d), nil })
	}
	settled := js.settledOf(targets, first)
	var round func(ctx workflow.Context) (ToolResult, *parked)
	round = func(ctx workflow.Context) (ToolResult, *parked) {
		return timer(ctx, settled, func(workflow.Context) (ToolResult, *parked) {
			if !js.asking(targets) {
				return js.waited(targets, d), nil
			}
			// Until the person has answered, then again.
			return ToolResult{}, &parked{ready: func() bool { return !js.asking(targets) }, resume: func(ctx workflow.Context, err error) (ToolResult, *parked) {
				if err != nil {
					return toolError("%s: %s", subagent.JobsToolName, err.Error()), nil
				}
				return round(ctx)
			}}
		})
	}
	return round(ctx)
}

// waited is what a wait for targets, of at most d, returns once it has
// waited: those that ended, collected, and those still running.
func (js *jobs) waited(targets []*bgJob, d time.Duration) ToolResult {
	js.drain()
	var got []*bgJob
	var res ToolResult
	var running []string
	for _, j := range targets {
		if j.ended {
			got = append(got, j)
		} else {
			running = append(running, j.id)
		}
	}
	if len(targets) == 1 {
		if len(got) == 0 {
			return ToolResult{Content: fmt.Sprintf("job %s is still running after %v: wait again, do other work meanwhile, or cancel it", targets[0].id, d)}
		}
		return got[0].collect(js.spec.maxOutput())
	}
	var b strings.Builder
	for i, j := range got {
		if i > 0 {
			b.WriteString("\n\n")
		}
		r := j.collect(js.spec.maxOutput())
		res.Usage, res.Cost, res.Refused = res.Usage.Add(r.Usage), res.Cost+r.Cost, res.Refused+r.Refused
		res.Models, res.Earlier = addModels(res.Models, r.Models...), addModels(res.Earlier, r.Earlier...)
		fmt.Fprintf(&b, "job %s (%s) %s:\n%s", j.id, j.agent, j.state(), r.Content)
	}
	if len(running) > 0 {
		if len(got) > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "still running: %s: wait again, do other work meanwhile, or cancel them", strings.Join(running, ", "))
	}
	res.Content = b.String()
	return res
}

// asking notes, for each job, the questions of the tree that it or a
// child of its own waits on a person for (a job's descendants' workflow
// ids begin with its own), and reports whether any of targets has one.
// Only the run at the top of the tree knows them.
func (js *jobs) asking(targets []*bgJob) bool {
	if js.q == nil || !js.q.top {
		return false
	}
	found := false
	for _, j := range js.list {
		j.asks = nil
		if j.ended {
			continue
		}
		for _, it := range js.q.pending {
			if askedUnder(it, j.wfID) {
				j.asks = append(j.asks, it)
			}
		}
		found = found || len(j.asks) > 0 && slices.Contains(targets, j)
	}
	return found
}

// settledOf returns whether targets have ended or wait for a person
// (asking), all of them or, first, one.
func (js *jobs) settledOf(targets []*bgJob, first bool) func() bool {
	return func() bool {
		js.asking(targets)
		n := 0
		for _, j := range targets {
			if j.ended || len(j.asks) > 0 {
				n++
			}
		}
		return n == len(targets) || first && n > 0
	}
}

// awaitAsking waits, for at most d, for the targets to end (any or all),
// a job waiting for a person counting as ended, as a suspended job does
// in process. When the wait ends with a target waiting for a person, it
// waits with it — durably, without a timeout — until the person has
// answered, and then waits again for d: the question reaches the person
// as any question of the tree (Pending), attributed to the job's
// workflow, and the model reads the job's outcome, not that it is still
// running. It returns why it could not wait ("": it waited).
func (js *jobs) awaitAsking(ctx workflow.Context, targets []*bgJob, first bool, d time.Duration) string {
	settled := js.settledOf(targets, first)
	for {
		if !settled() && d > time.Nanosecond {
			if _, err := js.awaitTimed(ctx, d, settled); err != nil {
				return err.Error()
			}
		}
		if !js.asking(targets) {
			return ""
		}
		if err := workflow.Await(ctx, func() bool { return !js.asking(targets) }); err != nil {
			return err.Error()
		}
	}
}

// settle ends the run's jobs: those still running are cancelled, and
// what each spent that no wait or cancel collected is returned, to be
// counted in the run's ChildUsage.
//
// A program's starts under way are waited for first, and its waits
// after the jobs have ended, before what is left is collected: they
// collect what they waited for first (fold counts it). In a thread, whose
// jobs work on, they return with what has ended.
func (js *jobs) settle() (provider.Usage, float64, []provider.ModelUsage) {
	if js == nil {
		return provider.Usage{}, 0, nil
	}
	js.closing = true
	ctx, _ := workflow.NewDisconnectedContext(js.ctx)
	// (Neither waits without a program's start or wait.)
	_ = workflow.Await(ctx, func() bool { return js.starting == 0 })
	goWaits := func() { _ = workflow.Await(ctx, func() bool { return js.waiting == 0 }) }
	if len(js.list) == 0 {
		goWaits()
		return provider.Usage{}, 0, nil
	}
	if js.threaded() {
		// The thread's jobs work on; the next turn hands them over.
		js.leave()
		goWaits()
		return provider.Usage{}, 0, nil
	}
	for _, j := range js.list {
		if !j.ended {
			j.cancelled = true
			j.cancel()
		}
	}
	// Until each job's end is published too: the run must not end first.
	_ = workflow.Await(ctx, func() bool {
		return js.alive() == 0 && !slices.ContainsFunc(js.list, func(j *bgJob) bool { return !j.told })
	})
	goWaits()
	var u provider.Usage
	var c float64
	var ms []provider.ModelUsage
	for _, j := range js.list {
		if !j.collected {
			j.collected = true
			ju, jc := j.spent()
			u, c = u.Add(ju), c+jc
			jm, _ := j.models()
			ms = addModels(ms, jm...)
		}
	}
	return u, c, ms
}

func jsonToolResult(v any) ToolResult {
	b, err := json.Marshal(v)
	if err != nil {
		return toolError("%s: %v", subagent.JobsToolName, err)
	}
	return ToolResult{Content: string(b)}
}

// clipTask cuts a task to n bytes for a listing, as the in-process list
// does.
func clipTask(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return strconv.Quote(s[:n]) + "…"
}

// Names of the query and updates a run's background jobs are acted on
// through from outside the workflow (Jobs, SendToJob, CancelJob).
const (
	// JobsQuery returns the run's jobs ([]subagent.JobStatus).
	JobsQuery = "jobs"
	// JobSendUpdate sends a job a message (JobSend) and returns its
	// subagent.Receipt.
	JobSendUpdate = "job_send"
	// JobCancelUpdate cancels a job (its id) and returns its
	// subagent.JobStatus once it has ended.
	JobCancelUpdate = "job_cancel"
)

// JobSend is the argument of JobSendUpdate.
type JobSend struct {
	JobID string `json:"job_id"`
	Text  string `json:"text"`
}

// serve answers JobsQuery and takes JobSendUpdate, JobCancelUpdate,
// JobStartUpdate and JobsWaitUpdate.
// Neither records anything in the history until an update comes.
func (js *jobs) serve(ctx workflow.Context) error {
	if js.threaded() {
		if err := workflow.SetQueryHandler(ctx, ThreadJobsQuery, func() (ThreadJobs, error) { return js.state(), nil }); err != nil {
			return err
		}
	}
	if err := workflow.SetQueryHandler(ctx, JobsQuery, func() ([]subagent.JobStatus, error) {
		js.asking(nil)
		out := make([]subagent.JobStatus, len(js.list))
		for i, j := range js.list {
			out[i] = j.status()
		}
		return out, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, JobSendUpdate, func(ctx workflow.Context, m JobSend) (subagent.Receipt, error) {
		r, bad := js.deliver(ctx, m.JobID, m.Text, MessageLink{}) // a program's: no model call sent it
		if bad != "" {
			return r, errors.New(bad)
		}
		return r, nil
	}, workflow.UpdateHandlerOptions{Validator: func(m JobSend) error {
		if bad := js.refuse(m.JobID, m.Text); bad != "" {
			return errors.New(bad)
		}
		if j := js.find(m.JobID); j.full() {
			return errors.New(j.tooMany()) // a validator is not replayed: no version asked
		}
		return nil
	}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, JobCancelUpdate, func(ctx workflow.Context, id string) (subagent.JobStatus, error) {
		j := js.find(id)
		if err := js.stop(ctx, j); err != nil {
			return subagent.JobStatus{}, err
		}
		js.drain()
		return j.status(), nil
	}, workflow.UpdateHandlerOptions{Validator: func(id string) error {
		if j, bad := js.named(id); j == nil {
			return errors.New(bad.Content)
		}
		return nil
	}}); err != nil {
		return err
	}
	return js.serveGo(ctx)
}

// Jobs returns the background jobs of the run whose workflow is
// workflowID (Spec.Background), in the order they started: each one's
// state, step, last words, usage so far and message receipts.
func Jobs(ctx context.Context, c client.Client, workflowID string) ([]subagent.JobStatus, error) {
	var v converter.EncodedValue
	err := whileNotReady(ctx, func() error {
		var err error
		v, err = c.QueryWorkflow(ctx, workflowID, "", JobsQuery)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("temporal: reading the jobs of %s: %w", workflowID, err)
	}
	var out []subagent.JobStatus
	if err := v.Get(&out); err != nil {
		return nil, fmt.Errorf("temporal: reading the jobs of %s: %w", workflowID, err)
	}
	return out, nil
}

// SendToJob sends a message to job jobID of the run whose workflow is
// workflowID, as the run's model does with subagent_jobs: the job reads
// it before its next model call. It returns the message's receipt
// (queued, or delivered with the step), or refuses, sending nothing, an
// unknown job, one that has ended, and a blank or oversized message, with
// an error whose text says which (that of subagent.ErrUnknownJob,
// subagent.ErrJobEnded or tool.ErrInvalidArguments), as it refuses a job
// that has 64 messages waiting, or was sent 1,024, as in process. Between the turns
// of a thread (Spec.JobsAcrossTurns) no run takes it, nor CancelJob: the
// error says to act in the thread's next turn.
func SendToJob(ctx context.Context, c client.Client, workflowID, jobID, text string) (subagent.Receipt, error) {
	var r subagent.Receipt
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: JobSendUpdate, Args: []any{JobSend{JobID: jobID, Text: text}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &r)
	}
	if err != nil {
		return r, fmt.Errorf("temporal: sending a message to %s of %s: %w%s", jobID, workflowID, err, noTurnHint(err))
	}
	return r, nil
}

// CancelJob cancels job jobID of the run whose workflow is workflowID,
// and its child workflow's own children, and returns its status once it
// has ended. The run's model collects it as any ended job: its partial
// report and what it spent.
func CancelJob(ctx context.Context, c client.Client, workflowID, jobID string) (subagent.JobStatus, error) {
	var st subagent.JobStatus
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: JobCancelUpdate, Args: []any{jobID}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &st)
	}
	if err != nil {
		return st, fmt.Errorf("temporal: cancelling %s of %s: %w%s", jobID, workflowID, err, noTurnHint(err))
	}
	return st, nil
}

// noTurnHint says what to do when the run acted through has ended: its
// workflow takes no more updates, and a thread's jobs (Spec.JobsAcrossTurns)
// are acted on during a turn of the thread.
func noTurnHint(err error) string {
	var gone *serviceerror.NotFound
	if !errors.As(err, &gone) {
		return ""
	}
	return " (no run of that workflow is running: a thread's jobs are acted on while a turn of the thread runs; act in its next turn, or wait for the job there)"
}

// inbox is a background child's side of its mailbox: the messages its
// parent sent, taken before each model call, and what it tells its
// parent of where it stands.
type inbox struct {
	job    string
	parent string
	ch     workflow.ReceiveChannel
	// settle: a model call in flight when the job is cancelled is waited
	// for, so that what it was billed counts (jobSettleChange).
	settle bool
	// kept, for a job of a thread: what it told last and the messages it
	// took, for a turn of the thread that asks (answerHellos).
	kept      bool
	latest    jobProgress
	delivered []string
	// deliveredAt is the step each of delivered was taken before.
	deliveredAt []int
	// ordered: the job takes each sender's messages in their Order
	// (jobOrderChange), holding in held those that came early; next is,
	// by sender, the Order of the last taken.
	ordered bool
	next    map[string]int
	held    []jobMessage
}

// jobSettleChange names the workflow version from which a cancelled job
// is waited for until its workflow has ended, and a job cancelled during
// a model call waits for the call to end, so that what it spent counts
// instead of being dropped.
const jobSettleChange = "deputy.job-settles-its-call"

// modelContext is actx for the run's model calls: a job's wait for a
// call in flight when it is cancelled.
func (ib *inbox) modelContext(actx workflow.Context) workflow.Context {
	if ib == nil || !ib.settle {
		return actx
	}
	o := workflow.GetActivityOptions(actx)
	o.WaitForCancellation = true
	return workflow.WithActivityOptions(actx, o)
}

func newInbox(ctx workflow.Context, job string) *inbox {
	if job == "" {
		return nil
	}
	info := workflow.GetInfo(ctx)
	parent := ""
	if info.ParentWorkflowExecution != nil {
		parent = info.ParentWorkflowExecution.ID
	}
	settle := workflow.GetVersion(ctx, jobSettleChange, workflow.DefaultVersion, 1) >= 1
	ordered := workflow.GetVersion(ctx, jobOrderChange, workflow.DefaultVersion, 1) >= 1
	return &inbox{job: job, parent: parent, ch: workflow.GetSignalChannel(ctx, jobMessageSignal), settle: settle, ordered: ordered, next: map[string]int{}}
}

// take returns the messages waiting, as the user message that delivers
// them, and tells the parent they were taken before step.
//
// It returns the receipts of the messages taken, for the step's model
// call to publish (those a parent numbered: see jobEventsChange).
func (ib *inbox) take(ctx workflow.Context, step int, out RunOutput, conv []provider.Message) (provider.Message, []subagent.Receipt, []MessageLink, bool) {
	if ib == nil {
		return provider.Message{}, nil, nil, false
	}
	var ids, texts []string
	var taken []subagent.Receipt
	var links []MessageLink
	for {
		var got jobMessage
		if !ib.ch.ReceiveAsync(&got) {
			break
		}
		for _, m := range ib.inOrder(got) {
			ids, texts = append(ids, m.ID), append(texts, m.Text)
			if m.SpanID != "" {
				links = append(links, MessageLink{ID: m.ID, TraceID: m.TraceID, SpanID: m.SpanID})
			}
			if m.Seq > 0 {
				taken = append(taken, subagent.Receipt{JobID: ib.job, MessageID: m.ID, State: subagent.MessageDelivered, Step: step, Seq: m.Seq})
			}
		}
	}
	if len(ids) == 0 {
		return provider.Message{}, nil, nil, false
	}
	ib.tell(ctx, jobProgress{Job: ib.job, Step: step, Last: lastWords(conv), Usage: out.TotalUsage(), Cost: out.Cost, Delivered: ids})
	return provider.UserMessage(runtime.JobMessages(ids, texts)), taken, links, true
}

// inOrder returns the messages m lets the job take, in order: m itself,
// unless it came before a message its sender sent before it, which it
// then waits for in held, and those held that came after it. A sender's
// messages all come (a signal is delivered once its sender has sent it,
// and a job that ends takes no more), so held waits only for those on
// their way: at most a sender's maxJobQueued. A message the job has taken
// or holds already, come again, is dropped: it is taken once.
func (ib *inbox) inOrder(m jobMessage) []jobMessage {
	if !ib.ordered || m.Order == 0 {
		return []jobMessage{m}
	}
	if m.Order <= ib.next[m.From] || slices.ContainsFunc(ib.held, func(h jobMessage) bool { return h.From == m.From && h.Order == m.Order }) {
		return nil
	}
	if m.Order > ib.next[m.From]+maxJobQueued || len(ib.held) >= maxJobQueued {
		// More early than a sender can have on their way: not a message
		// of ours in order (a signal sent from outside), taken as it
		// comes rather than held for good.
		return []jobMessage{m}
	}
	ib.held = append(ib.held, m)
	var out []jobMessage
	for {
		i := slices.IndexFunc(ib.held, func(h jobMessage) bool { return h.Order == ib.next[h.From]+1 })
		if i < 0 {
			return out
		}
		h := ib.held[i]
		ib.held = slices.Delete(ib.held, i, i+1)
		ib.next[h.From] = h.Order
		out = append(out, h)
	}
}

// reached tells the parent where the job stands after a model reply of
// step.
func (ib *inbox) reached(ctx workflow.Context, step int, out RunOutput, conv []provider.Message) {
	if ib == nil {
		return
	}
	ib.tell(ctx, jobProgress{Job: ib.job, Step: step, Last: lastWords(conv), Usage: out.TotalUsage(), Cost: out.Cost})
}

func (ib *inbox) tell(ctx workflow.Context, p jobProgress) {
	if ib.parent == "" {
		return
	}
	p.Last = capText(p.Last, 2048)
	if ib.kept && !p.Hello {
		ib.latest = p
		ib.latest.Delivered = nil
		ib.delivered = append(ib.delivered, p.Delivered...)
		for range p.Delivered {
			ib.deliveredAt = append(ib.deliveredAt, p.Step)
		}
		if extra := len(ib.delivered) - maxHelloDelivered; extra > 0 {
			ib.delivered, ib.deliveredAt = ib.delivered[extra:], ib.deliveredAt[extra:]
		}
	}
	// A parent that has ended hears nothing more; the job goes on.
	_ = workflow.SignalExternalWorkflow(ctx, ib.parent, "", jobProgressSignal, p).Get(ctx, nil)
}

// lastWords is the last text the agent said in conv.
func lastWords(conv []provider.Message) string {
	for i := len(conv) - 1; i >= 0; i-- {
		if m := conv[i]; m.Role == provider.RoleAssistant && m.Content != "" {
			return m.Content
		}
	}
	return ""
}
