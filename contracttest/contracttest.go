// Package contracttest is deputy's contracts written once, as a suite that
// any runtime of agents runs: the in-process agents (InProcess) and the
// workflows of the temporal module run the same cases, so that a tree
// means the same wherever it runs. A runtime builds the Tree a case
// describes, runs it, and reports its Outcome; Run runs every case as a
// subtest, as store/storetest does for store backends.
//
// The models of a case are functions of what they are sent, never
// scripts that count their calls, since a runtime may run siblings in any
// order and replay what it recorded; and every agent of a tree has a
// system prompt of its own, by which its model tells whose request it is.
package contracttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Tree is an agent as a case describes it, with what it delegates to.
type Tree struct {
	// System is the agent's system prompt, by which its model knows the
	// request is its own.
	System string
	// Provider answers the agent's model calls (every agent of a case
	// shares one).
	Provider provider.Provider
	// Tools are plain tools the model may call.
	Tools []tool.Tool
	// SubAgents are fixed children offered as tools.
	SubAgents []SubAgent
	// Spawn offers spawn_subagent; MaxSpawns caps its calls in one run
	// (0: none).
	Spawn     bool
	MaxSpawns int
	// Background, with Spawn, lets the model start forks in the
	// background (spawn_subagent with background=true) and act on them
	// with subagent_jobs.
	Background bool
	// Roster, with Spawn, are named children spawn_subagent starts by
	// its "agent" argument, in the foreground or the background; each
	// member's Tree is its agent. They are not offered as tools.
	Roster []SubAgent
	// TokenLimit ends the run past so many tokens, its children's
	// included (0: none); ToolRetries is how many steps in a row with a
	// failed tool call the run tolerates (0: the default; below 0: none).
	TokenLimit  int64
	ToolRetries int
	// Task is the run's input.
	Task string
}

// SubAgent is a fixed child of a Tree.
type SubAgent struct {
	Name, Description string
	Tree              Tree
	// React lets the model define the child: its system prompt and task
	// come from the call's arguments (system_prompt, task), its provider
	// is the parent's, and Tree is not used.
	React bool
	// OutputSchema, when set, is checked against the child's answer, with
	// one corrective retry.
	OutputSchema json.RawMessage
	// MaxOutputBytes caps what the child hands its parent (0: the
	// default).
	MaxOutputBytes int
	// Factory, on a roster member, asks a runtime that builds a member
	// in more ways than one to build it in Go, as a factory's agent (on
	// Temporal, SubAgent.Factory: an agent run in process, inside one
	// activity, where an Agent member is a child workflow). In process
	// every member is built so.
	Factory bool
}

// Outcome is how a run ended.
type Outcome struct {
	Answer     string
	Usage      provider.Usage // the agent's own model calls
	ChildUsage provider.Usage // its children's
	// Failure names the limit a failed run ended at: "usage_limit",
	// "tool_retries", "max_steps"; "" for another failure or none.
	Failure string
	Err     error
}

// Runtime runs trees.
type Runtime interface {
	// Run builds tree and runs it on tree.Task. When a tool of the tree
	// asks a person (tool.Ask, tool.RequireApproval), the runtime calls
	// answer with the questions the tree waits on, and gives the tree the
	// answers it returns.
	Run(t *testing.T, tree Tree, answer func([]tool.Interrupt) []tool.Answer) Outcome
}

// Run runs every case of the suite on rt.
func Run(t *testing.T, rt Runtime) {
	cases := []struct {
		name string
		run  func(*testing.T, Runtime)
	}{
		{"output cap", outputCap},
		{"one corrective retry", correctiveRetry},
		{"still invalid after the retry", stillInvalid},
		{"depth by absence", depthByAbsence},
		{"a child the model defines", modelDefinedChild},
		{"usage of a failed child", failedChildUsage},
		{"spawn limit", spawnLimit},
		{"token limit", tokenLimit},
		{"failed tool steps", toolRetries},
		{"approval runs its call once", approvalOnce},
		{"a background job steered by a message", backgroundMessage},
		{"a roster member in the background steered by a message", rosterMessage},
		{"a roster member a factory builds, in the background, steered by a message", factoryMemberMessage},
		{"a background job cancelled", backgroundCancel},
		{"a background job asks a person", backgroundAsks},
		{"a job outlives its turn", jobAcrossTurns},
		{"a job a factory's member runs outlives its turn", factoryJobAcrossTurns},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, rt) })
	}
}

