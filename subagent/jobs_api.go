package subagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Jobs is the background children of one run, safe for concurrent use.
type Jobs struct {
	s  *Spawner
	jt *jobTable
}

// Jobs returns the jobs of ctx's run, or nil, which lists none and fails.
func (s *Spawner) Jobs(ctx context.Context) *Jobs {
	if !s.cfg.background {
		return nil
	}
	jt := s.jobs(ctx)
	if jt == nil {
		return nil
	}
	return &jt.api
}

// States of jobs and messages, and names and bounds of background jobs.
const (
	JobRunning           = "running"
	JobDone              = "done"
	JobFailed            = "failed"
	JobCancelled         = "cancelled"
	JobSuspended         = "suspended" // waits for a person (tool.Ask)
	MessageQueued        = mailbox.Queued
	MessageDelivered     = mailbox.Delivered
	MessageUndelivered   = mailbox.Undelivered     // the job ended before a step took it
	JobsToolName         = "subagent_jobs"         // the jobs tool's name
	DefaultJobWait       = 30 * time.Second        // a wait the model gives no timeout
	MaxMessageBytes      = jobtool.MaxMessageBytes // the text of a message sent to a job
	DefaultMaxBackground = 8                       // jobs of one run alive at once (WithMaxBackground)
	DefaultMaxOwnerJobs  = 32                      // jobs of one owner's threads alive at once (WithMaxOwnerJobs)
	DefaultJobSteps      = 50                      // JobLimits' defaults; tokens and cost only past an unlimited run
	DefaultJobTime       = 30 * time.Minute
	DefaultJobTokens     = 200_000
	DefaultJobCost       = 2.0            // US dollars
	DefaultJobTTL        = 24 * time.Hour // a thread's jobs after its last use (WithJobTTL)
)

// Task is what Jobs.Start starts: the spawn tool's arguments.
type Task struct {
	Task         string          `json:"task"`                    // what to do (required)
	Context      string          `json:"context,omitempty"`       // all it knows besides
	Agent        string          `json:"agent,omitempty"`         // a roster member; empty forks
	OutputSchema json.RawMessage `json:"output_schema,omitempty"` // its answer's schema
	Model        string          `json:"model,omitempty"`         // a fork's model (WithModelMenu)
}

// JobStatus is where a background job stands.
type JobStatus struct {
	ID        string           `json:"job_id"`
	Agent     string           `json:"agent"`
	Task      string           `json:"task"`
	State     string           `json:"state"`                // JobRunning, JobDone, …
	Step      int              `json:"step"`                 // the last step begun
	LastWords string           `json:"last_words,omitempty"` // the last it said
	Usage     provider.Usage   `json:"usage"`                // spent so far
	Cost      float64          `json:"cost,omitempty"`
	Messages  []Receipt        `json:"messages,omitempty"`         // of the last 64 messages sent to it
	Dropped   int              `json:"messages_dropped,omitempty"` // older messages, their receipts left out
	Questions []tool.Interrupt `json:"questions,omitempty"`        // asked while suspended
	Swept     bool             `json:"swept,omitempty"`            // ended by WithJobTTL's sweep
	Elsewhere bool             `json:"elsewhere,omitempty"`        // run by another process sharing the store (WithJobStore), as it last recorded
}

// Receipt says where a message sent to a job stands.
type Receipt struct {
	JobID     string `json:"job_id"`
	MessageID string `json:"message_id"`
	State     string `json:"state"`          // MessageQueued, MessageDelivered, …
	Step      int    `json:"step,omitempty"` // delivered before this step (0: queued)
	Seq       int    `json:"seq"`            // its place among the job's messages
}

// JobResult is an ended job; Result.Usage is set when it is first collected.
type JobResult struct {
	JobStatus
	Result tool.Result
	Err    error // nil for an answer; a *tool.Interrupted when suspended
}

// errNoJobs is the error of the methods of a nil *Jobs.
var errNoJobs = errors.New("subagent: no background jobs here: Spawner.Jobs has them only inside a run of an agent that has the spawner, built with WithBackground")

