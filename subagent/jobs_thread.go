package subagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// With WithJobsAcrossTurns the background jobs a top-level run starts
// belong to its thread (agent.WithThread, and its owner, agent.WithOwner),
// not to the run: they work on when the run ends, and the thread's next
// run acts on them (the jobs tool, Jobs) and is told, before its first
// model call, which ended meanwhile (the spawner is a tool.Notifier). The
// spawner owns their goroutines: Close ends them.

// WithJobsAcrossTurns gives a top-level run's jobs to its thread.
func WithJobsAcrossTurns(note func(JobResult) string) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		c.background, c.acrossTurns = true, true
		c.note = note
		if c.note == nil {
			c.note = DefaultJobNote
		}
		return nil
	})
}

// DefaultJobNote is what the model reads of a job that ended between turns.
func DefaultJobNote(r JobResult) string {
	if r.State == JobSuspended {
		return fmt.Sprintf("Background job %s (%s), started in an earlier turn, waits for a person's answer. %s", r.ID, r.Agent, r.Result.Content)
	}
	return fmt.Sprintf("Background job %s (%s), started in an earlier turn, has ended (%s). Its result:\n%s", r.ID, r.Agent, r.State, r.Result.Content)
}

// waitingReport is what a job that waits for a person hands back.
func waitingReport(st JobStatus) string {
	var b strings.Builder
	b.WriteString("Wait for it (" + JobsToolName + ", action wait) to put its questions to them:")
	for _, q := range st.Questions {
		b.WriteString("\n- " + clip(q.Message, 500))
	}
	return b.String()
}

// maxKeptJobs bounds the jobs a thread keeps once they are collected:
// the oldest go first.
const maxKeptJobs = 64

// threadKey names a thread's jobs: its owner and its id.
type threadKey struct{ owner, thread string }

// threadJobs is the jobs of every thread, which the spawner owns.
type threadJobs struct {
	mu     sync.Mutex
	tables map[threadKey]*jobTable
	closed bool
	// The sweep (WithJobTTL): when it last ran, whether it runs now, and
	// its goroutine, which Close waits for.
	swept    time.Time
	sweeping bool
	wg       sync.WaitGroup
	// spent is, for each job of the tables, what it spends by model and
	// the run that started it (see handOver).
	spent map[*job]jobSpend
	// unclaimed is, by provider and model, what the jobs of threads that
	// left memory without a store spent that no run counted (Unclaimed).
	unclaimed []provider.ModelUsage
	// kept is, by owner, the threads of the owner that the store kept
	// with jobs running, not held by this process, as the first job this
	// process admitted found them (keptScanned; see keptRunning): an
	// owner leaves it once none of them has a job running, so it holds
	// no more than the threads whose jobs ran as a process stopped.
	kept        map[string][]threadKey
	keptScanned bool
}

// jobSpend is what a thread's job spends, by model (its own ledger, whose
// calls the ledger of the run that started it counts until that run
// reports its cost: ledger.WithGate) and in dollars (cost, which knows
// the part of both that run counted), and the context of that run.
type jobSpend struct {
	from context.Context
	l    *ledger.Ledger
	cost *run.Spend
}

// spends keeps what j, a thread's job started under ctx, spends in l and
// cost.
func (s *Spawner) spends(ctx context.Context, j *job, l *ledger.Ledger, cost *run.Spend, old *job) {
	ts := &s.threads
	ts.mu.Lock()
	if ts.spent == nil {
		ts.spent = map[*job]jobSpend{}
	}
	ts.spent[j] = jobSpend{from: run.Context(ctx), l: l, cost: cost}
	delete(ts.spent, old)
	ts.mu.Unlock()
}

// owed returns what of u, all that j spent, the run of ctx that takes it
// now counts (run.Spend.Owed): all of it for the run that started it, if
// that run has not reported yet; else what that run does not count as
// its own, as handOver does for its dollars.
func (s *Spawner) owed(ctx context.Context, j *job, u provider.Usage) provider.Usage {
	ts := &s.threads
	ts.mu.Lock()
	sp, ok := ts.spent[j]
	ts.mu.Unlock()
	if !ok {
		if j.kept != nil {
			// Read back from the store: what the run that started it
			// counted, as Owed leaves out for a later run.
			return run.Minus(u, j.kept.counted)
		}
		return u
	}
	return sp.cost.Owed(ctx, u)
}

// keptSpend is what a job read back ended from the store spent, by
// provider and model with its cost, and the part of it the run that
// started it counted (jobRecord.Models and Counted).
type keptSpend struct {
	models, counted []provider.ModelUsage
}

