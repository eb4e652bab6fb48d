package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// policyIDModes are the ways real providers name tool calls: afresh on
// every request, not at all, or call_0, call_1, … again in every response.
var policyIDModes = []struct {
	name string
	id   func(n int64, i int) string
}{
	{"fresh ids", func(n int64, _ int) string { return fmt.Sprint("call_", 1000+n) }},
	{"no ids", func(int64, int) string { return "" }},
	{"ids restarting at call_0", func(_ int64, i int) string { return fmt.Sprint("call_", i) }},
}

// inEachIDMode runs test, on one client of the test server, once in each
// of policyIDModes.
func inEachIDMode(t *testing.T, test func(t *testing.T, c client.Client, id func(n int64, i int) string)) {
	t.Helper()
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { test(t, c, mode.id) })
	}
}

// steps is a model that, on a new task, makes its steps' tool calls, one
// step a reply, then answers with what they returned; "{task}" in a call's
// arguments stands for the task as a JSON string's content. It keeps the
// requests it was sent and counts the calls it asked for.
type steps struct {
	name  string
	id    func(n int64, i int) string
	n     *atomic.Int64
	steps [][][2]string
	// subs answer the requests whose task starts with their prefix
	// ("fork: "), each a model of its own.
	subs map[string]*steps

	mu       sync.Mutex
	requests []provider.Request
	calls    int
}

func (m *steps) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	task := lastUser(req)
	for prefix, sub := range m.subs {
		if strings.HasPrefix(task, prefix) {
			return sub.Complete(ctx, req)
		}
	}
	step := 0
	var results []string
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != provider.RoleUser; i-- {
		switch req.Messages[i].Role {
		case provider.RoleAssistant:
			step++
		case provider.RoleTool:
			results = append([]string{req.Messages[i].Content}, results...)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, req)
	u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	if step >= len(m.steps) {
		return provider.Response{Message: provider.AssistantMessage(m.name + "(" + strings.Join(results, "; ") + ")"), Usage: u, StopReason: provider.StopEndTurn}, nil
	}
	quoted, _ := json.Marshal(task)
	var calls []provider.ToolCall
	for i, c := range m.steps[step] {
		args := strings.ReplaceAll(c[1], "{task}", string(quoted[1:len(quoted)-1]))
		calls = append(calls, provider.ToolCall{ID: m.id(m.n.Add(1), i), Name: c[0], Arguments: json.RawMessage(args)})
	}
	m.calls += len(calls)
	return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u, StopReason: provider.StopToolUse}, nil
}

// starts counts the runs the model was asked to begin: the requests
// holding no reply of its own yet.
func (m *steps) starts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, req := range m.requests {
		if !slices.ContainsFunc(req.Messages, func(msg provider.Message) bool { return msg.Role == provider.RoleAssistant }) {
			n++
		}
	}
	return n
}

func (m *steps) sent(s string) (requests int, holding bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.requests {
		if b, _ := json.Marshal(req); strings.Contains(string(b), s) {
			holding = true
		}
	}
	return len(m.requests), holding
}

// countedTools are plain tools that count their runs and keep their
// arguments.
type countedTools struct {
	mu   sync.Mutex
	args map[string][]string
}

func (c *countedTools) tool(t *testing.T, name string) tool.Tool {
	t.Helper()
	return tool.Func{Def: tool.Definition{Name: name, Description: "Does " + name + ".", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(_ context.Context, call tool.Call) (tool.Result, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.args[name] = append(c.args[name], string(call.Arguments))
			return tool.Result{Content: name + " done"}, nil
		}}
}

func (c *countedTools) runs(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.args[name])
}

// watcher is a rule that counts the checks by point, and the tool calls
// by name, and keeps the paths each point and tool was checked at.
type watcher struct {
	mu     sync.Mutex
	points map[policy.Point]int
	tools  map[string]int
	paths  map[string]bool // "point tool@path"
	// results, when set, keeps the results checked, by tool.
	results map[string][]string
}

func (w *watcher) Name() string { return "watcher" }