// model is a provider whose answer is a function of the request; it
// counts its calls and the usage it hands out, per system prompt.
type model struct {
	fn func(req provider.Request) (provider.Message, error)

	mu    sync.Mutex
	calls map[string]int
	usage provider.Usage
	reqs  map[string][]provider.Request
}

func newModel(fn func(req provider.Request) (provider.Message, error)) *model {
	return &model{fn: fn, calls: map[string]int{}, reqs: map[string][]provider.Request{}}
}

func (m *model) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	msg, err := m.fn(req)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[whose(req)]++
	m.reqs[whose(req)] = append(m.reqs[whose(req)], req)
	if err != nil {
		return provider.Response{}, err
	}
	u := provider.Usage{InputTokens: 10, OutputTokens: int64(1 + len(msg.Content)/100), Requests: 1}
	m.usage = m.usage.Add(u)
	return provider.Response{Message: msg, Usage: u, StopReason: provider.StopEndTurn}, nil
}

func (m *model) callsOf(system string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[system]
}

func (m *model) requestsOf(system string) []provider.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]provider.Request(nil), m.reqs[system]...)
}

func (m *model) total() provider.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usage
}

// whose is the agent a request is from: the first line of its system
// prompt (a runtime may add to it, such as the shape of the answer).
func whose(req provider.Request) string {
	s, _, _ := strings.Cut(req.System, "\n")
	return strings.TrimSpace(s)
}

func lastMessage(req provider.Request) provider.Message {
	return req.Messages[len(req.Messages)-1]
}

func toolResults(req provider.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

func call(id, name, args string) provider.ToolCall {
	return provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func outputCap(t *testing.T, rt Runtime) {
	long := strings.Repeat("é", 3000)
	m := newModel(func(req provider.Request) (provider.Message, error) {
		switch {
		case whose(req) == "writer":
			return provider.AssistantMessage(long), nil
		case lastMessage(req).Role == provider.RoleTool:
			return provider.AssistantMessage("got it"), nil
		}
		return provider.AssistantMessage("", call("c1", "writer", `{"task":"write"}`)), nil
	})
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", SubAgents: []SubAgent{{
		Name: "writer", Description: "Writes.", MaxOutputBytes: 1000, Tree: Tree{System: "writer", Provider: m},
	}}}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	reqs := m.requestsOf("lead")
	if len(reqs) != 2 {
		t.Fatalf("the lead's model was asked %d times, want 2", len(reqs))
	}
	if got, want := toolResults(reqs[1]), []string{runtime.CapOutput(long, 1000)}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("the lead read %d results, the first ending %q; want the child's answer capped as runtime.CapOutput caps it", len(got), tail(got))
	}
}

func tail(s []string) string {
	if len(s) == 0 {
		return ""
	}
	x := s[0]
	if len(x) > 80 {
		x = x[len(x)-80:]
	}
	return x
}