// spentByModel returns what j, a thread's job, has spent by provider and
// model, and the part the run that started it counted, as its record
// keeps them; none for a job whose spending is not kept.
func (s *Spawner) spentByModel(j *job) (all, counted []provider.ModelUsage) {
	ts := &s.threads
	ts.mu.Lock()
	sp, ok := ts.spent[j]
	ts.mu.Unlock()
	if ok {
		return sp.l.Entries(), sp.cost.Counted()
	}
	if j.kept != nil {
		return j.kept.models, j.kept.counted
	}
	return nil, nil
}

// forgetSpends forgets what the jobs spent, which no run will take.
func (s *Spawner) forgetSpends(jobs []*job) {
	ts := &s.threads
	ts.mu.Lock()
	for _, j := range jobs {
		delete(ts.spent, j)
	}
	ts.mu.Unlock()
}

// unclaim keeps, for Unclaimed, what the jobs, ended and taken by no run,
// spent that the runs that started them did not count: without a store
// their thread leaves memory (the sweep, Close) and no later turn can be
// told of them. With a store their records keep it, for the thread's next
// turn.
func (s *Spawner) unclaim(jobs []*job) {
	if s.cfg.jobStore != nil || len(jobs) == 0 {
		return
	}
	ts := &s.threads
	for _, j := range jobs {
		_, rest := ledger.Unreplayed(s.spentByModel(j))
		ts.mu.Lock()
		for _, m := range rest {
			i := slices.IndexFunc(ts.unclaimed, func(e provider.ModelUsage) bool { return e.Provider == m.Provider && e.Model == m.Model })
			if i < 0 {
				ts.unclaimed = append(ts.unclaimed, m)
			} else {
				ts.unclaimed[i] = ts.unclaimed[i].Add(m)
			}
		}
		ts.mu.Unlock()
	}
}

// Unclaimed returns, per model, what swept or closed jobs spent uncounted.
func (s *Spawner) Unclaimed() []provider.ModelUsage {
	ts := &s.threads
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.unclaimed)
}

// handOver counts what j, a thread's job, spent in the run of ctx that
// takes its usage (told of it in a note, or collecting it): its cost and
// its ledger (RUN_FINISHED's usage), as its tokens count in the run's
// ChildUsage. The run that started the job counted them as they were
// spent, until it reported its cost (run.AddCall); a later turn of the
// thread, whose run is not inside that one, counts the rest.
func (s *Spawner) handOver(ctx context.Context, j *job) {
	ts := &s.threads
	ts.mu.Lock()
	sp, ok := ts.spent[j]
	ts.mu.Unlock()
	var dollars float64
	var all, counted []provider.ModelUsage
	switch {
	case ok && !run.Same(sp.from, ctx):
		dollars, all, counted = sp.cost.Uncounted(), sp.l.Entries(), sp.cost.Counted()
	case !ok && j.kept != nil:
		// Read back from the store: the run that started it was another
		// process's, and the record keeps what each model cost.
		all, counted = j.kept.models, j.kept.counted
	default:
		return
	}
	_, rest := ledger.Unreplayed(all, counted)
	if !ok {
		for _, m := range rest {
			dollars += m.Cost
		}
	}
	if dollars != 0 {
		run.AddCost(ctx, dollars, 0, "")
	}
	for _, m := range rest {
		ledger.Add(ctx, m)
	}
}

// attachment is a run of a thread that acted on its jobs: the jobs' events
// go to its sink while it runs.
type attachment struct{}

type attachKey struct{ jt *jobTable }

// threadOf returns the thread whose jobs a run under ctx acts on: that of
// a top-level run, with WithJobsAcrossTurns.
func (s *Spawner) threadOf(ctx context.Context) (threadKey, bool) {
	if !s.cfg.acrossTurns || agent.Depth(ctx) != 0 {
		return threadKey{}, false
	}
	th := agent.Thread(ctx)
	if th == "" {
		return threadKey{}, false
	}
	return threadKey{owner: agent.Owner(ctx), thread: th}, true
}

