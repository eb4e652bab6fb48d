package subagent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// jobTable holds the background jobs of one parent run. The run owns their
// goroutines: when it ends, the table cancels what still runs, waits for
// it, and hands the run the usage not yet collected.
type jobTable struct {
	mu   sync.Mutex
	jobs map[string]*job
	// order is the jobs' ids, by their place (see jobPlace), so that the
	// jobs of a step are listed, waited for and collected in the order
	// of the calls that started them, whichever started first.
	order   []string
	started int // jobs started, for jobPlace.seq
	wg      sync.WaitGroup
	changed chan struct{} // made by a waiter, closed when a job ends (see ended)
	owned   bool          // close runs at the end of the run
	closed  bool          // the run has ended: no new jobs
	// lasting: the table is a thread's (WithJobsAcrossTurns), whose jobs
	// outlive the runs that start them; owner is the thread's owner;
	// relay is where its jobs' events go, to the thread's run running
	// now (see attach), or to the run's sink for a run's own jobs (nil
	// when it has none); gen counts the runs that attached. (The three
	// flags side by side keep the table in a smaller size class.)
	lasting bool
	owner   string
	relay   *relay
	gen     int
	// key is a thread's; touched when a run or Go code last acted on
	// its jobs, runs the runs acting on them now (see sweep).
	key     threadKey
	touched time.Time
	runs    int
	// api is the handle Spawner.Jobs returns, made with the table: a
	// run's Go code asking for its jobs allocates nothing.
	api Jobs
}

// newJobTable returns an empty job table of s.
func newJobTable(s *Spawner) *jobTable {
	jt := &jobTable{jobs: map[string]*job{}}
	jt.api = Jobs{s: s, jt: jt}
	return jt
}

type job struct {
	kept            *keptSpend // read back ended from the store: what it spent
	id, agent, task string
	cancel          context.CancelFunc
	done            chan struct{}
	// told closes once its deputy.job_ended event is emitted, just after
	// done (nil for a job read back ended from the store).
	told   chan struct{}
	res    tool.Result // set before done closes
	err    error       // set before done closes
	settle func(spent int64)
	unhold func()        // gives back what the job did not spend of its cost share
	box    *mailbox.Box  // its messages, and where its loop stands
	runID  string        // its sub-agent's run id, when events are on
	em     event.Emitter // the spawning call's: the job's events go there
	// Guarded by the table's mu: folded, its usage has been handed to the
	// parent; cancelled, by its parent. A thread's job (WithJobsAcrossTurns):
	// noted, a run was told it ended; swept, ended by the sweep
	// (WithJobTTL); endGen, the table's gen when it ended. (The four flags
	// side by side keep a job in a smaller size class: 352 bytes, not 384.)
	folded, cancelled, noted, swept bool
	endGen                          int
	place                           jobPlace // set when it joins the table
	// A thread's job kept in a store (WithJobStore): where, the spawn's
	// arguments and when it started; receipts: those of a job read back
	// ended.
	store    *jobStore
	args     json.RawMessage
	started  time.Time
	receipts []Receipt
	// scope: a run's job that a model's call started in a journaled
	// turn, the call's part of the journal, where its cancel is recorded
	// (cancelledKey).
	scope *journal.Scope
}

// cancelledKey is the journal key, in its spawning call's part of the
// journal, that records that a run's job was cancelled: a run of the
// turn after it starts the job cancelled, so that no work the cancel
// stopped (a tool call in a reply that came back as the cancel came)
// runs when the turn is resumed, whenever the run replays the cancel.
func cancelledKey(s *journal.Scope) string { return s.Prefix + "cancelled" }

// recordCancel records that j was cancelled, if it is a job that a run
// of its turn after this one starts again. A record that does not land
// leaves the job to be cancelled again as that run replays the cancel.
func (j *job) recordCancel(ctx context.Context) {
	if j.scope == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = j.scope.J.Record(wctx, cancelledKey(j.scope), journal.Entry{Content: "cancelled"})
}

