package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
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

// probe is a tool that reports the token budget of the run calling it, and
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
			if n, limited := agent.TokensLeft(ctx); limited {
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
func setup(t testing.TB, p provider.Provider, background bool, opts []subagent.Option, extra ...tool.Tool) (*tool.Registry, *subagent.Spawner) {
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
// stamps and ids cleared for comparison.
func (r *recorder) of(types ...event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if slices.Contains(types, e.Type) {
			e.Timestamp, e.SubagentRunID, e.Result, e.ResultText = 0, "", nil, ""
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
func spied(t testing.TB, p provider.Provider, opts []subagent.Option, extra ...tool.Tool) (*tool.Registry, *spy) {
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

func TestSpawnInvalidArgumentsAreCorrectable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider()
	critic, err := subagent.FromReact("critic", "Reviews a draft for errors.", p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	researcher, err := subagent.FromReact("researcher", "Finds and reads sources.", p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	roster := []subagent.Option{subagent.WithRoster(researcher, critic)}
	tests := []struct {
		name string
		opts []subagent.Option
		args string
		want []string
	}{
		{"missing task", nil, `{"context":"c"}`,
			[]string{"missing property 'task'", "pass task (required), context, output_schema (a JSON Schema object)"}},
		{"blank task", nil, `{"task":"  \n"}`,
			[]string{"task is blank: say what the sub-agent must do"}},
		{"not JSON", nil, `{"task":`,
			[]string{"not valid JSON", "pass task (required)"}},
		{"unknown agent", roster, `{"task":"t","agent":"oracle"}`,
			[]string{"agent (one of: critic, researcher)"}},
		{"agent without a roster", nil, `{"task":"t","agent":"critic"}`,
			[]string{"'agent' not allowed", "pass task (required), context, output_schema (a JSON Schema object)"}},
		{"background not enabled", nil, `{"task":"t","background":true}`,
			[]string{"'background' not allowed"}},
		{"output_schema not an object", nil, `{"task":"t","output_schema":"a number"}`,
			[]string{"/output_schema", "output_schema (a JSON Schema object)"}},
		{"output_schema does not compile", nil, `{"task":"t","output_schema":{"type":"nope"}}`,
			[]string{"output_schema: tool: JSON Schema does not compile", `send a JSON Schema object such as {"type":"object"`}},
		{"output_schema refers to a file", nil, `{"task":"t","output_schema":{"$ref":"file:///etc/hostname"}}`,
			[]string{"output_schema:", "file:///etc/hostname is outside the schema"}},
		{"output_schema with an absurd number", nil, `{"task":"t","output_schema":{"multipleOf":1e-99999999}}`,
			[]string{"number 1e-99999999 is out of range: write numbers of at most 400 characters"}},
		{"output_schema refers to a URL", nil, `{"task":"t","output_schema":{"$ref":"https://example.com/s.json"}}`,
			[]string{"output_schema:", "https://example.com/s.json is outside the schema"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg, _ := setup(t, p, false, tc.opts)
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(tc.args)}})
			if err != nil {
				t.Fatalf("Execute: %v, want the error as a result", err)
			}
			if !res[0].IsError || !errors.Is(res[0].Err, tool.ErrInvalidArguments) {
				t.Errorf("result %+v: want an error result wrapping tool.ErrInvalidArguments", res[0])
			}
			mustContain(t, res[0].Content, tc.want...)
			if n := p.Calls(); n != 0 {
				t.Errorf("the model was called %d times for invalid arguments", n)
			}
		})
	}
}

func TestNewSpawnerRejectsBadConfiguration(t *testing.T) {
	p := fake.NewProvider()
	member := func(name string, params string) *subagent.SubAgentTool {
		var raw json.RawMessage
		if params != "" {
			raw = json.RawMessage(params)
		}
		m, err := subagent.FromReact(name, "d", p, nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name string
		p    provider.Provider
		opts []subagent.Option
		want string
	}{
		{"nil provider", nil, nil, "nil provider"},
		{"nil roster member", p, []subagent.Option{subagent.WithRoster(nil)}, "nil member"},
		{"two members of one name", p, []subagent.Option{subagent.WithRoster(member("a", ""), member("a", ""))}, `two roster members are named "a"`},
		{"member that needs more than a task", p,
			[]subagent.Option{subagent.WithRoster(member("a", `{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`))},
			`roster member "a" does not accept a call with only a task`},
		{"max spawns 0", p, []subagent.Option{subagent.WithMaxSpawns(0)}, "max spawns 0"},
		{"concurrency 0", p, []subagent.Option{subagent.WithSpawnConcurrency(0)}, "spawn concurrency 0"},
		{"child budget 0", p, []subagent.Option{subagent.WithChildTokenBudget(0)}, "child token budget 0"},
		{"bad fork name", p, []subagent.Option{subagent.WithForkName("my fork")}, `name "my fork" is not allowed`},
		{"nil fork tools", p, []subagent.Option{subagent.WithForkTools(nil)}, "WithForkTools(nil)"},
		{"nil policy", p, []subagent.Option{subagent.WithSpawnPolicy(nil)}, "WithSpawnPolicy(nil)"},
		{"bad default schema", p, []subagent.Option{subagent.WithOutputSchema(json.RawMessage(`{"type":1}`))}, "output schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subagent.NewSpawner(tc.p, nil, tc.opts...)
			if err == nil {
				t.Fatalf("NewSpawner succeeded, want an error containing %q", tc.want)
			}
			mustContain(t, err.Error(), tc.want)
		})
	}
}

func TestSpawnDefinition(t *testing.T) {
	p := fake.NewProvider()
	researcher, _ := subagent.FromReact("researcher", "Finds and reads sources.", p, nil, nil)
	critic, _ := subagent.FromReact("critic", "Reviews a draft for errors.", p, nil, nil)
	tests := []struct {
		name       string
		opts       []subagent.Option
		wantProps  []string
		wantEnum   []string
		wantIn     []string
		wantNotIn  []string
		background bool
	}{
		{
			name:      "forks only",
			wantProps: []string{"context", "output_schema", "task"},
			wantIn: []string{
				"Handle simple work directly",
				"it cannot see this conversation",
				"a partial or failed sub-agent is not success",
				"At most 8 sub-agents per run.",
				"Each sub-agent is a fork of you, with your tools.",
			},
			wantNotIn: []string{"Named sub-agents", subagent.JobsToolName},
		},
		{
			name:      "roster",
			opts:      []subagent.Option{subagent.WithRoster(researcher, critic), subagent.WithMaxSpawns(3)},
			wantProps: []string{"agent", "context", "output_schema", "task"},
			wantEnum:  []string{"researcher", "critic"},
			wantIn: []string{
				"At most 3 sub-agents per run.",
				"pick with `agent` only when its purpose covers the task",
				"- researcher: Finds and reads sources.\n- critic: Reviews a draft for errors.\n",
			},
			wantNotIn: []string{subagent.JobsToolName},
		},
		{
			name:      "background",
			opts:      []subagent.Option{subagent.WithBackground()},
			wantProps: []string{"background", "context", "output_schema", "task"},
			wantIn:    []string{"A job id is not a result: collect each job with subagent_jobs (wait), or cancel it, before you answer"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := subagent.NewSpawner(p, nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			def := s.Definition()
			if def.Name != subagent.SpawnToolName {
				t.Errorf("name %q", def.Name)
			}
			mustContain(t, def.Description, tc.wantIn...)
			for _, w := range tc.wantNotIn {
				if strings.Contains(def.Description, w) {
					t.Errorf("description mentions %q:\n%s", w, def.Description)
				}
			}
			var params struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
				Required []string `json:"required"`
			}
			if err := json.Unmarshal(def.Parameters, &params); err != nil {
				t.Fatal(err)
			}
			var props []string
			for k := range params.Properties {
				props = append(props, k)
			}
			sort.Strings(props)
			if diff := cmp.Diff(tc.wantProps, props); diff != "" {
				t.Errorf("properties (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnum, params.Properties["agent"].Enum); diff != "" {
				t.Errorf("agent enum (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"task"}, params.Required); diff != "" {
				t.Errorf("required (-want +got):\n%s", diff)
			}
		})
	}
}

type denyKey struct{}

// TestSpawnNotOfferedAtCapOrWhenDenied checks that the spawn tool and its
// jobs tool disappear at the depth cap or under a denying policy, and that
// a direct call there fails with the sentinel.
func TestSpawnNotOfferedAtCapOrWhenDenied(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	policy := subagent.WithSpawnPolicy(func(ctx context.Context) bool { return ctx.Value(denyKey{}) == nil })
	tests := []struct {
		name    string
		opts    []subagent.Option
		depth   int
		deny    bool
		want    []string
		wantErr error
	}{
		{"top level", nil, 0, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"at the default cap", nil, 1, false, []string{"lookup"}, subagent.ErrMaxDepth},
		{"below a cap of 2", []subagent.Option{subagent.WithMaxDepth(2)}, 1, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"at a cap of 2", []subagent.Option{subagent.WithMaxDepth(2)}, 2, false, []string{"lookup"}, subagent.ErrMaxDepth},
		{"allowed by the policy", []subagent.Option{policy}, 0, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"denied by the policy", []subagent.Option{policy}, 0, true, []string{"lookup"}, subagent.ErrDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("done").For(subagent.DefaultForkName))
			reg, s := setup(t, p, true, append(tc.opts, subagent.WithBackground()))
			ctx := agent.WithDepth(t.Context(), tc.depth)
			if tc.deny {
				ctx = context.WithValue(ctx, denyKey{}, true)
			}
			if diff := cmp.Diff(tc.want, names(reg.Definitions(ctx))); diff != "" {
				t.Errorf("tools offered (-want +got):\n%s", diff)
			}
			if got, want := s.Available(ctx), tc.wantErr == nil; got != want {
				t.Errorf("Available = %v, want %v", got, want)
			}
			_, err := s.Call(ctx, tool.Call{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t"}`)})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("direct call: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil && !tool.IsCorrectable(err) {
				t.Errorf("direct call: %v is not correctable", err)
			}
		})
	}
}

// TestSpawnForkIsTheParentsKind checks a fork's request: the parent's
// provider and tools, a fresh history holding the task and its context, a
// system prompt of its own; and the usage of the tree.
func TestSpawnForkIsTheParentsKind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(
		fake.Text("Earlier answer.").For("lead").WithUsage(usage(1)),
		spawns(`{"task":"find X","context":"X is a letter"}`).For("lead").WithUsage(usage(10)),
		fake.Text("X is 42").For(subagent.DefaultForkName).WithUsage(usage(100)),
		fake.Text("The answer is 42.").For("lead").WithUsage(usage(1000)),
	)
	reg, _ := setup(t, p, false, nil)
	a := lead(t, p, reg, agent.WithSystemPrompt("You lead."))
	if _, err := a.Run(t.Context(), agent.Input{Text: "earlier question"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(t.Context(), agent.Input{Text: "What is X?"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"X is 42"}, toolResults(out.Messages)); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(times(2, usage(505)), out.Usage); diff != "" {
		t.Errorf("parent usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(usage(100), out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(subagent.DefaultForkName)
	if len(reqs) != 1 {
		t.Fatalf("the fork made %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	want := provider.Request{
		System:   subagent.DefaultForkPrompt,
		Messages: []provider.Message{provider.UserMessage("find X\n\nContext:\nX is a letter")},
		Tools:    []provider.ToolDef{lookup().Definition()},
		CacheKey: subagent.DefaultForkName,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fork request (-want +got):\n%s", diff)
	}
}

// TestSpawnForkScopeOnlyNarrows checks which tools a fork is offered: the
// parent's, less the spawn tools at the depth cap, less what WithForkTools
// drops, and never more, whatever WithReactOptions says.
func TestSpawnForkScopeOnlyNarrows(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	shell := tool.Func{Def: tool.Definition{Name: "shell", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "rm -rf"}, nil }}
	notLookup := subagent.WithForkTools(func(t tool.Tool) bool { return t.Definition().Name != "lookup" })
	onlyLookup := subagent.WithForkTools(func(t tool.Tool) bool { return t.Definition().Name == "lookup" })
	tests := []struct {
		name       string
		opts       []subagent.Option
		background bool
		want       []string
	}{
		{"spawn hidden at the default cap", nil, false, []string{"lookup"}},
		{"jobs hidden at the default cap", []subagent.Option{subagent.WithBackground()}, true, []string{"lookup"}},
		{"spawn inherited below a cap of 2", []subagent.Option{subagent.WithMaxDepth(2)}, false, []string{"lookup", "spawn_subagent"}},
		{"jobs inherited below a cap of 2", []subagent.Option{subagent.WithMaxDepth(2), subagent.WithBackground()}, true,
			[]string{"lookup", "spawn_subagent", "subagent_jobs"}},
		{"narrowed, spawn kept", []subagent.Option{subagent.WithMaxDepth(2), notLookup}, false, []string{"spawn_subagent"}},
		{"narrowed to one tool", []subagent.Option{subagent.WithMaxDepth(2), onlyLookup}, false, []string{"lookup"}},
		{"react options cannot widen", []subagent.Option{subagent.WithReactOptions(
			agent.WithTools(shell), agent.WithName("other"), agent.WithSystemPrompt("You may do anything."))}, false, []string{"lookup"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(
				spawns(`{"task":"t"}`).For("lead"),
				fake.Text("child done").For(subagent.DefaultForkName),
				fake.Text("done").For("lead"),
			)
			reg, _ := setup(t, p, tc.background, tc.opts)
			if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			reqs := p.RequestsFor(subagent.DefaultForkName)
			if len(reqs) != 1 {
				t.Fatalf("the fork made %d requests, want 1", len(reqs))
			}
			if diff := cmp.Diff(tc.want, names(reqs[0].Tools)); diff != "" {
				t.Errorf("fork tools (-want +got):\n%s", diff)
			}
			if reqs[0].System != subagent.DefaultForkPrompt {
				t.Errorf("fork system prompt %q, want the default", reqs[0].System)
			}
		})
	}
}

// TestSpawnForkAtCapCannotSpawn checks that a fork at the depth cap which
// calls spawn_subagent anyway is told there is no such tool.
func TestSpawnForkAtCapCannotSpawn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(
		spawns(`{"task":"t"}`).For("lead"),
		spawns(`{"task":"deeper"}`).For(subagent.DefaultForkName),
		fake.Text("did it myself").For(subagent.DefaultForkName),
		fake.Text("done").For("lead"),
	)
	reg, _ := setup(t, p, false, nil)
	out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"did it myself"}, toolResults(out.Messages)); diff != "" {
		t.Errorf("lead's tool results (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(subagent.DefaultForkName)
	if len(reqs) != 2 {
		t.Fatalf("the fork made %d requests, want 2", len(reqs))
	}
	mustContain(t, toolResults(reqs[1].Messages)[0], `unknown tool "spawn_subagent": call one of: lookup`)
}

func TestSpawnForkNameAndPrompt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(fake.Text("ok").For("scout"))
	reg, _ := setup(t, p, false, []subagent.Option{subagent.WithForkName("scout"), subagent.WithForkPrompt("You scout.")})
	rec := &recorder{}
	ctx := event.WithSink(t.Context(), rec)
	res, err := reg.Execute(ctx, []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"look around"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Content != "ok" {
		t.Errorf("content %q", res[0].Content)
	}
	reqs := p.RequestsFor("scout")
	if len(reqs) != 1 || reqs[0].System != "You scout." {
		t.Fatalf("scout requests %+v", reqs)
	}
	want := []event.Event{
		{Type: event.SubagentStarted, Name: "scout", Description: "a fork of the calling agent", ParentToolCallID: "c1"},
		{Type: event.SubagentFinished},
	}
	if diff := cmp.Diff(want, rec.of(event.SubagentStarted, event.SubagentFinished, event.SubagentError)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestSpawnRoster checks that the agent argument calls the named member,
// with the task and context as its task, and that the validation a member
// gets is the call's output_schema, else its own, else the spawner's.
func TestSpawnRoster(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var (
		mu  sync.Mutex
		got []string
	)
	factoryCritic := func(opts ...subagent.Option) *subagent.SubAgentTool {
		m, err := subagent.FromFactory("critic", "Reviews a draft for errors.", nil,
			func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
				return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
					mu.Lock()
					got = append(got, in.Text)
					mu.Unlock()
					return agent.Output{Answer: `{"status":"success","summary":"two typos"}`, Usage: usage(7)}, nil
				}), nil
			}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name      string
		member    func(p provider.Provider) *subagent.SubAgentTool
		opts      []subagent.Option
		args      string
		replies   []fake.Reply
		want      string
		wantValue any
		wantInput []string // what the member's model or agent was given
	}{
		{
			name: "react member",
			member: func(p provider.Provider) *subagent.SubAgentTool {
				m, _ := subagent.FromReact("researcher", "Finds sources.", p, nil, nil)
				return m
			},
			args:      `{"task":"find sources on X","context":"X is a letter","agent":"researcher"}`,
			replies:   []fake.Reply{fake.Text("three sources").For("researcher")},
			want:      "three sources",
			wantInput: []string{"find sources on X\n\nContext:\nX is a letter"},
		},
		{
			name:      "factory member gets the task as its argument",
			member:    func(provider.Provider) *subagent.SubAgentTool { return factoryCritic() },
			args:      `{"task":"review","agent":"critic"}`,
			want:      `{"status":"success","summary":"two typos"}`,
			wantInput: []string{`{"task":"review"}`},
		},
		{
			name:      "member keeps its own validation over the spawner's default",
			member:    func(provider.Provider) *subagent.SubAgentTool { return factoryCritic(subagent.WithResult()) },
			opts:      []subagent.Option{subagent.WithOutputSchema(json.RawMessage(numberSchema))},
			args:      `{"task":"review","agent":"critic"}`,
			want:      `{"status":"success","summary":"two typos"}`,
			wantValue: subagent.Result{Status: subagent.StatusSuccess, Summary: "two typos"},
			// Its own shape, told on the first question.
			wantInput: []string{`{"task":"review"}` + "\n\n" + subagent.ResultSystemPrompt()},
		},
		{
			name: "call's output_schema wins, and the member is told it",
			member: func(p provider.Provider) *subagent.SubAgentTool {
				m, _ := subagent.FromReact("researcher", "Finds sources.", p, nil, nil, subagent.WithResult())
				return m
			},
			args:      `{"task":"count","agent":"researcher","output_schema":` + numberSchema + `}`,
			replies:   []fake.Reply{fake.Text(`{"n":3}`).For("researcher")},
			want:      `{"n":3}`,
			wantValue: map[string]any{"n": float64(3)},
			wantInput: []string{"count\n\n" + subagent.SchemaPrompt(json.RawMessage(numberSchema))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			p := fake.NewProvider(tc.replies...)
			reg, _ := setup(t, p, false, append(tc.opts, subagent.WithRoster(tc.member(p))))
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(tc.args)}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].IsError || res[0].Content != tc.want {
				t.Errorf("result %+v, want content %q", res[0], tc.want)
			}
			if diff := cmp.Diff(tc.wantValue, res[0].Value); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			inputs := got
			for _, r := range p.Requests() {
				inputs = append(inputs, r.Messages[0].Content)
			}
			if diff := cmp.Diff(tc.wantInput, inputs); diff != "" {
				t.Errorf("member input (-want +got):\n%s", diff)
			}
			if n := len(p.RequestsFor(subagent.DefaultForkName)); n != 0 {
				t.Errorf("a fork ran (%d requests), want only the member", n)
			}
		})
	}
}

// TestSpawnOutputSchema checks the validation of an answer against the
// call's output_schema: the fork is told the shape, gets one corrective
// retry, and a second failure comes back with the [validation failed: …]
// ending.
func TestSpawnOutputSchema(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	tests := []struct {
		name        string
		opts        []subagent.Option
		schema      string // the call's output_schema; "" for none
		replies     []fake.Reply
		want        string
		wantValue   any
		wantUsage   provider.Usage
		wantPrompt  string
		wantRetried bool
	}{
		{
			name:       "valid at once",
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text(`{"n":1}`).For(fork).WithUsage(usage(10))},
			want:       `{"n":1}`,
			wantValue:  map[string]any{"n": float64(1)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:       "found in a fenced block",
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text("Here:\n```json\n{\"n\": 2}\n```").For(fork).WithUsage(usage(10))},
			want:       `{"n": 2}`,
			wantValue:  map[string]any{"n": float64(2)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:   "fixed on the retry",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text("about five").For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":5}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":5}`,
			wantValue:   map[string]any{"n": float64(5)},
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:   "wrong twice",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text(`{"n":"five"}`).For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":"still five"}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":"still five"}` + "\n\n[validation failed: at /n: got string, want integer]",
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:   "an absurd number is a violation, not a crash",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text(`{"n":1e-99999999}`).For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":1e999999999}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":1e999999999}` + "\n\n[validation failed: number 1e999999999 is out of range: write numbers of at most 400 characters with an exponent from -400 to 400]",
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:       "the spawner's default applies without output_schema",
			opts:       []subagent.Option{subagent.WithResult()},
			replies:    []fake.Reply{fake.Text(`{"status":"partial","summary":"half"}`).For(fork).WithUsage(usage(10))},
			want:       `{"status":"partial","summary":"half"}`,
			wantValue:  subagent.Result{Status: subagent.StatusPartial, Summary: "half"},
			wantUsage:  usage(10),
			wantPrompt: subagent.ResultSystemPrompt(),
		},
		{
			name:       "output_schema wins over the spawner's default",
			opts:       []subagent.Option{subagent.WithResult()},
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text(`{"n":1}`).For(fork).WithUsage(usage(10))},
			want:       `{"n":1}`,
			wantValue:  map[string]any{"n": float64(1)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:      "no validation",
			replies:   []fake.Reply{fake.Text("just prose").For(fork).WithUsage(usage(10))},
			want:      "just prose",
			wantUsage: usage(10),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(tc.replies...)
			reg, _ := setup(t, p, false, tc.opts)
			args := `{"task":"count"}`
			if tc.schema != "" {
				args = `{"task":"count","output_schema":` + tc.schema + `}`
			}
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].IsError || res[0].Content != tc.want {
				t.Errorf("result %+v\nwant content %q", res[0], tc.want)
			}
			if diff := cmp.Diff(tc.wantValue, res[0].Value); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUsage, res[0].Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			reqs := p.RequestsFor(fork)
			wantSystem := subagent.DefaultForkPrompt
			if tc.wantPrompt != "" {
				wantSystem += "\n\n" + tc.wantPrompt
			}
			if reqs[0].System != wantSystem {
				t.Errorf("fork system prompt:\n%s\nwant:\n%s", reqs[0].System, wantSystem)
			}
			if want := map[bool]int{false: 1, true: 2}[tc.wantRetried]; len(reqs) != want {
				t.Fatalf("the fork made %d requests, want %d", len(reqs), want)
			}
			if tc.wantRetried {
				retry := reqs[1].Messages
				if len(retry) != 1 {
					t.Fatalf("the retry is not a fresh run: %d messages", len(retry))
				}
				mustContain(t, retry[0].Content, "count\n\nYour answer was rejected: ", "Your rejected answer was:\n")
			}
		})
	}
}

func TestSpawnOutputCap(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	long := strings.Repeat("é", 500) // 1000 bytes
	member := func(p provider.Provider) *subagent.SubAgentTool {
		m, _ := subagent.FromReact("writer", "Writes at length.", p, nil, nil, subagent.WithMaxOutputBytes(4096))
		return m
	}
	for _, args := range []string{`{"task":"write"}`, `{"task":"write","agent":"writer"}`} {
		t.Run(args, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(long).For(subagent.DefaultForkName), fake.Text(long).For("writer"))
			reg, _ := setup(t, p, false, []subagent.Option{subagent.WithMaxOutputBytes(200), subagent.WithRoster(member(p))})
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
			if err != nil {
				t.Fatal(err)
			}
			c := res[0].Content
			if len(c) > 200 || !utf8.ValidString(c) {
				t.Errorf("content of %d bytes (valid UTF-8: %v), want at most 200", len(c), utf8.ValidString(c))
			}
			mustContain(t, c, "[output truncated: 1000 bytes, the first ")
		})
	}
}

// TestSpawnMaxSpawnsPerRun checks the spawn limit: counted per parent run
// (a second run starts again; two runs sharing the spawner count apart),
// with invalid calls not counted.
func TestSpawnMaxSpawnsPerRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const limitMsg = "subagent: spawn limit reached: this run has started its 2 sub-agents"

	t.Run("sequential turns, then a second run", func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"a"}`).For("lead"),
			spawns(`{"task":""}`).For("lead"), // invalid: not counted
			spawns(`{"task":"b"}`).For("lead"),
			spawns(`{"task":"c"}`).For("lead"),
			fake.Text("first run done").For("lead"),
			spawns(`{"task":"d"}`).For("lead"),
			fake.Text("second run done").For("lead"),
			fake.Text("A").For(subagent.DefaultForkName),
			fake.Text("B").For(subagent.DefaultForkName),
			fake.Text("D").For(subagent.DefaultForkName),
		)
		reg, sp := spied(t, p, []subagent.Option{subagent.WithMaxSpawns(2)})
		a := lead(t, p, reg)
		out, err := a.Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 4 || got[0] != "A" || got[2] != "B" || !strings.Contains(got[3], limitMsg) {
			t.Errorf("first run's tool results: %q", got)
		}
		if n := sp.count(subagent.ErrMaxSpawns); n != 1 {
			t.Errorf("%d correctable ErrMaxSpawns, want 1", n)
		}
		out, err = a.Run(t.Context(), agent.Input{Text: "again"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"D"}, toolResults(out.Messages)); diff != "" {
			t.Errorf("second run's tool results (-want +got):\n%s", diff)
		}
	})

	t.Run("default limit in one turn", func(t *testing.T) {
		args := make([]string, subagent.DefaultMaxSpawns+1)
		for i := range args {
			args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
		}
		p := fake.NewProvider(spawns(args...).For("lead"), fake.Text("ok").For(subagent.DefaultForkName), fake.Text("done").For("lead")).Loop()
		reg, _ := setup(t, p, false, nil)
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		var ok, limited int
		for _, c := range toolResults(out.Messages) {
			switch {
			case c == "ok":
				ok++
			case strings.Contains(c, "subagent: spawn limit reached: this run has started its 8 sub-agents"):
				limited++
			default:
				t.Errorf("unexpected result %q", c)
			}
		}
		if ok != 8 || limited != 1 {
			t.Errorf("%d spawns ran and %d were refused, want 8 and 1", ok, limited)
		}
	})

	t.Run("two runs sharing the spawner", func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"a"}`, `{"task":"b"}`).For("lead1"),
			fake.Text("done").For("lead1"),
			spawns(`{"task":"a"}`, `{"task":"b"}`).For("lead2"),
			fake.Text("done").For("lead2"),
			fake.Text("ok").For(subagent.DefaultForkName),
		).Loop()
		reg, _ := setup(t, p, false, []subagent.Option{subagent.WithMaxSpawns(2)})
		var wg sync.WaitGroup
		for _, name := range []string{"lead1", "lead2"} {
			a := lead(t, p, reg, agent.WithName(name))
			wg.Go(func() {
				out, err := a.Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Error(err)
					return
				}
				if diff := cmp.Diff([]string{"ok", "ok"}, toolResults(out.Messages)); diff != "" {
					t.Errorf("%s's tool results (-want +got):\n%s", name, diff)
				}
			})
		}
		wg.Wait()
	})
}

// TestSpawnChildBudget checks the token limit a fork gets: what the parent
// has left, or WithChildTokenBudget if less, observed by a tool the fork
// calls.
func TestSpawnChildBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name        string
		parentLimit int64
		parentSpent int64 // by the parent's first model call
		childBudget int64 // 0 for no WithChildTokenBudget
		want        string
	}{
		{"what the parent has left", 1000, 300, 0, "700"},
		{"the per-child budget when less", 1000, 300, 200, "200"},
		{"what is left when less than the budget", 1000, 800, 500, "200"},
		{"the per-child budget of an unlimited parent", 0, 300, 250, "250"},
		{"unlimited", 0, 300, 0, "unlimited"},
		{"nothing left", 1000, 1000, 0, "error"},
		{"nothing left, with a budget", 1000, 1000, 100, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr := &probe{}
			p := fake.NewProvider(
				spawns(`{"task":"t"}`).For("lead").WithUsage(usage(tc.parentSpent)),
				fake.Call("probe", `{}`).For(subagent.DefaultForkName).WithUsage(provider.Usage{Requests: 1}),
				fake.Text("ok").For(subagent.DefaultForkName).WithUsage(provider.Usage{Requests: 1}),
				fake.Text("done").For("lead").WithUsage(provider.Usage{Requests: 1}),
			)
			var opts []subagent.Option
			if tc.childBudget > 0 {
				opts = append(opts, subagent.WithChildTokenBudget(tc.childBudget))
			}
			reg, sp := spied(t, p, opts, pr.tool())
			out, err := lead(t, p, reg, agent.WithTokenLimit(tc.parentLimit)).Run(t.Context(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "error" {
				got := toolResults(out.Messages)
				if len(got) != 1 || !strings.Contains(got[0], "subagent: no token budget left") || sp.count(subagent.ErrNoBudget) != 1 {
					t.Errorf("tool results %q, want ErrNoBudget", got)
				}
				return
			}
			if diff := cmp.Diff([]string{tc.want}, pr.sorted()); diff != "" {
				t.Errorf("the fork's tokens left (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSpawnBudgetNote checks that a fork near the end of its budget is told
// so in a note after the conversation, leaving the system prompt (the start
// of the cached prefix) as it was, and can hand back a partial result.
func TestSpawnBudgetNote(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		spawns(`{"task":"survey the field"}`).For("lead").WithUsage(usage(300)),
		fake.Call("lookup", `{}`).For(fork).WithUsage(usage(560)),
		fake.Text(`{"status":"partial","summary":"surveyed half"}`).For(fork).WithUsage(usage(50)),
		fake.Text("done").For("lead").WithUsage(usage(1)),
	)
	reg, _ := setup(t, p, false, []subagent.Option{subagent.WithResult()})
	out, err := lead(t, p, reg, agent.WithTokenLimit(1000)).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`{"status":"partial","summary":"surveyed half"}`}, toolResults(out.Messages)); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(fork)
	for _, m := range reqs[0].Messages {
		if strings.Contains(m.Content, "Budget note") {
			t.Errorf("first request already has a budget note:\n%s", m.Content)
		}
	}
	if reqs[1].System != reqs[0].System {
		t.Errorf("the budget note changed the system prompt:\n%s\nwas\n%s", reqs[1].System, reqs[0].System)
	}
	mustContain(t, reqs[1].System, subagent.ResultSystemPrompt())
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != provider.RoleUser {
		t.Errorf("the note travels as a %s message, want user", last.Role)
	}
	mustContain(t, last.Content,
		`Budget note: you have used 560 of your 700 tokens. Finish now: answer with what you have`, `status "partial"`)
	if diff := cmp.Diff(reqs[0].Messages, reqs[1].Messages[:len(reqs[0].Messages)]); diff != "" {
		t.Errorf("the second request does not repeat the first's conversation (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(provider.Usage{InputTokens: 610, Requests: 2}, out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
}

// TestSpawnChildOverBudget checks that a fork that passes its limit fails
// with agent.ErrUsageLimit, and that what it spent still comes back.
func TestSpawnChildOverBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(fake.Text("a long answer").For(subagent.DefaultForkName).WithUsage(usage(150)))
	reg, _ := setup(t, p, false, []subagent.Option{subagent.WithChildTokenBudget(100)})
	res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].IsError || !errors.Is(res[0].Err, subagent.ErrChildFailed) || !errors.Is(res[0].Err, agent.ErrUsageLimit) {
		t.Errorf("result %+v, want a child failure wrapping agent.ErrUsageLimit", res[0])
	}
	if diff := cmp.Diff(usage(150), res[0].Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// TestSpawnBudgetIsReserved checks that forks running side by side are not
// promised the same tokens: each child's budget is set aside from what the
// parent has left while it runs.
func TestSpawnBudgetIsReserved(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name        string
		budget      int64
		concurrency int
		childSpent  int64
		want        []string // the children's limits, sorted
		wantNoBudge int      // spawns refused for want of tokens
	}{
		// 900 left: 400 and 400 are set aside, the third gets the rest.
		{"side by side", 400, 3, 0, []string{"100", "400", "400"}, 0},
		{"side by side, nothing left for the third", 450, 3, 0, []string{"450", "450"}, 1},
		// One at a time: each takes its budget from what the ones
		// before it left (each spends 300).
		{"one at a time", 400, 1, 300, []string{"300", "400", "400"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fork := subagent.DefaultForkName
				pr := &probe{}
				p := fake.NewProvider(
					spawns(`{"task":"a"}`, `{"task":"b"}`, `{"task":"c"}`).For("lead").WithUsage(usage(100)),
					fake.Text("done").For("lead").WithUsage(provider.Usage{Requests: 1}),
				)
				// A child calls probe, then answers; every call takes a
				// second, so every child takes its budget before the
				// first answers.
				child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					if len(req.Messages) == 1 {
						return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: "probe", Arguments: json.RawMessage(`{}`)}),
							Usage: provider.Usage{Requests: 1}}, nil
					}
					return provider.Response{Message: provider.AssistantMessage("ok"), Usage: usage(tc.childSpent)}, nil
				}).For(fork).After(time.Second)
				for range 2 * (3 - tc.wantNoBudge) {
					p.Add(child)
				}
				reg, _ := setup(t, p, false, []subagent.Option{subagent.WithChildTokenBudget(tc.budget), subagent.WithSpawnConcurrency(tc.concurrency)}, pr.tool())
				out, err := lead(t, p, reg, agent.WithTokenLimit(1000)).Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, pr.sorted()); diff != "" {
					t.Errorf("the children's limits (-want +got):\n%s", diff)
				}
				refused := 0
				for _, c := range toolResults(out.Messages) {
					if strings.Contains(c, "subagent: no token budget left") {
						refused++
					}
				}
				if refused != tc.wantNoBudge {
					t.Errorf("%d spawns refused for want of tokens, want %d", refused, tc.wantNoBudge)
				}
			})
		})
	}
}

// TestSpawnUsageFoldsOnce checks exact usage sums: every child's usage,
// failed, retried and cancelled ones included, reaches the parent once.
func TestSpawnUsageFoldsOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	// Each child's task names what it does; a Respond reply routes on it.
	byTask := func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		n := len(req.Messages)
		text := func(s string, u provider.Usage) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
		}
		switch {
		case strings.HasPrefix(task, "ok"):
			return text(`{"n":1}`, usage(10))
		case strings.HasPrefix(task, "retry") && !strings.Contains(task, "rejected"):
			return text("no JSON here", usage(100))
		case strings.HasPrefix(task, "retry"):
			return text(`{"n":2}`, usage(1000))
		case strings.HasPrefix(task, "fail") && n == 1:
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)}), Usage: usage(10000)}, nil
		case strings.HasPrefix(task, "fail"):
			return provider.Response{}, errors.New("model crashed")
		}
		return provider.Response{}, fmt.Errorf("unexpected task %q", task)
	}
	p := fake.NewProvider(
		spawns(
			`{"task":"ok","output_schema":`+numberSchema+`}`,
			`{"task":"retry","output_schema":`+numberSchema+`}`,
			`{"task":"fail"}`,
			`{"task":""}`,
		).For("lead").WithUsage(usage(1)),
		fake.Text("done").For("lead").WithUsage(usage(2)),
	)
	for range 5 {
		p.Add(fake.Respond(byTask).For(fork))
	}
	reg, _ := setup(t, p, false, nil)
	out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	got := toolResults(out.Messages)
	if len(got) != 4 || got[0] != `{"n":1}` || got[1] != `{"n":2}` ||
		!strings.Contains(got[2], "model crashed") || !strings.Contains(got[3], "at /task: minLength") {
		t.Errorf("tool results %q", got)
	}
	if diff := cmp.Diff(provider.Usage{InputTokens: 1 + 2, Requests: 2}, out.Usage); diff != "" {
		t.Errorf("parent usage (-want +got):\n%s", diff)
	}
	want := provider.Usage{InputTokens: 10 + 100 + 1000 + 10000, Requests: 4}
	if diff := cmp.Diff(want, out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
	if p.Remaining() != 0 {
		t.Errorf("%d replies unused", p.Remaining())
	}
}

// TestSpawnFanoutBound checks that the spawns of one turn run side by side,
// as many at once as the lower of the spawn bound and the registry's.
func TestSpawnFanoutBound(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		n, concurrency, parallelism int
		wantMax                     int
		wantWall                    time.Duration
	}{
		{6, 2, 16, 2, 30 * time.Millisecond},
		{6, 8, 16, 6, 10 * time.Millisecond},
		{6, 8, 3, 3, 20 * time.Millisecond},
		{4, 1, 16, 1, 40 * time.Millisecond},
		{256, 32, 256, 32, 80 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d children, %d slots, registry %d", tc.n, tc.concurrency, tc.parallelism), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				running, most := 0, 0
				child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					mu.Lock()
					running++
					most = max(most, running)
					mu.Unlock()
					defer func() { mu.Lock(); running--; mu.Unlock() }()
					select {
					case <-time.After(10 * time.Millisecond):
					case <-ctx.Done():
						return provider.Response{}, ctx.Err()
					}
					return provider.Response{Message: provider.AssistantMessage("ok"), Usage: usage(1)}, nil
				}).For(subagent.DefaultForkName)
				args := make([]string, tc.n)
				for i := range args {
					args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
				}
				p := fake.NewProvider(spawns(args...).For("lead"), fake.Text("done").For("lead"), child).Loop()
				reg, _ := setup(t, p, false, []subagent.Option{subagent.WithSpawnConcurrency(tc.concurrency), subagent.WithMaxSpawns(tc.n)})
				if err := reg.SetParallelism(tc.parallelism); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				if wall := time.Since(start); wall != tc.wantWall {
					t.Errorf("wall time %v, want %v", wall, tc.wantWall)
				}
				if most != tc.wantMax {
					t.Errorf("at most %d children ran at once, want %d", most, tc.wantMax)
				}
				if diff := cmp.Diff(times(int64(tc.n), usage(1)), out.ChildUsage); diff != "" {
					t.Errorf("child usage (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestSpawnDefaultsRunAWideFanOutInOneWave checks that, with the default
// bounds, a turn spawning tool.DefaultParallelism children runs them all at
// once: the spawn bound does not cut the registry's fan-out into waves. A
// wider turn still runs at most that many at once.
func TestSpawnDefaultsRunAWideFanOutInOneWave(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		n, wantMax int
		wantWall   time.Duration
	}{
		{tool.DefaultParallelism, tool.DefaultParallelism, 10 * time.Millisecond},
		{tool.DefaultParallelism + 1, tool.DefaultParallelism, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%d children", tc.n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				running, most := 0, 0
				child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					mu.Lock()
					running++
					most = max(most, running)
					mu.Unlock()
					defer func() { mu.Lock(); running--; mu.Unlock() }()
					select {
					case <-time.After(10 * time.Millisecond):
					case <-ctx.Done():
						return provider.Response{}, ctx.Err()
					}
					return provider.Response{Message: provider.AssistantMessage("ok"), Usage: usage(1)}, nil
				}).For(subagent.DefaultForkName)
				args := make([]string, tc.n)
				for i := range args {
					args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
				}
				p := fake.NewProvider(spawns(args...).For("lead"), fake.Text("done").For("lead"), child).Loop()
				reg, _ := setup(t, p, false, []subagent.Option{subagent.WithMaxSpawns(tc.n)})
				start := time.Now()
				if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
					t.Fatal(err)
				}
				if wall := time.Since(start); wall != tc.wantWall {
					t.Errorf("wall time %v, want %v", wall, tc.wantWall)
				}
				if most != tc.wantMax {
					t.Errorf("at most %d children ran at once, want %d", most, tc.wantMax)
				}
			})
		})
	}
}

// TestSpawnFanoutOrderAndIsolation checks that results come back in call
// order whatever order the children finish in, and that one child's
// failure leaves its siblings running.
func TestSpawnFanoutOrderAndIsolation(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		// Child i answers after (4-i)×10ms, so they finish in reverse; t2 fails.
		child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			task := req.Messages[0].Content
			i, _ := strconv.Atoi(strings.TrimPrefix(task, "t"))
			if i == 2 {
				return provider.Response{}, errors.New("model crashed")
			}
			select {
			case <-time.After(time.Duration(4-i) * 10 * time.Millisecond):
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
			return provider.Response{Message: provider.AssistantMessage("answer to " + task), Usage: usage(1)}, nil
		}).For(subagent.DefaultForkName)
		p := fake.NewProvider(
			spawns(`{"task":"t0"}`, `{"task":"t1"}`, `{"task":"t2"}`, `{"task":"t3"}`).For("lead"),
			fake.Text("done").For("lead"),
			child, child, child, child,
		)
		reg, _ := setup(t, p, false, nil)
		rec := &recorder{}
		ctx := event.WithSink(t.Context(), rec)
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		want := []string{"answer to t0", "answer to t1", "", "answer to t3"}
		if len(got) != 4 {
			t.Fatalf("tool results %q", got)
		}
		mustContain(t, got[2], `subagent: child failed: "subagent"`, "model crashed")
		got[2] = ""
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tool results (-want +got):\n%s", diff)
		}
		var calls []string
		for _, m := range out.Messages {
			for _, c := range m.ToolCalls {
				calls = append(calls, c.ID)
			}
		}
		var parents []string
		for _, e := range rec.of(event.SubagentStarted) {
			parents = append(parents, e.ParentToolCallID)
		}
		sort.Strings(calls)
		sort.Strings(parents)
		if diff := cmp.Diff(calls, parents); diff != "" {
			t.Errorf("SUBAGENT_STARTED parent tool calls (-want +got):\n%s", diff)
		}
		if n, e := len(rec.of(event.SubagentFinished)), len(rec.of(event.SubagentError)); n != 3 || e != 1 {
			t.Errorf("%d SUBAGENT_FINISHED and %d SUBAGENT_ERROR, want 3 and 1", n, e)
		}
	})
}

// TestSpawnCancelParent checks that cancelling the parent cancels every
// child in flight, that the spawn fails rather than answering with what a
// child had, and that the children's usage still reaches the parent.
func TestSpawnCancelParent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			spawns(`{"task":"a"}`, `{"task":"b"}`, `{"task":"c"}`).For("lead").WithUsage(usage(1)),
			fake.Text("never").For("lead"),
		)
		for range 3 {
			p.Add(fake.Call("lookup", `{}`).For(fork).WithUsage(usage(10)))
		}
		for range 3 {
			p.Add(fake.Text("too late").For(fork).After(time.Hour))
		}
		reg, _ := setup(t, p, false, nil)
		rec := &recorder{}
		ctx, cancel := context.WithCancel(event.WithSink(t.Context(), rec))
		defer cancel()
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
		if wall := time.Since(start); wall != time.Minute {
			t.Errorf("the run ended after %v, want 1m0s (the cancellation)", wall)
		}
		if out.Answer != "" {
			t.Errorf("answer %q from a cancelled run", out.Answer)
		}
		if diff := cmp.Diff(usage(1), out.Usage); diff != "" {
			t.Errorf("parent usage (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(times(3, usage(10)), out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
		for _, e := range rec.of(event.SubagentError) {
			if e.Code != "cancelled" {
				t.Errorf("SUBAGENT_ERROR code %q, want cancelled", e.Code)
			}
		}
		if n, f := len(rec.of(event.SubagentError)), len(rec.of(event.SubagentFinished)); n != 3 || f != 0 {
			t.Errorf("%d SUBAGENT_ERROR and %d SUBAGENT_FINISHED, want 3 and 0", n, f)
		}
	})
}

// TestSpawnChildIgnoringCancellation checks that a member that answers
// after its context ended does not get to answer.
func TestSpawnChildIgnoringCancellation(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		stubborn, err := subagent.FromFactory("stubborn", "Never stops.", nil, func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
				<-ctx.Done()
				return agent.Output{Answer: "half done", Usage: usage(5)}, nil
			}), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reg, _ := setup(t, fake.NewProvider(), false, []subagent.Option{subagent.WithRoster(stubborn)})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		res, err := reg.Execute(ctx, []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t","agent":"stubborn"}`)}})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Execute: %v, want context.Canceled", err)
		}
		if res[0].Content == "half done" {
			t.Error("the cancelled child's partial answer came back as its result")
		}
		if diff := cmp.Diff(usage(5), res[0].Usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
	})
}

