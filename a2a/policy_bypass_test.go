package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// treeModel is the model of one kind of agent in the bypass tree: on a new
// task it makes its steps' tool calls, one step a reply, then answers with
// what they returned. "{task}" in a call's arguments stands for the task
// as a JSON string's content, "{job}" for the job id of the last receipt.
// It names its calls as ids says (resumetest.IDsFresh, IDsNone,
// IDsRestart), and counts what it asked for and what it was sent.
type treeModel struct {
	name  string
	ids   int
	steps [][][2]string
	fresh *atomic.Int64

	mu       sync.Mutex
	requests []provider.Request
	calls    int
	tasks    int
}

func (m *treeModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	last := -1
	for i, msg := range req.Messages {
		if msg.Role == provider.RoleUser {
			last = i
		}
	}
	task, step, job := "", 0, ""
	var results []string
	if last >= 0 {
		task = req.Messages[last].Content
		for _, msg := range req.Messages[last+1:] {
			switch msg.Role {
			case provider.RoleAssistant:
				step++
			case provider.RoleTool:
				var receipt struct {
					JobID string `json:"job_id"`
				}
				if json.Unmarshal([]byte(msg.Content), &receipt) == nil && receipt.JobID != "" {
					job = receipt.JobID
					continue
				}
				results = append(results, msg.Content)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, req)
	if step == 0 {
		m.tasks++
	}
	u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	if step >= len(m.steps) {
		return provider.Response{Message: provider.AssistantMessage(m.name + "(" + strings.Join(results, "; ") + ")"), Usage: u}, nil
	}
	quoted, _ := json.Marshal(task)
	var calls []provider.ToolCall
	for _, c := range m.steps[step] {
		args := strings.ReplaceAll(c[1], "{task}", string(quoted[1:len(quoted)-1]))
		args = strings.ReplaceAll(args, "{job}", job)
		calls = append(calls, provider.ToolCall{Name: c[0], Arguments: json.RawMessage(args)})
	}
	resumetest.NameCalls(m.ids, calls, m.fresh)
	m.calls += len(calls)
	return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
}

// guard is the root's observing rule: it counts every check by point,
// the tool calls and the hand-offs by the tool's name, and the paths.
type guard struct {
	mu       sync.Mutex
	points   map[policy.Point]int
	tools    map[string]int
	handOffs map[string]int
	paths    map[string]bool
}

func newGuard() *guard {
	return &guard{points: map[policy.Point]int{}, tools: map[string]int{}, handOffs: map[string]int{}, paths: map[string]bool{}}
}

func (g *guard) Name() string { return "observer" }

func (g *guard) Decide(_ context.Context, c *policy.Check) policy.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.points[c.Point]++
	switch c.Point {
	case policy.BeforeTool:
		g.tools[c.Tool]++
	case policy.BeforeDelegation:
		g.handOffs[c.Tool]++
	}
	g.paths[c.Path] = true
	return policy.Decision{}
}

// bypassTree is a three-level tree that delegates in every form, an A2A
// remote served by deputy in-process among them: the lead calls a plain
// tool, a resident (FromAgent), a factory child (FromFactory), a FromReact
// child, a roster member, a fork and a background fork through the spawn
// tool, and the remote (clerk); each of its six local children calls a
// plain tool, a grandchild (FromFactory) and the remote; each grandchild
// calls a plain tool and one the root's policy forbids. The remote agent,
// built per task, calls its own ledger, whose answer holds remoteSecret.
type bypassTree struct {
	lead                 *agent.React
	models               []*treeModel // the lead's first
	remoteModel          *treeModel
	search, lookup, leaf *countedTool
	rm, ledger           *countedTool
	served               *observer // the serving side's policy
	bodies               bodies    // what the remote agent was sent
}

func newBypassTree(t *testing.T, ids int, leadOpts ...agent.Option) *bypassTree {
	t.Helper()
	tr := &bypassTree{
		search: &countedTool{name: "search", answer: "search done"}, lookup: &countedTool{name: "lookup", answer: "lookup done"},
		leaf: &countedTool{name: "leaf", answer: "leaf done"}, rm: &countedTool{name: "rm", answer: "rm done"},
		ledger: &countedTool{name: "ledger", answer: "balance 42 on " + remoteSecret},
		served: newObserver("served"),
	}
	fresh := new(atomic.Int64)
	model := func(name string, steps ...[][2]string) *treeModel {
		m := &treeModel{name: name, ids: ids, steps: steps, fresh: fresh}
		tr.models = append(tr.models, m)
		return m
	}
	must := func(st *subagent.SubAgentTool, err error) *subagent.SubAgentTool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	react := func(p provider.Provider, name string, opts ...agent.Option) *agent.React {
		t.Helper()
		a, err := agent.NewReact(p, append([]agent.Option{agent.WithName(name)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	// The remote, served by deputy over loopback HTTP, with a policy of
	// its own.
	tr.remoteModel = &treeModel{name: "clerk", ids: ids, fresh: fresh, steps: [][][2]string{{{"ledger", `{"q":"{task}"}`}}}}
	served, err := policy.New(tr.served)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(tr.remoteModel, agent.WithName("clerk"), agent.WithTools(tr.ledger), agent.WithPolicy(served))
	}, a2a.WithName("clerk"), a2a.WithDescription("Keeps the books."),
		a2a.WithAuthorize(func(*http.Request) (string, error) { return "acme", nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(tr.bodies.wrap(srv))
	t.Cleanup(hs.Close)
	remote, err := a2a.Connect(context.Background(), hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	clerk := must(remote.Tool(subagent.WithMaxDepth(2))) // the children delegate to it too

	leadModel := model("lead",
		[][2]string{{"search", `{"q":"{task}"}`}, {"expert", `{"task":"{task}"}`}, {"worker", `{"task":"{task}"}`},
			{"improv", `{"task":"{task}","system_prompt":"be brief"}`},
			{subagent.SpawnToolName, `{"task":"{task}","agent":"analyst"}`},
			{subagent.SpawnToolName, `{"task":"{task}"}`},
			{subagent.SpawnToolName, `{"task":"{task}","background":true}`},
			{"clerk", `{"task":"{task}"}`}},
		[][2]string{{subagent.JobsToolName, `{"action":"wait","job_id":"{job}"}`}})
	l2 := model("grandchild", [][2]string{{"leaf", `{"q":"{task}"}`}, {"rm", `{"path":"/"}`}})
	grandchild := func() *subagent.SubAgentTool {
		return must(subagent.FromFactory("deep", "Goes deeper.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return react(l2, "grandchild", agent.WithTools(tr.leaf, tr.rm)), nil
		}, subagent.WithMaxDepth(2)))
	}
	childSteps := [][2]string{{"lookup", `{"q":"{task}"}`}, {"deep", `{"task":"{task}"}`}, {"clerk", `{"task":"{task}"}`}}
	childTools := func() []tool.Tool { return []tool.Tool{tr.lookup, grandchild(), clerk} }

	expert := must(subagent.FromAgent("expert", "A resident.", react(model("expert", childSteps), "expert", agent.WithTools(childTools()...))))
	workerModel := model("worker", childSteps)
	worker := must(subagent.FromFactory("worker", "One-shot.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return react(workerModel, "worker", agent.WithTools(childTools()...)), nil
	}))
	improvTools, err := tool.NewRegistry(childTools()...)
	if err != nil {
		t.Fatal(err)
	}
	improv := must(subagent.FromReact("improv", "Model-defined.", model("improv", childSteps), improvTools))
	analystModel := model("analyst", childSteps)
	analyst := must(subagent.FromFactory("analyst", "A roster member.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return react(analystModel, "analyst", agent.WithTools(childTools()...)), nil
	}))
	forkTools, err := tool.NewRegistry(childTools()...)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(model("fork", childSteps), forkTools, subagent.WithRoster(analyst), subagent.WithBackground())
	if err != nil {
		t.Fatal(err)
	}
	tr.lead = react(leadModel, "lead", append([]agent.Option{agent.WithTools(tr.search, expert, worker, improv, sp, sp.JobsTool(), clerk)}, leadOpts...)...)
	return tr
}

// counts returns what the tree's local models asked for and were asked.
func (tr *bypassTree) counts() (calls, childTasks, requests int) {
	for i, m := range tr.models {
		m.mu.Lock()
		calls += m.calls
		requests += len(m.requests)
		if i > 0 {
			childTasks += m.tasks
		}
		m.mu.Unlock()
	}
	return
}

// sent reports whether any request m was sent holds s.
func (m *treeModel) sent(s string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.requests {
		if b, _ := json.Marshal(req); strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// The root's policy binds every form of delegation in one three-level
// tree, the edge to an A2A remote served by deputy among them: it sees
// every tool call, every hand-off (the remote's included) and every model
// call on this side of the edge, and none of the remote's own tool calls,
// which its own policy sees; a call it denies never runs; a secret the
// lead was given reaches no child's model, no tool, no request to the
// remote and not the remote's model, and a secret the remote answers with
// comes back to no model of the tree — whatever ids the models give their
// calls. Side effects are counted by the tools themselves.
func TestPolicyBindsEveryDelegationWithARemote(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			g := newGuard()
			root, err := policy.New(g,
				policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
				policy.Redact("secrets", []string{leadSecret, remoteSecret}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newBypassTree(t, ids, agent.WithPolicy(root))
			out, err := tr.lead.Run(context.Background(), agent.Input{Text: "audit the account with key " + leadSecret})
			if err != nil {
				t.Fatal(err)
			}
			calls, childTasks, requests := tr.counts()
			tr.remoteModel.mu.Lock()
			remoteTasks := tr.remoteModel.tasks
			tr.remoteModel.mu.Unlock()
			g.mu.Lock()
			defer g.mu.Unlock()
			// 8 + 1 calls of the lead, 3 of each of its 6 local children,
			// 2 of each of their 6 grandchildren; the remote is asked by
			// the lead and by each child.
			if calls != 39 || childTasks != 12 || remoteTasks != 7 {
				t.Fatalf("the models asked for %d tool calls (want 39), the local children started %d tasks (want 12), the remote %d (want 7): the tree did not run as built",
					calls, childTasks, remoteTasks)
			}
			if got := g.points[policy.BeforeTool]; got != calls {
				t.Errorf("the root's policy saw %d tool calls; the models asked for %d", got, calls)
			}
			if got := g.points[policy.BeforeDelegation]; got != childTasks+remoteTasks {
				t.Errorf("the root's policy saw %d hand-offs; the children started %d tasks and the remote %d", got, childTasks, remoteTasks)
			}
			if g.handOffs["clerk"] != remoteTasks || g.tools["clerk"] != remoteTasks {
				t.Errorf("the root's policy saw %d calls of the remote and %d hand-offs to it; the remote ran %d tasks", g.tools["clerk"], g.handOffs["clerk"], remoteTasks)
			}
			if got := g.points[policy.BeforeModel]; got != requests {
				t.Errorf("the root's policy saw %d model calls; the tree's models were asked %d times", got, requests)
			}
			if got, want := g.points[policy.AfterResult], calls-6; got != want {
				t.Errorf("the root's policy saw %d results, want %d (a result for each call not denied)", got, want)
			}
			for _, c := range []*countedTool{tr.search, tr.lookup, tr.leaf} {
				if g.tools[c.name] != c.runs() || c.runs() == 0 {
					t.Errorf("%s ran %d times; the policy saw %d calls", c.name, c.runs(), g.tools[c.name])
				}
			}
			if tr.rm.runs() != 0 || g.tools["rm"] != 6 {
				t.Errorf("rm, denied, ran %d times (the policy saw %d calls)", tr.rm.runs(), g.tools["rm"])
			}
			if len(out.Denials) != 6 {
				t.Errorf("the lead's Output has %d denials, want 6: %v", len(out.Denials), out.Denials)
			}
			// The remote's own tools are its own: its policy saw them, the
			// root's did not.
			tr.served.mu.Lock()
			if g.tools["ledger"] != 0 || tr.ledger.runs() != remoteTasks || tr.served.tools["ledger"] != tr.ledger.runs() {
				t.Errorf("ledger ran %d times; the root's policy saw %d of its calls (want none), the remote's own %d",
					tr.ledger.runs(), g.tools["ledger"], tr.served.tools["ledger"])
			}
			tr.served.mu.Unlock()
			// The lead's secret stayed with the lead.
			if !tr.models[0].sent(leadSecret) {
				t.Fatal("the lead's model was not given the secret: the test tries nothing")
			}
			for _, m := range tr.models[1:] {
				if m.sent(leadSecret) {
					t.Errorf("the lead's secret reached %s's model", m.name)
				}
			}
			if tr.bodies.count() == 0 {
				t.Fatal("no request reached the remote agent")
			}
			if tr.bodies.holds(leadSecret) || tr.remoteModel.sent(leadSecret) {
				t.Errorf("the lead's secret reached the remote (in a request to it: %v; its model: %v)", tr.bodies.holds(leadSecret), tr.remoteModel.sent(leadSecret))
			}
			for _, c := range []*countedTool{tr.search, tr.lookup, tr.leaf, tr.ledger} {
				for _, a := range c.args {
					if strings.Contains(a, leadSecret) {
						t.Errorf("the lead's secret reached the tool %s: %s", c.name, a)
					}
				}
			}
			// What came back from the remote passed the policy too.
			if !tr.remoteModel.sent(remoteSecret) {
				t.Fatal("the remote's model never read the remote's secret: the test tries nothing")
			}
			for _, m := range tr.models {
				if m.sent(remoteSecret) {
					t.Errorf("the remote's secret came back to %s's model", m.name)
				}
			}
			if strings.Contains(out.Answer, remoteSecret) {
				t.Errorf("the answer holds the remote's secret: %q", out.Answer)
			}
			for _, p := range []string{"lead", "lead/expert", "lead/worker", "lead/improv", "lead/analyst", "lead/" + subagent.DefaultForkName,
				"lead/expert/grandchild", "lead/" + subagent.DefaultForkName + "/grandchild"} {
				if !g.paths[p] {
					t.Errorf("no check at %s; seen: %v", p, g.paths)
				}
			}
		})
	}
}