// threadTable returns the jobs of the thread k, creating them if create,
// attached to the run of ctx; nil once the spawner is closed. With a
// store, a thread this process has not seen yet is read from it, and its
// jobs that were running start again.
func (s *Spawner) threadTable(ctx context.Context, k threadKey, create bool) *jobTable {
	s.sweep()
	ts := &s.threads
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return nil
	}
	jt := ts.tables[k]
	var running []jobRecord
	if jt == nil {
		var ended []*job
		if s.cfg.jobStore != nil {
			ts.mu.Unlock()
			var err error
			if ended, running, err = s.loadThread(ctx, k); err != nil {
				return nil // the thread's jobs cannot be known while the store fails
			}
			ts.mu.Lock()
			if ts.closed {
				ts.mu.Unlock()
				return nil
			}
		}
		if jt = ts.tables[k]; jt != nil {
			running = nil // read meanwhile by another run of the thread
		} else {
			if !create && len(ended)+len(running) == 0 {
				ts.mu.Unlock()
				return nil
			}
			if ts.tables == nil {
				ts.tables = map[threadKey]*jobTable{}
			}
			jt = newJobTable(s)
			jt.lasting, jt.owner, jt.key, jt.touched = true, k.owner, k, s.cfg.now()
			jt.relay = &relay{keep: true}
			for _, j := range ended {
				jt.addEnded(j)
			}
			ts.tables[k] = jt
		}
	}
	ts.mu.Unlock()
	s.attach(ctx, jt)
	for _, r := range running {
		s.restart(ctx, jt, r)
	}
	return jt
}

// attach makes the run of ctx the one the thread's jobs report to, the
// first time it acts on them: their events go to its sink until it ends,
// and the jobs that ended before it are the ones it is told of. Go code
// outside a run only marks the thread used now.
func (s *Spawner) attach(ctx context.Context, jt *jobTable) {
	if agent.RunID(ctx) == "" {
		_ = s.touch(ctx, jt) // Go code outside any run
		return
	}
	fresh := false
	run.Local(ctx, attachKey{jt}, func() any { fresh = true; return attachment{} })
	if !fresh {
		return
	}
	rctx := run.Context(ctx)
	jt.mu.Lock()
	jt.gen++
	jt.runs++
	gen := jt.gen
	jt.mu.Unlock()
	o := jt.relay.attach(event.From(rctx), gen)
	_ = s.touch(ctx, jt) // a store that fails only makes the sweep sooner
	registered := run.OnEnd(ctx, func() provider.Usage {
		// No event of a job reaches the run's sink from now on; those
		// on their way reach it first, unless the run is cancelled.
		jt.relay.detach(o, rctx.Done())
		jt.mu.Lock()
		jt.runs--
		jt.touched = s.cfg.now()
		gone, took := jt.prune()
		jt.mu.Unlock()
		var u provider.Usage
		for _, j := range took {
			s.handOver(ctx, j) // their cost, as their usage
			u = u.Add(s.owed(ctx, j, j.res.Usage))
		}
		s.pruned(ctx, gone)
		return u
	})
	if !registered {
		// The run has ended already (a goroutine it left behind acts on
		// the jobs): its sink takes none of their events.
		jt.relay.detach(o, nil) // not started: it waits for nothing
		jt.mu.Lock()
		jt.runs--
		jt.mu.Unlock()
		return
	}
	jt.relay.start(o)
}

// relay passes the events of a thread's jobs on to the sink of the run of
// the thread attached last, through that run's outlet: a queue and a
// goroutine of its own that passes them on, one at a time and in the
// order they came. No job, and no one emitting, waits for the sink to
// take an event (but see emit's bound), so a sink may act on the jobs
// from within its Emit, and wait for them there (Wait, Cancel): the
// events that causes come after the one it is taking. Once the run's end
// has detached its outlet, no event of a job reaches the run's sink,
// whose terminal event comes after. It keeps, for each job still running,
// the events that opened it (its SUBAGENT_STARTED and deputy.job_started)
// and its sub-agent's terminal event once emitted, until its
// deputy.job_ended: a later run of the thread is shown them first, when
// it attaches, so that its stream is told of every job whose events it
// gets.
//
// A run's own jobs (not a thread's) go through a relay too, attached once
// to the run's sink for the run's life: parent is the sub-agent run the
// events of the jobs' parent are attributed to ("" at the top), and keep
// is false, there being no later run to tell of the jobs.
type relay struct {
	mu     sync.Mutex
	gen    int       // the run attached last (jobTable.gen)
	out    *outlet   // its outlet, where events go; nil when none listens
	live   []liveJob // in the order they were announced
	parent string
	keep   bool
}

// outlet is a run's end of a relay, which the run's attachment owns:
// detach ends it. Its fields are guarded by the relay's mu.
type outlet struct {
	em event.Emitter
	// queue is the events to pass on; queued counts those queued, taken
	// those the sink took (its Emit returned), calls the Emit calls
	// begun, in set within one.
	queue                []event.Event
	queued, taken, calls int
	in                   bool
	// waited counts, by their sub-agent run id, the jobs a wait begun
	// within Emit call liftCall waits for (see lift).
	waited   map[string]int
	liftCall int
	// wake tells the goroutine of events queued, or of the detach; room,
	// made by an emitter waiting for room, is closed when there is some
	// or when it need wait no more; moved, made by one waiting for the
	// sink, is closed when an Emit call returns or the goroutine ends.
	wake        chan struct{}
	room, moved chan struct{}
	// started: its goroutine runs; detached: the run has ended, and the
	// goroutine ends once the queue is empty, closing done.
	started, detached bool
	done              chan struct{}
}