// jobPlace is where a job stands among its table's jobs: in the order of
// the runs of its thread that started them (gen), then of the calls that
// started them in that run (the step and the call's index in it, as
// run.Position numbers them), then, for jobs started by one call or
// outside any model's tool call (Jobs.Start from Go code, after the
// others), in the order they started.
type jobPlace struct{ gen, step, index, seq int }

func (a jobPlace) compare(b jobPlace) int {
	return cmp.Or(cmp.Compare(a.gen, b.gen), cmp.Compare(a.step, b.step), cmp.Compare(a.index, b.index), cmp.Compare(a.seq, b.seq))
}

// attrJobID is the job id on the span of a background job
// ("background_job <name>"), the span under which the job's sub-agent runs.
const attrJobID = attribute.Key("deputy.job.id")

// jobMargin is what a background job costs its parent beyond its child's
// answer, taken from the job's share: the receipt (about 50 tokens), read
// by the parent's next calls until it is collected, say three times, and
// the call that collects it (about 30), written once and read once. In
// tokens (under a token limit), and priced at the parent's model (under a
// cost limit).
var jobMargin = provider.Usage{InputTokens: 3*50 + 30, OutputTokens: 30}

// startJob runs fn in the background under the parent run's context and
// returns the job's receipt. who is the sub-agent the job runs (for a fork,
// the spawner's fork), callID the spawning call. The settle function fn
// returns is called when the job's usage reaches the parent.
//
// SUBAGENT_STARTED is emitted before the receipt, so that a UI finds the
// child under its spawning call while the call is still open; the job's
// events carry that sub-agent run id, and its terminal event comes when the
// job ends. A traced run gets a span for the job, a child of the spawning
// call's span that lasts as long as the job.
func (s *Spawner) startJob(ctx context.Context, sc *spawnCall, callID string, a spawnArgs) (*job, error) {
	jt := s.jobs(ctx)
	if jt == nil {
		return nil, tool.Correctable(fmt.Errorf("%s: background jobs need a running agent to own them: call without background", SpawnToolName))
	}
	if err := sc.handOffFirst(ctx); err != nil {
		return nil, err
	}
	if err := s.admitOnce(ctx, jt, callID, sc.who().def.Name); err != nil {
		return nil, err
	}
	r := jobRecord{Task: a.Task}
	if jt.lasting && s.cfg.jobStore != nil {
		r.Args = a.task() // kept with the job (see storeJob)
	}
	j, err := s.launch(ctx, jt, sc, callID, &r)
	if err == nil && jt.relay != nil {
		// Its SUBAGENT_STARTED before its receipt; not the events its
		// child has queued since it started, which a sink may be taking
		// as it waits for what the receipt leads to.
		// A program's start (no call id) has no receipt to order.
		grace := announceGrace
		if callID == "" {
			grace = 0
		}
		jt.relay.flush(sc.announced, grace, ctx.Done())
	}
	return j, err
}

// handOffFirst asks the run's policy about the job's hand-off before the
// job starts, as on Temporal: a job the policy refuses (a denial, a
// person's refusal, or a question not answered yet) is not started, gets
// no id and is not counted against WithMaxSpawns, and the model reads why
// in the spawning call's result. The input the policy let through (as a
// rule rewrote it) is the one the job's child is given, unchecked again.
// A job whose child finished in an earlier run of the turn is replayed
// from the journal, as a hand-off in the foreground is, and not asked
// about again.
func (sc *spawnCall) handOffFirst(ctx context.Context) error {
	pol := policy.From(ctx)
	if pol == nil {
		return nil
	}
	if _, _, finished := sc.recorded(ctx); finished {
		return nil
	}
	in := sc.input()
	if sc.member == nil {
		in = forkInput(sc.model, sc.text, sc.check, sc.prefix)
	}
	in, err := sc.who().handOff(ctx, pol, sc.callID, sc.args(), in)
	if err != nil {
		sc.uncount()
		return err
	}
	sc.handed = &in
	return nil
}

