package subagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/journal/stored"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// With WithJobStore the jobs of threads (WithJobsAcrossTurns) are kept in
// a store: each job has a record (its spawn's arguments, its state, its
// progress, and once it ends its result and its messages' receipts), each
// message sent to it a record until it ends, and its sub-agent runs under
// a journal of its own. A spawner built anew over the store (after a
// restart) reads a thread's jobs when the thread is next used: one that
// ended is told of once, as in memory; one that was running starts again
// from its journal (its model answers and tool calls that finished are
// replayed, not made again), with the messages it had not taken waiting
// for it; one that was collected is not told of again.
//
// Spawner.Close leaves the records of running jobs as they are, for the
// next process; only a job that ends while the spawner is open writes its
// end.
//
// A job runs only while its process holds the job's lease in the store
// (store.Lock, renewed while held): a second process sharing the store
// that reads the thread's running job waits for the lease instead of
// running the job too, and meanwhile reports it running and refuses to
// send to or cancel it. When the lease comes free it reads the job's
// record again: a job that ended is taken as it ended; one still running
// (its process died, and its lease expired) runs on here from its
// journal. A holder that loses the lease (stalled past its TTL) cancels
// the job, and its fenced writes land nothing.

// WithJobStore keeps threads' jobs in st (docs/background.md).
func WithJobStore(st *store.Store) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if st == nil {
			return errors.New("WithJobStore(nil): pass a store, such as store.New(sqlite.Open(path))")
		}
		c.jobStore = st
		return nil
	})
}

// The store's keys of a thread's jobs, under jobsNS: t/<thread> for the
// thread (its owner, its id, when it was last used), j/<thread>/<job> for
// a job, and m/<thread>/<job>/<seq> for a message sent to it; a job's
// journal is the turn jobsTurn/<thread>/<job>. <thread> is a hash of the
// owner and the thread id, which are the application's and may be long.
const (
	jobsNS   = "deputy-jobs/"
	jobsTurn = "deputy-job/"
)

func threadHash(k threadKey) string {
	sum := sha256.Sum256([]byte(k.owner + "\x1f" + k.thread))
	return hex.EncodeToString(sum[:16])
}

func threadRecKey(h string) string    { return jobsNS + "t/" + h }
func leaseKey(h, job string) string   { return jobsNS + "l/" + h + "/" + job }
func jobsPrefix(h string) string      { return jobsNS + "j/" + h + "/" }
func mailPrefix(h, job string) string { return jobsNS + "m/" + h + "/" + job + "/" }
func jobTurn(h, job string) string    { return jobsTurn + h + "/" + job }

// threadRecord is a thread that has jobs in the store.
type threadRecord struct {
	Owner   string    `json:"owner"`
	Thread  string    `json:"thread"`
	Touched time.Time `json:"touched"`
}