// liveJob is a job of a thread that has not ended, or whose
// deputy.job_ended is not emitted yet: the events that announce it to a
// run of the thread that did not see it start.
type liveJob struct {
	runID  string
	events []event.Event
}

// maxRelayed bounds an outlet's queue: past it, the events of the jobs'
// sub-agents wait for the sink to take some (see relay.emit).
const maxRelayed = 4096

// relaySink is the sink of the job whose sub-agent run id is runID; done
// is its context's, once made.
type relaySink struct {
	r     *relay
	runID string
	done  <-chan struct{}
}

// Emit passes e on through the relay.
func (s *relaySink) Emit(e event.Event) { s.r.emit(s.runID, s.done, e) }

// sink returns the sink of the job whose sub-agent run id is runID.
func (r *relay) sink(runID string) *relaySink {
	return &relaySink{r: r, runID: runID}
}

// emit queues e, an event of the job whose sub-agent run id is runID, for
// the run attached now. The job's own events are those of its sub-agent
// run, and the CUSTOM events of its parent (r.parent): those of the jobs
// its sub-agent starts name that sub-agent.
//
// When maxRelayed events wait in the queue, an event of the job's
// sub-agent run waits for room (a slow sink slows the sub-agents down),
// unless done, the job's context's, is closed (a job cancelled ends), or
// the sink waits for the job from within Emit (see lift). The events
// that announce, end or tell of a job or its messages do not wait: the
// jobs and messages bound them, and they are emitted holding what a sink
// acting on the job would wait for.
func (r *relay) emit(runID string, done <-chan struct{}, e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	own := e.Type == event.Custom && e.SubagentRunID == r.parent
	lifecycle := own || e.SubagentRunID == runID && (e.Type == event.SubagentStarted || e.Type == event.SubagentFinished || e.Type == event.SubagentError)
	for o := r.out; !lifecycle && o != nil && len(o.queue) >= maxRelayed && o.waitedFor(runID) == 0; o = r.out {
		if o.room == nil {
			o.room = make(chan struct{})
		}
		room := o.room
		r.mu.Unlock()
		select {
		case <-room:
		case <-done:
			lifecycle = true // queue it, and go on
		}
		r.mu.Lock()
	}
	switch {
	case !r.keep:
	case e.Type == event.SubagentStarted && e.SubagentRunID == runID:
		r.live = append(r.live, liveJob{runID: runID, events: []event.Event{e}})
	case own && e.Name == JobStartedEvent, e.SubagentRunID == runID && (e.Type == event.SubagentFinished || e.Type == event.SubagentError):
		// Of its latest run: a job woken with a person's answers starts
		// again, under the same run id, maybe before its suspended self's
		// end is emitted.
		for i := len(r.live) - 1; i >= 0; i-- {
			if r.live[i].runID == runID {
				r.live[i].events = append(r.live[i].events, e)
				break
			}
		}
	case own && e.Name == JobEndedEvent:
		// Its last event: no run needs to be told of it any more. The
		// first of its runs ends first.
		for i := range r.live {
			if r.live[i].runID == runID {
				r.live = slices.Delete(r.live, i, i+1)
				break
			}
		}
	}
	if o := r.out; o != nil {
		o.push(e)
	}
}

// push queues e. r.mu is held.
func (o *outlet) push(e event.Event) {
	o.queue = append(o.queue, e)
	o.queued++
	select {
	case o.wake <- struct{}{}:
	default: // told already
	}
}

// free wakes the emitters waiting for room in o, to look again. r.mu is
// held.
func (o *outlet) free() {
	if o.room != nil {
		close(o.room)
		o.room = nil
	}
}

// pass is the goroutine of o: it passes on o's events, one at a time,
// until the run's end detaches it and the queue is empty.
func (r *relay) pass(o *outlet) {
	r.mu.Lock()
	for {
		for len(o.queue) == 0 && !o.detached {
			r.mu.Unlock()
			<-o.wake
			r.mu.Lock()
		}
		if len(o.queue) == 0 {
			break
		}
		e := o.queue[0]
		o.queue[0] = event.Event{}
		if o.queue = o.queue[1:]; len(o.queue) == 0 {
			o.queue = nil
		}
		if len(o.queue) < maxRelayed {
			o.free()
		}
		o.calls++
		o.in = true
		r.mu.Unlock()
		o.em.Emit(e)
		r.mu.Lock()
		o.in, o.waited = false, nil
		o.taken++
		o.moved = closeNil(o.moved)
	}
	o.moved = closeNil(o.moved)
	r.mu.Unlock()
	close(o.done)
}