// Start starts a background child and returns its status at once.
func (js *Jobs) Start(ctx context.Context, t Task) (JobStatus, error) {
	if js == nil {
		return JobStatus{}, errNoJobs
	}
	s := js.s
	if err := s.admit(ctx); err != nil {
		return JobStatus{}, err
	}
	a, err := t.args()
	if err != nil {
		return JobStatus{}, err
	}
	check, callSchema, err := s.checkerFor(a.OutputSchema)
	if err != nil {
		return JobStatus{}, err
	}
	sc, err := s.plan(ctx, "", a, check, callSchema)
	if err != nil {
		return JobStatus{}, err
	}
	j, err := s.startJob(ctx, sc, "", a)
	if err != nil {
		return JobStatus{}, err
	}
	return js.jt.status(j), nil
}

// args checks t as Spawner.parse checks the spawn tool's arguments, less
// what its fields' types say already and what plan checks (the roster
// member, the model), without a round trip through JSON and the tool's
// schema: that was a seventh of the CPU of a job started and collected in
// BenchmarkBackgroundJob.
func (t Task) args() (spawnArgs, error) {
	if strings.TrimSpace(t.Task) == "" {
		return spawnArgs{}, fmt.Errorf("%w for %s: task is blank: say what the sub-agent must do", tool.ErrInvalidArguments, SpawnToolName)
	}
	if o := bytes.TrimSpace(t.OutputSchema); len(o) > 0 && o[0] != '{' && string(o) != "null" {
		return spawnArgs{}, fmt.Errorf("%w for %s: output_schema is %s, not a JSON Schema object: send one such as {\"type\":\"object\"}, or leave it out",
			tool.ErrInvalidArguments, SpawnToolName, clip(string(o), 40))
	}
	return spawnArgs{Task: t.Task, Context: t.Context, Agent: t.Agent, OutputSchema: t.OutputSchema, Background: true, Model: t.Model}, nil
}

// Status returns where the job stands.
func (js *Jobs) Status(id string) (JobStatus, error) {
	if js == nil {
		return JobStatus{}, errNoJobs
	}
	j, err := js.find(id)
	if err != nil {
		return JobStatus{}, err
	}
	st := js.jt.status(j)
	j.emitStatus(JobStatusEvent, st)
	return st, nil
}

// List returns the run's jobs in the order of the calls that started them.
func (js *Jobs) List() []JobStatus {
	if js == nil {
		return nil
	}
	js.jt.mu.Lock()
	jobs := make([]*job, len(js.jt.order))
	for i, id := range js.jt.order {
		jobs[i] = js.jt.jobs[id]
	}
	js.jt.mu.Unlock()
	out := make([]JobStatus, len(jobs))
	for i, j := range jobs {
		out[i] = js.jt.status(j)
		j.emitStatus(JobStatusEvent, out[i])
	}
	return out
}

// WaitFor says what Jobs.Wait waits for.
type WaitFor struct {
	IDs     []string      // none: every job not collected yet
	Any     bool          // return when one has ended, not all
	Timeout time.Duration // 0: until ctx ends
}

// Wait returns, collected, the jobs that ended as w says (maybe none).
func (js *Jobs) Wait(ctx context.Context, w WaitFor) ([]JobResult, error) {
	if js == nil {
		return nil, errNoJobs
	}
	targets, err := js.targets(w.IDs)
	if err != nil {
		return nil, err
	}
	if targets, err = js.s.wake(ctx, js.jt, targets); err != nil {
		return nil, err
	}
	if err := js.await(ctx, targets, w); err != nil {
		return nil, err
	}
	var out []JobResult
	for _, j := range targets {
		if j.ended() {
			out = append(out, js.collect(ctx, j))
		}
	}
	return out, nil
}

