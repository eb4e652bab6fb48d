package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// A journaled turn whose guardrails decided before it asked a person
// decides nothing again when it resumes: the input's check and the check
// that sent the first answer back are replayed with the answers they
// judged, neither run again nor reported again, and only the answer
// given after the resume is checked anew. Answers replayed from the
// journal emit no usage event: one deputy.usage event for each model call
// made, over both runs. With models that name their calls afresh, not at
// all, and from call_0.
func TestReplayedGuardrailDecidesNothingAgain(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, deploys, inputChecks, outputChecks atomic.Int64
			// The model answers badly, is sent back, asks to deploy, then
			// answers well.
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				n := modelCalls.Add(1)
				usage := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
				var said []string
				for _, m := range req.Messages {
					said = append(said, m.Content)
				}
				all := strings.Join(said, "\n")
				switch {
				case !strings.Contains(all, "rejected by the guardrail"):
					return provider.Response{Message: provider.AssistantMessage("The password is hunter2."), Usage: usage}, nil
				case !strings.Contains(all, "deployed"):
					call := provider.ToolCall{ID: mode.id(n), Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)}
					return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
				}
				return provider.Response{Message: provider.AssistantMessage("Deployed, and no secret told."), Usage: usage}, nil
			})
			deploy := tool.RequireApproval(toolFunc("deploy", func(context.Context, tool.Call) (tool.Result, error) {
				deploys.Add(1)
				return tool.Result{Content: "deployed"}, nil
			}), "deploys", 0)
			guards := []policy.Guardrail{
				{Name: "polite", Stage: policy.Input, Check: func(context.Context, string) (policy.Finding, error) {
					inputChecks.Add(1)
					return policy.Finding{}, nil
				}},
				{Name: "no-secrets", Stage: policy.Output, Retry: true, Check: func(_ context.Context, text string) (policy.Finding, error) {
					outputChecks.Add(1)
					if strings.Contains(text, "hunter2") {
						return policy.Finding{Problem: "it tells a password"}, nil
					}
					return policy.Finding{}, nil
				}},
			}
			lead := newReact(t, model, agent.WithName("lead"), agent.WithTools(deploy), agent.WithGuardrails(guards...))
			var mu sync.Mutex
			var decisions []string
			usageEvents := 0
			sink := event.SinkFunc(func(e event.Event) {
				if e.Type != event.Custom {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch e.Name {
				case policy.GuardrailEvent:
					var d struct{ Guardrail, Verdict string }
					_ = json.Unmarshal(e.Value, &d)
					decisions = append(decisions, d.Guardrail+" "+d.Verdict)
				case agent.UsageEvent:
					usageEvents++
				}
			})
			ctx := context.Background()
			var out agent.Output
			for round := range 2 {
				j, err := st.Journal(ctx, "guarded")
				if err != nil {
					t.Fatal(err)
				}
				out, err = lead.Run(agent.WithJournal(event.WithSink(ctx, sink), j), agent.Input{Text: "Deploy, politely."})
				var in *tool.Interrupted
				switch {
				case round == 0 && errors.As(err, &in):
					if ctx, err = tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved,
						Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
						t.Fatal(err)
					}
				case round == 1 && err == nil:
				default:
					t.Fatalf("run %d: %v", round, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"polite pass", "no-secrets retry", "no-secrets pass"}
			if strings.Join(decisions, ", ") != strings.Join(want, ", ") {
				t.Errorf("the guardrails' events over the turn: %q, want %q", decisions, want)
			}
			if inputChecks.Load() != 1 || outputChecks.Load() != 2 {
				t.Errorf("the input was checked %d times and answers %d, want 1 and 2", inputChecks.Load(), outputChecks.Load())
			}
			if deploys.Load() != 1 {
				t.Errorf("deployed %d times, want once", deploys.Load())
			}
			if got := int(modelCalls.Load()); usageEvents != got || got != 3 {
				t.Errorf("%d usage events for %d model calls, want one a call, 3 in all", usageEvents, got)
			}
			if out.Answer != "Deployed, and no secret told." || out.TotalUsage().Requests != 3 {
				t.Errorf("the turn answered %q for %d requests, want its last answer and 3", out.Answer, out.TotalUsage().Requests)
			}
		})
	}
}
