package subagent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

// mortal is a process's backend over a shared database: once dead, it
// writes nothing and renews no lease, as a killed process does not.
type mortal struct {
	store.Backend
	dead *atomic.Bool
}

var errDead = errors.New("the process is dead")

func (b mortal) Put(ctx context.Context, writes ...store.Write) error {
	if b.dead.Load() {
		return errDead
	}
	return b.Backend.Put(ctx, writes...)
}

func (b mortal) Delete(ctx context.Context, keys ...string) error {
	if b.dead.Load() {
		return errDead
	}
	return b.Backend.Delete(ctx, keys...)
}

func (b mortal) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if b.dead.Load() {
		return false, errDead
	}
	return b.Backend.Lease(ctx, key, owner, ttl)
}

func (b mortal) Release(ctx context.Context, key, owner string) error {
	if b.dead.Load() {
		return errDead
	}
	return b.Backend.Release(ctx, key, owner)
}

// openMortal returns a func that opens a store on the SQLite file path
// that dies when dead is set, its leases lasting a second.
func openMortal(t *testing.T, path string, dead *atomic.Bool) func() *store.Store {
	return func() *store.Store {
		b, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(mortal{Backend: b, dead: dead}, store.WithLeaseTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

// Two processes serve one thread's kept jobs over one SQLite file: the
// second, reading the thread while the first runs its job, does not run
// the job too: it reports it running, refuses to send to it, and, when
// the first process ends it, collects its answer. If the first process
// dies instead, the second takes the job over once its lease expires and
// runs it on from its journal. Either way its side effect runs once, no
// model answer is asked for twice and its tool is entered by one process
// at a time; in the three id modes.
func TestKeptJobRunsInOneProcessAtATime(t *testing.T) {
	for _, dies := range []bool{false, true} {
		for _, mode := range callIDModes {
			name := map[bool]string{false: "the first ends it", true: "the first dies"}[dies] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "deputy.db")
				var deadA, deadB atomic.Bool
				w := &keptWorld{t: t, id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1)}
				ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
				w.open = openMortal(t, path, &deadA)
				a := w.start()
				defer func() {
					if !dies {
						a.stop(t)
					}
				}()
				a.run(t, ctx, "cmd start")
				<-w.inDig
				w.open = openMortal(t, path, &deadB)
				b := w.start()
				defer b.stop(t)
				jobs := b.s.Jobs(ctx).List()
				if len(jobs) != 1 || jobs[0].State != subagent.JobRunning {
					t.Fatalf("the second process reads the thread's jobs as %+v, want one running", jobs)
				}
				job := jobs[0].ID
				if _, err := b.s.Jobs(ctx).Send(ctx, job, "dig deeper"); err == nil || !strings.Contains(err.Error(), "another process") {
					t.Errorf("the second process's send to the job it does not run: %v, want a refusal", err)
				}
				time.Sleep(time.Second) // what the second process would do, it would have begun
				if d, n := w.digs.Load(), w.forks.Load(); d != 1 || n != 2 {
					t.Fatalf("while the first process runs the job, its tool was entered %d times and its model asked %d times, want 1 and 2", d, n)
				}
				if dies {
					deadA.Store(true) // its lease expires; the second process takes the job over
					<-w.inDig
				}
				close(w.dig)
				out := b.run(t, ctx, "cmd wait "+job)
				if out.Answer != "lead: found gold; messages: " {
					t.Errorf("the second process's wait answered %q, want the job's answer", out.Answer)
				}
				wantDigs := int64(1)
				if dies {
					wantDigs = 2 // the dig the dead process did not finish, run on here
				}
				if e, n, d := w.effect.Load(), w.forks.Load(), w.digs.Load(); e != 1 || n != 3 || d != wantDigs {
					t.Errorf("the effect ran %d times, the job's model answered %d times and its tool was entered %d times; want 1, 3 and %d", e, n, d, wantDigs)
				}
			})
		}
	}
}

// A process that waits for another's lease on a thread's job shows the
// job as the store records it, not as it stood when the process first
// looked: its status and list, asked again as the job runs on in the
// first process, say it runs there and give the step it reached and what
// it spent as that process recorded them, the same as the first process
// reports; in the three id modes.
func TestKeptJobStatusFromTheProcessThatWaits(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "deputy.db")
			var deadA, deadB atomic.Bool
			w := &keptWorld{t: t, id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), moreDigs: 2}
			ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
			w.open = openMortal(t, path, &deadA)
			a := w.start()
			defer a.stop(t)
			a.run(t, ctx, "cmd start")
			<-w.inDig
			w.open = openMortal(t, path, &deadB)
			b := w.start()
			defer b.stop(t)
			var steps []int
			for look := 0; look < 3; look++ {
				if look > 0 {
					w.dig <- struct{}{} // the dig the job is in returns; the job's next step digs again
					<-w.inDig
				}
				mine := a.s.Jobs(ctx).List()
				theirs := b.s.Jobs(ctx).List()
				if len(mine) != 1 || len(theirs) != 1 {
					t.Fatalf("look %d: the processes list %d and %d jobs, want 1", look, len(mine), len(theirs))
				}
				m, th := mine[0], theirs[0]
				if th.State != subagent.JobRunning || !th.Elsewhere || m.Elsewhere {
					t.Errorf("look %d: the process that waits lists the job %s (elsewhere: %v), the one that runs it elsewhere: %v; want it running elsewhere, and here in the first", look, th.State, th.Elsewhere, m.Elsewhere)
				}
				if th.Step != m.Step || th.Usage != m.Usage || th.LastWords != m.LastWords || th.Usage.IsZero() {
					t.Errorf("look %d: the process that waits shows step %d and usage %+v, the process that runs it step %d and usage %+v; want them the same, not zero", look, th.Step, th.Usage, m.Step, m.Usage)
				}
				if st, err := b.s.Jobs(ctx).Status(th.ID); err != nil || st.Step != m.Step || st.Usage != m.Usage {
					t.Errorf("look %d: the job's status in the process that waits is %+v (%v), want step %d and usage %+v", look, st, err, m.Step, m.Usage)
				}
				steps = append(steps, m.Step)
			}
			if steps[0] >= steps[1] || steps[1] >= steps[2] {
				t.Errorf("the job reached the steps %v at the three looks, want it to have moved on between them", steps)
			}
			out := b.run(t, ctx, "cmd list")
			if !strings.Contains(out.Answer, "another process") {
				t.Errorf("the jobs tool's list in the process that waits reads %q, want it to say another process runs the job", out.Answer)
			}
			close(w.dig)
			job := b.s.Jobs(ctx).List()[0].ID
			if out := b.run(t, ctx, "cmd wait "+job); !strings.HasPrefix(out.Answer, "lead: found gold") {
				t.Errorf("the second process's wait answered %q, want the job's answer", out.Answer)
			}
			if e, n := w.effect.Load(), w.forks.Load(); e != 1 || n != 5 {
				t.Errorf("the effect ran %d times and the job's model answered %d times, want 1 and 5", e, n)
			}
		})
	}
}