// closeNil closes c, if not nil, and returns nil.
func closeNil(c chan struct{}) chan struct{} {
	if c != nil {
		close(c)
	}
	return nil
}

// attach makes em, the sink of the thread's run gen, the one the jobs'
// events go to, and returns its outlet (nil when em takes no events),
// with the jobs that are still running announced to it, as they were
// first announced: a run of the thread attached after another (a later
// turn) does not see them start. Its goroutine starts with start.
func (r *relay) attach(em event.Emitter, gen int) *outlet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen < r.gen {
		return nil // a later run of the thread attached first
	}
	if r.out != nil {
		r.out.free() // its emitters wait for the new outlet now
	}
	r.gen, r.out = gen, nil
	if !em.Enabled() {
		return nil
	}
	o := &outlet{em: em, wake: make(chan struct{}, 1), done: make(chan struct{})}
	for _, l := range r.live {
		for _, e := range l.events {
			o.push(e)
		}
	}
	r.out = o
	return o
}

// start starts the goroutine of o, unless it is nil or detached already.
func (r *relay) start(o *outlet) {
	if o == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !o.detached {
		o.started = true
		go r.pass(o)
	}
}

// detach ends o, a run's outlet, as the run ends: no event goes to it
// from now on, and once those queued have reached the sink, its goroutine
// ends. When stop closes first (the run's context ends while a sink is
// slow, or never returns), those not passed on yet are dropped, and
// detach returns without waiting for the Emit under way, if any: the
// goroutine ends when it returns.
func (r *relay) detach(o *outlet, stop <-chan struct{}) {
	if o == nil {
		return
	}
	r.mu.Lock()
	if r.out == o {
		r.out = nil // no run of the thread listens
	}
	o.detached = true
	o.free()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	started := o.started
	r.mu.Unlock()
	if !started {
		return // the run ended before it began
	}
	select {
	case <-o.done:
	case <-stop:
		r.mu.Lock()
		clear(o.queue)
		o.queue = nil
		r.mu.Unlock()
	}
}

// lift lets the jobs whose sub-agent run ids are runIDs emit past the
// queue's bound while the sink takes the event it is taking now, until
// the returned function is called: a sink that waits for them from
// within Emit would otherwise wait for ever, their events waiting for it.
// A wait that is not the sink's, begun while it takes one event, lifts
// the bound for as long as it takes that one.
func (r *relay) lift(runIDs []string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.out
	if o == nil || !o.in || len(runIDs) == 0 {
		return func() {}
	}
	if o.waited == nil {
		o.waited, o.liftCall = map[string]int{}, o.calls
	}
	for _, id := range runIDs {
		o.waited[id]++
	}
	o.free()
	call := o.calls
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if o.in && o.calls == call && o.waited != nil { // else that Emit has returned
			for _, id := range runIDs {
				if o.waited[id]--; o.waited[id] <= 0 {
					delete(o.waited, id)
				}
			}
		}
	}
}

// waitedFor reports how many waits begun within the Emit call under way
// wait for the job whose sub-agent run id is runID. r.mu is held.
func (o *outlet) waitedFor(runID string) int {
	if !o.in || o.liftCall != o.calls {
		return 0
	}
	return o.waited[runID]
}

// relayMark is where the queue of a run's outlet stood (see mark): o,
// and how many events had been queued for it; before, how many had been
// queued before the events flush waits for were (markAfter).
type relayMark struct {
	o              *outlet
	queued, before int
}

