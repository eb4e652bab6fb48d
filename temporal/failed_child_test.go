package temporal

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// failingFork is a lead that spawns one fork, "part 1", whose first model
// call asks for "look" and whose second fails for good (a bad request);
// the lead then answers. It counts what each agent's model calls bill, by
// task ("" for the lead's), and the runs of "look".
type failingFork struct {
	*script
	mu     sync.Mutex
	billed map[string]provider.Usage
	looked atomic.Int64
	// read is what the lead read of the failed part, the result of its
	// call.
	read string
}

func newFailingFork(id func(n int64, i int) string) *failingFork { return newFailing(id, false) }

// newFailing is newFailingFork whose fork runs, when background, as a
// background job, which the lead then waits for.
func newFailing(id func(n int64, i int) string, background bool) *failingFork {
	return newFailingVia(id, background, SpawnToolName)
}

// newFailingVia is newFailing whose lead delegates "part 1" by calling
// the tool named via (not in the background: a factory's sub-agent tool).
func newFailingVia(id func(n int64, i int) string, background bool, via string) *failingFork {
	f := &failingFork{billed: map[string]provider.Usage{}}
	var n atomic.Int64
	f.script = &script{model: "m-1", fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		task, rs := firstUserOf(req), resultsOf(req)
		if task == `{"task":"part 1"}` {
			task = "part 1" // a factory's agent on Temporal reads the call's arguments
		}
		var msg provider.Message
		switch {
		case task == "part 1" && len(rs) == 0:
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "look", Arguments: json.RawMessage(`{}`)})
		case task == "part 1":
			return provider.Message{}, &provider.Error{Provider: "m", StatusCode: http.StatusBadRequest, Kind: provider.KindBadRequest, Message: "no such model"}
		case len(rs) == 0 && background:
			task = ""
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1","background":true}`)})
		case len(rs) == 1 && background:
			task = ""
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName,
				Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":60}`)})
		case len(rs) == 0:
			task = ""
			msg = provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: via, Arguments: json.RawMessage(`{"task":"part 1"}`)})
		default:
			task = ""
			msg = provider.AssistantMessage("the part failed")
			f.mu.Lock()
			f.read = rs[len(rs)-1]
			f.mu.Unlock()
		}
		f.mu.Lock()
		f.billed[task] = f.billed[task].Add(fake.Usage(req, msg))
		f.mu.Unlock()
		return msg, nil
	}}
	return f
}

