package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestUserToolChildrenDrawOnTheCallsShare runs a lead whose step calls,
// twice at once, a tool of the user's that starts two writers itself, one
// after the other: with agent.Run, or with a SubAgentTool's Call. Each
// writer would write about 1,000 tokens, and writes what its call's output
// bound lets it. Under a token limit of 2,400 and a cost limit of $0.0024
// (a dollar a million tokens, in and out), the tree spends no more than
// its limit (the fake counts tokens as the estimate does, so the bound's
// error is 0), all four writers get part of their call's share and write,
// and the lead answers; what the models billed is what Output counts.
// With models that name their calls afresh, not at all, and from call_0.
func TestUserToolChildrenDrawOnTheCallsShare(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 1e-6}})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 2400
	long := strings.Repeat(essay, 2) // about 1,000 tokens
	for _, direct := range []bool{true, false} {
		for _, cost := range []bool{false, true} {
			for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
				t.Run(fmt.Sprintf("direct %v, cost %v, ids %d", direct, cost, ids), func(t *testing.T) {
					var (
						mu          sync.Mutex
						billed      provider.Usage
						leadCalls   int
						writerCalls int
						fresh       atomic.Int64
					)
					bill := func(req provider.Request, msg provider.Message, n *int) provider.Response {
						u := fake.Usage(req, msg)
						mu.Lock()
						defer mu.Unlock()
						billed = billed.Add(u)
						*n++
						return provider.Response{Message: msg, Usage: u, Model: "fake"}
					}
					leadModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
						if len(req.Tools) == 0 || len(req.Messages) > 1 {
							return bill(req, provider.AssistantMessage("Done."), &leadCalls), nil
						}
						calls := []provider.ToolCall{
							{Name: "team", Arguments: json.RawMessage(`{"topic":"a"}`)},
							{Name: "team", Arguments: json.RawMessage(`{"topic":"b"}`)},
						}
						resumetest.NameCalls(ids, calls, &fresh)
						return bill(req, provider.AssistantMessage("", calls...), &leadCalls), nil
					}
					writerModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
						text := long
						if n := 4 * req.MaxTokens; n > 0 && n < len(text) {
							text = text[:n]
						}
						return bill(req, provider.AssistantMessage(text), &writerCalls), nil
					}
					p := fake.NewProvider(fake.Respond(leadModel).For("lead"), fake.Respond(writerModel).For("writer")).Loop().DontRecord().Named("fake", "fake")
					writer, err := subagent.FromFactory("writer", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) {
						return agent.NewReact(p, agent.WithName("writer"))
					})
					if err != nil {
						t.Fatal(err)
					}
					// The user's tool: two writers in turn, their answers
					// joined, and nothing said of what they spent.
					team := tool.Func{
						Def: tool.Definition{Name: "team", Description: "Writes two parts.", Parameters: json.RawMessage(`{"type":"object"}`)},
						Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
							var parts []string
							for i := range 2 {
								task := fmt.Sprintf("Write part %d in full.", i)
								if direct {
									w, err := agent.NewReact(p, agent.WithName("writer"))
									if err != nil {
										return tool.Result{}, err
									}
									out, err := w.Run(ctx, agent.Input{Text: task})
									if err != nil {
										return tool.Result{}, err
									}
									parts = append(parts, out.Answer)
									continue
								}
								res, err := writer.Call(ctx, tool.Call{ID: c.ID, Name: "writer", Arguments: json.RawMessage(fmt.Sprintf(`{"task":%q}`, task))})
								if err != nil {
									return tool.Result{}, err
								}
								parts = append(parts, res.Content)
							}
							return tool.Result{Content: strings.Join(parts, "\n")}, nil
						},
					}
					opts := []agent.Option{agent.WithName("lead"), agent.WithTools(team), agent.WithPrices(prices), agent.WithTokenLimit(limit)}
					if cost {
						opts[len(opts)-1] = agent.WithCostLimit(limit * 1e-6)
					}
					l, err := agent.NewReact(p, opts...)
					if err != nil {
						t.Fatal(err)
					}
					out, err := l.Run(t.Context(), agent.Input{Text: "Write the four parts."})
					mu.Lock()
					defer mu.Unlock()
					t.Logf("billed %d tokens in %d calls of the lead and %d of the writers; answer %q, partial %v", billed.Tokens(), leadCalls, writerCalls, out.Answer, out.Partial)
					if billed.Tokens() > limit {
						t.Errorf("the tree spent %d tokens under a limit of %d", billed.Tokens(), limit)
					}
					if err != nil {
						t.Fatalf("the lead failed: %v", err)
					}
					if out.Answer != "Done." || leadCalls != 2 {
						t.Errorf("the lead answered %q in %d calls, want its own answer in 2", out.Answer, leadCalls)
					}
					if writerCalls != 4 {
						t.Errorf("the writers made %d model calls, want 4: each of a call's two gets part of its share", writerCalls)
					}
					for _, c := range toolResults(out.Messages) {
						if strings.Contains(c, "not started") || strings.Contains(c, "budget") {
							t.Errorf("a call's result is %q, want two parts written", c)
						}
					}
					if got := out.Usage.Add(out.ChildUsage); got != billed {
						t.Errorf("Output counts %+v, the models billed %+v", got, billed)
					}
				})
			}
		}
	}
}