var schemaA = json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`)

// checker is a tree whose child answers {"b":1} and, when good, {"a":1}
// once it is corrected.
func checker(good bool) (*model, Tree) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		switch {
		case whose(req) == "checker" && good && strings.Contains(lastMessage(req).Content, "rejected"):
			return provider.AssistantMessage(`{"a":1}`), nil
		case whose(req) == "checker":
			return provider.AssistantMessage(`{"b":1}`), nil
		case lastMessage(req).Role == provider.RoleTool:
			return provider.AssistantMessage("lead: " + strings.Join(toolResults(req), "")), nil
		}
		return provider.AssistantMessage("", call("c1", "checker", `{"task":"check"}`)), nil
	})
	return m, Tree{System: "lead", Provider: m, Task: "go", SubAgents: []SubAgent{{
		Name: "checker", Description: "Checks.", OutputSchema: schemaA, Tree: Tree{System: "checker", Provider: m},
	}}}
}

func correctiveRetry(t *testing.T, rt Runtime) {
	m, tree := checker(true)
	out := rt.Run(t, tree, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if n := m.callsOf("checker"); n != 2 {
		t.Errorf("the child was asked %d times, want 2: its answer, then one correction", n)
	}
	if !strings.Contains(out.Answer, `"a":1`) || strings.Contains(out.Answer, "validation failed") {
		t.Errorf("the lead answered %q, want the corrected answer", out.Answer)
	}
}

func stillInvalid(t *testing.T, rt Runtime) {
	m, tree := checker(false)
	out := rt.Run(t, tree, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if n := m.callsOf("checker"); n != 2 {
		t.Errorf("the child was asked %d times, want 2: one correction only", n)
	}
	if !strings.Contains(out.Answer, "[validation failed: ") {
		t.Errorf("the lead answered %q, want the child's answer with the note saying what is wrong", out.Answer)
	}
}

func depthByAbsence(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		switch {
		case whose(req) == "middle":
			return provider.AssistantMessage("middle's own answer"), nil
		case lastMessage(req).Role == provider.RoleTool:
			return provider.AssistantMessage("done"), nil
		}
		return provider.AssistantMessage("", call("c1", "middle", `{"task":"go on"}`)), nil
	})
	deep := SubAgent{Name: "deep", Description: "Goes deeper.", Tree: Tree{System: "deep", Provider: m}}
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", SubAgents: []SubAgent{{
		Name: "middle", Description: "Delegates further.", Tree: Tree{System: "middle", Provider: m, SubAgents: []SubAgent{deep}},
	}}}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	for _, req := range m.requestsOf("middle") {
		for _, d := range req.Tools {
			if d.Name == "deep" {
				t.Errorf("the child at the depth cap was offered %q; below the cap a sub-agent is absent, not refused", d.Name)
			}
		}
	}
}

func failedChildUsage(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		switch {
		case whose(req) == "worker" && lastMessage(req).Role == provider.RoleTool:
			return provider.Message{}, &provider.Error{Provider: "contract", Kind: provider.KindBadRequest, Message: "refused"}
		case whose(req) == "worker":
			return provider.AssistantMessage("", call("w1", "noop", `{}`)), nil
		case lastMessage(req).Role == provider.RoleTool:
			return provider.AssistantMessage("lead saw: " + strings.Join(toolResults(req), "")), nil
		}
		return provider.AssistantMessage("", call("c1", "worker", `{"task":"work"}`)), nil
	})
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", SubAgents: []SubAgent{{
		Name: "worker", Description: "Works.", Tree: Tree{System: "worker", Provider: m, Tools: []tool.Tool{noop}},
	}}}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if out.ChildUsage.Requests != 1 {
		t.Errorf("the lead counted %d requests of its failed child, want its one call that succeeded", out.ChildUsage.Requests)
	}
	if got, want := out.Usage.Add(out.ChildUsage), m.total(); got != want {
		t.Errorf("the run reported %v, the model handed out %v", got, want)
	}
}

func spawnLimit(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		last := lastMessage(req)
		switch {
		case last.Role == provider.RoleUser && strings.Contains(last.Content, "part "):
			return provider.AssistantMessage("did " + last.Content[strings.Index(last.Content, "part "):]), nil
		case last.Role == provider.RoleTool:
			return provider.AssistantMessage("lead: " + strings.Join(toolResults(req), " | ")), nil
		}
		return provider.AssistantMessage("",
			call("s1", subagent.SpawnToolName, `{"task":"part 1"}`),
			call("s2", subagent.SpawnToolName, `{"task":"part 2"}`)), nil
	})
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Spawn: true, MaxSpawns: 1}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if strings.Count(out.Answer, "did part") != 1 || !strings.Contains(out.Answer, "spawn limit") {
		t.Errorf("the lead answered %q: want one fork done and the other refused at the spawn limit", out.Answer)
	}
	// The model reads the same refusal on every runtime.
	if want := "this run has started its 1 sub-agents: do the rest directly, or combine tasks"; !strings.Contains(out.Answer, want) {
		t.Errorf("the lead read %q, want the refusal to say %q", out.Answer, want)
	}
}

func tokenLimit(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		if lastMessage(req).Role == provider.RoleTool {
			return provider.AssistantMessage("done"), nil
		}
		return provider.AssistantMessage("", call("c1", "noop", `{}`)), nil
	})
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Tools: []tool.Tool{noop}, TokenLimit: 5}, nil)
	// Five tokens leave no room for a reply: a runtime that reserves each
	// call before it makes it makes none; one that checks after a reply
	// stops at its first.
	if out.Failure != "usage_limit" {
		t.Errorf("a run whose limit has no room for a reply ended %q (%v), want usage_limit", out.Failure, out.Err)
	}
	if out.Usage.Requests > 1 {
		t.Errorf("the run reported %d requests, want at most one", out.Usage.Requests)
	}
}

func toolRetries(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("", call(fmt.Sprintf("c%d", len(req.Messages)), "flaky", `{}`)), nil
	})
	flaky := tool.Must(tool.New("flaky", "Fails.", func(context.Context, struct{}) (string, error) {
		return "", tool.Correctable(fmt.Errorf("down"))
	}))
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Tools: []tool.Tool{flaky}, ToolRetries: 2}, nil)
	if out.Failure != "tool_retries" {
		t.Errorf("the run ended %q (%v), want tool_retries", out.Failure, out.Err)
	}
	if n := m.callsOf("lead"); n != 3 {
		t.Errorf("the model was asked %d times, want 3: three failed steps, the third one too many", n)
	}
}

// idModes are the ways real models name their tool calls: afresh in every
// reply, not at all, or from call_0 again in every reply.
var idModes = []struct {
	name string
	id   func(n int64) string
}{
	{"fresh ids", func(n int64) string { return fmt.Sprintf("call_%d", 1000+n) }},
	{"no ids", func(int64) string { return "" }},
	{"ids restarting at call_0", func(int64) string { return "call_0" }},
}

func approvalOnce(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { approvalOnceWith(t, rt, mode.id) })
	}
}

func approvalOnceWith(t *testing.T, rt Runtime, id func(int64) string) {
	var paid, replies atomic.Int64
	pay := tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
		paid.Add(1)
		return "paid", nil
	})), "moves money", 0)
	m := newModel(func(req provider.Request) (provider.Message, error) {
		if lastMessage(req).Role == provider.RoleTool {
			return provider.AssistantMessage("lead: " + strings.Join(toolResults(req), "")), nil
		}
		return provider.AssistantMessage("", call(id(replies.Add(1)), "pay", `{}`)), nil
	})
	var asked int
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Tools: []tool.Tool{pay}}, func(its []tool.Interrupt) []tool.Answer {
		asked += len(its)
		var as []tool.Answer
		for _, it := range its {
			as = append(as, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
		}
		return as
	})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if asked != 1 || paid.Load() != 1 || out.Answer != "lead: paid" {
		t.Errorf("asked %d, paid %d, answered %q: want one question, one payment, and the answer", asked, paid.Load(), out.Answer)
	}
	if n := m.callsOf("lead"); n != 2 {
		t.Errorf("the model was asked %d times, want 2: the step that asked is not asked again", n)
	}
	checkSpent(t, m, out)
}

func modelDefinedChild(t *testing.T, rt Runtime) {
	m := newModel(func(req provider.Request) (provider.Message, error) {
		switch {
		case whose(req) == "poet":
			return provider.AssistantMessage("a poem on " + lastMessage(req).Content), nil
		case lastMessage(req).Role == provider.RoleTool:
			return provider.AssistantMessage("lead: " + strings.Join(toolResults(req), "")), nil
		}
		return provider.AssistantMessage("", call("c1", "define", `{"system_prompt":"poet\nYou write poems.","task":"the sea"}`)), nil
	})
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", SubAgents: []SubAgent{{Name: "define", Description: "Defines a sub-agent.", React: true}}}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if out.Answer != "lead: a poem on the sea" || m.callsOf("poet") != 1 {
		t.Errorf("the lead answered %q and the defined child was asked %d times; want the child, prompted as the model said, to answer the task once", out.Answer, m.callsOf("poet"))
	}
}