func (f *failingFork) tools(t *testing.T) *tool.Registry {
	t.Helper()
	look := tool.Must(tool.New("look", "Looks.", func(context.Context, struct{}) (string, error) {
		f.looked.Add(1)
		return "seen", nil
	}))
	reg, err := tool.NewRegistry(look)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// runTree serves the agents build makes on an AG-UI handler, runs a turn
// of thread "th" to its end, and returns the stream the client read.
func runTree(t *testing.T, ctx context.Context, build agui.Builder) []event.Event {
	t.Helper()
	return serveTurn(t, ctx, build, nil)
}

// serveTurn serves the agents build makes on an AG-UI handler, posts a
// turn of thread "th", calls during (unless nil) with the handler once
// the stream has begun, and returns the stream the client read.
func serveTurn(t *testing.T, ctx context.Context, build agui.Builder, during func(*agui.Handler)) []event.Event {
	t.Helper()
	h, err := agui.NewPerRequest(build)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"threadId":"th","runId":"r1","messages":[{"id":"m1","role":"user","content":"go"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if during != nil {
		during(h)
	}
	return sseEvents(t, resp.Body)
}

// A fork on Temporal whose model fails for good after it spent tokens
// ends as in process: a SUBAGENT_ERROR with code "provider_error" and what
// its model calls billed, and the run's RUN_FINISHED reports what the
// whole tree billed. With models that name their calls afresh, not at
// all, or from call_0.
func TestFailedForkReportsItsCodeAndUsageOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			// The same tree in process: what its client reads.
			var local *failingFork
			inProcess := runTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
				p := newFailingFork(mode.id)
				local = p
				reg := p.tools(t)
				spawn, err := subagent.NewSpawner(p, reg)
				if err != nil {
					return nil, err
				}
				return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(append(reg.Tools(), spawn)...))
			})

			hub := NewHub()
			p := newFailingFork(mode.id)
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: p.tools(t), Events: hub})
			evs := runTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
				return &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"look"}, Spawn: true}, Events: hub}, nil
			})

			want := []string{"SUBAGENT_ERROR provider_error, usage true", "RUN_FINISHED "}
			if d := cmp.Diff(want, subagentEnds(inProcess)); d != "" {
				t.Fatalf("in process, the client read these ends (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, subagentEnds(evs)); d != "" {
				t.Errorf("on Temporal, the client read these ends (-want +got):\n%s", d)
			}
			// The model that answered the child's first call, as in process.
			if got, want := errorModels(evs), errorModels(inProcess); !slices.Equal(want, []string{"m-1"}) || !slices.Equal(got, want) {
				t.Errorf("SUBAGENT_ERROR names the models %q on Temporal, %q in process; want [m-1] in both", got, want)
			}
			// Its usage per model, as in process.
			if got, want := errorUsageModels(t, evs), errorUsageModels(t, inProcess); len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("SUBAGENT_ERROR's usage is under the models %q on Temporal, %q in process", got, want)
			}
			for _, pr := range eventcheck.Check(evs, eventcheck.Options{}) {
				t.Error(pr)
			}
			if n := p.looked.Load(); n != 1 {
				t.Errorf("look ran %d times, want 1", n)
			}
			// The lead's model reads the failure in a line, as in process,
			// not the server's account of the child workflow (its ids and
			// event ids), which it would pay to read.
			p.mu.Lock()
			read := p.read
			p.mu.Unlock()
			if !strings.Contains(read, "no such model") || strings.Contains(read, "workflow") || len(read) > 200 {
				t.Errorf("the lead read %q (%d bytes) of the failed fork, want its error in a line; in process it read %q", read, len(read), local.read)
			}
			calls, billed := p.total()
			if calls != 4 {
				t.Errorf("%d model calls, want 4: the lead's two and the fork's two, the failed one not retried", calls)
			}
			p.mu.Lock()
			fork := p.billed["part 1"]
			p.mu.Unlock()
			fork.Requests, billed.Requests = 0, 0
			var ended, finished bool
			for _, e := range evs {
				switch e.Type {
				case event.SubagentError:
					ended = true
					if got := usageTokens(t, e.Usage); got != fork || got.IsZero() {
						t.Errorf("the fork's SUBAGENT_ERROR reports %s, its model calls billed %+v", e.Usage, fork)
					}
				case event.RunFinished:
					finished = true
					if got := usageTokens(t, e.Usage); got != billed {
						t.Errorf("RUN_FINISHED reports %s, the model billed %+v", e.Usage, billed)
					}
				}
			}
			if !ended || !finished {
				t.Errorf("the stream has SUBAGENT_ERROR %v and RUN_FINISHED %v, want both", ended, finished)
			}
		})
	}
}

