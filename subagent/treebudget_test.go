package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// billed makes a reply cost what a real model would bill for the request:
// about a token per four bytes sent, and 25 out. It records the largest
// reply.
type billed struct{ most atomic.Int64 }

func (b *billed) usage(req provider.Request) provider.Usage {
	return b.bill(req, false)
}

func (b *billed) bill(req provider.Request, worker bool) provider.Usage {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Content) + 8
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, d := range req.Tools {
		n += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	u := provider.Usage{InputTokens: int64(n/4 + 1), OutputTokens: 25, Requests: 1}
	if !worker {
		return u
	}
	for m := b.most.Load(); u.Tokens() > m && !b.most.CompareAndSwap(m, u.Tokens()); m = b.most.Load() {
	}
	return u
}

// worker is a child that tries to spend about a thousand tokens: it looks
// things up eight times before it answers, unless its budget ends that
// sooner; asked to wrap up (no tools offered), it reports what it has.
func (b *billed) worker(ctx context.Context, req provider.Request) (provider.Response, error) {
	u := b.bill(req, true)
	if len(req.Tools) == 0 {
		return provider.Response{Message: provider.AssistantMessage(`{"status":"partial","summary":"what I found before my budget ended"}`), Usage: u}, nil
	}
	lookups := 0
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			lookups++
		}
	}
	if lookups < 8 {
		call := provider.ToolCall{ID: fmt.Sprintf("l%d", lookups), Name: "lookup", Arguments: json.RawMessage(`{}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: u}, nil
	}
	return provider.Response{Message: provider.AssistantMessage(`{"status":"success","summary":"all of it"}`), Usage: u}, nil
}

// TestTreeBudget gives a tree 10,000 to 100,000 tokens for 64 children
// that each try to spend about 1,000, in the foreground and as background
// jobs (whose receipts and collection the lead pays out of their shares,
// so they get a budget of 30,000 at least): the tree spends no more than
// its budget (the children are billed about as the estimate counts), the
// lead answers, and every child ends with success or a partial report,
// none failed or refused.
func TestTreeBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 64
	for _, tc := range []struct {
		budget     int64
		background bool
	}{{10_000, false}, {30_000, true}, {100_000, false}, {100_000, true}} {
		budget, background := tc.budget, tc.background
		t.Run(fmt.Sprintf("budget %d, background %v", budget, background), func(t *testing.T) {
			var (
				b     billed
				after atomic.Int64 // what the lead's calls after the first cost
			)
			looks := func(ctx context.Context, req provider.Request) (provider.Response, error) {
				u := b.usage(req)
				if len(req.Messages) > 1 {
					after.Add(u.Tokens())
				}
				last := req.Messages[len(req.Messages)-1]
				switch {
				case last.Role == provider.RoleUser && len(req.Messages) == 1:
					calls := make([]provider.ToolCall, n)
					for i := range calls {
						args := fmt.Sprintf(`{"task":"part %d"}`, i)
						if background {
							args = fmt.Sprintf(`{"task":"part %d","background":true}`, i)
						}
						calls[i] = provider.ToolCall{ID: fmt.Sprintf("s%d", i), Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}
					}
					return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
				case background && len(req.Tools) > 0 && strings.Contains(last.Content, `"job_id"`):
					// Wait for every job whose receipt came back.
					var calls []provider.ToolCall
					for _, m := range req.Messages {
						var r struct {
							JobID string `json:"job_id"`
						}
						if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
							args, _ := json.Marshal(map[string]any{"action": "wait", "job_id": r.JobID, "timeout_seconds": 600})
							calls = append(calls, provider.ToolCall{ID: "w" + r.JobID, Name: subagent.JobsToolName, Arguments: args})
						}
					}
					return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
				}
				return provider.Response{Message: provider.AssistantMessage("All parts done."), Usage: u}, nil
			}
			p := fake.NewProvider(
				fake.Respond(looks).For("lead"),
				fake.Respond(b.worker).For(subagent.DefaultForkName),
			).Loop().DontRecord()
			opts := []subagent.SpawnOption{subagent.WithMaxSpawns(n), subagent.WithReport()}
			if background {
				// All 64 start in one step: none may be refused for being
				// one too many alive at once.
				opts = append(opts, subagent.WithBackground(), subagent.WithMaxBackground(n))
			}
			reg, _ := setup(t, p, background, opts)
			out, err := lead(t, p, reg, agent.WithTokenLimit(budget)).Run(t.Context(), agent.Input{Text: "Do all parts."})
			if err != nil {
				t.Fatal(err)
			}
			statuses := map[string]int{}
			for _, c := range toolResults(out.Messages) {
				var r subagent.Report
				if strings.Contains(c, `"job_id"`) && strings.Contains(c, `"running"`) {
					continue // a receipt
				}
				if err := json.Unmarshal([]byte(c), &r); err != nil {
					if i := strings.Index(c, "{"); i >= 0 {
						err = json.Unmarshal([]byte(c[i:]), &r)
					}
					if err != nil {
						t.Errorf("a child's result is not a report: %q", c)
						continue
					}
				}
				statuses[string(r.Status)]++
			}
			spent := out.TotalUsage().Tokens()
			t.Logf("spent %d of a budget of %d (the largest reply %d, the lead's calls after the spawns %d); children: %v; refused %d",
				spent, budget, b.most.Load(), after.Load(), statuses, out.Refused)
			if spent > budget {
				t.Errorf("the tree spent %d tokens, more than its budget %d", spent, budget)
			}
			if statuses["success"]+statuses["partial"] != n || out.Refused != 0 {
				t.Errorf("children ended %v, %d refused; want all %d with success or partial", statuses, out.Refused, n)
			}
		})
	}
}
