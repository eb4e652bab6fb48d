package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A job of one run that waits for a person's approval counts against
// WithMaxBackground: a second spawn while it waits is refused, with an
// event, and the model reads why; once the job is cancelled a spawn is
// admitted. The call that asked never runs.
func TestRunJobWaitingForAPersonCountsAgainstTheCap(t *testing.T) {
	var deletes int
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct{}) (string, error) {
		deletes++
		return "deleted", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		spawns(`{"task":"clean up","background":true}`).For("lead").WithUsage(usage(1)),
		fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").After(100*time.Millisecond).WithUsage(usage(1)),
		spawns(`{"task":"clean up more","background":true}`).For("lead").WithUsage(usage(1)),
		onJob("cancel", "").For("lead"),
		spawns(`{"task":"clean up again","background":true}`).For("lead").WithUsage(usage(1)),
		fake.Text("done").For("lead").WithUsage(usage(1)),
		fake.Call("delete", `{}`).For(fork).WithUsage(usage(1)),
		fake.Call("delete", `{}`).For(fork).WithUsage(usage(1)),
	)
	reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxBackground(1)}, tool.RequireApproval(del, "", 0))
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "tidy up"})
		if err != nil || out.Answer != "done" {
			t.Fatalf("run: %q, %v; want it to finish", out.Answer, err)
		}
		results := toolResults(out.Messages)
		mustContain(t, results[1], "suspended")
		mustContain(t, results[2], subagent.ErrMaxBackground.Error(), "waiting for a person's answer")
		mustContain(t, results[3], "cancelled while it waited for a person's answer")
		jobID(t, results[4]) // the spawn after the cancel is admitted
		refused := rec.custom(subagent.RefusedEvent)
		if out.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_background"`) {
			t.Errorf("Output.Refused %d, refusals %+v: want one, max_background", out.Refused, refused)
		}
		if deletes != 0 {
			t.Errorf("the delete ran %d times, want never", deletes)
		}
	})
}

