package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// holdingTree is a lead that spawns two forks in one step, each of which
// calls "hold" (which runs until it is cancelled); it counts what each
// agent's model calls bill, by task ("" for the lead's).
type holdingTree struct {
	*script
	mu     sync.Mutex
	billed map[string]provider.Usage
}

func newHoldingTree(id func(n int64, i int) string) *holdingTree {
	h := &holdingTree{billed: map[string]provider.Usage{}}
	var n atomic.Int64
	h.script = &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		task, rs := firstUserOf(req), resultsOf(req)
		var msg provider.Message
		switch {
		case strings.HasPrefix(task, "part ") && len(rs) == 0:
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)})
		case strings.HasPrefix(task, "part "):
			msg = provider.AssistantMessage("done: " + task)
		case len(rs) == 0:
			task = ""
			msg = provider.AssistantMessage("",
				provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)},
				provider.ToolCall{ID: id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 2"}`)})
		default:
			task = ""
			msg = provider.AssistantMessage("all done")
		}
		h.mu.Lock()
		h.billed[task] = h.billed[task].Add(fake.Usage(req, msg))
		h.mu.Unlock()
		return msg, nil
	}}
	return h
}

// holdTool runs until its context ends, counting its runs on started.
func holdTool(t *testing.T, started chan<- struct{}) *tool.Registry {
	t.Helper()
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	reg, err := tool.NewRegistry(hold)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// stopTree serves the agents build makes on an AG-UI handler, runs a turn
// of thread "th", stops it through the handler once both forks hold, and
// returns the stream the client read.
func stopTree(t *testing.T, ctx context.Context, build agui.Builder, started <-chan struct{}) []event.Event {
	t.Helper()
	return serveTurn(t, ctx, build, func(h *agui.Handler) {
		for range 2 {
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the forks never held")
			}
		}
		if !h.Stop("", "th") {
			t.Fatal("Stop found no run on the thread")
		}
	})
}

// subagentEnds is what a client reads of the ends of the sub-agents it
// saw start, in the order they started: each one's end event, its code,
// and whether it carries usage; and the run's end with its outcome.
func subagentEnds(evs []event.Event) []string {
	var order []string
	ends := map[string]string{}
	var out []string
	for _, e := range evs {
		switch e.Type {
		case event.SubagentStarted:
			order = append(order, e.SubagentRunID)
			ends[e.SubagentRunID] = "never ends"
		case event.SubagentFinished, event.SubagentError:
			ends[e.SubagentRunID] = fmt.Sprintf("%s %s, usage %v", e.Type, e.Code, len(e.Usage) > 0)
		case event.RunFinished, event.RunError:
			for _, id := range order {
				out = append(out, ends[id])
			}
			return append(out, fmt.Sprintf("%s %s", e.Type, e.Outcome))
		}
	}
	for _, id := range order {
		out = append(out, ends[id])
	}
	return out
}

// usageTokens reads the tokens of an event's usage.
func usageTokens(t *testing.T, raw json.RawMessage) provider.Usage {
	t.Helper()
	var in []struct {
		Input  int64 `json:"inputTokens"`
		Output int64 `json:"outputTokens"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			t.Fatalf("usage %s: %v", raw, err)
		}
	}
	var u provider.Usage
	for _, x := range in {
		u = u.Add(provider.Usage{InputTokens: x.Input, OutputTokens: x.Output})
	}
	return u
}

// A tree on Temporal stopped through the AG-UI handler while its two
// forks work ends every sub-agent its client saw start, as in process: a
// SUBAGENT_ERROR with code "cancelled" and what the fork's model calls
// billed, before the run's RUN_FINISHED with outcome cancelled and what
// the whole tree billed. Each fork's tool ran once and no model was
// called after the stop. (The forks never ended: the run's workflow
// ended without waiting for them, and Agent ended the stream at once.)
// With models that name their calls afresh, not at all, or from call_0.
func TestStoppedTreeEndsItsSubagentsOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			// The same tree in process: what its client reads.
			started := make(chan struct{}, 2)
			inProcess := stopTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
				p, reg := newHoldingTree(mode.id), holdTool(t, started)
				spawn, err := subagent.NewSpawner(p, reg)
				if err != nil {
					return nil, err
				}
				return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(append(reg.Tools(), spawn)...))
			}, started)

			hub := NewHub()
			p := newHoldingTree(mode.id)
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: holdTool(t, started), Events: hub})
			evs := stopTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
				return &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true}, Events: hub}, nil
			}, started)

			want := []string{"SUBAGENT_ERROR cancelled, usage true", "SUBAGENT_ERROR cancelled, usage true", `RUN_FINISHED {"type":"cancelled"}`}
			if d := cmp.Diff(want, subagentEnds(inProcess)); d != "" {
				t.Fatalf("in process, the client read these ends (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, subagentEnds(evs)); d != "" {
				t.Errorf("on Temporal, the client read these ends (-want +got):\n%s", d)
			}
			for _, pr := range eventcheck.Check(evs, eventcheck.Options{}) {
				t.Error(pr)
			}
			calls, billed := p.total()
			if calls != 3 {
				t.Errorf("%d model calls, want 3: the lead's first and each fork's first, none after the stop", calls)
			}
			if n := len(started); n != 0 {
				t.Errorf("%d more runs of hold, want each fork's one", n)
			}
			var forks provider.Usage
			for _, e := range evs {
				switch e.Type {
				case event.SubagentError:
					forks = forks.Add(usageTokens(t, e.Usage))
				case event.RunFinished:
					all := billed
					if all.Requests = 0; usageTokens(t, e.Usage) != all {
						t.Errorf("RUN_FINISHED reports %s, the model billed %+v", e.Usage, billed)
					}
				}
			}
			p.mu.Lock()
			want1 := p.billed["part 1"].Add(p.billed["part 2"])
			p.mu.Unlock()
			if want1.Requests = 0; forks != want1 || forks.IsZero() {
				t.Errorf("the forks' ends report %+v, their model calls billed %+v", forks, want1)
			}
			if i := slices.IndexFunc(evs, func(e event.Event) bool { return e.Type == event.RunFinished }); i != len(evs)-1 {
				t.Errorf("RUN_FINISHED at %d of %d events, want it last", i, len(evs))
			}
		})
	}
}