func (w *watcher) Decide(_ context.Context, c *policy.Check) policy.Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.points[c.Point]++
	if c.Point == policy.BeforeTool {
		w.tools[c.Tool]++
	}
	if w.paths != nil {
		w.paths[fmt.Sprintf("%s %s@%s", c.Point, c.Tool, c.Path)] = true
	}
	if w.results != nil && c.Point == policy.AfterResult {
		w.results[c.Tool] = append(w.results[c.Tool], c.Result)
	}
	return policy.Decision{}
}

const temporalSecret = "sk-live-0123456789abcdef"

// policyTree is a tree on Temporal under a worker's policy: the lead
// calls search, leaf, rm, a factory child (worker, an agent.React run in
// process) and a spawned fork (a child workflow) in one step; the fork
// calls search and rm; the worker calls lookup and rm. The whole tree
// (whole) has three levels and every form of delegation on Temporal: the
// lead also spawns a fork in the background in that step, which calls
// search and rm too, and waits for it (subagent_jobs) in the next; it
// calls a fixed child (analyst, a child workflow of its own Spec), which
// calls search and spawns a fork of its own, and a React child (improv),
// which calls search and rm; and it spawns a member of its roster by name
// (surveyor, a child workflow of its own Spec), which calls a tool of its
// own (record) and rm.
type policyTree struct {
	rt                                            *Runtime
	lead, fork, worker, analyst, improv, surveyor *steps
	tools                                         *countedTools
	builds                                        atomic.Int64
	spec                                          Spec
}

// models are the tree's models, the lead's first.
func (tr *policyTree) models() []*steps {
	return []*steps{tr.lead, tr.fork, tr.worker, tr.analyst, tr.improv, tr.surveyor}
}

func newPolicyTree(t *testing.T, id func(int64, int) string, pol *policy.Policy, whole bool) *policyTree {
	t.Helper()
	n := new(atomic.Int64)
	tr := &policyTree{tools: &countedTools{args: map[string][]string{}}}
	tr.fork = &steps{name: "fork", id: id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"rm", `{}`}}}}
	tr.analyst = &steps{name: "analyst", id: id, n: n, subs: map[string]*steps{"fork: ": tr.fork},
		steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {SpawnToolName, `{"task":"fork: {task}"}`}}}}
	tr.improv = &steps{name: "improv", id: id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"rm", `{}`}}}}
	tr.surveyor = &steps{name: "surveyor", id: id, n: n, steps: [][][2]string{{{"record", `{"q":"{task}"}`}, {"rm", `{}`}}}}
	lead := [][][2]string{{
		{"search", `{"q":"{task}"}`}, {"leaf", `{}`}, {"rm", `{}`}, {"worker", `{"task":"{task}"}`}, {SpawnToolName, `{"task":"fork: {task}"}`}}}
	subs := map[string]*steps{"fork: ": tr.fork}
	if whole {
		lead[0] = append(lead[0], [2]string{SpawnToolName, `{"task":"fork: in the background, {task}","background":true}`},
			[2]string{"analyst", `{"task":"analyst: {task}"}`}, [2]string{"improv", `{"task":"improv: {task}","system_prompt":"be brief"}`},
			[2]string{SpawnToolName, `{"task":"survey: {task}","agent":"surveyor"}`})
		lead = append(lead, [][2]string{{subagent.JobsToolName, `{"action":"wait"}`}})
		subs["improv: "] = tr.improv
	}
	tr.lead = &steps{name: "lead", id: id, n: n, subs: subs, steps: lead}
	tr.worker = &steps{name: "worker", id: id, n: n, steps: [][][2]string{{{"lookup", `{"q":"{task}"}`}, {"rm", `{}`}}}}
	reg, err := tool.NewRegistry(tr.tools.tool(t, "search"), tr.tools.tool(t, "leaf"), tr.tools.tool(t, "rm"), tr.tools.tool(t, "record"))
	if err != nil {
		t.Fatal(err)
	}
	workerTools := []tool.Tool{tr.tools.tool(t, "lookup"), tr.tools.tool(t, "rm")}
	tr.rt = &Runtime{
		Providers: map[string]provider.Provider{"m": tr.lead, "analyst": tr.analyst, "surveyor": tr.surveyor},
		Tools:     reg,
		Factories: map[string]subagent.Factory{
			"worker": func(context.Context, json.RawMessage) (agent.Agent, error) {
				tr.builds.Add(1)
				return agent.NewReact(tr.worker, agent.WithName("worker"), agent.WithTools(workerTools...))
			},
		},
		Policy: pol,
	}
	tr.spec = Spec{Name: "lead", Provider: "m", Tools: []string{"search", "leaf", "rm"}, Spawn: true,
		SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}}
	if whole {
		tr.spec.Background, tr.spec.MaxDepth = true, 2
		tr.spec.SubAgents = append(tr.spec.SubAgents,
			SubAgent{Name: "analyst", Description: "Analyses.", Agent: &Spec{Name: "analyst", Provider: "analyst", Tools: []string{"search", "rm"}, Spawn: true}},
			SubAgent{Name: "improv", Description: "Model-defined.", React: true})
		tr.spec.Roster = []SubAgent{{Name: "surveyor", Description: "Surveys.", Agent: &Spec{Name: "surveyor", Provider: "surveyor", Tools: []string{"record", "rm"}}}}
	}
	return tr
}

