package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// factoryLead is a lead that calls the sub-agent "worker" once with
// {"task":"part 1"}, its call named by id, and then answers.
func factoryLead(id func(n int64, i int) string, args string) *script {
	var n atomic.Int64
	return &script{model: "m-1", fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "worker", Arguments: json.RawMessage(args)}), nil
		}
		return provider.AssistantMessage("done"), nil
	}}
}

// factoryTree runs a turn of factoryLead over the sub-agent factory
// builds, in process (subagent.FromFactory) and on Temporal (a Runtime
// factory), and returns the events the client read of each.
func factoryTree(t *testing.T, id func(n int64, i int) string, args string, factory subagent.Factory) (inProcess, onTemporal []event.Event) {
	t.Helper()
	inProcess = runTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
		st, err := subagent.FromFactory("worker", "Works.", factory)
		if err != nil {
			return nil, err
		}
		return agent.NewReact(factoryLead(id, args), agent.WithName("lead"), agent.WithTools(st))
	})
	hub := NewHub()
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": factoryLead(id, args)}, Events: hub,
		Factories: map[string]subagent.Factory{"worker": factory}})
	onTemporal = runTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
		return &Agent{Client: c, TaskQueue: queue, Events: hub,
			Spec: Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}}}, nil
	})
	return inProcess, onTemporal
}

// The agent a Runtime factory builds is handed its call's task, as
// subagent.FromFactory hands it in process, where on Temporal it was
// handed the call's arguments whole ({"task":"part 1"}). With models that
// name their calls afresh, not at all, or from call_0.
func TestFactoryAgentIsHandedItsTaskOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var mu sync.Mutex
			var handed []string
			factory := func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.Func(func(_ context.Context, in agent.Input) (agent.Output, error) {
					mu.Lock()
					handed = append(handed, in.Text)
					mu.Unlock()
					return agent.Output{Answer: "did " + in.Text}, nil
				}), nil
			}
			inProcess, evs := factoryTree(t, mode.id, `{"task":"part 1"}`, factory)
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"part 1", "part 1"}; !slices.Equal(handed, want) {
				t.Errorf("the factory's agents were handed %q, in process then on Temporal; want %q", handed, want)
			}
			if d := cmp.Diff(subagentEnds(inProcess), subagentEnds(evs)); d != "" {
				t.Errorf("the sub-agent ends on Temporal differ from those in process (-in process +Temporal):\n%s", d)
			}
			if got, want := toolResults(evs), toolResults(inProcess); !slices.Equal(got, want) {
				t.Errorf("the lead read %q on Temporal, %q in process", got, want)
			}
		})
	}
}

// A call of a factory's sub-agent whose arguments hold no task, or spell
// its key in another case, is refused on Temporal as in process, before
// the factory builds anything, where on Temporal the agent was handed the
// arguments. With models that name their calls afresh, not at all, or
// from call_0.
func TestFactoryCallWithoutATaskIsRefusedOnTemporal(t *testing.T) {
	for _, args := range []string{`{"job":"part 1"}`, `{"task":"  "}`, `{"Task":"part 1"}`, `"part 1"`} {
		for _, mode := range policyIDModes {
			t.Run(args+"/"+mode.name, func(t *testing.T) {
				var built atomic.Int64
				factory := func(context.Context, json.RawMessage) (agent.Agent, error) {
					built.Add(1)
					return agent.Func(func(_ context.Context, in agent.Input) (agent.Output, error) {
						return agent.Output{Answer: "did " + in.Text}, nil
					}), nil
				}
				inProcess, evs := factoryTree(t, mode.id, args, factory)
				if n := built.Load(); n != 0 {
					t.Errorf("the factory built %d agents, want 0", n)
				}
				in, got := toolResults(inProcess), toolResults(evs)
				if len(got) != 1 || len(in) != 1 || !strings.Contains(got[0], tool.ErrInvalidArguments.Error()) || !strings.Contains(in[0], tool.ErrInvalidArguments.Error()) {
					t.Errorf("the lead read %q on Temporal, %q in process; want the arguments refused in both", got, in)
				}
			})
		}
	}
}

// A factory that panics, or that fails to build its agent, ends its
// sub-agent on Temporal as in process: its SUBAGENT_ERROR has the code
// and the model (none) it has in process, where on Temporal the panic's
// code was "error". With models that name their calls afresh, not at
// all, or from call_0.
func TestFailingFactoryEndsAsInProcessOnTemporal(t *testing.T) {
	factories := []struct {
		name    string
		factory subagent.Factory
		want    string
	}{
		{"panics", func(context.Context, json.RawMessage) (agent.Agent, error) { panic("no agent today") }, "SUBAGENT_ERROR panic, usage false"},
		{"fails", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, errors.New("no key") }, "SUBAGENT_ERROR error, usage false"},
		{"fails with a provider's error", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return nil, &provider.Error{Provider: "p", StatusCode: 401, Message: "bad key"}
		}, "SUBAGENT_ERROR provider_error, usage false"},
		{"returns no agent", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, nil }, "SUBAGENT_ERROR error, usage false"},
	}
	for _, f := range factories {
		for _, mode := range policyIDModes {
			t.Run(f.name+"/"+mode.name, func(t *testing.T) {
				inProcess, evs := factoryTree(t, mode.id, `{"task":"part 1"}`, f.factory)
				// (A factory's error that is not correctable fails the
				// lead's run too, in process and on Temporal:
				// TestFactoryBuildErrorEndsTheLeadOnTemporal.)
				if got := subagentEnds(inProcess); len(got) == 0 || got[0] != f.want {
					t.Fatalf("in process, the client read the ends %q; want %q first", got, f.want)
				}
				if got := subagentEnds(evs); len(got) == 0 || got[0] != f.want {
					t.Errorf("on Temporal, the client read the ends %q; want %q first", got, f.want)
				}
				if got, want := errorModels(evs), errorModels(inProcess); !slices.Equal(got, want) {
					t.Errorf("SUBAGENT_ERROR names the models %q on Temporal, %q in process", got, want)
				}
			})
		}
	}
}

// toolResults returns the content of each TOOL_CALL_RESULT of evs.
func toolResults(evs []event.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == event.ToolCallResult {
			out = append(out, e.Content)
		}
	}
	return out
}
