package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// pairTree is a lead whose one tool is written by the user: it runs two
// sub-agents itself, a writer and a deployer, and hands back both
// answers, and, unless silent, both usages. The deployer's deploy tool
// needs a person's approval. Every model bills what it reads and writes,
// and names its calls as ids says.
type pairTree struct {
	ids      int
	silent   bool
	fresh    atomic.Int64
	mu       sync.Mutex
	billed   provider.Usage
	calls    map[string]int            // model calls, by agent
	by       map[string]provider.Usage // billed, by agent
	deploys  atomic.Int64
	lead     *agent.React
	writer   *subagent.SubAgentTool
	deployer *subagent.SubAgentTool
}

func (p *pairTree) bill(who string, req provider.Request, msg provider.Message) provider.Response {
	u := fake.Usage(req, msg)
	p.mu.Lock()
	p.billed = p.billed.Add(u)
	p.calls[who]++
	p.by[who] = p.by[who].Add(u)
	p.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: "fake"}
}

// answered reports whether the last message of req is a tool result.
func answered(req provider.Request) bool {
	return len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == provider.RoleTool
}

func newPairTree(t *testing.T, ids int, silent bool) *pairTree {
	t.Helper()
	p := &pairTree{ids: ids, silent: silent, calls: map[string]int{}, by: map[string]provider.Usage{}}
	return p.build(t)
}

// build makes p's agents and tools afresh, as a process that restarts
// does.
func (p *pairTree) build(t *testing.T) *pairTree {
	t.Helper()
	leadModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		if answered(req) {
			return p.bill("lead", req, provider.AssistantMessage("Both are done: "+req.Messages[len(req.Messages)-1].Content)), nil
		}
		calls := []provider.ToolCall{{Name: "pair", Arguments: json.RawMessage(`{"topic":"release notes"}`)}}
		resumetest.NameCalls(p.ids, calls, &p.fresh)
		return p.bill("lead", req, provider.AssistantMessage("", calls...)), nil
	})
	writerModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		return p.bill("writer", req, provider.AssistantMessage("The notes are written.")), nil
	})
	deployerModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		if answered(req) {
			return p.bill("deployer", req, provider.AssistantMessage("Deployed: "+req.Messages[len(req.Messages)-1].Content)), nil
		}
		calls := []provider.ToolCall{{Name: "deploy", Arguments: json.RawMessage(`{"env":"prod"}`)}}
		resumetest.NameCalls(p.ids, calls, &p.fresh)
		return p.bill("deployer", req, provider.AssistantMessage("", calls...)), nil
	})
	type envIn struct {
		Env string `json:"env"`
	}
	deploy, err := tool.New("deploy", "Deploys the release.", func(_ context.Context, in envIn) (string, error) {
		p.deploys.Add(1)
		return "deployed to " + in.Env, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deployTools, err := tool.NewRegistry(tool.RequireApproval(deploy, "deploys to production", 0))
	if err != nil {
		t.Fatal(err)
	}
	prov := fake.NewProvider(leadModel.For("lead"), writerModel.For("writer"), deployerModel.For("deployer")).Loop().Named("fake", "fake")
	p.writer, err = subagent.FromFactory("writer", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(prov, agent.WithName("writer"))
	})
	if err != nil {
		t.Fatal(err)
	}
	p.deployer, err = subagent.FromFactory("deployer", "Deploys.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(prov, agent.WithName("deployer"), agent.WithRegistry(deployTools))
	})
	if err != nil {
		t.Fatal(err)
	}
	// The user's tool: both sub-agents in turn, both answers and, unless
	// silent, both usages handed back, as tool.Result asks.
	pair := tool.Func{
		Def: tool.Definition{Name: "pair", Description: "Writes the notes, then deploys.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			usage := func(u provider.Usage) provider.Usage {
				if p.silent {
					return provider.Usage{}
				}
				return u
			}
			w, err := p.writer.Call(ctx, tool.Call{ID: c.ID, Name: "writer", Arguments: json.RawMessage(`{"task":"write the notes"}`)})
			if err != nil {
				return tool.Result{Usage: usage(w.Usage)}, err
			}
			d, err := p.deployer.Call(ctx, tool.Call{ID: c.ID, Name: "deployer", Arguments: json.RawMessage(`{"task":"deploy"}`)})
			if err != nil {
				return tool.Result{Usage: usage(w.Usage.Add(d.Usage))}, err
			}
			return tool.Result{Content: w.Content + " / " + d.Content, Usage: usage(w.Usage.Add(d.Usage))}, nil
		},
	}
	p.lead, err = agent.NewReact(prov, agent.WithName("lead"), agent.WithTools(pair))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A tool the user writes that runs two sub-agents itself keeps one