// mark returns where the queue of the run attached now stands, for flush
// (the zero mark when none listens).
func (r *relay) mark() relayMark {
	if r == nil {
		return relayMark{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return relayMark{}
	}
	return relayMark{o: r.out, queued: r.out.queued, before: r.out.queued}
}

// markAfter returns where the queue stands now, pre having been taken
// before the caller queued the events it will flush (a job's
// announcement): flush knows an Emit of one of those as one its caller
// is not within.
func (r *relay) markAfter(pre relayMark) relayMark {
	m := r.mark()
	if m.o == pre.o {
		m.before = pre.queued
	}
	return m
}

// flush waits until the sink has taken the events queued for the outlet
// of m before m was taken, or the outlet is detached, or stop closes: so
// that a job's SUBAGENT_STARTED reaches the sink before the receipt of
// the call that started it, as a foreground child's does. The job's own
// events, queued after the mark, are not waited for: a sink may wait,
// from within their Emit, for what the receipt lets the parent do next.
//
// An Emit under way as flush begins, of an event queued before the
// job's announcement (m.before), is one the caller may be within (a
// program starting a job as its sink takes an event), or one in which
// the sink waits for what the caller does next: flush waits for it for
// grace at most, then returns, leaving the announcement to follow. A
// spawning call gives a grace of seconds, far longer than a sink takes
// over one event (another job's announcement, taken as the call spawns
// beside it), though a client that stops reading for longer still sees
// the receipt first; a program's start, which has no receipt to order,
// gives none. An Emit
// of the job's own announcement is always waited for: the caller, which
// queued it, is not within it.
func (r *relay) flush(m relayMark, grace time.Duration, stop <-chan struct{}) {
	o := m.o
	if o == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	began := o.calls
	var timer *time.Timer
	for o.taken < m.queued && !o.detached {
		var late <-chan time.Time
		if o.in && o.calls == began && began <= m.before {
			if grace <= 0 {
				return
			}
			if timer == nil {
				timer = time.NewTimer(grace)
				defer timer.Stop()
			}
			late = timer.C
		}
		if o.moved == nil {
			o.moved = make(chan struct{})
		}
		moved := o.moved
		r.mu.Unlock()
		select {
		case <-moved:
		case <-late:
			r.mu.Lock()
			return
		case <-stop:
			r.mu.Lock()
			return
		}
		r.mu.Lock()
	}
}

// announceGrace is how long a spawning call's flush waits for the sink to
// return from an Emit it may be waiting within (see flush).
var announceGrace = 5 * time.Second

// prune forgets the oldest jobs that have ended, past maxKeptJobs, and
// returns them: those handed over first, then those not collected yet (a
// note of "" leaves them to a wait), which it folds and returns too
// (took), for the run ending to count (handOver, owed: what the run that
// started them did not count). A job that waits for a person is kept.
// jt.mu is held.
func (jt *jobTable) prune() (gone, took []*job) {
	extra := len(jt.order) - maxKeptJobs
	for _, handed := range []bool{true, false} {
		if extra <= 0 {
			break
		}
		kept := jt.order[:0]
		for _, id := range jt.order {
			if j := jt.jobs[id]; extra > 0 && j.folded == handed && j.ended() && (handed || !interrupted(j.err)) {
				if !j.folded {
					j.folded = true
					j.settle(j.res.Usage.Tokens())
					j.unhold()
					took = append(took, j)
				}
				delete(jt.jobs, id)
				gone = append(gone, j)
				extra--
				continue
			}
			kept = append(kept, id)
		}
		jt.order = kept
	}
	return gone, took
}

// Notes returns notes of the thread's jobs that ended (tool.Notifier).
func (s *Spawner) Notes(ctx context.Context) []tool.Note {
	k, ok := s.threadOf(ctx)
	if !ok {
		return nil
	}
	jt := s.threadTable(ctx, k, false)
	if jt == nil {
		return nil
	}
	jt.mu.Lock()
	var ended []*job
	for _, id := range jt.order {
		if j := jt.jobs[id]; j.ended() && !j.folded && !j.noted && j.endGen < jt.gen {
			ended = append(ended, j)
		}
	}
	jt.mu.Unlock()
	var notes []tool.Note
	for _, j := range ended {
		st := jt.status(j)
		res := tool.Result{Content: j.res.Content, Value: j.res.Value}
		usage := s.owed(ctx, j, j.res.Usage) // a later turn's
		switch {
		case st.State == JobSuspended:
			res.Content, usage = waitingReport(st), provider.Usage{} // counted when it ends
		case st.Swept:
			res.Content = sweptReport(st, s.cfg.jobTTL)
		case st.State == JobCancelled || st.State == JobFailed && pastLimit(j.err):
			res.Content = partialReport(st, j.err)
		case j.err != nil:
			res = tool.Result{Content: "job " + j.id + " failed: " + j.err.Error(), IsError: true}
		}
		if text := s.cfg.note(JobResult{JobStatus: st, Result: res, Err: j.err}); strings.TrimSpace(text) != "" {
			notes = append(notes, tool.Note{ID: j.id, Text: text, Usage: usage})
		}
	}
	return notes
}

// Noted hands the jobs of the notes over to the run of ctx (tool.Notifier).
func (s *Spawner) Noted(ctx context.Context, ids []string) {
	k, ok := s.threadOf(ctx)
	if !ok {
		return
	}
	jt := s.threadTable(ctx, k, false)
	if jt == nil {
		return
	}
	for _, id := range ids {
		j := jt.find(id)
		if j == nil {
			continue
		}
		jt.mu.Lock()
		j.noted = true
		jt.mu.Unlock()
		if j.ended() && jt.state(j) != JobSuspended {
			// Its usage is the note's. A job that waits for a person is
			// collected by the wait that asks its questions, and one
			// running (a note replayed from the turn's journal of a job
			// since woken with its answers) when it ends.
			jt.collect(j)
			s.handOver(ctx, j) // each run that counts the note's usage
		}
		s.saved(ctx, jt, j)
	}
}

// Close ends the jobs that outlive their run (WithJobsAcrossTurns).
func (s *Spawner) Close() error {
	ts := &s.threads
	ts.mu.Lock()
	ts.closed = true
	tables := ts.tables
	ts.tables = nil
	ts.mu.Unlock()
	ts.wg.Wait() // a sweep under way
	for _, jt := range tables {
		_, left := jt.shut()
		s.unclaim(left)
	}
	ts.mu.Lock()
	ts.spent = nil
	ts.mu.Unlock()
	return nil
}

// WithJobTTL sets how long a thread's jobs outlive its last use.
func WithJobTTL(d time.Duration) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if d < time.Minute {
			return fmt.Errorf("job TTL %v: use a minute or more", d)
		}
		c.jobTTL = d
		return nil
	})
}