// A worker's policy binds a three-level tree on Temporal that delegates
// in every form it has: it sees every tool call (the spawns of forks run
// as child workflows, at two levels, and of one run as a background job,
// the spawn of a roster member by name, and the lead's wait for the job,
// included), every model call (the forks', the fixed and React
// children's, the roster member's, and the factory child's, run in
// process), the seven children's hand-offs (the member's under its name)
// and answers (the job's, as the result of the wait that collects it),
// each at the path of the agent that makes it, as in process; a call it denies never runs, anywhere;
// and a secret given to the lead reaches no child's model and no tool —
// whatever ids the models give their calls.
func TestPolicyBindsATreeOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}, results: map[string][]string{}}
			pol, err := policy.New(w, policy.DenyTools("no-rm", policy.AnyDepth, "rm"), policy.Redact("secrets", []string{temporalSecret}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newPolicyTree(t, mode.id, pol, true)
			env := newEnv(t, tr.rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: tr.spec, Text: "audit the account with key " + temporalSecret})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			// The lead's 9 calls and its wait, 2 of each of the three
			// forks, of the worker, of the analyst, of improv and of the
			// surveyor.
			models := tr.models()
			calls := 0
			for _, m := range models {
				calls += m.calls
			}
			if calls != 24 || tr.builds.Load() != 1 || tr.fork.starts() != 3 || tr.analyst.starts() != 1 || tr.improv.starts() != 1 || tr.surveyor.starts() != 1 {
				t.Fatalf("the models asked for %d calls (want 24), the worker was built %d times (want 1), the forks, analyst, improv and surveyor started %d, %d, %d and %d times (want 3, 1, 1, 1): the tree did not run as built",
					calls, tr.builds.Load(), tr.fork.starts(), tr.analyst.starts(), tr.improv.starts(), tr.surveyor.starts())
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if got := w.points[policy.BeforeTool]; got != calls {
				t.Errorf("the policy saw %d tool calls; the models asked for %d", got, calls)
			}
			requests := 0
			for _, m := range models {
				n, _ := m.sent("")
				requests += n
			}
			if got := w.points[policy.BeforeModel]; got != requests || requests != 17 {
				t.Errorf("the policy saw %d model calls; the models were asked %d times (want 17)", got, requests)
			}
			if got := w.points[policy.BeforeDelegation]; got != 7 {
				t.Errorf("the policy saw %d hand-offs, want the worker's, the three forks', the analyst's, improv's and the surveyor's", got)
			}
			// Every call not denied had its result checked: the seven of
			// rm are denied.
			if got := w.points[policy.AfterResult]; got != calls-7 {
				t.Errorf("the policy saw %d results, want %d", got, calls-7)
			}
			for _, want := range []string{
				"tool search@lead", "tool " + SpawnToolName + "@lead", "tool worker@lead", "tool " + subagent.JobsToolName + "@lead",
				"tool analyst@lead", "tool improv@lead",
				"delegation " + SpawnToolName + "@lead", "delegation worker@lead", "delegation analyst@lead", "delegation improv@lead",
				"result " + SpawnToolName + "@lead", "result worker@lead", "result " + subagent.JobsToolName + "@lead",
				"result analyst@lead", "result improv@lead",
				"tool search@lead/subagent", "tool rm@lead/subagent", "tool lookup@lead/worker", "tool rm@lead/improv",
				"tool search@lead/analyst", "delegation " + SpawnToolName + "@lead/analyst", "result " + SpawnToolName + "@lead/analyst",
				"tool search@lead/analyst/subagent", "tool rm@lead/analyst/subagent",
				"model @lead", "model @lead/subagent", "model @lead/worker", "model @lead/analyst", "model @lead/improv", "model @lead/analyst/subagent",
				// The hand-off to the roster member is checked under its
				// name, its own calls at its place.
				"delegation surveyor@lead", "tool record@lead/surveyor", "tool rm@lead/surveyor", "result record@lead/surveyor", "model @lead/surveyor",
			} {
				if !w.paths[want] {
					t.Errorf("no check %q; the checks were %v", want, w.paths)
				}
			}
			if got := w.results[subagent.JobsToolName]; len(got) != 1 || !strings.Contains(got[0], "fork(search done") {
				t.Errorf("the policy saw the wait's results %q, want one holding the job's answer", got)
			}
			for _, name := range []string{"search", "leaf", "lookup", "record", "worker", SpawnToolName, "analyst", "improv"} {
				runs := tr.tools.runs(name)
				switch name {
				case "worker":
					runs = int(tr.builds.Load())
				case SpawnToolName:
					runs = tr.fork.starts() + tr.surveyor.starts()
				case "analyst":
					runs = tr.analyst.starts()
				case "improv":
					runs = tr.improv.starts()
				}
				if w.tools[name] != runs || runs == 0 {
					t.Errorf("%s ran %d times; the policy saw %d calls", name, runs, w.tools[name])
				}
			}
			if tr.tools.runs("rm") != 0 || w.tools["rm"] != 7 {
				t.Errorf("rm, denied, ran %d times (the policy saw %d calls, want 7)", tr.tools.runs("rm"), w.tools["rm"])
			}
			if strings.Count(out.Answer, "rm is not allowed here") != 7 {
				t.Errorf("the answer %q does not carry the seven denials", out.Answer)
			}
			if _, given := tr.lead.sent(temporalSecret); !given {
				t.Fatal("the lead's model was not given the secret: the test tries nothing")
			}
			for _, m := range models[1:] {
				if _, leaked := m.sent(temporalSecret); leaked {
					t.Errorf("the secret reached the %s's model", m.name)
				}
			}
			tr.tools.mu.Lock()
			for name, args := range tr.tools.args {
				for _, a := range args {
					if strings.Contains(a, temporalSecret) {
						t.Errorf("the secret reached the tool %s: %s", name, a)
					}
				}
			}
			tr.tools.mu.Unlock()
		})
	}
}

