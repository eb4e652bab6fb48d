package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// countingTasks is a provider that counts the requests whose conversation
// holds task.
type countingTasks struct {
	provider.Provider
	task string
	n    atomic.Int64
}

func (c *countingTasks) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	for _, m := range req.Messages {
		if strings.Contains(m.Content, c.task) {
			c.n.Add(1)
			break
		}
	}
	return c.Provider.Complete(ctx, req)
}

// A background spawn refused under WithMaxBackground in a journaled turn
// is refused again when the turn resumes, though the job that held the
// place has ended by then in the resumed run: the model's recorded
// answers were made after reading the refusal, so the job it never saw
// must not start and spend. The resumed run makes the same decision, with
// the same message, and counts the refusal once for the turn. With models
// that name their calls afresh, not at all, and from call_0.
func TestRefusedSpawnStaysRefusedWhenTheTurnResumes(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			release := make(chan struct{})
			var digs, deploys atomic.Int64
			dig, err := tool.New("dig", "Digs.", func(ctx context.Context, in struct{}) (string, error) {
				digs.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return "dug", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			deploy, err := tool.New("deploy", "Deploys.", func(ctx context.Context, in struct{}) (string, error) {
				deploys.Add(1)
				return "deployed", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// The job that held the place ends once the model has read the
			// refusal.
			waitFirst := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				close(release)
				args := `{"action":"wait","job_id":"` + latestJob(req.Messages) + `"}`
				return provider.Response{
					Message: provider.AssistantMessage("", provider.ToolCall{ID: mode.id(3, 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(args)}),
					Usage:   usage(1),
				}, nil
			})
			fork := subagent.DefaultForkName
			fp := fake.NewProvider(
				modeCall(mode.id, 1, subagent.SpawnToolName, `{"task":"clean up","background":true}`).For("lead"),
				modeCall(mode.id, 2, subagent.SpawnToolName, `{"task":"clean up more","background":true}`).For("lead"),
				waitFirst.For("lead"),
				modeCall(mode.id, 4, "deploy", `{}`).For("lead"),
				fake.Text("done").For("lead").WithUsage(usage(1)),
				modeCall(mode.id, 5, "dig", `{}`).For(fork),
				fake.Text("dug it").For(fork).WithUsage(usage(1)),
			)
			p := &countingTasks{Provider: fp, task: "clean up more"}
			var s *subagent.Spawner
			var resuming atomic.Bool
			// In the resumed run, the refused spawn is tried once the first
			// job has ended, its answer replayed: nothing then holds the
			// place. (The policy is asked as the tool is offered, and as
			// each spawn is made.)
			afterTheFirstEnded := subagent.WithSpawnPolicy(func(ctx context.Context) bool {
				for deadline := time.Now().Add(10 * time.Second); resuming.Load() && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if l := s.Jobs(ctx).List(); len(l) != 1 || l[0].State != subagent.JobRunning {
						break
					}
				}
				return true
			})
			reg, sp := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxBackground(1), afterTheFirstEnded}, dig, tool.RequireApproval(deploy, "", 0))
			s = sp
			a := lead(t, p, reg)
			run := func(ctx context.Context) (agent.Output, *recorder, error) {
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{}
				out, err := a.Run(event.WithSink(agent.WithJournal(ctx, j), rec), agent.Input{Text: "tidy up"})
				return out, rec, err
			}
			out1, rec1, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run: %v, want the deploy's question", err)
			}
			results := toolResults(out1.Messages)
			if len(results) < 3 {
				t.Fatalf("the first run's tool results %q: want the receipt, the refusal and the job's answer", results)
			}
			mustContain(t, results[1], subagent.ErrMaxBackground.Error())
			mustContain(t, results[2], "dug it")
			if out1.Refused != 1 || len(rec1.custom(subagent.RefusedEvent)) != 1 {
				t.Fatalf("the first run refused %d spawns: want one", out1.Refused)
			}

			rctx := approveOne(t, context.Background(), in)
			resuming.Store(true)
			out2, _, err := run(rctx)
			if err != nil || out2.Answer != "done" {
				t.Fatalf("the resumed run: %q, %v", out2.Answer, err)
			}
			again := toolResults(out2.Messages)
			if len(again) < 2 || again[1] != results[1] {
				t.Errorf("the resumed run's second spawn read %q; the model read %q", again, results[1])
			}
			if n := p.n.Load(); n != 0 {
				t.Errorf("the refused job's sub-agent was asked %d times, want never", n)
			}
			if out2.Refused != 1 {
				t.Errorf("the turn counts %d refusals, want one", out2.Refused)
			}
			if d, g := deploys.Load(), digs.Load(); d != 1 || g != 1 {
				t.Errorf("the deploy ran %d times and the dig %d, want each once", d, g)
			}
		})
	}
}

// A thread's turn that started a job and crashed, run again from its
// journal while the job works on, gives the model's spawn the job it
// started, under WithMaxBackground(1) too: the job that holds the one
// place is that spawn's own, and the turn does not refuse it its own job
// (before, the spawn run again was refused, as if a second job, and the
// model's answer read a refusal where it had read the receipt). In the
// three id modes.
func TestThreadTurnRunAgainKeepsItsJobAtTheCap(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the store closes
			m := &threadModel{dig: make(chan struct{}), id: mode.id}
			var crashed atomic.Bool
			m.crash = func(req provider.Request) bool {
				// As the lead reads the receipt, the first time.
				return !strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) &&
					req.Messages[len(req.Messages)-1].Role == provider.RoleTool && !crashed.Swap(true)
			}
			a, s := threadLead(t, m, subagent.WithMaxBackground(1))
			ctx := agent.WithThread(t.Context(), "t1")
			st := newStore(t)
			j, err := st.Journal(t.Context(), "turn-1")
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			if _, err := a.Run(event.WithSink(agent.WithJournal(ctx, j), rec), agent.Input{Text: "cmd start"}); err == nil || !crashed.Load() {
				t.Fatalf("the turn did not crash (%v)", err)
			}
			first := s.Jobs(ctx).List()
			if len(first) != 1 || first[0].State != subagent.JobRunning {
				t.Fatalf("jobs after the crash %+v: want one, running", first)
			}
			out, err := a.Run(event.WithSink(agent.WithJournal(ctx, j), rec), agent.Input{Text: "cmd start"})
			if err != nil {
				t.Fatal(err)
			}
			results := toolResults(out.Messages)
			if len(results) != 1 || jobID(t, results[0]) != first[0].ID {
				t.Errorf("the turn run again read %q, want the receipt of %s", results, first[0].ID)
			}
			if out.Refused != 0 || len(rec.custom(subagent.RefusedEvent)) != 0 {
				t.Errorf("the turn run again refused %d spawns, want none", out.Refused)
			}
			if l := s.Jobs(ctx).List(); len(l) != 1 {
				t.Errorf("the thread has %d jobs, want the one", len(l))
			}
			close(m.dig)
			if _, err := s.Jobs(ctx).Wait(t.Context(), subagent.WaitFor{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