// launch starts the job of sc in jt: a new one, or one read back from the
// store (r.ID set) that was running when its process stopped, or that
// waits for a person and is woken with the answers (r.State is then
// JobSuspended, as the store keeps it until it runs: see takeOver).
func (s *Spawner) launch(ctx context.Context, jt *jobTable, sc *spawnCall, callID string, r *jobRecord) (*job, error) {
	who := sc.who()
	jobID, runID := id.New("job_"), ""
	if js := journalFrom(ctx); js != nil && r.ID == "" {
		// The same job each time the turn runs: a resumed turn, replaying
		// the model's decisions, waits for it by the id the model saw, and
		// its sub-agent run has the id the client saw.
		salt := ""
		if jt.lasting {
			var err error
			if salt, err = turnSalt(ctx, js); err != nil {
				return nil, err
			}
		}
		jobID, runID = jobIDs(js, callID, salt)
	}
	resumed := r.ID != ""
	if resumed {
		jobID, runID = r.ID, r.RunID
	} else if old := jt.find(jobID); old != nil {
		// The same job, started again by a turn run again: the thread
		// kept it. Its announcement, queued before, is flushed with
		// all that has been queued since.
		sc.announced = jt.relay.mark()
		return old, nil
	}
	if runID == "" && jt.relay != nil {
		// Known before it is announced, for its relay (see relay); a
		// thread's job keeps it, for its events after a restart.
		runID = id.New("sub_")
	}
	// The job outlives the call, not the run: its context is the run's. Its
	// depth is the caller's, and its place in the tree the call's. A
	// thread's job outlives the run too: it is
	// cancelled by its parent or by the spawner's Close, its events go to
	// the thread's run running now, and it is not journaled with the run's
	// turn, which the run ending discards; with a store it has a journal
	// of its own.
	base := run.Context(ctx)
	j := &job{id: jobID, runID: runID, agent: who.def.Name, task: r.Task, done: make(chan struct{}), told: make(chan struct{}), args: r.Args, started: r.Started}
	var progressed func()
	if jt.lasting && s.cfg.jobStore != nil {
		progressed = func() { s.progressed(jt, j) } // its progress is kept (storeJob)
	}
	j.box = mailbox.New(progressed)
	if j.started.IsZero() {
		j.started = s.cfg.now()
	}
	if resumed {
		j.folded, j.noted, j.cancelled = r.Folded, r.Noted, r.Cancelled
	}
	var own *journal.Scope
	var jl *jobLease
	if jt.lasting && s.cfg.jobStore != nil {
		var err error
		if own, err = s.storeJob(ctx, jt, j, resumed); err != nil {
			return nil, fmt.Errorf("%s: keeping the job in the store: %w: try again when the store is back", SpawnToolName, err)
		}
		rec := *r // the lease keeps it: r stays the caller's, on its stack
		if jl, err = s.lease(ctx, j, &rec); err != nil {
			return nil, fmt.Errorf("%s: taking the job's lease in the store: %w: try again when the store is back", SpawnToolName, err)
		}
	}
	if js := journalFrom(ctx); js != nil {
		// Its invocation is journaled in the spawning call's part of the
		// turn's journal, where what it paid for is found when a run of
		// the turn does not start it again (journal.Scope.Paid).
		base = journal.With(base, js)
	}
	var sink *relaySink
	if jt.relay != nil {
		sink = jt.relay.sink(runID)
		if jt.lasting {
			base = journal.With(event.WithSink(context.WithoutCancel(base), sink), own)
		} else {
			base = event.WithSink(base, sink)
		}
	}
	// Its bounds (WithJobLimits and the defaults): its wall time from now,
	// its tokens and its cost in the run of its sub-agent, its steps in a
	// fork's loop (sc.child). cancel ends it.
	sc.limits = s.limitsFor(ctx, jt)
	jctx, cancel := sc.limits.bound(base)
	if sink != nil {
		sink.done = jctx.Done() // a job cancelled does not wait for the queue
	}
	jctx = run.AtCallOf(ctx, jctx) // the caller's depth and the call's place
	// The job's child takes its share of the parent's budget like a child
	// in the foreground; the step ending does not give it back. What the
	// parent spends on the job itself comes out of the share first
	// (jobMargin).
	jctx, giveBack := run.KeepShare(ctx, jctx, jobMargin.Tokens())
	// Its share of the parent's cost limit is held in the parent until the
	// job is collected: the parent's later steps cannot share it out again.
	// What the parent spends on the job comes out of it first, here too.
	jctx, unhold := run.HoldCostShare(ctx, jctx, jobMargin)
	jctx, sc.bounds.cost = sc.limits.boundCost(jctx)
	sc.bounds.limits = sc.limits
	sc.bounds.steps = sc.member == nil && sc.limits.Steps > 0 // a fork's
	if sc.member != nil {
		// A member's tokens: its job's own limit, unless the parent's
		// share, smaller, bounds it.
		sc.bounds.tokens = sc.limits.Tokens > 0 && (!run.HasShares(jctx) || run.TokenShare(jctx) > sc.limits.Tokens)
	}
	jctx = context.WithValue(jctx, jobBoundsKey{}, &sc.bounds)
	var spent *ledger.Ledger
	var cost *run.Spend
	if jt.lasting {
		// What it spends, counted by the later turn that takes it.
		jctx, spent = ledger.WithGate(jctx)
		jctx, cost = run.TrackSpend(ctx, jctx)
	}
	j.cancel, j.unhold = cancel, unhold
	if js := journalFrom(ctx); js != nil && !js.Recorded && callID != "" && !jt.lasting && !resumed {
		// A run's job of a model's call: cancelled in a run of the turn
		// before this one, it starts cancelled. (A thread's job is kept
		// across the runs of its turn, cancelled or not.)
		j.scope = js
		if _, ok := js.J.Lookup(cancelledKey(js)); ok {
			j.cancelled = true
			cancel()
		}
	}
	jctx = mailbox.With(jctx, j.box)
	jt.mu.Lock()
	if jt.closed {
		jt.mu.Unlock()
		cancel()
		unhold()
		giveBack()
		if jl != nil {
			if jl.prior != nil {
				// Woken, it does not run after all: it waits as before.
				_ = j.store.put(ctx, j.id, jl.prior)
			}
			j.store.release()
		}
		return nil, tool.Correctable(fmt.Errorf("%s: the run has ended: no background job can start", SpawnToolName))
	}
	old := jt.jobs[j.id]
	if old != nil && !(resumed && old.ended() && interrupted(old.err)) {
		// The same job, started again by a turn run again: the thread
		// kept it.
		jt.mu.Unlock()
		cancel()
		unhold()
		giveBack()
		if jl != nil {
			j.store.release()
		}
		sc.announced = jt.relay.mark() // as above
		return old, nil
	}
	if old != nil {
		// Woken with its answers (Spawner.wake): it takes the place of
		// its suspended self.
		j.place = old.place
		jt.jobs[j.id] = j
	} else {
		j.place = jobPlace{gen: jt.gen, step: math.MaxInt, seq: jt.started}
		if step, index, ok := run.CallPlace(ctx); ok {
			j.place.step, j.place.index = step, index
		}
		jt.started++
		at, _ := slices.BinarySearchFunc(jt.order, j.place, func(id string, pl jobPlace) int { return jt.jobs[id].place.compare(pl) })
		jt.jobs[j.id] = j
		jt.order = slices.Insert(jt.order, at, j.id)
	}
	jt.wg.Add(1)
	jt.mu.Unlock()
	if spent != nil {
		s.spends(ctx, j, spent, cost, old)
	}
	var span trace.Span
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		// The spawning call's span ends with the receipt: the job's own
		// span keeps the child's spans in a live parent.
		jctx = trace.ContextWithSpan(jctx, sp)
		jctx, span = sp.TracerProvider().Tracer(agent.TracerName).Start(jctx, "background_job "+who.def.Name,
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrJobID.String(j.id)))
	}
	pre := jt.relay.mark()
	jctx, ann := who.announce(jctx, callID, runID)
	if ann != nil {
		j.runID, j.em = ann.runID, ann.em
		j.box.SetNotify(mailbox.Notify{
			Queued: func(m mailbox.Message, r mailbox.Receipt) {
				j.emitValue(JobMessageEvent, "", messageEvent{receiptOf(j.id, r), j.runID, m.Text})
			},
			Delivered: func(rs []mailbox.Receipt) {
				for _, r := range rs {
					j.emitValue(JobDeliveredEvent, j.runID, messageEvent{receiptOf(j.id, r), j.runID, ""})
				}
			},
		})
		j.emitStatus(JobStartedEvent, jt.status(j))
	}
	// What flush waits for: the job's child queues nothing before its
	// goroutine starts, below.
	sc.announced = jt.relay.markAfter(pre)
	var leased jobFunc // nil: sc.runJob, called as it is (a method value would be an allocation)
	if jl != nil {
		leased = s.leased(jt, j, jl, sc.runJob, cancel)
	}
	go func() {
		growStack(0)
		defer jt.wg.Done()
		defer jt.ended()
		defer j.emitEnd(jt)
		defer close(j.done)
		defer s.ending(jctx, jt, j)
		defer cancel()
		defer giveBack()
		defer jt.markEnd(j)
		if leased != nil {
			j.res, j.settle, j.err = leased(jctx, ann)
		} else {
			j.res, j.settle, j.err = sc.runJob(jctx, ann)
		}
		j.err = sc.bounds.named(jctx, j.err)
		j.box.Close()
		ann.unannounce(j.err)
		if span != nil {
			if j.err != nil {
				span.RecordError(j.err)
				span.SetStatus(codes.Error, j.err.Error())
			}
			span.End()
		}
	}()
	return j, nil
}