// On Temporal, a factory child whose call the worker's policy denies is
// never built; a plain call it asks about waits, durably, for the person,
// and runs once when approved — whatever ids the models give their calls.
func TestPolicyDeniesAndAsksOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			pol, err := policy.New(policy.DenyTools("no-worker", policy.AnyDepth, "worker"), policy.AskBefore("approve-leaf", "leaf"))
			if err != nil {
				t.Fatal(err)
			}
			tr := newPolicyTree(t, mode.id, pol, false)
			hub := NewHub()
			tr.rt.Events = hub
			env := newEnv(t, tr.rt)
			tree := "tree-asks-" + mode.name
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: tree})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), tree)()
			var pending []tool.Interrupt
			var answerErr error
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(InterruptsQuery)
				if err != nil {
					t.Errorf("query: %v", err)
					return
				}
				if err := v.Get(&pending); err != nil {
					t.Error(err)
				}
				if tr.tools.runs("leaf") != 0 {
					t.Errorf("leaf ran %d times before any answer", tr.tools.runs("leaf"))
				}
				var answers []tool.Answer
				for _, it := range pending {
					answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
				}
				env.UpdateWorkflow(AnswerUpdate, "a1", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { answerErr = err }, OnComplete: func(_ any, err error) {
						if err != nil {
							answerErr = err
						}
					},
				}, answers)
			}, time.Hour)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: tr.spec, Text: "audit"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if answerErr != nil {
				t.Fatal(answerErr)
			}
			if len(pending) != 1 || pending[0].Reason != tool.ApprovalReason || !strings.Contains(pending[0].Message, "approve-leaf") {
				t.Fatalf("the tree waited on %+v, want the policy's one question about leaf", pending)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if tr.builds.Load() != 0 || len(tr.worker.requests) != 0 {
				t.Errorf("the denied worker was built %d times and its model asked %d times", tr.builds.Load(), len(tr.worker.requests))
			}
			if tr.tools.runs("leaf") != 1 {
				t.Errorf("leaf ran %d times after one approval", tr.tools.runs("leaf"))
			}
			if !strings.Contains(out.Answer, "leaf done") || !strings.Contains(out.Answer, `"no-worker" denied the call to worker`) {
				t.Errorf("the answer %q should hold leaf's result and the worker's denial", out.Answer)
			}
			// The audit trail holds the question once, as it was put, and
			// the person's answer once, as the call ran again with it.
			trail := map[string]int{}
			rec.mu.Lock()
			for _, e := range rec.events {
				var v struct{ Verdict, Rule, Answer string }
				if e.Type == event.Custom && e.Name == policy.EventName && json.Unmarshal(e.Value, &v) == nil && v.Rule == "approve-leaf" {
					trail[v.Verdict+" "+v.Answer]++
				}
			}
			rec.mu.Unlock()
			if want := map[string]int{"ask ": 1, "allow approved": 1}; !maps.Equal(trail, want) {
				t.Errorf("the audit trail of the question is %v, want %v", trail, want)
			}
		})
	}
}