// jobRecord is a job as the store keeps it.
type jobRecord struct {
	ID      string          `json:"id"`
	RunID   string          `json:"run_id,omitempty"`
	Agent   string          `json:"agent"`
	Task    string          `json:"task"`
	Args    json.RawMessage `json:"args"` // the spawn's arguments, to start it again
	Started time.Time       `json:"started"`
	State   string          `json:"state"` // JobRunning until it ends
	// Its progress, and once it ended its result.
	Step      int             `json:"step,omitempty"`
	LastWords string          `json:"last_words,omitempty"`
	Usage     provider.Usage  `json:"usage"`
	Cost      float64         `json:"cost,omitempty"`
	Content   string          `json:"content,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Err       string          `json:"error,omitempty"`
	ErrKind   string          `json:"error_kind,omitempty"` // errCanceled, errLimit or ""
	// Models is what it spent by provider and model, with what that cost,
	// and Counted the part of it the run that started it counted: the
	// turn that takes it from the store counts the rest.
	Models   []provider.ModelUsage `json:"models,omitempty"`
	Counted  []provider.ModelUsage `json:"counted,omitempty"`
	Receipts []Receipt             `json:"receipts,omitempty"` // of the last mailbox.MaxReceipts messages
	Dropped  int                   `json:"receipts_dropped,omitempty"`
	// A suspended job's questions, which it waits for answers to.
	Questions []tool.Interrupt `json:"questions,omitempty"`
	// What happened to it.
	Cancelled bool `json:"cancelled,omitempty"`
	Swept     bool `json:"swept,omitempty"`
	Folded    bool `json:"folded,omitempty"` // its usage and result were handed over
	Noted     bool `json:"noted,omitempty"`
}

const (
	errCanceled = "canceled"
	errLimit    = "limit"
)

// storedErr is the error a job ended with, read back from the store: its
// text, and what it is (context.Canceled, a bound).
type storedErr struct {
	msg string
	is  error
}

func (e *storedErr) Error() string { return e.msg }
func (e *storedErr) Unwrap() error { return e.is }

// jobStore is where one job of a thread is kept.
type jobStore struct {
	st     *store.Store
	h      string // the thread's hash
	mu     sync.Mutex
	sendMu sync.Mutex // one send at a time: its record, then its place in the box
	sent   int        // messages recorded
	// dropped: the receipts left out of those of a job read back ended
	// (jobRecord.Dropped), set with job.receipts.
	dropped int
	// The job's lease, while this process runs it (see leased); waiting:
	// it waits for the lease, held by another process; elsewhere: it
	// ended there; unheld: it ended here without ever holding it.
	// Guarded by mu.
	lease                      *store.Lock
	waiting, elsewhere, unheld bool
	// seen: the progress of a job another process runs, as its record
	// was last read (see elsewhereStatus).
	seen mailbox.Progress
}

// elsewhereRead bounds a read of the record of a job another process
// runs, when its status is asked for.
const elsewhereRead = 2 * time.Second

// elsewhereStatus sets st, the status of a job whose lease another
// process holds, to say so and to show the job's progress as the store
// records it, read again now (the other process records it at each step):
// the step it reached, its last words and what it spent. A read that
// fails or takes past elsewhereRead leaves what was read last.
func (js *jobStore) elsewhereStatus(st *JobStatus) {
	st.Elsewhere = true
	ctx, cancel := context.WithTimeout(context.Background(), elsewhereRead)
	defer cancel()
	var r jobRecord
	b, _, err := js.st.Get(ctx, js.key(st.ID))
	js.mu.Lock()
	defer js.mu.Unlock()
	if err == nil && json.Unmarshal(b, &r) == nil {
		js.seen = mailbox.Progress{Step: r.Step, Last: r.LastWords, Usage: r.Usage, Cost: r.Cost}
	}
	p := js.seen
	st.Step, st.LastWords, st.Usage, st.Cost = p.Step, p.Last, p.Usage, p.Cost
}

func (js *jobStore) key(id string) string { return jobsPrefix(js.h) + id }

// save writes the record of j, as it stands now, fenced by its lease
// while it runs. A job that ended here without its lease writes nothing.
func (js *jobStore) save(ctx context.Context, jt *jobTable, j *job, final bool) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.unheld {
		return nil
	}
	r := jt.record(j, final)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if js.lease != nil {
		return js.lease.Put(context.WithoutCancel(ctx), js.key(j.id), b, store.AnyVersion)
	}
	return js.st.Put(context.WithoutCancel(ctx), js.key(j.id), b, store.AnyVersion)
}

// elsewhereNow reports whether the job's lease is another process's:
// it waits for it.
func (js *jobStore) elsewhereNow() bool {
	if js == nil {
		return false
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.waiting
}

// release gives the job's lease back, if held.
func (js *jobStore) release() {
	js.mu.Lock()
	l := js.lease
	js.lease = nil
	js.mu.Unlock()
	if l != nil {
		_ = l.Unlock()
	}
}

// jobFunc runs a job's sub-agent (spawnCall.runJob).
type jobFunc func(context.Context, *announced) (tool.Result, func(int64), error)

// jobLease is how a stored job starts under its lease: at once (held),
// or once another process gives it up (busy); ended, a job read back
// from the store that ended meanwhile in the process that held it.
// prior is the record of a job woken with its answers as it stood
// before it was recorded running again (see takeOver), to write back if
// it does not start after all; rec, the record the job starts from.
type jobLease struct {
	key   string
	busy  bool
	ended *jobRecord
	prior []byte
	rec   *jobRecord
}

// lease takes the lease of a stored job as it starts, if it is free: a
// job read back from the store (r, resumed: r.ID set) then reads its
// record again and has its unread messages restored. If another process
// holds it, the job waits for it (leased), refusing sends meanwhile.
func (s *Spawner) lease(ctx context.Context, j *job, r *jobRecord) (*jobLease, error) {
	js := j.store
	jl := &jobLease{key: leaseKey(js.h, j.id), rec: r}
	l, err := s.cfg.jobStore.TryLock(context.WithoutCancel(ctx), jl.key)
	if errors.Is(err, store.ErrBusy) {
		jl.busy = true
		js.waiting = true
		js.seen = mailbox.Progress{Step: r.Step, Last: r.LastWords, Usage: r.Usage, Cost: r.Cost}
		return jl, nil
	}
	if err != nil {
		return nil, err
	}
	js.lease = l
	if r.ID != "" {
		if err = s.takeOver(ctx, j, r, jl); err != nil {
			js.release()
			return nil, err
		}
	}
	return jl, nil
}

// takeOver reads the record of a job read back from the store (r) again,
// its lease held, and sets jl.ended to the record of a job that ended
// meanwhile; one still running has its messages restored. A job woken
// with its answers (r.State is JobSuspended, as the store kept it) that
// still waits in the store has its messages restored and is recorded
// running again, fenced by its lease, only then: a wake that fails before
// leaves the store saying it waits, as it does.
func (s *Spawner) takeOver(ctx context.Context, j *job, r *jobRecord, jl *jobLease) error {
	b, _, err := s.cfg.jobStore.Get(ctx, j.store.key(j.id))
	if err != nil {
		return err
	}
	var cur jobRecord
	if err := json.Unmarshal(b, &cur); err != nil {
		return fmt.Errorf("%w: job record of %s: %v", store.ErrCorrupt, j.id, err)
	}
	waking := r.State == JobSuspended && cur.State == JobSuspended
	if cur.State != JobRunning && !waking {
		jl.ended = &cur
		return nil
	}
	if err := s.restoreMail(ctx, j); err != nil {
		return err
	}
	if !waking {
		return nil
	}
	run := *r
	run.State = JobRunning
	nb, _ := json.Marshal(run) // plain fields and JSON already: it cannot fail
	if err := j.store.put(ctx, j.id, nb); err != nil {
		return err
	}
	jl.prior = b
	return nil
}

// put writes b as the record of job id, fenced by the job's lease.
func (js *jobStore) put(ctx context.Context, id string, b []byte) error {
	js.mu.Lock()
	l := js.lease
	js.mu.Unlock()
	if l == nil {
		return errors.New("the job's lease is not held")
	}
	return l.Put(context.WithoutCancel(ctx), js.key(id), b, store.AnyVersion)
}

// leased returns fn run under the job's lease jl: once it is held (a
// busy lease waited for, then the job's record read again), a job that
// ended meanwhile elsewhere takes that outcome, and one still running
// runs. Losing the lease cancels the job (cancel).
func (s *Spawner) leased(jt *jobTable, j *job, jl *jobLease, fn jobFunc, cancel context.CancelFunc) jobFunc {
	return func(ctx context.Context, ann *announced) (tool.Result, func(int64), error) {
		js := j.store
		if jl.busy {
			l, err := s.cfg.jobStore.Lock(ctx, jl.key)
			if err == nil {
				js.mu.Lock()
				js.lease = l
				js.mu.Unlock()
				err = s.takeOver(ctx, j, jl.rec, jl)
			}
			js.mu.Lock()
			js.waiting, js.unheld = false, err != nil && js.lease == nil
			js.mu.Unlock()
			if err != nil {
				return tool.Result{}, noSettle, fmt.Errorf("job %s: waiting for its lease: %w", j.id, err)
			}
		}
		js.mu.Lock()
		l := js.lease
		js.mu.Unlock()
		go func() {
			select {
			case <-l.Lost():
				cancel()
			case <-ctx.Done():
			}
		}()
		if r := jl.ended; r != nil {
			e := endedJob(*r, js.h, s.cfg.jobStore)
			js.mu.Lock()
			js.elsewhere = true
			js.mu.Unlock()
			jt.mu.Lock()
			j.folded, j.noted, j.cancelled, j.swept, j.receipts = r.Folded, r.Noted, r.Cancelled, r.Swept, r.Receipts
			js.dropped = r.Dropped
			jt.mu.Unlock()
			j.box.Reached(r.Step, r.LastWords, r.Usage, r.Cost)
			return e.res, noSettle, e.err
		}
		return fn(ctx, ann)
	}
}

// record returns j as the store keeps it; final: it has ended (its outcome
// is set, though done may not be closed yet).
func (jt *jobTable) record(j *job, final bool) jobRecord {
	p := j.box.Progress()
	r := jobRecord{ID: j.id, RunID: j.runID, Agent: j.agent, Task: j.task, Args: j.args, Started: j.started,
		State: JobRunning, Step: p.Step, LastWords: p.Last, Usage: p.Usage, Cost: p.Cost}
	jt.mu.Lock()
	r.Cancelled, r.Swept, r.Folded, r.Noted = j.cancelled, j.swept, j.folded, j.noted
	jt.mu.Unlock()
	if jt.api.s != nil {
		r.Models, r.Counted = jt.api.s.spentByModel(j)
	}
	if final {
		r.State = stateOf(j.err)
		if r.Cancelled && r.State != JobDone {
			r.State = JobCancelled
		}
		r.Usage = j.res.Usage
		r.Content, r.IsError = j.res.Content, j.res.IsError
		if j.res.Value != nil {
			r.Value, _ = json.Marshal(j.res.Value) // a validated answer: JSON already
		}
		if j.err != nil {
			r.Err = j.err.Error()
			switch {
			case errors.Is(j.err, context.Canceled):
				r.ErrKind = errCanceled
			case pastLimit(j.err):
				r.ErrKind = errLimit
			}
		}
		rs, dropped := j.box.Receipts()
		for _, rc := range rs {
			r.Receipts = append(r.Receipts, receiptOf(j.id, rc))
		}
		r.Dropped = dropped
		var in *tool.Interrupted
		if errors.As(j.err, &in) {
			r.Questions = in.Interrupts
		}
	}
	return r
}

// ending is what a stored job does as it ends, before anyone sees it
// ended: its end is written, unless the spawner is closing (the job is
// then left running in the store, for the next process), and its messages
// and journal go, unless it waits for a person: it runs on from them
// when the answers come (wake).
func (s *Spawner) ending(ctx context.Context, jt *jobTable, j *job) {
	if j.store == nil {
		return
	}
	defer j.store.release()
	j.store.mu.Lock()
	mine := !j.store.elsewhere && !j.store.unheld
	j.store.mu.Unlock()
	if !mine || s.closing() {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if err := j.store.save(ctx, jt, j, true); err != nil {
		return // the next process runs it again from its journal
	}
	if !interrupted(j.err) {
		s.forget(ctx, j.store.h, j.id, false)
	}
}

// forget deletes what the store keeps of a job beside its record: its
// messages and its journal; and its record too if all.
func (s *Spawner) forget(ctx context.Context, h, id string, all bool) {
	st := s.cfg.jobStore
	for _, k := range keysUnder(ctx, st, mailPrefix(h, id)) {
		_ = st.Delete(ctx, k)
	}
	_ = st.DeleteJournal(ctx, jobTurn(h, id))
	if all {
		_ = st.Delete(ctx, jobsPrefix(h)+id)
	}
}

// keysUnder lists every key under prefix, page by page; nil on an error.
func keysUnder(ctx context.Context, st *store.Store, prefix string) []string {
	var out []string
	after := ""
	for {
		keys, err := st.Keys(ctx, prefix, after, store.MaxPage)
		if err != nil {
			return out
		}
		out = append(out, keys...)
		if len(keys) < store.MaxPage {
			return out
		}
		after = keys[len(keys)-1]
	}
}

// saved writes a stored job's record after its parent collected it or was
// told of it.
func (s *Spawner) saved(ctx context.Context, jt *jobTable, j *job) {
	if j.store != nil && j.ended() {
		_ = j.store.save(ctx, jt, j, true)
	}
}

// progressed writes a stored job's progress (its step, last words and
// spending) when its loop reaches a step or takes a message, so that a
// sweep of a job its process left running counts what it spent.
func (s *Spawner) progressed(jt *jobTable, j *job) {
	if j.store != nil && !s.closing() {
		_ = j.store.save(context.Background(), jt, j, false)
	}
}

// closing reports whether Close has begun.
func (s *Spawner) closing() bool {
	s.threads.mu.Lock()
	defer s.threads.mu.Unlock()
	return s.threads.closed
}

// touch records that the thread of jt is in use now.
func (s *Spawner) touch(ctx context.Context, jt *jobTable) error {
	now := s.cfg.now()
	jt.mu.Lock()
	jt.touched = now
	jt.mu.Unlock()
	if s.cfg.jobStore == nil {
		return nil
	}
	b, _ := json.Marshal(threadRecord{Owner: jt.key.owner, Thread: jt.key.thread, Touched: now})
	return s.cfg.jobStore.Put(context.WithoutCancel(ctx), threadRecKey(threadHash(jt.key)), b, store.AnyVersion)
}

// storeJob writes the record of a new job of a stored thread, before it
// starts, and returns the job's scope in its own journal.
func (s *Spawner) storeJob(ctx context.Context, jt *jobTable, j *job, resumed bool) (*journal.Scope, error) {
	h := threadHash(jt.key)
	j.store = &jobStore{st: s.cfg.jobStore, h: h}
	if !resumed {
		if err := s.touch(ctx, jt); err != nil {
			return nil, err
		}
		if err := j.store.save(ctx, jt, j, false); err != nil {
			return nil, err
		}
	}
	jr, err := s.cfg.jobStore.Journal(context.WithoutCancel(ctx), jobTurn(h, j.id))
	if err != nil {
		return nil, err
	}
	return stored.New(jr), nil
}

// loadThread reads the jobs the store keeps of thread k: those that ended,
// as they ended, and the records of those that were running.
func (s *Spawner) loadThread(ctx context.Context, k threadKey) (ended []*job, running []jobRecord, err error) {
	st := s.cfg.jobStore
	h := threadHash(k)
	var recs []jobRecord
	for _, key := range keysUnder(ctx, st, jobsPrefix(h)) {
		b, _, err := st.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		var r jobRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, nil, fmt.Errorf("%w: job record %q: %v: delete it (store.Delete)", store.ErrCorrupt, key, err)
		}
		recs = append(recs, r)
	}
	sort.SliceStable(recs, func(a, b int) bool { return recs[a].Started.Before(recs[b].Started) })
	for _, r := range recs {
		if r.State == JobRunning {
			running = append(running, r)
			continue
		}
		ended = append(ended, endedJob(r, h, st))
	}
	return ended, running, nil
}

// endedJob is a job read back from its record, ended.
func endedJob(r jobRecord, h string, st *store.Store) *job {
	j := &job{id: r.ID, runID: r.RunID, agent: r.Agent, task: r.Task, args: r.Args, started: r.Started,
		cancel: func() {}, done: make(chan struct{}), settle: noSettle, unhold: func() {},
		box: mailbox.New(nil), folded: r.Folded, noted: r.Noted, cancelled: r.Cancelled, swept: r.Swept,
		store: &jobStore{st: st, h: h, dropped: r.Dropped}, receipts: r.Receipts}
	j.res = tool.Result{Content: r.Content, IsError: r.IsError, Usage: r.Usage}
	if len(r.Models)+len(r.Counted) > 0 {
		j.kept = &keptSpend{models: r.Models, counted: r.Counted}
	}
	if len(r.Value) > 0 {
		j.res.Value = r.Value
	}
	if r.State == JobSuspended || r.State == JobCancelled && len(r.Questions) > 0 {
		// Its questions, pending, or withdrawn by a cancel while it
		// waited (the answers a turn resumed later carries are dropped).
		j.err = &tool.Interrupted{Interrupts: r.Questions}
	} else if r.State != JobDone {
		var is error
		switch r.ErrKind {
		case errCanceled:
			is = context.Canceled
		case errLimit:
			is = agent.ErrUsageLimit
		}
		msg := r.Err
		if msg == "" {
			msg = "the job ended " + r.State
		}
		j.err = &storedErr{msg: msg, is: is}
	}
	j.box.Reached(r.Step, r.LastWords, r.Usage, r.Cost)
	j.box.Close()
	close(j.done)
	return j
}

// addEnded adds a job read back ended from the store, before the jobs
// the process starts. jt.mu is held.
func (jt *jobTable) addEnded(j *job) {
	j.place = jobPlace{seq: jt.started}
	jt.started++
	at, _ := slices.BinarySearchFunc(jt.order, j.place, func(id string, pl jobPlace) int { return jt.jobs[id].place.compare(pl) })
	jt.jobs[j.id] = j
	jt.order = slices.Insert(jt.order, at, j.id)
}

// restart starts again, in jt, a job that was running when the process
// that ran it stopped; if it cannot, the job is kept failed.
func (s *Spawner) restart(ctx context.Context, jt *jobTable, r jobRecord) {
	if _, err := s.resume(ctx, jt, r); err != nil {
		r.State, r.Err = JobFailed, "it could not start again after a restart: "+err.Error()
		j := endedJob(r, threadHash(jt.key), s.cfg.jobStore)
		jt.mu.Lock()
		jt.addEnded(j)
		jt.mu.Unlock()
		_ = j.store.save(ctx, jt, j, true)
	}
}

// resume starts the job of r again in jt, from its journal, with the
// messages it had not taken waiting for it.
func (s *Spawner) resume(ctx context.Context, jt *jobTable, r jobRecord) (*job, error) {
	var t Task
	if err := json.Unmarshal(r.Args, &t); err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(struct {
		Task
		Background bool `json:"background"`
	}{t, true})
	a, err := s.parse(raw)
	if err != nil {
		return nil, err
	}
	check, callSchema, err := s.checkerFor(a.OutputSchema)
	if err != nil {
		return nil, err
	}
	sc, err := s.plan(ctx, "", a, check, callSchema)
	if err != nil {
		return nil, err
	}
	sc.st.spawns.Add(-1) // started by an earlier run, and counted there
	sc.carried = true    // so not counted back if it does not start
	return s.launch(ctx, jt, sc, "", &r)
}

// A stored job whose sub-agent asked a person ends suspended, keeping its
// journal and messages, and its record its questions: it holds no
// goroutine while it waits, in this process or, after a restart, the
// next. A turn resumed with the answers (tool.Resume) that waits for it
// wakes it: it runs again from its journal, its finished steps replayed,
// and the call that asked takes its answer.

// wake starts again each stored job of targets that waits for a person
// whose answers the run of ctx carries, and returns targets with the
// jobs woken in their place. A job that cannot start again (the store
// fails) waits on, its record as it was: wake returns the error, and the
// turn resumed again with the answers wakes it.
func (s *Spawner) wake(ctx context.Context, jt *jobTable, targets []*job) ([]*job, error) {
	unused := tool.UnusedAnswers(ctx)
	js := journalFrom(ctx)
	if len(unused) == 0 && js == nil {
		return targets, nil
	}
	for i, j := range targets {
		if !parked(jt, j) {
			if err := dropAnswers(ctx, jt, js, unused, j); err != nil {
				return targets, err
			}
			continue
		}
		var in *tool.Interrupted
		errors.As(j.err, &in)
		var answered []string
		for _, it := range in.Interrupts {
			if slices.Contains(unused, it.ID) || handedTo(js, it.ID, j.id) {
				answered = append(answered, it.ID)
			}
		}
		if len(answered) == 0 {
			continue
		}
		if js != nil {
			// Handed over before the job can run: the job's own journal
			// records the answers as its calls take them; the turn's, that
			// they are used, as tool.UnusedAnswers reads it, even when the
			// turn runs again after a crash and the job, running on, asks
			// nothing again. A crash before the job runs leaves it parked
			// with the answers handed to it: handedTo wakes it again.
			for _, id := range answered {
				if err := js.J.Record(context.WithoutCancel(ctx), journal.AnswerKey(id), journal.Entry{Value: json.RawMessage(strconv.Quote(j.id))}); err != nil {
					return targets, fmt.Errorf("job %s could not be handed the answers to its questions: %w: it still waits; resume the turn with them again", j.id, err)
				}
			}
		}
		r := jt.record(j, false)
		r.State = JobSuspended // as the store keeps it, until it runs again
		r.Folded, r.Noted, r.Cancelled = false, false, false
		nj, err := s.resume(ctx, jt, r)
		if err != nil {
			return targets, fmt.Errorf("job %s could not start again with the answers to its questions: %w: it still waits; resume the turn with them again", j.id, err)
		}
		targets[i] = nj
	}
	return targets, nil
}

// dropAnswers takes the answers the run of ctx carries to the questions
// of j, a job cancelled while it waited for them: its questions were
// withdrawn, so the answers are used up with no call taking them, and
// the turn resumed with them goes on (its wait reads the job cancelled)
// rather than failing for an answer it did not use.
func dropAnswers(ctx context.Context, jt *jobTable, js *journal.Scope, unused []string, j *job) error {
	var in *tool.Interrupted
	if js == nil || len(unused) == 0 || !j.ended() || !errors.As(j.err, &in) {
		return nil
	}
	jt.mu.Lock()
	cancelled := j.cancelled
	jt.mu.Unlock()
	if !cancelled {
		return nil
	}
	for _, it := range in.Interrupts {
		if !slices.Contains(unused, it.ID) {
			continue
		}
		if err := js.J.Record(context.WithoutCancel(ctx), journal.AnswerKey(it.ID), journal.Entry{Value: json.RawMessage(strconv.Quote(j.id))}); err != nil {
			return fmt.Errorf("the answer to the question of job %s, cancelled since, could not be recorded as dropped: %w: resume the turn with it again", j.id, err)
		}
	}
	return nil
}

// handedTo reports whether the turn's journal js records the answer to the
// interrupt id as handed to the job jobID.
func handedTo(js *journal.Scope, id, jobID string) bool {
	if js == nil {
		return false
	}
	e, ok := js.J.Lookup(journal.AnswerKey(id))
	return ok && string(e.Value) == strconv.Quote(jobID)
}

// parked reports whether j is a stored job that waits for a person.
func parked(jt *jobTable, j *job) bool {
	if j.store == nil || !j.ended() || !interrupted(j.err) {
		return false
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	return !j.cancelled
}

// unpark ends a stored job that waits for a person, cancelled (swept
// too, if swept): its end is written, its messages and journal go.
func (s *Spawner) unpark(ctx context.Context, jt *jobTable, j *job, swept bool) {
	j.box.Withdraw()
	jt.mu.Lock()
	j.cancelled = true
	j.swept = j.swept || swept
	jt.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	if j.store.save(ctx, jt, j, true) == nil {
		s.forget(ctx, j.store.h, j.id, false)
	}
}

// restoreMail puts the messages recorded for a resumed job back in its
// box, in the order they were sent: those it took before the restart are
// found delivered when its loop replays the step that took them. They are
// requeued past mailbox.MaxQueued, since a job's life holds up to
// mailbox.MaxMessages, taken ones included.
func (s *Spawner) restoreMail(ctx context.Context, j *job) error {
	st := s.cfg.jobStore
	keys := keysUnder(ctx, st, mailPrefix(j.store.h, j.id))
	for _, k := range keys {
		b, _, err := st.Get(ctx, k)
		if err != nil {
			return err
		}
		var m mailbox.Message
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%w: message record %q: %v", store.ErrCorrupt, k, err)
		}
		if _, err := j.box.Requeue(m); err != nil {
			return err
		}
	}
	j.store.sent = len(keys)
	return nil
}

// storeMessage records a message sent to a stored job before it is
// queued; the returned func deletes the record again if the send fails.
// j.store.sendMu is held.
func (s *Spawner) storeMessage(ctx context.Context, j *job, m mailbox.Message) (undo func(), err error) {
	b, _ := json.Marshal(m) // strings: it cannot fail
	key := mailPrefix(j.store.h, j.id) + fmt.Sprintf("%06d", j.store.sent+1)
	if err := j.store.st.Put(context.WithoutCancel(ctx), key, b, store.AnyVersion); err != nil {
		return nil, err
	}
	j.store.sent++
	return func() {
		_ = j.store.st.Delete(context.WithoutCancel(ctx), key)
		j.store.sent--
	}, nil
}

// pruned deletes the records of jobs a thread no longer keeps.
func (s *Spawner) pruned(ctx context.Context, gone []*job) {
	s.forgetSpends(gone)
	for _, j := range gone {
		if j.store != nil {
			s.forget(context.WithoutCancel(ctx), j.store.h, j.id, true)
		}
	}
}

// sweepStore ends the jobs of stored threads not used within the TTL that
// this process does not hold: a running job is recorded ended, cancelled
// and swept, with what it had spent when last recorded, so that its
// thread, if it comes back, is told of it and counts its usage.
func (s *Spawner) sweepStore(ctx context.Context, now time.Time) {
	st := s.cfg.jobStore
	for _, key := range keysUnder(ctx, st, jobsNS+"t/") {
		b, _, err := st.Get(ctx, key)
		if err != nil {
			continue
		}
		var tr threadRecord
		if json.Unmarshal(b, &tr) != nil || now.Sub(tr.Touched) < s.cfg.jobTTL {
			continue
		}
		k := threadKey{owner: tr.Owner, thread: tr.Thread}
		s.threads.mu.Lock()
		held := s.threads.tables[k] != nil || s.threads.closed
		s.threads.mu.Unlock()
		if held {
			continue
		}
		h := threadHash(k)
		for _, jk := range keysUnder(ctx, st, jobsPrefix(h)) {
			b, _, err := st.Get(ctx, jk)
			if err != nil {
				continue
			}
			var r jobRecord
			if json.Unmarshal(b, &r) != nil || r.State != JobRunning && r.State != JobSuspended {
				continue
			}
			r.State, r.Swept, r.Cancelled, r.ErrKind = JobCancelled, true, true, errCanceled
			r.Err = "swept: its thread did not come back within " + s.cfg.jobTTL.String()
			nb, _ := json.Marshal(r)
			if st.Put(ctx, jk, nb, store.AnyVersion) == nil {
				s.forget(ctx, h, r.ID, false)
			}
		}
		_ = st.Delete(ctx, key)
	}
}

// sweptReport is what a job the sweep ended hands back.
func sweptReport(st JobStatus, ttl time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s was ended unfinished: its thread did not come back within %v", st.ID, ttl)
	if st.Step > 0 {
		fmt.Fprintf(&b, " (at step %d)", st.Step)
	}
	fmt.Fprintf(&b, " (%d tokens spent)", st.Usage.Tokens())
	if st.LastWords != "" {
		b.WriteString("; its last words:\n" + st.LastWords)
	}
	return b.String()
}

// keptRunning returns how many jobs the store keeps running, or waiting
// for a person's answer, in the threads of owner that this process does
// not hold: jobs whose process stopped, which run again when their thread
// is next used (or answered), or run in another process sharing the
// store. The store's threads are read once,
// as this process admits its first job, and the threads with jobs running
// then are kept by owner; after that only the owner's among them are
// read again, until none of them has a job running or this process holds
// them.
func (s *Spawner) keptRunning(ctx context.Context, owner string) int {
	st := s.cfg.jobStore
	ts := &s.threads
	ts.mu.Lock()
	scanned := ts.keptScanned
	ts.mu.Unlock()
	if !scanned {
		kept := map[string][]threadKey{}
		for _, key := range keysUnder(ctx, st, jobsNS+"t/") {
			b, _, err := st.Get(ctx, key)
			if err != nil {
				continue
			}
			var tr threadRecord
			if json.Unmarshal(b, &tr) != nil {
				continue
			}
			k := threadKey{owner: tr.Owner, thread: tr.Thread}
			if keptJobsRunning(ctx, st, k) > 0 {
				kept[k.owner] = append(kept[k.owner], k)
			}
		}
		ts.mu.Lock()
		if !ts.keptScanned {
			ts.kept, ts.keptScanned = kept, true
		}
		ts.mu.Unlock()
	}
	ts.mu.Lock()
	threads := ts.kept[owner]
	ts.mu.Unlock()
	if len(threads) == 0 {
		return 0
	}
	n := 0
	var still []threadKey
	for _, k := range threads {
		ts.mu.Lock()
		held := ts.tables[k] != nil
		ts.mu.Unlock()
		if held {
			continue // its jobs are counted in memory from now on
		}
		if running := keptJobsRunning(ctx, st, k); running > 0 {
			still = append(still, k)
			n += running
		}
	}
	ts.mu.Lock()
	if len(still) == 0 {
		delete(ts.kept, owner)
	} else {
		ts.kept[owner] = still
	}
	ts.mu.Unlock()
	return n
}

// keptJobsRunning returns how many jobs of the thread k the store keeps
// as running, or as waiting for a person's answer.
func keptJobsRunning(ctx context.Context, st *store.Store, k threadKey) int {
	running := 0
	for _, key := range keysUnder(ctx, st, jobsPrefix(threadHash(k))) {
		b, _, err := st.Get(ctx, key)
		if err != nil {
			continue
		}
		var r jobRecord
		if json.Unmarshal(b, &r) == nil && (r.State == JobRunning || r.State == JobSuspended) {
			running++
		}
	}
	return running
}