// receipt is what the model reads when a job starts.
func (j *job) receipt() tool.Result {
	return tool.Result{Content: jobtool.Started(j.id, JobsToolName)}
}

// markEnd records when j ended, among the runs of its thread.
func (jt *jobTable) markEnd(j *job) {
	jt.mu.Lock()
	j.endGen = jt.gen
	jt.mu.Unlock()
}

// ended wakes whoever waits for a job of the table to end.
func (jt *jobTable) ended() {
	jt.mu.Lock()
	if jt.changed != nil {
		close(jt.changed)
		jt.changed = nil // the next waiter makes one (waitChange)
	}
	jt.mu.Unlock()
}

// waitChange returns a channel closed when a job of the table ends next.
func (jt *jobTable) waitChange() <-chan struct{} {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if jt.changed == nil {
		jt.changed = make(chan struct{})
	}
	return jt.changed
}

// jobs returns the run's job table, creating it and arranging its cleanup
// at the end of the run. It returns nil outside a run, or when the run has
// ended before any job started.
func (s *Spawner) jobs(ctx context.Context) *jobTable {
	if k, ok := s.threadOf(ctx); ok {
		return s.threadTable(ctx, k, true)
	}
	jt := run.Local(ctx, jobsKey{s}, func() any { return newJobTable(s) }).(*jobTable)
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if !jt.owned {
		// The jobs' events reach the run's sink through a relay, as a
		// thread's do, so that a sink may wait for a job, or cancel it,
		// from within its Emit. Its goroutine ends with the run, once the
		// sink has taken the jobs' last events.
		rctx := run.Context(ctx)
		var o *outlet
		if em := event.From(rctx); em.Enabled() {
			jt.relay = &relay{parent: em.SubagentRunID()}
			// The events come attributed: the outlet passes them on as
			// they are.
			o = jt.relay.attach(event.From(event.WithSubagent(rctx, "")), 1)
		}
		if !run.OnEnd(ctx, func() provider.Usage {
			u := jt.close()
			jt.relay.detach(o, nil)
			return u
		}) {
			jt.relay = nil
			return nil
		}
		jt.relay.start(o)
		jt.owned = true
	}
	return jt
}