// A rule that asks before a hand-off waits, on Temporal, for the person,
// durably, as a plain call's question does: the lead's call of a factory
// child and its spawn of a fork (a child workflow) are both asked about,
// neither child starts before the answers, and each starts once when
// approved and never when declined — whatever ids the models give their
// calls.
func TestPolicyAsksBeforeAHandOffOnTemporal(t *testing.T) {
	for _, mode := range policyIDModes {
		for _, approve := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/approved=%v", mode.name, approve), func(t *testing.T) {
				pol, err := policy.New(policy.AskBefore("approve-children", "worker", SpawnToolName))
				if err != nil {
					t.Fatal(err)
				}
				tr := newPolicyTree(t, mode.id, pol, false)
				env := newEnv(t, tr.rt)
				var pending []tool.Interrupt
				var answerErr error
				env.RegisterDelayedCallback(func() {
					v, err := env.QueryWorkflow(InterruptsQuery)
					if err != nil {
						t.Errorf("query: %v", err)
						return
					}
					if err := v.Get(&pending); err != nil {
						t.Error(err)
					}
					if tr.builds.Load() != 0 || tr.fork.starts() != 0 {
						t.Errorf("before any answer, the worker was built %d times and the fork started %d times", tr.builds.Load(), tr.fork.starts())
					}
					var answers []tool.Answer
					for _, it := range pending {
						answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, approve))})
					}
					env.UpdateWorkflow(AnswerUpdate, "a1", &testsuite.TestUpdateCallback{
						OnAccept: func() {}, OnReject: func(err error) { answerErr = err }, OnComplete: func(_ any, err error) {
							if err != nil {
								answerErr = err
							}
						},
					}, answers)
				}, 24*time.Hour)
				env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: tr.spec, Text: "audit"})
				if err := env.GetWorkflowError(); err != nil {
					t.Fatal(err)
				}
				if answerErr != nil {
					t.Fatal(answerErr)
				}
				asked := map[string]bool{}
				for _, it := range pending {
					if it.Reason != tool.ApprovalReason || it.SubagentRunID != "" || !strings.Contains(it.Message, "approve-children") || !strings.Contains(it.Message, "Allow lead to call") {
						t.Errorf("question %+v: want the lead's approval, naming the rule", it)
					}
					for _, name := range []string{"worker", SpawnToolName} {
						if strings.Contains(it.Message, "call "+name) {
							asked[name] = true
						}
					}
				}
				if len(pending) != 2 || !asked["worker"] || !asked[SpawnToolName] {
					t.Fatalf("the tree waited on %+v, want one question about the worker and one about the spawn", pending)
				}
				var out RunOutput
				if err := env.GetWorkflowResult(&out); err != nil {
					t.Fatal(err)
				}
				want := 0
				if approve {
					want = 1
				}
				if int(tr.builds.Load()) != want || tr.fork.starts() != want || tr.tools.runs("lookup") != want {
					t.Errorf("the worker was built %d times (its lookup ran %d) and the fork started %d times, want %d each",
						tr.builds.Load(), tr.tools.runs("lookup"), tr.fork.starts(), want)
				}
				// The lead's own search and rm run once either way; the
				// fork's search and rm, and the worker's rm, only when approved.
				if tr.tools.runs("search") != 1+want || tr.tools.runs("rm") != 1+2*want {
					t.Errorf("search ran %d times and rm %d times", tr.tools.runs("search"), tr.tools.runs("rm"))
				}
				if approve && (!strings.Contains(out.Answer, "worker(") || !strings.Contains(out.Answer, "fork(")) {
					t.Errorf("the answer %q should hold both children's answers", out.Answer)
				}
				if !approve && strings.Count(out.Answer, "did not approve") != 2 {
					t.Errorf("the answer %q should hold both refusals", out.Answer)
				}
			})
		}
	}
}

