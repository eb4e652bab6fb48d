package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// usage is a model call that read in tokens.
func usage(in int64) provider.Usage { return provider.Usage{InputTokens: in, Requests: 1} }

// times is n model calls of u each.
func times(n int64, u provider.Usage) provider.Usage {
	return provider.Usage{InputTokens: n * u.InputTokens, OutputTokens: n * u.OutputTokens, Requests: n * u.Requests}
}

// spawn is a call of the spawn tool.
func spawn(args string) provider.ToolCall {
	return provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}
}

// spawns is one model turn calling the spawn tool once per args.
func spawns(args ...string) fake.Reply {
	calls := make([]provider.ToolCall, len(args))
	for i, a := range args {
		calls[i] = spawn(a)
	}
	return fake.Calls(calls...)
}

// lookup is a tool of the parent, which forks inherit.
func lookup() tool.Tool {
	return tool.Func{
		Def: tool.Definition{Name: "lookup", Description: "Looks a fact up.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn:  func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "found"}, nil },
	}
}

// probe is a tool that reports the token limit of the run calling it, and
// records it.
type probe struct {
	mu   sync.Mutex
	seen []string
}

func (p *probe) tool() tool.Tool {
	return tool.Func{
		Def: tool.Definition{Name: "probe", Description: "Reports the tokens left.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			s := "unlimited"
			if n := run.Limit(ctx); n > 0 {
				s = strconv.FormatInt(n, 10)
			}
			p.mu.Lock()
			p.seen = append(p.seen, s)
			p.mu.Unlock()
			return tool.Result{Content: s}, nil
		},
	}
}

func (p *probe) sorted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.seen)
	sort.Strings(out)
	return out
}

// setup returns a registry holding lookup, the extra tools and the spawner
// built with opts (and its jobs tool when background is set).
func setup(t testing.TB, p provider.Provider, background bool, opts []subagent.SpawnOption, extra ...tool.Tool) (*tool.Registry, *subagent.Spawner) {
	t.Helper()
	reg, err := tool.NewRegistry(append([]tool.Tool{lookup()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := subagent.NewSpawner(p, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	if background {
		if err := reg.Register(s.JobsTool()); err != nil {
			t.Fatal(err)
		}
	}
	return reg, s
}

// lead returns the parent agent, named "lead", over reg.
func lead(t testing.TB, p provider.Provider, reg *tool.Registry, opts ...agent.Option) *agent.React {
	t.Helper()
	a, err := agent.NewReact(p, append([]agent.Option{agent.WithName("lead"), agent.WithRegistry(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// toolResults returns the contents of the tool messages of msgs.
func toolResults(msgs []provider.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == provider.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

func names(defs []provider.ToolDef) []string {
	out := []string{}
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

// recorder is an event sink that keeps what it receives.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// of returns the events of the given types, in order, with their time
// stamps, ids and token counts cleared for comparison (TestNestedEvents
// checks the counts).
func (r *recorder) of(types ...event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if slices.Contains(types, e.Type) {
			e.Timestamp, e.SubagentRunID, e.Result, e.Usage = 0, "", nil, nil
			out = append(out, e)
		}
	}
	return out
}

// spy wraps a tool and keeps the errors its calls return.
type spy struct {
	tool.Tool
	mu   sync.Mutex
	errs []error
}

func (s *spy) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	res, err := s.Tool.Call(ctx, c)
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	return res, err
}

// count returns how many kept errors wrap target.
func (s *spy) count(target error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, err := range s.errs {
		if errors.Is(err, target) && tool.IsCorrectable(err) {
			n++
		}
	}
	return n
}

// spied returns a registry holding lookup and the spawner behind a spy.
func spied(t testing.TB, p provider.Provider, opts []subagent.SpawnOption, extra ...tool.Tool) (*tool.Registry, *spy) {
	t.Helper()
	reg, err := tool.NewRegistry(append([]tool.Tool{lookup()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := subagent.NewSpawner(p, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sp := &spy{Tool: s}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	return reg, sp
}

func mustContain(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%q\ndoes not contain %q", got, w)
		}
	}
}

const numberSchema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`