type jobsKey struct{ s *Spawner }

// close cancels the jobs still running, waits for all, and returns the
// usage not yet handed to the parent.
func (jt *jobTable) close() provider.Usage {
	u, _ := jt.shut()
	return u
}

// shut is close, returning too the jobs whose usage it folds: those no
// run took.
func (jt *jobTable) shut() (provider.Usage, []*job) {
	jt.mu.Lock()
	jt.closed = true
	for _, j := range jt.jobs {
		j.cancel()
	}
	jt.mu.Unlock()
	jt.wg.Wait()
	var u provider.Usage
	var left []*job
	jt.mu.Lock()
	defer jt.mu.Unlock()
	for _, id := range jt.order {
		if j := jt.jobs[id]; !j.folded {
			j.folded = true
			j.settle(j.res.Usage.Tokens())
			j.unhold()
			u = u.Add(j.res.Usage)
			left = append(left, j)
		}
	}
	return u, left
}

// collect hands a finished job's outcome to the caller, with its usage the
// first time only. A job suspended by an interrupt hands over the
// interrupt, as an error: the caller suspends too (see suspendedJob).
func (jt *jobTable) collect(j *job) (tool.Result, error) {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	res := tool.Result{Content: j.res.Content, Value: j.res.Value}
	var err error
	switch {
	case interrupted(j.err) && j.store != nil && !j.cancelled:
		// A stored job waits for a person; woken, it counts all it spent
		// when it ends.
		return tool.Result{}, j.err
	case interrupted(j.err):
		res, err = tool.Result{}, j.err
	case j.err != nil:
		res = tool.Result{Content: "job " + j.id + " failed: " + j.err.Error(), IsError: true, Err: j.err}
	}
	if !j.folded {
		j.folded = true
		j.settle(j.res.Usage.Tokens())
		j.unhold()
		res.Usage = j.res.Usage
	}
	return res, err
}

