//go:build unix

package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// keptKill is what the parent tells the process it kills.
type keptKill struct {
	Store, Log string
	Mode       int   // of callIDModes
	KillAt     int64 // the job's model answer at which it is killed; 0: in its tool, after the send
	// Ask: the job's side effect needs approval; the process is killed
	// while the job waits for it (KillAt 0) or, approved, in the job's
	// next tool (KillAt 1).
	Ask bool
}

const keptKillEnv = "DEPUTY_TEST_KEPT_KILL"

// A process is SIGKILLed while a thread's job runs, after the thread sent
// it a message: in the job's tool, or as the job's model is asked for its
// last answer, after the message was taken. The next process, over the
// same SQLite file, finishes the job when the thread waits for it: its
// side effect ran once, no model answer was asked for twice, and the
// message reached it once.
func TestKeptJobSurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(keptKillEnv); spec != "" {
		runKeptKill(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per case")
	}
	for _, killAt := range []int64{0, 3} {
		for mode := range callIDModes {
			name := "in its tool"
			if killAt > 0 {
				name = "asking for its last answer"
			}
			t.Run(name+"/"+callIDModes[mode].name, func(t *testing.T) {
				dir := t.TempDir()
				spec := keptKill{Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "log"), Mode: mode, KillAt: killAt}
				if _, killed := startRound[struct{}](t, "TestKeptJobSurvivesSIGKILL", spec, filepath.Join(dir, "out"), keptKillEnv); !killed {
					t.Fatal("the process was not killed")
				}
				logf, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				defer logf.Close()
				w := keptWorld{t: t, open: openSQLite(t, spec.Store), id: callIDModes[mode].id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), log: logf}
				close(w.dig)
				p := w.start()
				defer p.stop(t)
				job := ""
				data, _ := os.ReadFile(spec.Log)
				for _, line := range strings.Split(string(data), "\n") {
					if id, ok := strings.CutPrefix(line, "job "); ok {
						job = id
					}
				}
				ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
				out := p.run(t, ctx, "cmd wait "+job)
				if out.Answer != "lead: found gold; messages: dig deeper" {
					t.Errorf("the wait after the kill answered %q", out.Answer)
				}
				data, _ = os.ReadFile(spec.Log)
				if n, e := strings.Count(string(data), "answer\n"), strings.Count(string(data), "effect\n"); n != 3 || e != 1 {
					t.Errorf("the job's model was asked for %d answers and its effect ran %d times, want 3 and 1\n%s", n, e, data)
				}
			})
		}
	}
}

// openSQLite returns a func that opens the store on the SQLite file path.
// A killed process's job leases expire after two seconds.
func openSQLite(t *testing.T, path string) func() *store.Store {
	return func() *store.Store {
		b, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(b, store.WithLeaseTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

// runKeptKill is the process that is killed.
func runKeptKill(t *testing.T, spec string) {
	var k keptKill
	if err := json.Unmarshal([]byte(spec), &k); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(k.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	w := &keptWorld{t: t, open: openSQLite(t, k.Store), id: callIDModes[k.Mode].id, dig: make(chan struct{}), inDig: make(chan struct{}, 1),
		log: logf, killAt: k.KillAt, kill: kill}
	ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
	if k.Ask {
		w.killAt, w.approve = 0, true
		runKeptAskKill(t, w, ctx, k.KillAt, kill)
		return
	}
	p := w.start()
	p.run(t, ctx, "cmd start")
	job := p.s.Jobs(ctx).List()[0].ID
	w.note("job " + job)
	select {
	case <-w.inDig:
	case <-time.After(30 * time.Second):
		t.Fatal("the job never reached its tool")
	}
	p.run(t, ctx, "cmd send "+job)
	if k.KillAt == 0 {
		kill()
	}
	close(w.dig) // the job takes the message, and is killed asking for its answer
	time.Sleep(30 * time.Second)
	t.Fatal("the process was not killed")
}

// runKeptAskKill is the process that is killed while its thread's job
// waits for a person, or once the job, approved, runs on.
func runKeptAskKill(t *testing.T, w *keptWorld, ctx context.Context, killAt int64, kill func()) {
	p := w.start()
	if _, err := p.turnUnder(t, ctx, "turn-1", "cmd start"); err != nil {
		t.Fatal(err)
	}
	job := waitState(t, p.s, ctx, subagent.JobSuspended)
	w.note("job " + job.ID)
	_, err := p.turnUnder(t, ctx, "turn-2", "cmd wait "+job.ID)
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("the wait ended with %v, want the job's question", err)
	}
	b, _ := json.Marshal(in)
	w.note("ask " + string(b))
	if killAt == 0 {
		kill()
	}
	rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	j, err := p.st.Journal(ctx, "turn-2")
	if err != nil {
		t.Fatal(err)
	}
	go p.a.Run(agent.WithJournal(rctx, j), agent.Input{Text: "cmd wait " + job.ID}) //nolint:errcheck // killed before it ends
	select {
	case <-w.inDig: // the approved effect has run, and its step is recorded
		kill()
	case <-time.After(30 * time.Second):
	}
	t.Fatal("the woken job never reached its next tool")
}

// A process is SIGKILLed while a thread's kept job waits for a person's
// approval, or after the approval, as the job runs on: the next process,
// over the same SQLite file, resumes the thread's turn with the answer
// and collects the job's answer, its approved side effect run once and no
// model answer asked for twice.
func TestKeptJobWaitingForAPersonSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per case")
	}
	for _, killAt := range []int64{0, 1} {
		for mode := range callIDModes {
			name := map[int64]string{0: "while it waits", 1: "after the approval"}[killAt]
			t.Run(name+"/"+callIDModes[mode].name, func(t *testing.T) {
				dir := t.TempDir()
				spec := keptKill{Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "log"), Mode: mode, KillAt: killAt, Ask: true}
				if _, killed := startRound[struct{}](t, "TestKeptJobSurvivesSIGKILL", spec, filepath.Join(dir, "out"), keptKillEnv); !killed {
					t.Fatal("the process was not killed")
				}
				logf, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				defer logf.Close()
				w := keptWorld{t: t, open: openSQLite(t, spec.Store), id: callIDModes[mode].id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), log: logf, approve: true}
				close(w.dig)
				job, in := "", &tool.Interrupted{}
				data, _ := os.ReadFile(spec.Log)
				for _, line := range strings.Split(string(data), "\n") {
					if id, ok := strings.CutPrefix(line, "job "); ok {
						job = id
					}
					if ask, ok := strings.CutPrefix(line, "ask "); ok {
						if err := json.Unmarshal([]byte(ask), in); err != nil {
							t.Fatal(err)
						}
					}
				}
				if len(in.Interrupts) != 1 {
					t.Fatalf("the killed process logged no question:\n%s", data)
				}
				p := w.start()
				defer p.stop(t)
				ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
				rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
				if err != nil {
					t.Fatal(err)
				}
				out, err := p.turnUnder(t, rctx, "turn-2", "cmd wait "+job)
				if err != nil || !strings.HasPrefix(out.Answer, "lead: found gold") {
					t.Fatalf("the resumed turn after the kill answered %q, %v; want the job's answer", out.Answer, err)
				}
				data, _ = os.ReadFile(spec.Log)
				if n, e := strings.Count(string(data), "answer\n"), strings.Count(string(data), "effect\n"); n != 3 || e != 1 {
					t.Errorf("the job's model was asked for %d answers and its effect ran %d times, want 3 and 1\n%s", n, e, data)
				}
			})
		}
	}
}
