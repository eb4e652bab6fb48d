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
		return u
	}
	return sp.cost.Owed(ctx, u)
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
	if !ok || run.Same(sp.from, ctx) {
		return
	}
	if dollars := sp.cost.Uncounted(); dollars != 0 {
		run.AddCost(ctx, dollars, 0, "")
	}
	_, rest := ledger.Unreplayed(sp.l.Entries(), sp.cost.Counted())
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
			jt.relay = &relay{}
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
	em := event.From(run.Context(ctx))
	jt.mu.Lock()
	jt.gen++
	jt.runs++
	gen := jt.gen
	jt.mu.Unlock()
	jt.relay.attach(em, gen)
	_ = s.touch(ctx, jt) // a store that fails only makes the sweep sooner
	registered := run.OnEnd(ctx, func() provider.Usage {
		jt.relay.detach(gen) // no event of a job reaches the run's sink from now on
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
		jt.relay.detach(gen)
		jt.mu.Lock()
		jt.runs--
		jt.mu.Unlock()
	}
}

// relay passes the events of a thread's jobs on to the sink of the run of
// the thread running now (em), one at a time and in the order they came,
// without holding a lock while the sink takes one: a sink may act on the
// thread's jobs from within its Emit (ask their status, send to them,
// start one), and the events that causes wait in the queue for the event
// being passed on. It must not wait for a job there (Wait, Cancel): the
// one passing it the event may be the job's goroutine, and the queue is
// bounded (see emit). Whoever emits when none is being passed on
// passes on the queue. Once the run's end has detached it, no event of a
// job reaches the run's sink, whose terminal event comes after. It keeps,
// for each job still running, the events that opened it (its
// SUBAGENT_STARTED and deputy.job_started) and its sub-agent's terminal
// event once emitted, until its deputy.job_ended: a later run of the
// thread is shown them first, when it attaches, so that its stream is told
// of every job whose events it gets.
type relay struct {
	mu   sync.Mutex
	em   event.Emitter
	gen  int       // the run of em (jobTable.gen)
	live []liveJob // in the order they were announced
	// queue is the events to pass on, each with the sink it goes to (that
	// of the run attached when it came); passing is set while one is
	// passed on, and idle, made by a detach that waits, closed when the
	// queue is empty and none is.
	queue   []relayed
	passing bool
	idle    chan struct{}
	// held counts the emitters telling of a message to a job, its mailbox
	// held (see hold): the events emitted meanwhile wait in the queue.
	held int
	// room, made by an emitter waiting for room in the queue, is closed
	// when some is.
	room chan struct{}
}

// relayed is an event on its way to the sink of a run of the thread.
type relayed struct {
	em event.Emitter
	e  event.Event
}

// liveJob is a job of a thread that has not ended, or whose
// deputy.job_ended is not emitted yet: the events that announce it to a
// run of the thread that did not see it start.
type liveJob struct {
	runID  string
	events []event.Event
}

// maxRelayed bounds a relay's queue: past it, the events of the jobs'
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

