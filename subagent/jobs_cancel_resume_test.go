package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A job the model cancelled in a journaled turn does not work on when
// the turn resumes: its sub-agent's reply that came back as the cancel
// came (paid for, and journaled) asked to send an email, which the
// cancel stopped; the resumed run, whose lead replays the cancel late,
// starts the job cancelled and does not send it either (before, the job
// replayed the reply and sent the email, and the model's cancel found it
// ended with an answer). The turn counts what the job paid for once.
// With models that name their calls afresh, not at all, and from call_0.
func TestCancelledJobDoesNotWorkOnWhenTheTurnResumes(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			var emails, deploys atomic.Int64
			email, err := tool.New("email", "Sends an email.", func(ctx context.Context, in struct{}) (string, error) {
				emails.Add(1)
				return "sent", nil
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
			// The job's reply comes back as the cancel reaches it.
			late := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				<-ctx.Done()
				return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: mode.id(9, 0), Name: "email", Arguments: json.RawMessage(`{}`)}), Usage: usage(1)}, nil
			})
			fork := subagent.DefaultForkName
			p := fake.NewProvider(
				modeCall(mode.id, 1, subagent.SpawnToolName, `{"task":"write to the customer","background":true}`).For("lead"),
				onJob("cancel", "").For("lead"),
				modeCall(mode.id, 3, "deploy", `{}`).For("lead"),
				fake.Text("done").For("lead").WithUsage(usage(1)),
				late.For(fork),
				fake.Text("wrote").For(fork).WithUsage(usage(1)),
			)
			// The resumed run's lead takes its time: its replay of the cancel
			// comes after the job's replay of its reply.
			var resuming atomic.Bool
			slow := subagent.WithSpawnPolicy(func(ctx context.Context) bool {
				if resuming.Load() {
					time.Sleep(50 * time.Millisecond)
				}
				return true
			})
			reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), slow}, email, tool.RequireApproval(deploy, "", 0))
			a := lead(t, p, reg)
			run := func(ctx context.Context) (agent.Output, error) {
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "tidy up"})
			}
			out1, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run: %v, want the deploy's question", err)
			}
			results := toolResults(out1.Messages)
			if len(results) < 2 {
				t.Fatalf("the first run's tool results %q", results)
			}
			mustContain(t, results[1], "cancelled")
			if n := emails.Load(); n != 0 {
				t.Fatalf("the cancelled job sent %d emails in the first run, want none", n)
			}
			rctx := approveOne(t, context.Background(), in)
			resuming.Store(true)
			out2, err := run(rctx)
			if err != nil || out2.Answer != "done" {
				t.Fatalf("the resumed run: %q, %v", out2.Answer, err)
			}
			again := toolResults(out2.Messages)
			if len(again) < 2 {
				t.Fatalf("the resumed run's tool results %q", again)
			}
			mustContain(t, again[1], "cancelled")
			if n := emails.Load(); n != 0 {
				t.Errorf("the cancelled job sent %d emails when the turn resumed, want none", n)
			}
			// Every reply is billed a request of one token: the turn counts
			// each once, the cancelled job's too.
			if got, n := out2.TotalUsage(), int64(p.Calls()); got.Requests != n || got.InputTokens != n {
				t.Errorf("the turn counts %+v; the model was asked %d times, a token each", got, n)
			}
			if n := deploys.Load(); n != 1 {
				t.Errorf("the deploy ran %d times, want once", n)
			}
		})
	}
}