// sweep ends the jobs of threads not used within the TTL (WithJobTTL):
// those still running are cancelled, marked swept, and the thread leaves
// memory; with a store, threads that no process holds are swept there too
// (sweepStore). It runs at most every sixteenth of the TTL, when a thread
// is used, in a goroutine of its own that Close waits for.
func (s *Spawner) sweep() {
	ts := &s.threads
	now := s.cfg.now()
	ts.mu.Lock()
	if ts.closed || ts.sweeping || !ts.swept.IsZero() && now.Sub(ts.swept) < s.cfg.jobTTL/16 {
		ts.mu.Unlock()
		return
	}
	ts.swept = now
	var gone []*jobTable
	for k, jt := range ts.tables {
		if jt.idle(now, s.cfg.jobTTL) {
			delete(ts.tables, k)
			gone = append(gone, jt)
		}
	}
	scan := s.cfg.jobStore != nil
	if len(gone) == 0 && !scan {
		ts.mu.Unlock()
		return
	}
	ts.sweeping = true
	ts.wg.Add(1)
	ts.mu.Unlock()
	go func() {
		defer ts.wg.Done()
		for _, jt := range gone {
			s.unclaim(jt.sweep())
			jt.mu.Lock()
			jobs := slices.Collect(maps.Values(jt.jobs))
			jt.mu.Unlock()
			s.forgetSpends(jobs)
			for _, j := range jobs {
				if parked(jt, j) {
					s.unpark(context.Background(), jt, j, true)
				}
			}
		}
		if scan {
			s.sweepStore(context.Background(), now)
		}
		ts.mu.Lock()
		ts.sweeping = false
		ts.mu.Unlock()
	}()
}

// idle reports whether no run acts on the thread's jobs and none did
// within ttl.
func (jt *jobTable) idle(now time.Time, ttl time.Duration) bool {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	return jt.runs == 0 && now.Sub(jt.touched) >= ttl
}

// sweep cancels the thread's jobs still running, as swept, and waits for
// them: each ends with a partial report, written to the store if any. It
// returns the jobs no run took (shut).
func (jt *jobTable) sweep() []*job {
	jt.mu.Lock()
	for _, j := range jt.jobs {
		if !j.ended() {
			j.swept, j.cancelled = true, true
		}
	}
	jt.mu.Unlock()
	_, left := jt.shut()
	return left
}

// WithMaxOwnerJobs bounds the jobs alive at once in one owner's threads.
func WithMaxOwnerJobs(n int) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if n < 1 {
			return fmt.Errorf("max owner jobs %d: use 1 or more", n)
		}
		c.maxOwnerJobs = n
		return nil
	})
}

// JobLimits bound each job (WithJobLimits); zero: child bounds, then defaults.
type JobLimits struct {
	Tokens int64         // its sub-agent's, its own children's included
	Cost   float64       // US dollars, at the starting run's prices
	Steps  int           // a fork's model calls
	Time   time.Duration // wall time
}

// WithJobLimits bounds each job; one past a bound reports partly.
func WithJobLimits(l JobLimits) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if l.Tokens < 0 || l.Cost < 0 || l.Steps < 0 || l.Time < 0 {
			return fmt.Errorf("job limits %+v: a limit is 0 (the default) or more", l)
		}
		c.jobLimits = l
		return nil
	})
}