// denyTask is a rule that denies handing a sub-agent the task it names.
type denyTask string

func (d denyTask) Name() string { return "no-" + string(d) }

func (d denyTask) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point == policy.BeforeDelegation && c.Task == string(d) {
		return policy.Denied(string(d) + " is not handed off")
	}
	return policy.Decision{}
}

// A spawn the policy denied starts no child, and so does not count
// against Spec.MaxSpawns, as a call the policy denies in process never
// reaches the spawn tool: of three spawns under a limit of two, one
// denied, the other two run.
func TestDeniedSpawnDoesNotCountOnTemporal(t *testing.T) {
	pol, err := policy.New(denyTask("part 0"))
	if err != nil {
		t.Fatal(err)
	}
	p := fanOut(3)
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Policy: pol})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, MaxSpawns: 2}, Text: "do it"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			results = append(results, m.Content)
		}
	}
	if len(results) != 3 || !strings.Contains(results[0], "part 0 is not handed off") || results[1] != "done: part 1" || results[2] != "done: part 2" {
		t.Fatalf("the spawns ended %q; want part 0 denied, parts 1 and 2 done", results)
	}
	if calls, _ := p.total(); calls != 4 {
		t.Fatalf("%d model calls, want the lead's 2 and 2 children's", calls)
	}
}

// retryDenier is a rule that lets a child's first hand-off through and
// denies any other (a corrective retry's), keeping the tasks it saw and
// the arguments of the calls they were handed off by.
type retryDenier struct {
	mu    sync.Mutex
	tasks []string
	args  []string
}

func (r *retryDenier) Name() string { return "no-retries" }

func (r *retryDenier) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point != policy.BeforeDelegation {
		return policy.Decision{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, c.Task)
	r.args = append(r.args, string(c.Arguments))
	if c.Task != "part 1" {
		return policy.Denied("no corrective retries")
	}
	return policy.Decision{}
}