// ledger and one journal: the first run pays for the writer and for the
// deployer's call that asks to deploy, then stops at the question; the
// resumed run pays for neither again (the writer's answer comes from its
// own record in the turn's journal, not the deployer's), deploys once, and
// reports what the models billed over both runs in Output and in the
// Tree's totals, each child on its own node; so too when the process
// restarts between the two runs; and so too when the tool reports none of
// what its sub-agents spent (silent). With models that name their calls
// afresh, not at all, and from call_0.
func TestUserToolRunningTwoSubAgentsKeepsOneLedgerAcrossAResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		for _, restart := range []bool{false, true} {
			for _, silent := range []bool{false, true} {
				t.Run(fmt.Sprint("ids ", ids, " restart ", restart, " silent ", silent), func(t *testing.T) {
					p := newPairTree(t, ids, silent)
					st, err := store.New(memory.New())
					if err != nil {
						t.Fatal(err)
					}
					ctx := t.Context()
					runTurn := func(ctx context.Context) (agent.Output, *subagent.Tree, []event.Event, error) {
						j, err := st.Journal(ctx, "turn-1")
						if err != nil {
							t.Fatal(err)
						}
						var rec recorder
						tree := subagent.NewTree(&rec)
						out, err := p.lead.Run(event.WithSink(agent.WithJournal(ctx, j), tree), agent.Input{Text: "Ship the release."})
						return out, tree, rec.events, err
					}
					_, _, _, err = runTurn(ctx)
					var in *tool.Interrupted
					if !errors.As(err, &in) || len(in.Interrupts) != 1 {
						t.Fatalf("first run: %v, want one question", err)
					}
					rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
					if err != nil {
						t.Fatal(err)
					}
					if restart {
						p.build(t)
					}
					out, tree, _, err := runTurn(rctx)
					if err != nil {
						t.Fatalf("resumed run: %v", err)
					}
					p.mu.Lock()
					defer p.mu.Unlock()
					t.Logf("billed %+v; model calls %v; answer %q", p.billed, p.calls, out.Answer)
					if !strings.Contains(out.Answer, "The notes are written.") || !strings.Contains(out.Answer, "Deployed: deployed to prod") {
						t.Errorf("the lead answered %q, want both children's answers", out.Answer)
					}
					if got := p.deploys.Load(); got != 1 {
						t.Errorf("deployed %d times, want once", got)
					}
					if want := map[string]int{"lead": 2, "writer": 1, "deployer": 2}; fmt.Sprint(p.calls) != fmt.Sprint(want) {
						t.Errorf("model calls %v, want %v: a resumed run pays for nothing twice", p.calls, want)
					}
					if got := out.Usage.Add(out.ChildUsage); got != p.billed {
						t.Errorf("Output counts %+v, the models billed %+v", got, p.billed)
					}
					var nodes provider.Usage
					byName := map[string]provider.Usage{}
					for _, n := range tree.Roots() {
						nodes = nodes.Add(n.TotalUsage())
						byName[n.Name] = byName[n.Name].Add(n.TotalUsage())
					}
					if nodes != tokens(out.ChildUsage) {
						t.Errorf("the Tree counts %+v under the lead, Output.ChildUsage %+v (%v)", nodes, out.ChildUsage, byName)
					}
					for _, name := range []string{"writer", "deployer"} {
						if byName[name] != tokens(p.by[name]) {
							t.Errorf("the Tree counts %+v for the %s, its model billed %+v", byName[name], name, p.by[name])
						}
					}
				})
			}
		}
	}
}

// tokens is u without its count of requests, which the usage of events
// does not carry.
func tokens(u provider.Usage) provider.Usage {
	u.Requests = 0
	return u
}
