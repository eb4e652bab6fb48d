package agentfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// model answers a request by a function of it, as a real model does.
func model(fn func(req provider.Request) provider.Message) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: fn(req), Usage: provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}}, nil
	})
}

// results counts the tool results a request carries.
func results(req provider.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

func toolNames(req provider.Request) []string {
	var out []string
	for _, d := range req.Tools {
		out = append(out, d.Name)
	}
	return out
}

// lead calls the sub-agent name with task, then answers with its result.
func lead(name, task string) provider.Provider {
	return model(func(req provider.Request) provider.Message {
		if r := results(req); len(r) > 0 {
			return provider.AssistantMessage("lead: " + r[0])
		}
		args, _ := json.Marshal(map[string]string{"task": task})
		return provider.AssistantMessage("", provider.ToolCall{ID: "call_1", Name: name, Arguments: args})
	})
}

// A loaded sub-agent runs as its file says: its prompt, its model, its
// tools, its limit of steps, and its runs announce the definition's hash.
func TestLoadedSubagentRunsAsItsFileSays(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "runner.md", "---\nname: runner\ndescription: Runs tests.\ntools: run_tests, read_*\ndisallowedTools: read_dir\nmodel: haiku\nmaxTurns: 3\n---\nYou run tests.\n")
	var seen []provider.Request
	var mu sync.Mutex
	child := model(func(req provider.Request) provider.Message {
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		if len(results(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: "run_tests", Arguments: json.RawMessage(`{}`)})
		}
		return provider.AssistantMessage("all green")
	})
	reg := mustRegistry(t, namedTool("run_tests"), namedTool("read_file"), namedTool("read_dir"), namedTool("write_file"))
	l, err := agentfile.NewLoader(agentfile.WithProvider("anthropic", child, "claude-haiku-4-5"), agentfile.WithModelAlias("haiku", "claude-haiku-4-5"), agentfile.WithTools(reg))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var events []event.Event
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	top, err := agent.NewReact(lead("runner", "run the tests"), agent.WithTools(r.Tools()...))
	if err != nil {
		t.Fatal(err)
	}
	out, err := top.Run(ctx, agent.Input{Text: "check"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: all green" {
		t.Fatalf("answer %q", out.Answer)
	}
	if len(seen) != 2 {
		t.Fatalf("%d child requests, want 2", len(seen))
	}
	req := seen[0]
	if !strings.HasPrefix(req.System, "You run tests.") || req.Model != "claude-haiku-4-5" {
		t.Errorf("system %q, model %q", req.System, req.Model)
	}
	if got := toolNames(req); !slices.Equal(got, []string{"run_tests", "read_file"}) {
		t.Errorf("tools %v, want run_tests and read_file", got)
	}
	def := r.Definitions()[0]
	var hashes []string
	for _, e := range events {
		if e.Type == event.Custom && e.Name == agentfile.DefinitionEvent {
			var v struct{ Name, File, Hash string }
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatal(err)
			}
			if e.SubagentRunID == "" {
				t.Error("the definition event is not in the sub-agent's scope")
			}
			hashes = append(hashes, v.Hash)
		}
	}
	if len(hashes) != 1 || hashes[0] != def.Hash || !strings.HasPrefix(def.Hash, "sha256:") {
		t.Fatalf("definition events %v, want one with %s", hashes, def.Hash)
	}
}

func mustRegistry(t testing.TB, tools ...tool.Tool) *tool.Registry {
	t.Helper()
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// maxTurns bounds the sub-agent's steps: a child that keeps calling
// tools fails, and the parent's model reads why.
func TestMaxTurnsStopsTheChild(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "loop.md", "---\nname: loop\ndescription: Loops.\ntools: [grep]\nmaxTurns: 2\n---\nYou loop.\n")
	var calls atomic.Int64
	child := model(func(req provider.Request) provider.Message {
		calls.Add(1)
		return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: "grep", Arguments: json.RawMessage(`{}`)})
	})
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", child), agentfile.WithTools(mustRegistry(t, namedTool("grep"))))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := r.Member("loop")
	res, err := m.Call(context.Background(), tool.Call{ID: "x", Name: "loop", Arguments: json.RawMessage(`{"task":"go"}`)})
	if err == nil || !errors.Is(err, agent.ErrMaxSteps) {
		t.Fatalf("got %+v, %v; want max steps", res, err)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d model calls, want 2", calls.Load())
	}
}