// await waits until the targets have ended as w says.
func (js *Jobs) await(ctx context.Context, targets []*job, w WaitFor) error {
	var timeout <-chan time.Time
	if w.Timeout > 0 {
		t := time.NewTimer(w.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	if rl := js.jt.relay; rl != nil && !settled(targets, w.Any) {
		// A sink waiting from within Emit: the jobs' events do not wait for it.
		ids := make([]string, 0, len(targets))
		for _, j := range targets {
			ids = append(ids, j.runID)
		}
		defer rl.lift(ids)()
	}
	for !settled(targets, w.Any) {
		// The channel is taken before the jobs are looked at again, so
		// that a job ending in between closes it; it is made only when
		// the wait has to wait.
		changed := js.jt.waitChange()
		if settled(targets, w.Any) {
			break
		}
		select {
		case <-changed:
			continue
		case <-timeout:
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	return nil
}

// settled reports whether a wait for targets is over: all have ended, or
// one has when any will do.
func settled(targets []*job, anyOne bool) bool {
	ended := 0
	for _, j := range targets {
		if j.ended() {
			ended++
		}
	}
	return len(targets) == 0 || ended == len(targets) || anyOne && ended > 0
}

// Send queues a message that the job reads before its next model call.
func (js *Jobs) Send(ctx context.Context, id, text string) (Receipt, error) {
	if js == nil {
		return Receipt{}, errNoJobs
	}
	j, err := js.find(id)
	if err != nil {
		return Receipt{}, err
	}
	if bad := jobtool.BadMessage(id, text); bad != "" {
		return Receipt{}, tool.Correctable(fmt.Errorf("%w: %s", tool.ErrInvalidArguments, bad))
	}
	msgID, err := messageID(ctx, js.jt.lasting)
	if err != nil {
		return Receipt{}, err
	}
	// Whether the job has ended is read first: a job of a turn run again
	// replays the messages it took before its end, so a message it took
	// is known below if it had ended here. Read after, a job that replayed
	// the message and ended in between was told it ended, not that it
	// had the message.
	ended := j.ended()
	if r, ok := j.box.Receipt(msgID); ok {
		return receiptOf(j.id, r), nil // sent by an earlier run of the turn
	}
	if r, ok := j.storedReceipt(msgID); ok {
		return r, nil // sent before a restart to a job that has ended
	}
	if ended {
		return Receipt{}, tool.Correctable(fmt.Errorf("%w: %s", ErrJobEnded, jobtool.Ended(id, js.jt.state(j))))
	}
	if j.store.elsewhereNow() {
		return Receipt{}, tool.Correctable(fmt.Errorf("job %s runs in another process that shares the store: send it there, or wait for it", id))
	}
	m := mailbox.Message{ID: msgID, Text: text, From: trace.SpanContextFromContext(ctx)}
	undo := func() {}
	if j.store != nil {
		// Recorded before it is queued: a restart finds it, delivered
		// (in the job's journal) or still waiting.
		j.store.sendMu.Lock()
		defer j.store.sendMu.Unlock()
		if undo, err = js.s.storeMessage(ctx, j, m); err != nil {
			return Receipt{}, fmt.Errorf("job %s: keeping the message in the store: %w: send it again when the store is back", id, err)
		}
	}
	r, err := j.box.Send(m)
	if err != nil {
		undo()
	}
	if errors.Is(err, mailbox.ErrClosed) {
		return Receipt{}, tool.Correctable(fmt.Errorf("%w: %s", ErrJobEnded, jobtool.Ended(id, "")))
	}
	if err != nil {
		return Receipt{}, tool.Correctable(fmt.Errorf("job %s: %w", id, err))
	}
	return receiptOf(j.id, r), nil
}

// Cancel cancels the job and its children and returns it collected.
func (js *Jobs) Cancel(ctx context.Context, id string) (JobResult, error) {
	if js == nil {
		return JobResult{}, errNoJobs
	}
	j, err := js.find(id)
	if err != nil {
		return JobResult{}, err
	}
	if j.ended() && interrupted(j.err) {
		j.box.Withdraw() // the messages it kept for its answers are never taken
	}
	parkedNow := parked(js.jt, j)
	if parkedNow {
		js.s.unpark(ctx, js.jt, j, false)
	}
	if j.store.elsewhereNow() {
		return JobResult{}, tool.Correctable(fmt.Errorf("job %s runs in another process that shares the store: cancel it there, or wait for it", id))
	}
	js.jt.mu.Lock()
	running := !j.ended()
	// A job that waits for a person is cancelled too: its questions are
	// withdrawn, and a wait for it no longer asks them. (A stored one was
	// just unparked, cancelled.)
	asked := !running && interrupted(j.err) && (!j.cancelled || parkedNow)
	if running || asked {
		j.cancelled = true
	}
	js.jt.mu.Unlock()
	if running || asked {
		j.recordCancel(ctx)
	}
	if running && j.em.Enabled() {
		j.emitStatus(JobCancelledEvent, js.jt.status(j))
	}
	j.cancel()
	select {
	case <-j.done:
	case <-ctx.Done():
		return JobResult{}, ctx.Err()
	}
	jr := js.collect(ctx, j)
	if asked {
		jr.Result.Content = "job " + j.id + " cancelled while it waited for a person's answer: its work is discarded."
	}
	return jr, nil
}

func (js *Jobs) find(id string) (*job, error) {
	if j := js.jt.find(id); j != nil {
		return j, nil
	}
	return nil, tool.Correctable(fmt.Errorf("%w %q: this run's jobs are: %s", ErrUnknownJob, id, js.jt.ids()))
}

// targets returns the jobs named, or those not collected yet.
func (js *Jobs) targets(ids []string) ([]*job, error) {
	if len(ids) == 0 {
		js.jt.mu.Lock()
		defer js.jt.mu.Unlock()
		var out []*job
		for _, id := range js.jt.order {
			if j := js.jt.jobs[id]; !j.folded {
				out = append(out, j)
			}
		}
		return out, nil
	}
	out := make([]*job, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		j, err := js.find(id)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// collect hands over a job that ended to the run of ctx.
func (js *Jobs) collect(ctx context.Context, j *job) JobResult {
	if js.jt.relay != nil && j.told != nil {
		// Its deputy.job_ended is queued for the run collecting it, which
		// its goroutine emits just after done closes (the relay queues it
		// without waiting): a thread's run that ended right after the
		// wait would otherwise never see it, the next run being told only
		// of jobs still running.
		select {
		case <-j.told:
		case <-ctx.Done():
		}
	}
	res, err := js.jt.collect(j)
	if !res.Usage.IsZero() {
		js.s.handOver(ctx, j)
		res.Usage = js.s.owed(ctx, j, res.Usage)
	}
	js.s.saved(context.Background(), js.jt, j)
	st := js.jt.status(j)
	switch {
	case st.Swept:
		res = tool.Result{Content: sweptReport(st, js.s.cfg.jobTTL), Usage: res.Usage}
		err = nil
	case st.State == JobCancelled || st.State == JobFailed && pastLimit(j.err):
		res = tool.Result{Content: partialReport(st, j.err), Usage: res.Usage}
		err = nil
	}
	return JobResult{JobStatus: st, Result: res, Err: err}
}

// partialReport is what a job cancelled, or stopped at one of its
// bounds (err says which), hands back.
func partialReport(st JobStatus, err error) string {
	reason := ""
	if st.State != JobCancelled {
		reason = clip(err.Error(), 200)
	}
	return jobtool.Partial(st.ID, reason, st.Step, st.Usage.Tokens(), st.LastWords)
}

// status returns where j stands.
func (jt *jobTable) status(j *job) JobStatus {
	p := j.box.Progress()
	st := JobStatus{ID: j.id, Agent: j.agent, Task: j.task, State: jt.state(j), Step: p.Step, LastWords: p.Last, Usage: p.Usage, Cost: p.Cost}
	jt.mu.Lock()
	st.Swept = j.swept
	jt.mu.Unlock()
	if j.ended() {
		st.Usage = j.res.Usage
		if st.State == JobSuspended { // a cancelled job's questions are withdrawn
			var in *tool.Interrupted
			if errors.As(j.err, &in) {
				st.Questions = in.Interrupts
			}
		}
	}
	if j.store.elsewhereNow() {
		j.store.elsewhereStatus(&st)
	}
	rs, dropped := j.box.Receipts()
	for _, r := range rs {
		st.Messages = append(st.Messages, receiptOf(j.id, r))
	}
	st.Dropped = dropped
	if j.receipts != nil {
		st.Messages, st.Dropped = j.receipts, j.store.dropped // read back from the store
	}
	return st
}

// storedReceipt returns the receipt of message id kept with a job read back
// ended from the store.
func (j *job) storedReceipt(id string) (Receipt, bool) {
	for _, r := range j.receipts {
		if r.MessageID == id {
			return r, true
		}
	}
	return Receipt{}, false
}

// ended reports whether the job has ended.
func (j *job) ended() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// state returns the job's state, from its outcome.
func (j *job) state() string {
	if !j.ended() {
		return JobRunning
	}
	return stateOf(j.err)
}

// state returns j's state: from its outcome, or cancelled for a job its
// parent (or the sweep) cancelled, one that waited for a person among
// them.
func (jt *jobTable) state(j *job) string {
	st := j.state()
	if st != JobRunning && st != JobDone {
		jt.mu.Lock()
		if j.cancelled {
			st = JobCancelled
		}
		jt.mu.Unlock()
	}
	return st
}

// stateOf returns the state of a job that ended with err.
func stateOf(err error) string {
	switch {
	case err == nil:
		return JobDone
	case interrupted(err):
		return JobSuspended
	case errors.Is(err, context.Canceled):
		return JobCancelled
	default:
		return JobFailed
	}
}

func receiptOf(jobID string, r mailbox.Receipt) Receipt {
	return Receipt{JobID: jobID, MessageID: r.ID, State: r.State, Step: r.Step, Seq: r.Seq}
}

// messageID names a message sent under ctx: under a journal, by its
// place in the turn, the same each time the turn runs, and for a thread's
// job (lasting) by the turn's salt too.
func messageID(ctx context.Context, lasting bool) (string, error) {
	js := journalFrom(ctx)
	if js == nil {
		return id.New("msg_"), nil
	}
	salt := ""
	if lasting {
		var err error
		if salt, err = turnSalt(ctx, js); err != nil {
			return "", err
		}
	}
	return js.ID("msg_", salt+js.Next("message")), nil
}

// A thread's jobs outlive the turns that start them, and the turns of a
// thread may run under journals of the same name (an A2A task answered
// again, an AG-UI client that sends a run id again), each journal deleted
// when its turn ends. The ids of a thread's jobs and messages, derived
// from their place in the turn, are salted with a value the turn records
// in its journal the first time it needs one: a turn run again after a
// crash finds it and names its jobs and messages the same, a later turn of
// the same name gets its own.

// saltEntry is the journal key of a turn's salt.
const saltEntry = "deputy/kept-jobs-salt"

type saltKey struct{}

type salt struct {
	once sync.Once
	v    string
	err  error
}

// turnSalt returns the salt of the turn of ctx, recording it the first
// time.
func turnSalt(ctx context.Context, js *journal.Scope) (string, error) {
	sl := run.Local(ctx, saltKey{}, func() any { return &salt{} }).(*salt)
	sl.once.Do(func() {
		if e, ok := js.J.Lookup(saltEntry); ok && json.Unmarshal(e.Value, &sl.v) == nil {
			return
		}
		sl.v = id.New("")
		v, _ := json.Marshal(sl.v) // a string: it cannot fail
		if err := js.J.Record(context.WithoutCancel(ctx), saltEntry, journal.Entry{Value: v}); err != nil {
			sl.err = fmt.Errorf("recording the turn's salt of job ids in the journal: %w: run the turn again when the store is back", err)
		}
	})
	return sl.v, sl.err
}

// The CUSTOM events of calls, spawns and jobs, a job's in order.
const (
	ValidationEvent   = "deputy.validation"    // the validator rejected an answer
	RefusedEvent      = "deputy.refused"       // a limit refused a child
	JobStartedEvent   = "deputy.job_started"   // after its SUBAGENT_STARTED
	JobMessageEvent   = "deputy.job_message"   // a message queued
	JobDeliveredEvent = "deputy.job_delivered" // a message taken by the sub-agent
	JobStatusEvent    = "deputy.job_status"    // its status asked for
	JobCancelledEvent = "deputy.job_cancelled" // cancelled while running; ended follows
	JobEndedEvent     = "deputy.job_ended"     // ended, in its JobStatus's state
)

// statusEvent and messageEvent are the values of a job's events.
type statusEvent struct {
	JobStatus
	RunID string `json:"subagent_run_id"`
}

type messageEvent struct {
	Receipt
	RunID string `json:"subagent_run_id"`
	Text  string `json:"text,omitempty"`
}

// emitStatus emits a CUSTOM event of the job, by its parent, with st.
func (j *job) emitStatus(name string, st JobStatus) {
	if j.em.Enabled() {
		j.emitValue(name, "", statusEvent{st, j.runID})
	}
}

// emitValue emits a CUSTOM event of the job, attributed to by ("": the
// parent).
func (j *job) emitValue(name, by string, v any) {
	b, _ := json.Marshal(v) // plain fields: it cannot fail
	j.em.Emit(event.Event{Type: event.Custom, Name: name, SubagentRunID: by, Value: b})
}

// emitEnd emits the job's JobEndedEvent, once it has ended.
func (j *job) emitEnd(jt *jobTable) {
	if j.em.Enabled() {
		j.emitStatus(JobEndedEvent, jt.status(j))
	}
	close(j.told)
}

// admitOnce is admitJob decided once for each spawning call of a
// journaled turn: the decision is recorded in the call's part of the
// journal, and a run of the turn after it makes the same one, with the
// same message, whichever jobs are alive as it replays. The model's
// recorded answers were made after reading the receipt, or the refusal:
// a job refused before and admitted now would run and spend unseen, and
// one admitted before and refused now would leave the model waiting on a
// job that does not exist. A decision that cannot be recorded fails the
// call, before the job starts.
func (s *Spawner) admitOnce(ctx context.Context, jt *jobTable, callID, name string) error {
	js := journalFrom(ctx)
	if js == nil || js.Recorded || callID == "" {
		// Not a model's call that its turn records (Jobs.Start, from Go
		// code, decides afresh each time it is called).
		reason, err := s.admitJob(ctx, jt)
		if err != nil {
			return refuse(ctx, callID, name, reason, err)
		}
		return nil
	}
	key := js.Prefix + "admission"
	if e, ok := js.J.Lookup(key); ok {
		if e.Error == "" {
			return nil
		}
		return refuse(ctx, callID, name, e.Content, tool.Correctable(&refusedBefore{msg: e.Error}))
	}
	reason, refusal := s.admitJob(ctx, jt)
	e := journal.Entry{Content: "admitted"}
	if refusal != nil {
		e = journal.Entry{Content: reason, Error: refusal.Error()}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := js.J.Record(wctx, key, e); err != nil {
		return fmt.Errorf("%s: recording whether the job may start in the journal: %w: resume the turn when the store is back", SpawnToolName, err)
	}
	if refusal != nil {
		return refuse(ctx, callID, name, reason, refusal)
	}
	return nil
}

// refusedBefore is the refusal of a spawn, recorded in the journal, that
// a run of the turn after it gives again. It is an ErrMaxBackground, as
// the refusal was.
type refusedBefore struct{ msg string }

func (e *refusedBefore) Error() string { return e.msg }
func (e *refusedBefore) Unwrap() error { return ErrMaxBackground }

// admitJob refuses a background job past WithMaxBackground (alive in
// one run, or in one thread), or past WithMaxOwnerJobs (alive in the
// threads of one owner), with the reason of the refusal's event. A job
// that waits for a person's answer is alive: answered, it runs again.
func (s *Spawner) admitJob(ctx context.Context, jt *jobTable) (reason string, err error) {
	alive := jt.alive()
	if alive >= s.cfg.maxBackground {
		where := "one run"
		if jt.lasting {
			where = "one thread"
		}
		return "max_background", tool.Correctable(fmt.Errorf("%w: %d are running or waiting for a person's answer, the most %s may have: wait for one, or cancel one, first",
			ErrMaxBackground, alive, where))
	}
	if !jt.lasting {
		return "", nil
	}
	ts := &s.threads
	ts.mu.Lock()
	var tables []*jobTable
	for k, t := range ts.tables {
		if k.owner == jt.owner {
			tables = append(tables, t)
		}
	}
	ts.mu.Unlock()
	mine := 0
	for _, t := range tables {
		mine += t.alive()
	}
	if mine < s.cfg.maxOwnerJobs && s.cfg.jobStore != nil {
		// The jobs of the owner's threads that ran, or waited for a
		// person, when their process stopped run again when their thread
		// is next used (or answered): they count before then too.
		mine += s.keptRunning(ctx, jt.owner)
	}
	if mine >= s.cfg.maxOwnerJobs {
		return "max_owner_jobs", tool.Correctable(fmt.Errorf("%w: %d are running or waiting for a person's answer in the threads of this owner, the most one owner may have: wait for one, or cancel one, first",
			ErrMaxBackground, mine))
	}
	return "", nil
}

// alive counts the jobs of jt that have not ended, and those that wait
// for a person's answer (suspended, not cancelled or swept): answered,
// they run again, so they hold their place under the caps until they end.
func (jt *jobTable) alive() int {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	n := 0
	for _, j := range jt.jobs {
		if !j.ended() || interrupted(j.err) && !j.cancelled {
			n++
		}
	}
	return n
}