// limitsFor returns the bounds of a job the run of ctx starts in jt.
func (s *Spawner) limitsFor(ctx context.Context, jt *jobTable) JobLimits {
	l := s.cfg.jobLimits
	if l.Steps == 0 && s.cfg.childSteps == 0 {
		l.Steps = DefaultJobSteps
	}
	if l.Time == 0 && s.cfg.childTime == 0 {
		l.Time = DefaultJobTime
	}
	if jt.lasting {
		if _, limited := run.TokensLeft(ctx); l.Tokens == 0 && s.cfg.childTokens == 0 && !limited {
			l.Tokens = DefaultJobTokens
		}
		if _, limited := run.CostLeft(ctx); l.Cost == 0 && !limited && !run.CostShared(ctx) {
			l.Cost = DefaultJobCost
		}
	}
	return l
}

// bound returns the context of a job under base, within l's time and
// tokens, and the function that cancels it.
func (l JobLimits) bound(base context.Context) (context.Context, context.CancelFunc) {
	if l.Tokens > 0 {
		base, _ = run.ForRun(base, l.Tokens, 0)
	}
	if l.Time > 0 {
		return context.WithTimeout(base, l.Time)
	}
	return context.WithCancel(base)
}

// boundCost returns jctx, the context of a job holding its share of its
// parent's cost limit (if any), within l's cost, and whether l's cost is
// what bounds it.
func (l JobLimits) boundCost(jctx context.Context) (context.Context, bool) {
	if c := run.CostShare(jctx); l.Cost > 0 && (c == 0 || c > l.Cost) {
		jctx, _ = run.ForRun(jctx, -1, l.Cost)
		return jctx, true
	}
	return jctx, false
}

// jobBounds say which limits of a job are its own (WithJobLimits, or a
// job's defaults), not its share of its parent's or its sub-agent's own:
// a job stopped at one of them names that setting.
type jobBounds struct {
	limits              JobLimits
	tokens, cost, steps bool
}

// ownTokens is the job's own token limit (JobLimits.Tokens), 0 for none
// or no job (b nil).
func (b *jobBounds) ownTokens() int64 {
	if b == nil {
		return 0
	}
	return b.limits.Tokens
}

// jobBoundsKey keys the *jobBounds of a job in its context, for the
// sub-agent call it makes (runChild), which takes it out of the context
// of its child's own children.
type jobBoundsKey struct{}

// named returns err, what ended a job whose context is jctx, saying which
// of the job's own limits stopped it, if one did.
func (b *jobBounds) named(jctx context.Context, err error) error {
	const raise = ": raise it with WithJobLimits or give a smaller task"
	var msg string
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(jctx.Err(), context.DeadlineExceeded) && b.limits.Time > 0:
		msg = fmt.Sprintf("the job ran past its time of %v (JobLimits.Time)", b.limits.Time) + raise
	case errors.Is(err, agent.ErrMaxSteps) && b.steps:
		msg = fmt.Sprintf("the job used its %d steps (JobLimits.Steps) without a final answer", b.limits.Steps) + raise
	case errors.Is(err, agent.ErrUsageLimit) && run.IsCostLimited(err) && b.cost:
		msg = fmt.Sprintf("the job reached its cost limit of $%g (JobLimits.Cost)", b.limits.Cost) + raise
	case errors.Is(err, agent.ErrUsageLimit) && !run.IsCostLimited(err) && b.tokens:
		msg = fmt.Sprintf("the job reached its token limit of %d (JobLimits.Tokens)", b.limits.Tokens) + raise
	default:
		return err
	}
	return &jobLimitError{msg: msg, err: err}
}

// limitName names the limit that stopped a job's sub-agent with err, an
// agent.ErrUsageLimit, and the setting it comes from (see limitName);
// with no job (b nil), limitName's.
func (b *jobBounds) limitName(err error) string {
	name := limitName(err)
	switch cost := run.IsCostLimited(err); {
	case b == nil:
	case cost && b.cost:
		name += " (JobLimits.Cost: raise it with WithJobLimits)"
	case cost:
		name += " (its share of its parent's WithCostLimit)"
	case b.tokens:
		name += " (JobLimits.Tokens: raise it with WithJobLimits)"
	default:
		name += " (its share of its parent's WithTokenLimit)"
	}
	return name
}

// jobLimitError is what ended a job at one of its own limits, saying
// which; it wraps the error that ended it.
type jobLimitError struct {
	msg string
	err error
}

func (e *jobLimitError) Error() string { return e.msg }
func (e *jobLimitError) Unwrap() error { return e.err }

// pastLimit reports whether err ended a job at one of its bounds.
func pastLimit(err error) bool {
	return errors.Is(err, agent.ErrUsageLimit) || errors.Is(err, agent.ErrMaxSteps) || errors.Is(err, context.DeadlineExceeded)
}