// A background job on Temporal whose model fails for good ends as in
// process: its SUBAGENT_ERROR has the code "provider_error", not "error",
// and the model it ran on. With models that name their calls afresh, not
// at all, or from call_0.
func TestFailedJobReportsItsCodeOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			inProcess := runTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
				p := newFailing(mode.id, true)
				reg := p.tools(t)
				spawn, err := subagent.NewSpawner(p, reg, subagent.WithBackground())
				if err != nil {
					return nil, err
				}
				return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(append(reg.Tools(), spawn, spawn.JobsTool())...))
			})
			hub := NewHub()
			p := newFailing(mode.id, true)
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: p.tools(t), Events: hub})
			evs := runTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
				return &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"look"}, Spawn: true, Background: true}, Events: hub}, nil
			})
			want := []string{"SUBAGENT_ERROR provider_error, usage true", "RUN_FINISHED "}
			if d := cmp.Diff(want, subagentEnds(inProcess)); d != "" {
				t.Fatalf("in process, the client read these ends (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, subagentEnds(evs)); d != "" {
				t.Errorf("on Temporal, the client read these ends (-want +got):\n%s", d)
			}
			// The model that answered the child's first call, as in process.
			if got, want := errorModels(evs), errorModels(inProcess); !slices.Equal(want, []string{"m-1"}) || !slices.Equal(got, want) {
				t.Errorf("SUBAGENT_ERROR names the models %q on Temporal, %q in process; want [m-1] in both", got, want)
			}
			// (A model whose ids restart at call_0 gives the job's call
			// the id of the lead's, and both trees stream them as given.)
			for _, pr := range eventcheck.Check(evs, eventcheck.Options{Background: true}) {
				if !strings.Contains(pr, "is reused") {
					t.Error(pr)
				}
			}
			if n := p.looked.Load(); n != 1 {
				t.Errorf("look ran %d times, want 1", n)
			}
		})
	}
}

// A sub-agent a Runtime factory builds (subagent.FromFactory in process)
// whose model fails for good after it answered once ends on Temporal as
// in process: its SUBAGENT_ERROR names the model that answered its first
// call, and has its code and what it spent. (It named none, and its code
// was "error".) With models that name their calls afresh, not at all, or
// from call_0.
func TestFailedFactoryChildNamesItsModelOnTemporal(t *testing.T) {
	worker := func(p *failingFork, reg *tool.Registry) subagent.Factory {
		return func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("worker"), agent.WithTools(reg.Tools()...))
		}
	}
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			inProcess := runTree(t, context.Background(), func(context.Context, *agui.RunInput) (agent.Agent, error) {
				p := newFailingVia(mode.id, false, "worker")
				st, err := subagent.FromFactory("worker", "Works.", worker(p, p.tools(t)))
				if err != nil {
					return nil, err
				}
				return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(st))
			})
			hub := NewHub()
			p := newFailingVia(mode.id, false, "worker")
			reg := p.tools(t)
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg, Events: hub,
				Factories: map[string]subagent.Factory{"worker": worker(p, reg)}})
			evs := runTree(t, ctx, func(context.Context, *agui.RunInput) (agent.Agent, error) {
				return &Agent{Client: c, TaskQueue: queue, Events: hub,
					Spec: Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}}}, nil
			})
			want := []string{"SUBAGENT_ERROR provider_error, usage true", "RUN_FINISHED "}
			if d := cmp.Diff(want, subagentEnds(inProcess)); d != "" {
				t.Fatalf("in process, the client read these ends (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, subagentEnds(evs)); d != "" {
				t.Errorf("on Temporal, the client read these ends (-want +got):\n%s", d)
			}
			if got, want := errorModels(evs), errorModels(inProcess); !slices.Equal(want, []string{"m-1"}) || !slices.Equal(got, want) {
				t.Errorf("SUBAGENT_ERROR names the models %q on Temporal, %q in process; want [m-1] in both", got, want)
			}
			for _, pr := range eventcheck.Check(evs, eventcheck.Options{}) {
				t.Error(pr)
			}
			if n := p.looked.Load(); n != 1 {
				t.Errorf("look ran %d times, want 1", n)
			}
		})
	}
}

// errorModels returns the model each SUBAGENT_ERROR of evs names.
func errorModels(evs []event.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == event.SubagentError {
			out = append(out, e.Model)
		}
	}
	return out
}

// errorUsageModels is the provider and model of each entry of the usage
// of each SUBAGENT_ERROR in evs, in order.
func errorUsageModels(t *testing.T, evs []event.Event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.Type != event.SubagentError {
			continue
		}
		var us []struct{ Provider, Model string }
		if err := json.Unmarshal(e.Usage, &us); err != nil {
			t.Fatalf("SUBAGENT_ERROR's usage %s: %v", e.Usage, err)
		}
		for _, u := range us {
			out = append(out, u.Provider+"/"+u.Model)
		}
	}
	return out
}