// A child whose answer fails its schema is asked again only if the
// workers' policy lets that corrective retry through as a hand-off of its
// own, as in process: the rule reads the retry's task and the arguments
// of the call that started the child, as at its first hand-off; denied,
// the child is not asked again, and its parent reads its answer marked
// invalid, with why.
func TestCorrectiveRetryIsCheckedAsAHandOffOnTemporal(t *testing.T) {
	rule := &retryDenier{}
	pol, err := policy.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	var childCalls atomic.Int32
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		first := req.Messages[0].Content
		last := req.Messages[len(req.Messages)-1]
		switch {
		case first == "part 1":
			childCalls.Add(1)
			if len(req.Messages) == 1 {
				return provider.AssistantMessage("not json"), nil
			}
			return provider.AssistantMessage(`{"ok":true}`), nil
		case last.Role == provider.RoleTool:
			return provider.AssistantMessage(`{"ok":true}`), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "s1", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)}), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Policy: pol})
	schema := json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, OutputSchema: schema}, Text: "do it"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if n := childCalls.Load(); n != 1 {
		t.Errorf("the child's model was called %d times, want once: its retry was denied", n)
	}
	if len(rule.tasks) != 2 || rule.tasks[0] != "part 1" {
		t.Fatalf("the policy saw the hand-offs %q, want the child's task and its retry", rule.tasks)
	}
	if want := `{"task":"part 1"}`; rule.args[0] != want || rule.args[1] != want {
		t.Errorf("the hand-offs were checked with the arguments %q, want the call's %s at both", rule.args, want)
	}
	var result string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			result = m.Content
		}
	}
	if !strings.Contains(result, "validation failed") || !strings.Contains(result, "no corrective retries") {
		t.Errorf("the lead read %q, want the child's answer marked invalid, saying the retry was denied", result)
	}
}

// denyResult is a rule that denies a result holding the text it names.
type denyResult string

func (d denyResult) Name() string { return "no-leaks" }

func (d denyResult) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point == policy.AfterResult && strings.Contains(c.Result, string(d)) {
		return policy.Denied("the result holds a secret")
	}
	return policy.Decision{}
}

// A background job's answer is checked by the workers' policy before the
// lead's model reads it, as a child's answer in the foreground is and as
// in process, where it is the result of the subagent_jobs call that
// collects it: denied, the lead reads why and not the answer; redacted,
// the answer as the rule left it, in its SUBAGENT_FINISHED too. The
// spawn's receipt is checked as its result, and each decision is one
// event of the tree.
func TestJobAnswerIsCheckedOnTemporal(t *testing.T) {
	const leak = "sk-job-0123456789"
	for _, tc := range []struct {
		name string
		rule policy.Rule
		want string
	}{
		{"denied", denyResult(leak), `rule "no-leaks" denied the result of ` + subagent.JobsToolName},
		{"redacted", policy.Redact("secrets", []string{leak}), "the job found " + policy.Redacted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
			pol, err := policy.New(w, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			var read string // what the lead's model read of the job
			p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				if firstUserOf(req) == "find it" {
					return provider.AssistantMessage("the job found " + leak), nil
				}
				switch rs := resultsOf(req); len(rs) {
				case 0:
					return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"find it","background":true}`)}), nil
				case 1:
					return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `"}`)}), nil
				default:
					read = rs[1]
					return provider.AssistantMessage("done"), nil
				}
			}}
			hub := NewHub()
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Events: hub, Policy: pol})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-" + tc.name})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-"+tc.name)()
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "go"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if calls, _ := p.total(); calls != 4 {
				t.Fatalf("%d model calls, want the lead's 3 and the job's 1", calls)
			}
			if !strings.Contains(read, tc.want) || strings.Contains(read, leak) {
				t.Errorf("the lead read %q of its job, want %q and not the job's secret", read, tc.want)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, want := range []string{
				"tool " + SpawnToolName + "@lead", "delegation " + SpawnToolName + "@lead", "result " + SpawnToolName + "@lead",
				"tool " + subagent.JobsToolName + "@lead", "result " + subagent.JobsToolName + "@lead",
			} {
				if !w.paths[want] {
					t.Errorf("no check %q; the checks were %v", want, w.paths)
				}
			}
			decided, events, results := 0, 0, 0
			for _, c := range w.points {
				decided += c
			}
			for _, e := range rec.events {
				if e.Type != event.Custom || e.Name != policy.EventName {
					continue
				}
				events++
				var v struct{ Point, Tool string }
				if err := json.Unmarshal(e.Value, &v); err == nil && v.Point == string(policy.AfterResult) && v.Tool == subagent.JobsToolName {
					results++
				}
			}
			if decided != events || results != 1 {
				t.Errorf("the policy made %d decisions and %d events tell of them, %d of the job's answer; want one event each, one of the answer", decided, events, results)
			}
			if tc.name == "redacted" {
				// What the job's end tells the event sink is the answer as
				// the redactor leaves it too.
				finished := 0
				for _, e := range rec.events {
					if e.Type == event.SubagentFinished || e.Type == event.SubagentError {
						finished++
						if b, _ := json.Marshal(e); strings.Contains(string(b), leak) {
							t.Errorf("a %s event holds the job's secret: %s", e.Type, b)
						}
					}
				}
				if finished == 0 {
					t.Error("no SUBAGENT_FINISHED event of the job")
				}
			}
		})
	}
}

