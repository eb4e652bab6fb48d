package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// handOffs is a rule that keeps the hand-offs it is asked about (their
// tasks and the arguments of the calls that made them), and denies every
// one after the first when deny is set.
type handOffs struct {
	deny  bool
	mu    sync.Mutex
	tasks []string
	args  []string
}

func (h *handOffs) Name() string { return "hand-offs" }

func (h *handOffs) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point != policy.BeforeDelegation {
		return policy.Decision{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tasks = append(h.tasks, c.Task)
	h.args = append(h.args, string(c.Arguments))
	if h.deny && len(h.tasks) > 1 {
		return policy.Denied("no second tries")
	}
	return policy.Decision{}
}

// A child whose answer fails its schema is asked again only as a hand-off
// of its own, which the policy decides on as on the first: the rule reads
// the corrective task and the arguments of the call that started the
// child; allowed, the child answers again; denied, it is not asked again,
// and its parent reads its answer marked invalid, with why — as on
// Temporal.
func TestCorrectiveRetryIsAHandOff(t *testing.T) {
	for _, deny := range []bool{false, true} {
		name := "allowed"
		if deny {
			name = "denied"
		}
		t.Run(name, func(t *testing.T) {
			rule := &handOffs{deny: deny}
			pol, err := policy.New(rule)
			if err != nil {
				t.Fatal(err)
			}
			var asked atomic.Int32
			child := fake.NewProvider(fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
				if asked.Add(1) == 1 {
					return provider.Response{Message: provider.AssistantMessage("not json")}, nil
				}
				return provider.Response{Message: provider.AssistantMessage(`{"ok":true}`)}, nil
			})).Loop()
			worker, err := subagent.FromFactory("worker", "Works.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(child)
			}, subagent.WithOutputSchema(json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)))
			if err != nil {
				t.Fatal(err)
			}
			const args = `{"task":"part 1"}`
			lead := fake.NewProvider(fake.Call("worker", args), fake.Text("done"))
			a, err := agent.NewReact(lead, agent.WithTools(worker), agent.WithPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			out, err := a.Run(t.Context(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			rule.mu.Lock()
			defer rule.mu.Unlock()
			if len(rule.tasks) != 2 || !strings.Contains(rule.tasks[1], "not json") || rule.args[0] != args || rule.args[1] != args {
				t.Fatalf("the policy saw the hand-offs %q with the arguments %q, want the first and the corrective one, with the rejected answer, both of %s", rule.tasks, rule.args, args)
			}
			result := toolResults(out.Messages)[0]
			want, times := `{"ok":true}`, int32(2)
			if deny {
				want, times = `not retried: the policy refused it: policy: rule "hand-offs" denied the hand-off to worker`, 1
			}
			if asked.Load() != times || !strings.Contains(result, want) {
				t.Errorf("the child was asked %d times and its parent read %q; want %d and %q", asked.Load(), result, times, want)
			}
			if deny && (len(out.Denials) != 1 || out.Denials[0].Point != policy.BeforeDelegation) {
				t.Errorf("denials %v, want the corrective hand-off's", out.Denials)
			}
		})
	}
}