// emit passes on e, an event of the job whose sub-agent run id is runID.
// The job's own events are those of its sub-agent run, and the CUSTOM
// events of its parent that name no sub-agent: those of the jobs its
// sub-agent starts name it.
//
// When maxRelayed events wait in the queue, an event of the job's
// sub-agent run waits for room (a slow sink slows the sub-agents down),
// unless done, the job's context's, is closed: a job cancelled ends. The
// events that announce, end or tell of a job or its messages do not wait:
// the jobs and messages bound them, and a sink that acts on a job from
// within Emit, which the queue waits for, emits them.
func (r *relay) emit(runID string, done <-chan struct{}, e event.Event) {
	r.mu.Lock()
	own := e.Type == event.Custom && e.SubagentRunID == ""
	lifecycle := own || e.SubagentRunID == runID && (e.Type == event.SubagentStarted || e.Type == event.SubagentFinished || e.Type == event.SubagentError)
	for !lifecycle && len(r.queue) >= maxRelayed && (r.passing || r.held > 0) && r.em.Enabled() {
		if r.room == nil {
			r.room = make(chan struct{})
		}
		room := r.room
		r.mu.Unlock()
		select {
		case <-room:
		case <-done:
			lifecycle = true // enqueue it, and go on
		}
		r.mu.Lock()
	}
	switch {
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
	if r.em.Enabled() {
		r.queue = append(r.queue, relayed{r.em, e})
	}
	if r.held > 0 {
		r.mu.Unlock() // unhold passes it on
		return
	}
	r.pass()
}

// hold and unhold surround the telling of a message to a job, its
// mailbox held: the one telling, which a sink sending to the job would
// wait for, passes on no event, the queue's included, until unhold, once
// the mailbox is let go.
func (r *relay) hold() {
	r.mu.Lock()
	r.held++
	r.mu.Unlock()
}

func (r *relay) unhold() {
	r.mu.Lock()
	r.held--
	r.pass()
}

// pass passes on the queue, unless an event is being passed on already
// (by another goroutine, or by this one, from within a sink's Emit):
// whoever passes that one passes on the rest. r.mu is held, and released.
func (r *relay) pass() {
	if r.passing {
		r.mu.Unlock()
		return
	}
	r.passing = true
	for len(r.queue) > 0 {
		next := r.queue[0]
		r.queue[0] = relayed{}
		r.queue = r.queue[1:]
		if r.room != nil && len(r.queue) < maxRelayed {
			close(r.room)
			r.room = nil
		}
		r.mu.Unlock()
		next.em.Emit(next.e)
		r.mu.Lock()
	}
	r.queue = nil
	r.passing = false
	if r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
	r.mu.Unlock()
}

// attach makes em, the sink of the thread's run gen, the one the jobs'
// events go to, and announces to it the jobs that are still running,
// before any other event of theirs, as they were first announced: a run
// of the thread attached after another (a later turn) does not see them
// start.
func (r *relay) attach(em event.Emitter, gen int) {
	r.mu.Lock()
	if gen < r.gen {
		r.mu.Unlock()
		return // a later run of the thread attached first
	}
	r.em, r.gen = em, gen
	if em.Enabled() {
		for _, l := range r.live {
			for _, e := range l.events {
				r.queue = append(r.queue, relayed{em, e})
			}
		}
	}
	r.pass()
}

// detach stops the events going to the sink of the run gen, once those
// on their way to it have reached it.
func (r *relay) detach(gen int) {
	r.mu.Lock()
	if r.gen == gen {
		r.em = event.Emitter{} // no run of the thread listens
	}
	for r.passing || len(r.queue) > 0 {
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle := r.idle
		r.mu.Unlock()
		<-idle
		r.mu.Lock()
	}
	r.mu.Unlock()
}

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
		if j.ended() && j.state() != JobSuspended {
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
	ts.tables, ts.spent = nil, nil
	ts.mu.Unlock()
	ts.wg.Wait() // a sweep under way
	for _, jt := range tables {
		jt.close()
	}
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
			jt.sweep()
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
// them: each ends with a partial report, written to the store if any.
func (jt *jobTable) sweep() {
	jt.mu.Lock()
	for _, j := range jt.jobs {
		if !j.ended() {
			j.swept, j.cancelled = true, true
		}
	}
	jt.mu.Unlock()
	jt.close()
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
// parent's cost limit (if any), within l's cost.
func (l JobLimits) boundCost(jctx context.Context) context.Context {
	if c := run.CostShare(jctx); l.Cost > 0 && (c == 0 || c > l.Cost) {
		jctx, _ = run.ForRun(jctx, -1, l.Cost)
	}
	return jctx
}

// pastLimit reports whether err ended a job at one of its bounds.
func pastLimit(err error) bool {
	return errors.Is(err, agent.ErrUsageLimit) || errors.Is(err, agent.ErrMaxSteps) || errors.Is(err, context.DeadlineExceeded)
}
