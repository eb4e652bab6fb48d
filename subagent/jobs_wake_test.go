package subagent_test

import (
	"context"
	"encoding/json"
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
	"github.com/deputy-go/deputy/tool"
)

// flaky is a backend that goes away, while armed, at the first read of a
// job's record: with gone unset, every call fails with errGoneAway from
// then until down is cleared, as a store whose server goes away between
// two calls does; with gone set, the read fails with the context it was
// given, which gone ends first, as a client that leaves at that moment
// does.
type flaky struct {
	store.Backend
	armed, down *atomic.Bool
	gone        func()
}

var errGoneAway = errors.New("the store went away")

func (b flaky) Get(ctx context.Context, key string) (store.Item, error) {
	// The store keeps its values under v/.
	if b.armed.Load() && strings.HasPrefix(key, "v/deputy-jobs/j/") {
		b.armed.Store(false)
		if b.gone != nil {
			b.gone()
			return store.Item{}, ctx.Err()
		}
		b.down.Store(true)
	}
	if b.down.Load() {
		return store.Item{}, errGoneAway
	}
	return b.Backend.Get(ctx, key)
}

func (b flaky) List(ctx context.Context, prefix string) ([]store.Item, error) {
	if b.down.Load() {
		return nil, errGoneAway
	}
	return b.Backend.List(ctx, prefix)
}

func (b flaky) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if b.down.Load() {
		return nil, errGoneAway
	}
	return b.Backend.Keys(ctx, prefix, after, limit)
}

func (b flaky) Put(ctx context.Context, writes ...store.Write) error {
	if b.down.Load() {
		return errGoneAway
	}
	return b.Backend.Put(ctx, writes...)
}

func (b flaky) Delete(ctx context.Context, keys ...string) error {
	if b.down.Load() {
		return errGoneAway
	}
	return b.Backend.Delete(ctx, keys...)
}

func (b flaky) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if b.down.Load() {
		return false, errGoneAway
	}
	return b.Backend.Lease(ctx, key, owner, ttl)
}

func (b flaky) Release(ctx context.Context, key, owner string) error {
	if b.down.Load() {
		return errGoneAway
	}
	return b.Backend.Release(ctx, key, owner)
}

// jobRecords returns the state of each job record in st.
func jobRecords(t *testing.T, st *store.Store) []string {
	t.Helper()
	keys, err := st.Keys(context.Background(), "deputy-jobs/j/", "", store.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, k := range keys {
		b, _, err := st.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		states = append(states, r.State)
	}
	return states
}

// A kept job that waits for a person, woken by a turn that brings the
// answer, stays as it was when it cannot start again because the store
// goes away as its record is read (and is back only after the turn), or
// because the turn's context ends then: its record still says it waits (not that it runs, while nothing
// runs it), the turn fails with why, a process started afresh finds it
// waiting with its question and does not run it, and the turn resumed
// with the answer again runs the approved side effect once and asks no
// model answer twice; in the three id modes.
func TestKeptJobFailedWakeLeavesItWaiting(t *testing.T) {
	for _, gone := range []bool{false, true} {
		for _, mode := range callIDModes {
			name := map[bool]string{false: "the store fails", true: "the turn's context ends"}[gone] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "deputy.db")
				var armed, down atomic.Bool
				w := &keptWorld{t: t, id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), approve: true}
				close(w.dig)
				var leave context.CancelFunc
				w.open = func() *store.Store {
					b, err := sqlite.Open(path)
					if err != nil {
						t.Fatal(err)
					}
					ub := flaky{Backend: b, armed: &armed, down: &down}
					if gone {
						ub.gone = func() { leave() }
					}
					st, err := store.New(ub, store.WithLeaseTTL(time.Second)) // a lease it could not give back expires soon
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { st.Close() })
					return st
				}
				ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
				p := w.start()
				if _, err := p.turnUnder(t, ctx, "turn-1", "cmd start"); err != nil {
					t.Fatal(err)
				}
				job := waitState(t, p.s, ctx, subagent.JobSuspended)
				_, err := p.turnUnder(t, ctx, "turn-2", "cmd wait "+job.ID)
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 {
					t.Fatalf("the turn that waits for the job ended with %v, want its question", err)
				}
				rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
				if err != nil {
					t.Fatal(err)
				}
				forks := w.forks.Load()

				jr, err := p.st.Journal(ctx, "turn-2")
				if err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithCancel(rctx)
				leave = cancel
				armed.Store(true)
				_, err = p.a.Run(agent.WithJournal(cctx, jr), agent.Input{Text: "cmd wait " + job.ID})
				armed.Store(false)
				down.Store(false) // the store is back
				cancel()
				if want := map[bool]error{false: errGoneAway, true: context.Canceled}[gone]; !errors.Is(err, want) {
					t.Errorf("the turn resumed while the job's record cannot be read ended with %v, want %v", err, want)
				}
				if got := jobRecords(t, p.st); len(got) != 1 || got[0] != subagent.JobSuspended {
					t.Errorf("after the wake failed the store records the job as %q, want it suspended, as it was", got)
				}
				if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobSuspended {
					t.Errorf("after the wake failed the process lists %+v, want the job suspended", got)
				}
				p.stop(t)

				p = w.start()
				defer func() { p.stop(t) }()
				if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobSuspended || len(got[0].Questions) != 1 {
					t.Fatalf("a process started afresh lists %+v, want the job waiting with its question", got)
				}
				if e, n := w.effect.Load(), w.forks.Load(); e != 0 || n != forks {
					t.Fatalf("before the answer reached the job its effect ran %d times and its model answered %d times, want 0 and %d", e, n, forks)
				}
				out, err := p.turnUnder(t, rctx, "turn-2", "cmd wait "+job.ID)
				if err != nil {
					t.Fatalf("the turn resumed once the store is back: %v", err)
				}
				if !strings.HasPrefix(out.Answer, "lead: found gold") {
					t.Errorf("the resumed turn answered %q, want the job's answer", out.Answer)
				}
				if e, n := w.effect.Load(), w.forks.Load(); e != 1 || n != 3 {
					t.Errorf("the effect ran %d times and the job's model answered %d times, want 1 and 3", e, n)
				}
				if got := jobRecords(t, p.st); len(got) != 1 || got[0] != subagent.JobDone {
					t.Errorf("the store records the job as %q, want it done", got)
				}
			})
		}
	}
}
