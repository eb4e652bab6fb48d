package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// namedProvider answers as its default model, which it names with Model,
// and names no model in its replies.
type namedProvider struct {
	provider.Func
	model string
}

func (namedProvider) Name() string    { return "acme" }
func (p namedProvider) Model() string { return p.model }

// A background job on a dearer model than its lead's, whose replies name
// no model, is held to its cost limit at its own model's price: it stops
// within the limit with a partial report, its status says what its model
// billed at that price, and the lead's Output costs what both models
// billed, to the cent and below. The job is a fork on a dearer choice of
// the model menu (its requests naming its model, or naming none, its
// provider's default) and a roster member on a dearer provider.
func TestJobOnADearerModelKeepsToItsCostLimit(t *testing.T) {
	cheap := provider.Price{Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)}
	dear := provider.Price{Input: 16.0 / (1 << 20), Output: 64.0 / (1 << 20)}
	prices, err := provider.NewPrices(map[string]provider.Price{"acme-1": cheap, "acme-max": dear})
	if err != nil {
		t.Fatal(err)
	}
	call := provider.Usage{InputTokens: 100, OutputTokens: 20, Requests: 1}
	limit := 10 * dear.Cost(call) // ten of the job's calls
	for _, tc := range []struct {
		name  string
		spawn string
		opts  func(lead, dearer provider.Provider) []subagent.SpawnOption
	}{
		{"fork on a menu choice naming its model", `{"task":"dig for ever","model":"max","background":true}`,
			func(lead, _ provider.Provider) []subagent.SpawnOption {
				return []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "max", Model: "acme-max"})}
			}},
		{"fork on a menu choice of another provider", `{"task":"dig for ever","model":"max","background":true}`,
			func(_, dearer provider.Provider) []subagent.SpawnOption {
				return []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "max", Provider: dearer})}
			}},
		{"roster member on another provider", `{"task":"dig for ever","agent":"digger","background":true}`,
			func(_, dearer provider.Provider) []subagent.SpawnOption {
				tools, err := tool.NewRegistry(lookup())
				if err != nil {
					t.Fatal(err)
				}
				digger, err := agent.NewReact(dearer, agent.WithName("digger"), agent.WithSystemPrompt(subagent.DefaultForkPrompt), agent.WithRegistry(tools))
				if err != nil {
					t.Fatal(err)
				}
				m, err := subagent.FromAgent("digger", "Digs.", digger)
				if err != nil {
					t.Fatal(err)
				}
				return []subagent.SpawnOption{subagent.WithRoster(m)}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range callIDModes {
				t.Run(mode.name, func(t *testing.T) {
					var mu sync.Mutex
					var n int64
					var leadBilled, jobBilled provider.Usage
					var jobCalls int
					answer := func(ctx context.Context, req provider.Request, dearer bool) (provider.Response, error) {
						mu.Lock()
						defer mu.Unlock()
						n++
						u := call
						if req.MaxTokens > 0 {
							u.OutputTokens = min(u.OutputTokens, int64(req.MaxTokens))
						}
						named := func(said string, name, args string) (provider.Response, error) {
							return provider.Response{Usage: u, Message: provider.AssistantMessage(said,
								provider.ToolCall{ID: mode.id(n, 0), Name: name, Arguments: json.RawMessage(args)})}, nil
						}
						if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
							if !dearer && req.Model != "acme-max" {
								return provider.Response{}, fmt.Errorf("the job asked the lead's model %q", req.Model)
							}
							jobBilled = jobBilled.Add(u)
							jobCalls++
							if len(req.Tools) == 0 {
								// Asked to wrap up, it says nothing.
								return provider.Response{Usage: u, Message: provider.AssistantMessage("")}, nil
							}
							return named(fmt.Sprintf("dug layer %d", jobCalls), "lookup", `{}`)
						}
						leadBilled = leadBilled.Add(u)
						switch rs := toolResults(req.Messages); len(rs) {
						case 0:
							return named("", subagent.SpawnToolName, tc.spawn)
						case 1:
							return named("", subagent.JobsToolName, `{"action":"wait","timeout_seconds":600,"job_id":"`+latestJob(req.Messages)+`"}`)
						default:
							return provider.Response{Usage: u, Message: provider.AssistantMessage("lead: " + rs[1])}, nil
						}
					}
					leadModel := namedProvider{model: "acme-1", Func: func(ctx context.Context, req provider.Request) (provider.Response, error) {
						return answer(ctx, req, false)
					}}
					dearer := namedProvider{model: "acme-max", Func: func(ctx context.Context, req provider.Request) (provider.Response, error) {
						return answer(ctx, req, true)
					}}
					opts := append(tc.opts(leadModel, dearer), subagent.WithBackground(), subagent.WithJobLimits(subagent.JobLimits{Cost: limit}))
					reg, s := setup(t, leadModel, true, opts)
					defer s.Close()
					rec := &recorder{}
					out, err := lead(t, leadModel, reg, agent.WithPrices(prices)).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
					if err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					defer mu.Unlock()
					mustContain(t, out.Answer, "lead: ", "cost limit")
					spent := dear.Cost(jobBilled)
					if spent > limit || jobCalls < 5 {
						t.Errorf("the job made %d model calls, $%.6f at its model's price: want at least 5, within its limit of $%.6f", jobCalls, spent, limit)
					}
					if ended := rec.custom(subagent.JobEndedEvent); len(ended) != 1 {
						t.Errorf("%d %s events, want 1", len(ended), subagent.JobEndedEvent)
					} else {
						var st subagent.JobStatus
						if err := json.Unmarshal(ended[0].Value, &st); err != nil {
							t.Fatal(err)
						}
						if st.Usage != jobBilled || st.Cost != spent {
							t.Errorf("the job ended having spent %+v, $%.9f; its model billed %+v, $%.9f", st.Usage, st.Cost, jobBilled, spent)
						}
					}
					if got := out.TotalUsage(); got != leadBilled.Add(jobBilled) {
						t.Errorf("the run counts %+v, the models billed %+v", got, leadBilled.Add(jobBilled))
					}
					if want := cheap.Cost(leadBilled) + spent; math.Abs(out.Cost-want) > 1e-12 {
						t.Errorf("the run cost $%.9f, the models billed $%.9f (the lead $%.9f, the job $%.9f)", out.Cost, want, cheap.Cost(leadBilled), spent)
					}
				})
			}
		})
	}
}