func (jt *jobTable) find(id string) *job {
	if jt == nil {
		return nil
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	return jt.jobs[id]
}

func (jt *jobTable) ids() string {
	if jt == nil {
		return "(none)"
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if len(jt.order) == 0 {
		return "(none)"
	}
	ids := append([]string(nil), jt.order...)
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// list renders the run's jobs, one a line: id, agent, status, task.
func (jt *jobTable) list() string {
	if jt == nil {
		return "no jobs in this run"
	}
	jt.mu.Lock()
	jobs := make([]*job, len(jt.order))
	for i, id := range jt.order {
		jobs[i] = jt.jobs[id]
	}
	jt.mu.Unlock()
	if len(jobs) == 0 {
		return "no jobs in this run"
	}
	var b strings.Builder
	for _, j := range jobs {
		status := jt.state(j)
		switch {
		case status == JobSuspended:
			status = "suspended (waiting for a person's answer)"
		case j.store.elsewhereNow():
			status = "running (in another process that shares the store)"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", j.id, j.agent, status, clip(j.task, 80))
	}
	return b.String()
}

// growStack grows the stack of a job's new goroutine, before it does
// anything (and of a sub-agent call's, at its start: SubAgentTool.Call),
// to the 32 KB its sub-agent's loop reaches on the fake provider. A
// goroutine starts small, and a stack grown on the way down is copied,
// with every frame on it, at each doubling: that was a quarter of the CPU
// of a job started and collected in BenchmarkBackgroundJob. Grown here,
// it is copied once, with one frame. What it buys, in medians over
// alternating runs: BenchmarkBackgroundJob/go's background case from
// about 45,000 to 22,000 cpu-ns/op (with the Task check that skips JSON),
// and BenchmarkFanoutDefault/1024 from 43.9 to 35.1 ms of CPU per turn.
// A call through a real provider goes deeper (the OpenAI SDK's encoding
// takes the stack to 64 KB) and is copied once more on its way; grown to
// 64 KB here, that copy goes, but a job on the fake provider then costs
// more than it saved (a larger stack is taken from the heap and given back
// at each job): BenchmarkBackgroundJobRatio's wire cases measure both.
//
//go:noinline
func growStack(i int) byte {
	var frame [16 << 10]byte // with what runs above it, more than 16 KB: the stack doubles to 32 KB
	frame[i] = 1
	return frame[len(frame)-1-i]
}