// Trusted hooks run around the tools their matcher names: PreToolUse
// can refuse a call (the model reads why), PostToolUse sees results.
func TestHooksRunAroundMatchedTools(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "h.md", `---
name: h
description: Hooked.
tools: [grep, write_file]
hooks:
  PreToolUse:
    - matcher: write_file
      hooks: [{type: command, command: no-writes}]
  PostToolUse:
    - matcher: "*"
      hooks: [{type: command, command: audit}]
---
You edit.
`)
	var ran atomic.Int64
	var audited []string
	var mu sync.Mutex
	write := func(name string) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: name, Description: name, Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
				ran.Add(1)
				return tool.Result{Content: name + " ran"}, nil
			}}
	}
	child := model(func(req provider.Request) provider.Message {
		r := results(req)
		if len(r) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "a", Name: "write_file", Arguments: json.RawMessage(`{}`)},
				provider.ToolCall{ID: "b", Name: "grep", Arguments: json.RawMessage(`{}`)})
		}
		return provider.AssistantMessage(strings.Join(r, " | "))
	})
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", child), agentfile.WithTools(mustRegistry(t, write("grep"), write("write_file"))),
		agentfile.WithHook("no-writes", func(ctx context.Context, in agentfile.HookInput) error {
			return errors.New("this agent may not write")
		}),
		agentfile.WithHook("audit", func(ctx context.Context, in agentfile.HookInput) error {
			mu.Lock()
			audited = append(audited, in.Agent+":"+in.Call.Name+"="+in.Result.Content)
			mu.Unlock()
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := r.Member("h")
	res, err := m.Call(context.Background(), tool.Call{ID: "x", Name: "h", Arguments: json.RawMessage(`{"task":"edit"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 || !strings.Contains(res.Content, "a hook refused the tool call write_file: this agent may not write") || !strings.Contains(res.Content, "grep ran") {
		t.Fatalf("%d tools ran; the child read %q", ran.Load(), res.Content)
	}
	if !slices.Equal(audited, []string{"h:grep=grep ran"}) {
		t.Fatalf("audited %v", audited)
	}
}

// A result contract in the file is enforced by the validator, with its
// one corrective retry, and a Go type registered by name reaches the Go
// caller as that type.
func TestOutputContractsAreEnforced(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "est.yaml", "name: est\ndescription: Estimates.\nprompt: You estimate.\noutput: {type: Estimate}\n")
	write(t, dir, "plan.md", "---\nname: plan\ndescription: Plans.\noutput: {file: schemas/plan.json}\n---\nYou plan.\n")
	write(t, dir, "schemas/plan.json", `{"type":"object","properties":{"steps":{"type":"array","items":{"type":"string"}}},"required":["steps"],"additionalProperties":false}`)
	var tries atomic.Int64
	child := model(func(req provider.Request) provider.Message {
		n := tries.Add(1)
		if n%2 == 1 {
			return provider.AssistantMessage(`{"wrong": true}`)
		}
		if strings.HasPrefix(req.System, "You estimate.") {
			return provider.AssistantMessage(`{"task":"login page","hours":6}`)
		}
		return provider.AssistantMessage(`{"steps":["one","two"]}`)
	})
	var values []any
	var mu sync.Mutex
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", child), agentfile.ResultType[Estimate]("Estimate"),
		agentfile.WithSubagentOptions(subagent.WithOutcome(func(ctx context.Context, o subagent.Outcome) {
			mu.Lock()
			values = append(values, o.Value)
			mu.Unlock()
		})))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"est", "plan"} {
		m, _ := r.Member(name)
		if _, err := m.Call(context.Background(), tool.Call{ID: "x", Name: name, Arguments: json.RawMessage(`{"task":"go"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if tries.Load() != 4 {
		t.Fatalf("%d tries, want a retry each", tries.Load())
	}
	if len(values) != 2 {
		t.Fatalf("values %v", values)
	}
	if e, ok := values[0].(Estimate); !ok || e.Hours != 6 {
		t.Fatalf("est's value %#v, want an Estimate", values[0])
	}
}

// Agent(name) in tools gives a sub-agent the roster member to delegate
// to, allowed at the depth it runs at.
func TestAgentInToolsDelegatesToAMember(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "boss.md", "---\nname: boss\ndescription: Delegates.\ntools: Agent(worker)\n---\nYou are the boss.\n")
	write(t, dir, "worker.md", "---\nname: worker\ndescription: Works.\ntools: []\n---\nYou work.\n")
	var bossTools []string
	p := model(func(req provider.Request) provider.Message {
		switch {
		case strings.HasPrefix(req.System, "You are the boss."):
			bossTools = toolNames(req)
			if r := results(req); len(r) > 0 {
				return provider.AssistantMessage("boss: " + r[0])
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: "worker", Arguments: json.RawMessage(`{"task":"work"}`)})
		case strings.HasPrefix(req.System, "You work."):
			return provider.AssistantMessage("worked")
		}
		if r := results(req); len(r) > 0 {
			return provider.AssistantMessage("top: " + r[0])
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "b", Name: "boss", Arguments: json.RawMessage(`{"task":"lead"}`)})
	})
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", p))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	boss, _ := r.Member("boss")
	top, err := agent.NewReact(p, agent.WithTools(boss))
	if err != nil {
		t.Fatal(err)
	}
	out, err := top.Run(context.Background(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "top: boss: worked" || !slices.Equal(bossTools, []string{"worker"}) {
		t.Fatalf("answer %q, boss's tools %v", out.Answer, bossTools)
	}
}

// Reloading a directory while a run is in flight makes a new roster; the
// run finishes with the definition it started with, and the next run
// uses the new one.
func TestReloadNeverChangesARunInFlight(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.md", "---\nname: a\ndescription: A.\n---\nversion one\n")
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	child := model(func(req provider.Request) provider.Message {
		if req.System == "version one" {
			once.Do(func() { close(started); <-release })
		}
		return provider.AssistantMessage("answered by " + req.System)
	})
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", child))
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[agentfile.Roster]
	load := func() {
		r, err := l.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		current.Store(r)
	}
	call := func(r *agentfile.Roster) (string, error) {
		m, _ := r.Member("a")
		res, err := m.Call(context.Background(), tool.Call{ID: "x", Name: "a", Arguments: json.RawMessage(`{"task":"go"}`)})
		return res.Content, err
	}
	load()
	done := make(chan string)
	go func() {
		got, err := call(current.Load())
		if err != nil {
			got = err.Error()
		}
		done <- got
	}()
	<-started
	write(t, dir, "a.md", "---\nname: a\ndescription: A.\n---\nversion two\n")
	load()
	close(release)
	if got := <-done; got != "answered by version one" {
		t.Fatalf("the run in flight: %q", got)
	}
	if got, err := call(current.Load()); err != nil || got != "answered by version two" {
		t.Fatalf("the next run: %q, %v", got, err)
	}
}

// The roster serves spawn_subagent: its members are the spawn tool's
// roster, and background: true lets the model start them as jobs.
func TestRosterServesTheSpawnTool(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.md", "---\nname: a\ndescription: A.\nbackground: true\n---\nYou are a.\n")
	write(t, dir, "b.yaml", "name: b\ndescription: B.\nprompt: You are b.\n")
	p := model(func(req provider.Request) provider.Message { return provider.AssistantMessage("hi from " + req.System) })
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", p))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, nil, r.SpawnOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	params := string(sp.Definition().Parameters)
	if !strings.Contains(params, `"enum":["a","b"]`) || !strings.Contains(params, `"background"`) {
		t.Fatalf("spawn parameters %s", params)
	}
	res, err := sp.Call(context.Background(), tool.Call{ID: "s", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"hello","agent":"b"}`)})
	if err != nil || !strings.Contains(res.Content, "hi from You are b.") {
		t.Fatalf("%+v, %v", res, err)
	}
}