// A thread's job that waits for a person's approval counts against the
// thread's cap (WithMaxBackground) and its owner's (WithMaxOwnerJobs)
// until it is answered and ends, in one process and across a restart
// (before its thread is used again, too): a spawn in the thread, or in
// the owner's other thread, is refused, with an event, and the model
// reads why. Answered, the job runs its approved call once and ends, and
// a spawn is admitted again.
func TestKeptJobWaitingForAPersonCountsAgainstTheCaps(t *testing.T) {
	for _, restart := range []bool{false, true} {
		for _, mode := range callIDModes {
			name := map[bool]string{false: "in one process", true: "across a restart"}[restart] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				w := &keptWorld{t: t, open: keptStores[0].open(t, 0), id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), approve: true}
				close(w.dig)
				ann := func(th string) context.Context {
					return agent.WithOwner(agent.WithThread(context.Background(), th), "ann")
				}
				caps := []subagent.SpawnOption{subagent.WithMaxBackground(1), subagent.WithMaxOwnerJobs(1)}
				p := w.start(caps...)
				defer func() { p.stop(t) }()
				if _, err := p.turnUnder(t, ann("t1"), "t1-turn-1", "cmd start"); err != nil {
					t.Fatal(err)
				}
				job := waitState(t, p.s, ann("t1"), subagent.JobSuspended)
				if restart {
					p.stop(t)
					p = w.start(caps...)
				}

				// The owner's other thread first: after a restart, before
				// the waiting job's thread is used again.
				refusedIn := func(th, turn, reason, where string) {
					t.Helper()
					rec := &recorder{}
					out, err := p.turnUnder(t, event.WithSink(ann(th), rec), turn, "cmd start")
					if err != nil {
						t.Fatal(err)
					}
					refused := rec.custom(subagent.RefusedEvent)
					if out.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"`+reason+`"`) {
						t.Errorf("a spawn in %s while the job waits: Output.Refused %d, refusals %+v; want one, %s", th, out.Refused, refused, reason)
					}
					mustContain(t, out.Answer, subagent.ErrMaxBackground.Error(), "waiting for a person's answer", where)
				}
				refusedIn("t2", "t2-turn-1", "max_owner_jobs", "threads of this owner")
				refusedIn("t1", "t1-turn-2", "max_background", "one thread")

				_, err := p.turnUnder(t, ann("t1"), "t1-turn-3", "cmd wait "+job.ID)
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].ID != job.Questions[0].ID {
					t.Fatalf("the turn that waits for the job ended with %v, want its question", err)
				}
				rctx := approveOne(t, ann("t1"), in)
				out, err := p.turnUnder(t, rctx, "t1-turn-3", "cmd wait "+job.ID)
				if err != nil || !strings.HasPrefix(out.Answer, "lead: found gold") {
					t.Fatalf("the resumed turn answered %q, %v; want the job's answer", out.Answer, err)
				}
				if e := w.effect.Load(); e != 1 {
					t.Errorf("the approved effect ran %d times, want once", e)
				}

				out, err = p.turnUnder(t, ann("t2"), "t2-turn-2", "cmd start")
				if err != nil {
					t.Fatal(err)
				}
				if n := len(p.s.Jobs(ann("t2")).List()); out.Refused != 0 || n != 1 {
					t.Errorf("a spawn once the job ended: refused %d times, the thread has %d jobs; want admitted", out.Refused, n)
				}
			})
		}
	}
}

// A job of one run that waits for a person's approval holds its place
// under WithMaxBackground while the run is suspended with its question:
// the spawn the model made while it waited was refused, and the run
// resumed with the answer does not start it either; once the job is
// answered and ends, a spawn is admitted. The approved call runs once.
func TestRunJobWaitingForAPersonHoldsItsPlaceUntilItEnds(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			// The resumed run starts the waiting job again, with its answer,
			// as it replays the spawn that started it, and runs the spawn
			// refused before again too: the job's approved call waits for
			// that refusal, so the job has not ended by then, however
			// soon it runs.
			refusedAgain := make(chan struct{})
			var resuming atomic.Bool
			var once sync.Once
			var deletes atomic.Int64
			del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct{}) (string, error) {
				deletes.Add(1)
				select {
				case <-refusedAgain:
				case <-time.After(10 * time.Second):
				}
				return "deleted", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var s *subagent.Spawner
			// The second spawn, once the first job waits.
			second := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if l := s.Jobs(ctx).List(); len(l) == 1 && l[0].State == subagent.JobSuspended {
						break
					}
				}
				return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: mode.id(2, 0), Name: subagent.SpawnToolName,
					Arguments: json.RawMessage(`{"task":"clean up more","background":true}`)}), Usage: usage(1)}, nil
			})
			fork := subagent.DefaultForkName
			p := fake.NewProvider(
				modeCall(mode.id, 1, subagent.SpawnToolName, `{"task":"clean up","background":true}`).For("lead"),
				second.For("lead"),
				waitCall(mode.id(3, 0)).For("lead"),
				modeCall(mode.id, 4, subagent.SpawnToolName, `{"task":"clean up again","background":true}`).For("lead"),
				fake.Text("done").For("lead").WithUsage(usage(1)),
				modeCall(mode.id, 5, "delete", `{}`).For(fork),
				fake.Text("deleted it").For(fork).WithUsage(usage(1)),
				fake.Text("nothing left").For(fork).WithUsage(usage(1)),
			)
			reg, sp := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxBackground(1)}, tool.RequireApproval(del, "", 0))
			s = sp
			a := lead(t, p, reg)
			run := func(ctx context.Context) (agent.Output, *recorder, error) {
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{}
				sink := event.SinkFunc(func(e event.Event) {
					rec.Emit(e)
					if e.Type == event.Custom && e.Name == subagent.RefusedEvent && resuming.Load() {
						once.Do(func() { close(refusedAgain) })
					}
				})
				out, err := a.Run(event.WithSink(agent.WithJournal(ctx, j), sink), agent.Input{Text: "tidy up"})
				return out, rec, err
			}
			out1, rec1, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run: %v, want the job's question", err)
			}
			refused := rec1.custom(subagent.RefusedEvent)
			if out1.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_background"`) {
				t.Errorf("a spawn while the job waits: Output.Refused %d, refusals %+v; want one, max_background", out1.Refused, refused)
			}
			rctx := approveOne(t, context.Background(), in)
			resuming.Store(true)
			out2, _, err := run(rctx)
			if err != nil || out2.Answer != "done" {
				t.Fatalf("the resumed run: %q, %v", out2.Answer, err)
			}
			results := toolResults(out2.Messages)
			mustContain(t, results[1], subagent.ErrMaxBackground.Error(), "waiting for a person's answer")
			mustContain(t, results[2], "deleted it")
			jobID(t, results[3]) // admitted once the first job ended
			if n := deletes.Load(); n != 1 {
				t.Errorf("the approved delete ran %d times, want once", n)
			}
		})
	}
}