// A call of a tool the run does not offer (one it does not have, or a
// sub-agent past the depth cap) is checked by the workers' policy, before
// and after, as in process, where the registry checks a call before it
// finds the tool missing: the policy sees every tool call the model makes.
// Denied, the model reads the denial; allowed, that the tool is unknown.
func TestUnofferedCallsAreCheckedOnTemporal(t *testing.T) {
	w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
	pol, err := policy.New(w, policy.DenyTools("no-shell", policy.AnyDepth, "shell"))
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if firstUserOf(req) == "deeper" {
			if rs := resultsOf(req); len(rs) > 0 {
				read = rs
				return provider.AssistantMessage("child done"), nil
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: "d", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"deepest"}`)}), nil
		}
		if rs := resultsOf(req); len(rs) > 0 {
			read = append(read, rs...)
			return provider.AssistantMessage("done"), nil
		}
		return provider.AssistantMessage("",
			provider.ToolCall{ID: "a", Name: "shell", Arguments: json.RawMessage(`{}`)},
			provider.ToolCall{ID: "b", Name: "nosuch", Arguments: json.RawMessage(`{}`)},
			provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"deeper"}`)}), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Policy: pol})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true}, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, want := range []string{
		"tool shell@lead", "tool nosuch@lead", "result nosuch@lead",
		"tool " + SpawnToolName + "@lead/subagent", "result " + SpawnToolName + "@lead/subagent",
	} {
		if !w.paths[want] {
			t.Errorf("no check %q; the checks were %v", want, w.paths)
		}
	}
	if w.paths["result shell@lead"] {
		t.Error("a denied call's result was checked")
	}
	joined := strings.Join(read, "\n")
	for _, want := range []string{`"no-shell" denied the call to shell`, `unknown tool: "nosuch"`, "cannot delegate further"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the models read %q, want %q among it", read, want)
		}
	}
}

// A background job that fails with a secret in its error ends, on the
// event sink, with the error as the workers' redactors leave it: the
// SUBAGENT_ERROR its lead's workflow publishes holds no secret, as a
// child's in its parent's step does not.
func TestJobFailureIsRedactedOnTemporal(t *testing.T) {
	const leak = "sk-job-0123456789"
	pol, err := policy.New(policy.Redact("secrets", []string{leak}))
	if err != nil {
		t.Fatal(err)
	}
	p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if firstUserOf(req) == "find it" {
			return provider.Message{}, &provider.Error{Provider: "m", StatusCode: http.StatusBadRequest, Kind: provider.KindBadRequest, Message: "the key " + leak + " is revoked"}
		}
		switch rs := resultsOf(req); len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"find it","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `"}`)}), nil
		}
		return provider.AssistantMessage("done"), nil
	}}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Events: hub, Policy: pol})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-failed-job"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-failed-job")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, e := range rec.events {
		if e.Type == event.SubagentError {
			ended++
			if b, _ := json.Marshal(e); strings.Contains(string(b), leak) || !strings.Contains(e.Message, policy.Redacted) {
				t.Errorf("the job's SUBAGENT_ERROR holds its secret, or no mark of its redaction: %s", b)
			}
		}
	}
	if ended != 1 {
		t.Errorf("%d SUBAGENT_ERROR events, want the job's one", ended)
	}
}
