package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A factory that cannot build its agent ends the lead's run on Temporal
// as in process when its model cannot correct the error (a plain error,
// or no agent), and the lead's model reads the error when it can
// (tool.Correctable): the run fails with the factory's error, its child's
// end published, and the lead's model is not asked again. (On Temporal
// the lead's model read every such error.) With models that name their
// calls afresh, not at all, or from call_0.
func TestFactoryBuildErrorEndsTheLeadOnTemporal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		fails bool
	}{
		{"plain", errors.New("the project database is down"), true},
		{"no agent", nil, true},
		{"correctable", tool.Correctable(errors.New("no project \"x\": name one of a, b")), false},
	} {
		for _, mode := range policyIDModes {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				var n atomic.Int64
				lead := func(calls *atomic.Int64) *script {
					return &script{model: "m-1", fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
						calls.Add(1)
						if len(resultsOf(req)) == 0 {
							return provider.AssistantMessage("", provider.ToolCall{ID: mode.id(n.Add(1), 0), Name: "worker", Arguments: json.RawMessage(`{"task":"count"}`)}), nil
						}
						return provider.AssistantMessage("the worker could not start"), nil
					}}
				}
				factory := func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, tc.err }
				var inCalls atomic.Int64
				inProcess := runTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
					st, err := subagent.FromFactory("worker", "Works.", factory)
					if err != nil {
						return nil, err
					}
					return agent.NewReact(lead(&inCalls), agent.WithName("lead"), agent.WithTools(st))
				})
				var calls atomic.Int64
				hub := NewHub()
				p := lead(&calls)
				ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Events: hub,
					Factories: map[string]subagent.Factory{"worker": factory}})
				evs := runTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
					return &Agent{Client: c, TaskQueue: queue, Events: hub,
						Spec: Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}}}, nil
				})
				want := "RUN_FINISHED"
				wantCalls := int64(2)
				if tc.fails {
					want, wantCalls = "RUN_ERROR", 1
				}
				for _, side := range []struct {
					name  string
					evs   []event.Event
					calls int64
				}{{"in process", inProcess, inCalls.Load()}, {"on Temporal", evs, calls.Load()}} {
					end := runEnd(side.evs)
					if end == nil || string(end.Type) != want {
						t.Errorf("%s the run ended with %+v, want %s", side.name, end, want)
						continue
					}
					if tc.fails && tc.err != nil && !strings.Contains(end.Message, tc.err.Error()) {
						t.Errorf("%s RUN_ERROR says %q, not the factory's error", side.name, end.Message)
					}
					if side.calls != wantCalls {
						t.Errorf("%s the lead's model was asked %d times, want %d", side.name, side.calls, wantCalls)
					}
					if got := subagentEnds(side.evs); len(got) != 2 || !strings.HasPrefix(got[0], "SUBAGENT_ERROR") {
						t.Errorf("%s the child ended %q, want a SUBAGENT_ERROR before the run's end", side.name, got)
					}
				}
				for _, pr := range eventcheck.Check(evs, eventcheck.Options{}) {
					t.Error(pr)
				}
			})
		}
	}
}

// runEnd is the top-level run's end in evs: RUN_FINISHED or RUN_ERROR.
func runEnd(evs []event.Event) *event.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.SubagentRunID == "" && (e.Type == event.RunFinished || e.Type == event.RunError) {
			return &e
		}
	}
	return nil
}