// TestSpawnDeeperChildrenDoNotWaitForTheirParentsSlot checks that a child
// that spawns in turn (below a depth cap of 2) does not wait for a slot
// its parent holds, whatever the concurrency bound.
func TestSpawnDeeperChildrenDoNotWaitForTheirParentsSlot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			spawns(`{"task":"a"}`).For("lead"),
			spawns(`{"task":"b"}`).For(fork),
			fake.Text("grandchild done").For(fork),
			fake.Text("child done").For(fork),
			fake.Text("done").For("lead"),
		)
		reg, _ := setup(t, p, false, []subagent.Option{subagent.WithMaxDepth(2), subagent.WithSpawnConcurrency(1)})
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"child done"}, toolResults(out.Messages)); diff != "" {
			t.Errorf("tool results (-want +got):\n%s", diff)
		}
	})
}

// FuzzSpawnArguments checks that whatever arguments a model sends, the
// spawn tool answers with a result the model can read: a child's answer,
// or a correctable error, never a Go error or a panic.
func FuzzSpawnArguments(f *testing.F) {
	for _, seed := range []string{
		`{"task":"t"}`,
		`{"task":"t","context":"c","agent":"critic"}`,
		`{"task":"t","output_schema":` + numberSchema + `}`,
		`{"task":"t","output_schema":{"$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}}`,
		`{"task":"t","output_schema":{"pattern":"("}}`,
		`{"task":"t","output_schema":{"multipleOf":1e-9999}}`,
		`{"task":"t","output_schema":{"maximum":1.5e308}}`,
		`{"task":"t","background":true}`,
		`{"task":1}`, `[]`, `null`, ``, `{"task":"\u0000"}`,
	} {
		f.Add(seed)
	}
	p := fake.NewProvider(fake.Text(`{"n":1}`)).Loop().DontRecord()
	critic, err := subagent.FromReact("critic", "Reviews.", p, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	reg, _ := setup(f, p, false, []subagent.Option{subagent.WithRoster(critic)})
	f.Fuzz(func(t *testing.T, args string) {
		res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
		if err != nil {
			t.Fatalf("arguments %q: Go error %v", args, err)
		}
		if res[0].IsError && !tool.IsCorrectable(res[0].Err) {
			t.Errorf("arguments %q: error result %q is not correctable", args, res[0].Content)
		}
		if res[0].Content == "" {
			t.Errorf("arguments %q: empty result", args)
		}
	})
}
