package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// treeModel is the model of one kind of agent in a tree: on a new task it
// makes its steps' tool calls, one step a reply, then answers with what
// they returned. "{task}" in a call's arguments stands for the task as a
// JSON string's content, "{job}" for the job id of the last receipt. It
// names its calls as ids says (resumetest.IDsFresh, IDsNone,
// IDsRestart), and counts what it asked for and what it was sent.
type treeModel struct {
	name  string
	ids   int
	steps [][][2]string // by step, the calls: name and arguments
	fresh *atomic.Int64 // shared by the tree's models, for fresh ids

	mu       sync.Mutex
	requests []provider.Request
	calls    int // tool calls asked for
	tasks    int // tasks started: requests whose turn had just begun
}

func (m *treeModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	// The turn is what follows the last user message.
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

// counted is a plain tool that counts its runs and keeps the arguments
// it was given.
type counted struct {
	name string
	mu   sync.Mutex
	args []string
}

func (c *counted) Definition() tool.Definition {
	return tool.Definition{Name: c.name, Description: "Does " + c.name + ".", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (c *counted) Call(_ context.Context, call tool.Call) (tool.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.args = append(c.args, string(call.Arguments))
	return tool.Result{Content: c.name + " done"}, nil
}

func (c *counted) runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.args)
}

// guard is the root's observing rule: it counts every check, by point,
// and the tool calls it saw by name.
type guard struct {
	mu     sync.Mutex
	points map[policy.Point]int
	tools  map[string]int
	paths  map[string]bool
}

func newGuard() *guard {
	return &guard{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
}

func (g *guard) Name() string { return "observer" }

func (g *guard) Decide(_ context.Context, c *policy.Check) policy.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.points[c.Point]++
	if c.Point == policy.BeforeTool {
		g.tools[c.Tool]++
	}
	g.paths[c.Path] = true
	return policy.Decision{}
}

// bypassTree is buildTree's tree with tools that count their runs: the
// lead calls search, each child lookup, each grandchild leaf and rm, which
// its policy forbids.
type bypassTree struct {
	lead                     *agent.React
	models                   []*treeModel // the lead's first
	search, lookup, leaf, rm *counted
}

const secret = "sk-live-0123456789abcdef"

func newBypassTree(t *testing.T, ids int, leadOpts ...agent.Option) *bypassTree {
	t.Helper()
	tr := &bypassTree{search: &counted{name: "search"}, lookup: &counted{name: "lookup"}, leaf: &counted{name: "leaf"}, rm: &counted{name: "rm"}}
	tr.lead, tr.models = buildTree(t, treeSpec{
		ids:        ids,
		fresh:      new(atomic.Int64),
		lead:       [][][2]string{append([][2]string{{"search", `{"q":"{task}"}`}}, everyForm...), {waitJob}},
		child:      [][][2]string{{{"lookup", `{"q":"{task}"}`}, {"deep", `{"task":"{task}"}`}}},
		grandchild: [][][2]string{{{"leaf", `{"q":"{task}"}`}, {"rm", `{"path":"/"}`}}},
		leadTools:  []tool.Tool{tr.search}, childTools: []tool.Tool{tr.lookup}, grandchildTools: []tool.Tool{tr.leaf, tr.rm},
		leadOpts: leadOpts,
	})
	return tr
}

// everyForm are a lead's calls that delegate in every form: to a resident
// (FromAgent), a factory child (FromFactory), a FromReact child, a roster
// member and a fork through the spawn tool, and a background fork. Each
// child's task is the lead's after a letter of its own.
var everyForm = [][2]string{
	{"expert", `{"task":"e {task}"}`},
	{"worker", `{"task":"w {task}"}`},
	{"improv", `{"task":"i {task}","system_prompt":"be brief"}`},
	{subagent.SpawnToolName, `{"task":"a {task}","agent":"analyst"}`},
	{subagent.SpawnToolName, `{"task":"f {task}"}`},
	{subagent.SpawnToolName, `{"task":"b {task}","background":true}`},
}

// waitJob is a lead's call that waits for the background fork of everyForm.
var waitJob = [2]string{subagent.JobsToolName, `{"action":"wait","job_id":"{job}"}`}

// treeSpec is what a tree of buildTree does: each agent's steps and tools
// by level, and what stands between each agent and its treeModel.
type treeSpec struct {
	ids   int           // as treeModel's
	fresh *atomic.Int64 // as treeModel's
	// The steps of the lead, of every child and of every grandchild: the
	// lead's hold everyForm, a child's a call of "deep", its grandchild.
	lead, child, grandchild                [][][2]string
	leadTools, childTools, grandchildTools []tool.Tool
	// model, if not nil, is what an agent calls in place of its
	// treeModel.
	model    func(*treeModel) provider.Provider
	leadOpts []agent.Option
	// contextForks makes the spawn tool's forks context forks
	// (subagent.WithContextForks), each of which goes on from the lead's
	// conversation unless its call asks for a fresh one.
	contextForks bool
}

// buildTree builds a three-level tree that delegates in every form: a
// lead whose tools are s.leadTools and the sub-agent tools of everyForm; a
// resident (FromAgent, "expert"), a factory child ("worker"), a FromReact
// child ("improv"), a roster member ("analyst"), and forks, foreground and
// background ("fork"), whose tools are s.childTools and "deep", a factory
// of grandchildren ("grandchild", with s.grandchildTools). It returns the
// lead and the models of each kind of agent, the lead's first.
func buildTree(t *testing.T, s treeSpec) (*agent.React, []*treeModel) {
	t.Helper()
	var models []*treeModel
	model := func(name string, steps [][][2]string) provider.Provider {
		m := &treeModel{name: name, ids: s.ids, steps: steps, fresh: s.fresh}
		models = append(models, m)
		if s.model == nil {
			return m
		}
		return s.model(m)
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
	leadModel := model("lead", s.lead)
	// The grandchildren: one model, a factory per child.
	l2 := model("grandchild", s.grandchild)
	grandchild := func() *subagent.SubAgentTool {
		return must(subagent.FromFactory("deep", "Goes deeper.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return react(l2, "grandchild", agent.WithTools(s.grandchildTools...)), nil
		}, subagent.WithMaxDepth(2)))
	}
	childTools := func() []tool.Tool { return append(slices.Clip(s.childTools), grandchild()) }
	registry := func() *tool.Registry {
		t.Helper()
		r, err := tool.NewRegistry(childTools()...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	expert := must(subagent.FromAgent("expert", "A resident.", react(model("expert", s.child), "expert", agent.WithTools(childTools()...))))
	workerModel := model("worker", s.child)
	worker := must(subagent.FromFactory("worker", "One-shot.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return react(workerModel, "worker", agent.WithTools(childTools()...)), nil
	}))
	improv := must(subagent.FromReact("improv", "Model-defined.", model("improv", s.child), registry()))
	analystModel := model("analyst", s.child)
	analyst := must(subagent.FromFactory("analyst", "A roster member.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return react(analystModel, "analyst", agent.WithTools(childTools()...)), nil
	}))
	spawnOpts := []subagent.SpawnOption{subagent.WithRoster(analyst), subagent.WithBackground()}
	if s.contextForks {
		spawnOpts = append(spawnOpts, subagent.WithContextForks())
	}
	sp, err := subagent.NewSpawner(model("fork", s.child), registry(), spawnOpts...)
	if err != nil {
		t.Fatal(err)
	}
	tools := append(slices.Clip(s.leadTools), expert, worker, improv, sp, sp.JobsTool())
	return react(leadModel, "lead", append([]agent.Option{agent.WithTools(tools...)}, s.leadOpts...)...), models
}

// counts returns what the tree's models asked for and were asked.
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

// The root's policy binds every form of delegation: it sees every tool
// call, every hand-off and every model call of a three-level tree, a call
// it denies never runs, and a secret the lead was given reaches no child,
// no tool and no child's model — whatever ids the models give their
// calls. A form that started its child outside the run's context would
// leave calls unseen here.
func TestPolicyBindsEveryDelegation(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			g := newGuard()
			root, err := policy.New(g,
				policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
				policy.Redact("secrets", []string{secret}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newBypassTree(t, ids, agent.WithPolicy(root))
			out, err := tr.lead.Run(context.Background(), agent.Input{Text: "audit the account with key " + secret})
			if err != nil {
				t.Fatal(err)
			}
			calls, childTasks, requests := tr.counts()
			g.mu.Lock()
			defer g.mu.Unlock()
			// 7 + 1 calls of the lead, 2 of each of its 6 children, 2 of
			// each of their 6 grandchildren.
			if calls != 32 {
				t.Fatalf("the models asked for %d tool calls, want 32: the tree did not run as built", calls)
			}
			if got := g.points[policy.BeforeTool]; got != calls {
				t.Errorf("the root's policy saw %d tool calls; the models asked for %d", got, calls)
			}
			if got := g.points[policy.BeforeDelegation]; got != childTasks || childTasks != 12 {
				t.Errorf("the root's policy saw %d hand-offs; the children started %d tasks (want 12)", got, childTasks)
			}
			if got := g.points[policy.BeforeModel]; got != requests {
				t.Errorf("the root's policy saw %d model calls; the models were asked %d times", got, requests)
			}
			if got, want := g.points[policy.AfterResult], calls-6; got != want {
				t.Errorf("the root's policy saw %d results, want %d (a result for each call not denied)", got, want)
			}
			for _, c := range []*counted{tr.search, tr.lookup, tr.leaf} {
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
			for _, d := range out.Denials {
				if d.Rule != "no-rm" || d.Tool != "rm" || !strings.HasSuffix(d.Path, "/grandchild") {
					t.Errorf("denial %+v", d)
				}
			}
			if b, _ := json.Marshal(tr.models[0].requests[0]); !strings.Contains(string(b), secret) {
				t.Error("the lead's model was not given the secret: the test tries nothing")
			}
			for _, m := range tr.models[1:] {
				for _, req := range m.requests {
					if b, _ := json.Marshal(req); strings.Contains(string(b), secret) {
						t.Errorf("the secret reached %s's model", m.name)
					}
				}
			}
			for _, c := range []*counted{tr.search, tr.lookup, tr.leaf} {
				for _, a := range c.args {
					if strings.Contains(a, secret) {
						t.Errorf("the secret reached the tool %s: %s", c.name, a)
					}
				}
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

// A child's policy adds to the root's, and cannot take from it: an allow
// list wider than the one it extends is refused when it is made and
// when it is put on a context that carries the root's, and the context
// that refusal returns is still bound by the root's.
func TestPolicyChildCannotWiden(t *testing.T) {
	root, err := policy.New(policy.AllowTools("tools", policy.AnyDepth, "search", "lookup", "deep", "leaf", "expert", "worker", "improv", "spawn_*", "subagent_jobs"))
	if err != nil {
		t.Fatal(err)
	}
	var w *policy.Widening
	if _, err := root.Narrow(policy.AllowTools("more", policy.AnyDepth, "search", "rm")); !errors.As(err, &w) || w.Rule != "more" || w.Inherited != "tools" || !strings.Contains(err.Error(), "narrow") {
		t.Fatalf("a wider allow list was accepted: %v", err)
	}
	if _, err := root.Narrow(policy.AllowTools("more", 1, "search*")); err == nil {
		t.Fatal("an allow list with a pattern wider than the inherited list was accepted")
	}
	narrower, err := root.Narrow(policy.AllowTools("fewer", 2, "leaf"))
	if err != nil {
		t.Fatalf("a narrower list was refused: %v", err)
	}
	if len(narrower.Rules()) != 2 {
		t.Fatalf("the narrowed policy has %d rules", len(narrower.Rules()))
	}
	// At run time: a child whose own policy allows everything, under a
	// root that allows no rm.
	loose, err := policy.New(policy.AllowTools("everything", policy.AnyDepth, "*"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := policy.With(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := policy.With(ctx, loose); !errors.As(err, &w) || w.Rule != "everything" || c != ctx {
		t.Fatalf("policy.With took a wider policy onto a context: %v", err)
	}
	if c, err := policy.With(ctx, narrower); err != nil || len(policy.From(c).Rules()) != 2 {
		t.Fatalf("policy.With of a narrower policy: %v", err)
	}
	ctx, _ = policy.With(ctx, loose)
	tr := newBypassTree(t, resumetest.IDsFresh)
	out, err := tr.lead.Run(ctx, agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.rm.runs() != 0 {
		t.Errorf("rm ran %d times under a root that does not allow it", tr.rm.runs())
	}
	if len(out.Denials) != 6 || out.Denials[0].Rule != "tools" {
		t.Errorf("denials %v", out.Denials)
	}
	if _, err := agent.NewReact(tr.models[0], agent.WithPolicy(nil)); !errors.Is(err, agent.ErrInvalidOption) {
		t.Errorf("WithPolicy(nil): %v", err)
	}
}

// Under a journal, a call the root's policy asks about is asked once, at
// whatever depth, and runs once when approved; a denied call stays
// denied across the resume; what ran before the question does not run
// again — whatever ids the models give their calls.
func TestPolicyAskAcrossResume(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			g := newGuard()
			root, err := policy.New(g, policy.DenyTools("no-rm", policy.AnyDepth, "rm"), policy.AskBefore("approve-leaf", "leaf"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			j, err := st.Journal(ctx, "turn")
			if err != nil {
				t.Fatal(err)
			}
			tr := newBypassTree(t, ids, agent.WithPolicy(root))
			// Round after round, every question is answered, alternately
			// yes and no, until the turn ends.
			asked := map[string]bool{}
			approved := 0
			var out agent.Output
			answerRounds(t, ctx, 5, func(rctx context.Context) error {
				var err error
				out, err = tr.lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "go"})
				return err
			}, func(round int, it tool.Interrupt) bool {
				if it.Reason != tool.ApprovalReason || !strings.Contains(it.Message, "approve-leaf") {
					t.Errorf("question %+v", it)
				}
				if asked[it.ID] {
					t.Errorf("round %d: %s was asked again", round, it.ID)
				}
				yes := len(asked)%2 == 0
				asked[it.ID] = true
				if yes {
					approved++
				}
				return yes
			})
			if len(asked) != 6 {
				t.Errorf("%d questions, want one per grandchild's leaf call (6)", len(asked))
			}
			if tr.leaf.runs() != approved {
				t.Errorf("leaf ran %d times after %d approvals", tr.leaf.runs(), approved)
			}
			if tr.rm.runs() != 0 {
				t.Errorf("rm, denied, ran %d times across the resumes", tr.rm.runs())
			}
			if tr.lookup.runs() != 6 || tr.search.runs() != 1 {
				t.Errorf("lookup ran %d times, search %d: what ran before a question ran again", tr.lookup.runs(), tr.search.runs())
			}
			if got := strings.Count(out.Answer, "did not approve"); got != len(asked)-approved {
				t.Errorf("the answer tells of %d refusals, want %d: %s", got, len(asked)-approved, out.Answer)
			}
		})
	}
}
