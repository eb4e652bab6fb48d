package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// widenRules are the policies of the tests of a child whose own policy
// would widen its parent's: the root allows search and the sub-agent
// tools; wide allows rm as well.
func widenRules(t *testing.T) (root, wide *policy.Policy) {
	t.Helper()
	root, err := policy.New(policy.AllowTools("tools", policy.AnyDepth, "search", "expert", "worker", "improv", "spawn_*"))
	if err != nil {
		t.Fatal(err)
	}
	wide, err = policy.New(policy.AllowTools("wide", policy.AnyDepth, "search", "rm"))
	if err != nil {
		t.Fatal(err)
	}
	return root, wide
}

// wantWidening fails t unless err is the refusal of rule "wide", which
// widens the inherited "tools".
func wantWidening(t *testing.T, what string, err error) {
	t.Helper()
	var w *policy.Widening
	if !errors.Is(err, policy.ErrWidens) || !errors.As(err, &w) || w.Rule != "wide" || w.Inherited != "tools" {
		t.Fatalf("%s: %v, want the *policy.Widening of rule \"wide\" over \"tools\"", what, err)
	}
	if !strings.Contains(err.Error(), "Narrow") {
		t.Errorf("%s: the error does not say what to do: %v", what, err)
	}
}

func TestPolicyWideningRefusedWhenBuilt(t *testing.T) {
	root, wide := widenRules(t)
	rm := &counted{name: "rm"}
	search := &counted{name: "search"}
	model := fake.NewProvider(fake.Text("unused")).Loop()
	tools := func(ts ...tool.Tool) *tool.Registry {
		reg, err := tool.NewRegistry(ts...)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	child, err := agent.NewReact(model, agent.WithName("child"), agent.WithTools(rm, search), agent.WithPolicy(wide))
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("expert", "a resident", child)
	if err != nil {
		t.Fatal(err)
	}
	improv, err := subagent.FromReact("improv", "a child per call", model, tools(rm, search), subagent.WithReactOptions(agent.WithPolicy(wide)))
	if err != nil {
		t.Fatal(err)
	}
	spawner, err := subagent.NewSpawner(model, tools(search), subagent.WithRoster(expert))
	if err != nil {
		t.Fatal(err)
	}
	// A child with no policy of its own, whose resident has the wide one.
	middle, err := agent.NewReact(model, agent.WithName("middle"), agent.WithTools(expert))
	if err != nil {
		t.Fatal(err)
	}
	viaMiddle, err := subagent.FromAgent("expert", "a resident over a resident", middle)
	if err != nil {
		t.Fatal(err)
	}
	// Forks whose options give them the wide policy, foreground,
	// background and context forks alike (one template builds them all).
	forks, err := subagent.NewSpawner(model, tools(search), subagent.WithReactOptions(agent.WithPolicy(wide)))
	if err != nil {
		t.Fatal(err)
	}
	contextForks, err := subagent.NewSpawner(model, tools(search), subagent.WithContextForks(), subagent.WithReactOptions(agent.WithPolicy(wide)))
	if err != nil {
		t.Fatal(err)
	}
	for name, sub := range map[string]tool.Tool{"resident": expert, "FromReact": improv, "roster": spawner, "grandchild": viaMiddle, "fork": forks, "context fork": contextForks} {
		for _, opts := range [][]agent.Option{
			{agent.WithTools(sub), agent.WithPolicy(root)},
			{agent.WithPolicy(root), agent.WithTools(sub)},
		} {
			_, err := agent.NewReact(model, opts...)
			if !errors.Is(err, agent.ErrInvalidOption) {
				t.Fatalf("%s: %v, want agent.ErrInvalidOption", name, err)
			}
			wantWidening(t, name, err)
		}
	}
	// A FromReact child given the root's policy and a tool whose resident
	// has the wide one: refused when the tool is built.
	_, err = subagent.FromReact("improv", "a child per call", model, tools(expert), subagent.WithReactOptions(agent.WithPolicy(root)))
	wantWidening(t, "FromReact with both", err)
	// And forks given the root's policy whose tools hold that resident.
	_, err = subagent.NewSpawner(model, tools(expert), subagent.WithReactOptions(agent.WithPolicy(root)))
	wantWidening(t, "forks with both", err)

	// Policies that only add are accepted, in every form.
	for name, p := range narrowerPolicies(t, root) {
		child, err := agent.NewReact(model, agent.WithTools(search), agent.WithPolicy(p))
		if err != nil {
			t.Fatal(err)
		}
		expert, err := subagent.FromAgent("expert", "a resident", child)
		if err != nil {
			t.Fatal(err)
		}
		improv, err := subagent.FromReact("improv", "a child per call", model, tools(search), subagent.WithReactOptions(agent.WithPolicy(p)))
		if err != nil {
			t.Fatal(err)
		}
		spawner, err := subagent.NewSpawner(model, tools(search), subagent.WithRoster(expert))
		if err != nil {
			t.Fatal(err)
		}
		forks, err := subagent.NewSpawner(model, tools(search), subagent.WithContextForks(), subagent.WithReactOptions(agent.WithPolicy(p)))
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range []tool.Tool{expert, improv, spawner, forks} {
			if _, err := agent.NewReact(model, agent.WithTools(sub), agent.WithPolicy(root)); err != nil {
				t.Errorf("%s (%s): a policy that only adds was refused: %v", name, sub.Definition().Name, err)
			}
		}
	}
}

// narrowerPolicies are child policies that only add to root: deny lists,
// redaction, narrower allow lists, root itself.
func narrowerPolicies(t *testing.T, root *policy.Policy) map[string]*policy.Policy {
	t.Helper()
	out := map[string]*policy.Policy{"root": root}
	for name, rules := range map[string][]policy.Rule{
		"deny":     {policy.DenyTools("no-rm", policy.AnyDepth, "rm")},
		"redact":   {policy.Redact("secrets", []string{"sk-123"})},
		"fewer":    {policy.AllowTools("fewer", policy.AnyDepth, "search")},
		"at depth": {policy.AllowTools("deeper", 1, "search")},
	} {
		p, err := policy.New(rules...)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	p, err := root.Narrow(policy.AllowTools("narrowed", 1, "search"))
	if err != nil {
		t.Fatal(err)
	}
	out["Narrow"] = p
	return out
}

// widenLead is a lead with no policy of its own, whose model hands a task
// to tool name and then answers, and the events of its runs.
type widenLead struct {
	model  *fake.Provider
	lead   *agent.React
	mu     sync.Mutex
	events []event.Event
}

func newWidenLead(t *testing.T, sub tool.Tool) *widenLead {
	t.Helper()
	name := sub.Definition().Name
	l := &widenLead{model: fake.NewProvider(fake.Call(name, `{"task":"clean up"}`), fake.Text("done"))}
	lead, err := agent.NewReact(l.model, agent.WithName("lead"), agent.WithTools(sub))
	if err != nil {
		t.Fatal(err)
	}
	l.lead = lead
	return l
}

func (l *widenLead) ctx(p *policy.Policy) context.Context {
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	}))
	ctx, err := policy.With(ctx, p)
	if err != nil {
		panic(err) // the tests give it a policy of their own, on no other
	}
	return ctx
}

// toolResult is what the lead's model read of its call.
func (l *widenLead) toolResult(t *testing.T) string {
	t.Helper()
	reqs := l.model.Requests()
	if len(reqs) < 2 {
		t.Fatalf("the lead's model was asked %d times", len(reqs))
	}
	for _, m := range reqs[1].Messages {
		if m.Role == provider.RoleTool {
			return m.Content
		}
	}
	t.Fatal("the lead's model read no tool result")
	return ""
}

func (l *widenLead) errorCodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var codes []string
	for _, e := range l.events {
		if e.Type == event.SubagentError {
			codes = append(codes, e.Code)
		}
	}
	return codes
}

func TestPolicyWideningRefusedAtRun(t *testing.T) {
	root, wide := widenRules(t)
	for _, form := range []string{"FromFactory", "FromReact", "FromAgent", "FromScoped", "fork", "context fork"} {
		t.Run(form, func(t *testing.T) {
			rm := &counted{name: "rm"}
			childModel := fake.NewProvider(fake.Call("rm", `{}`), fake.Text("removed")).Loop()
			reg, err := tool.NewRegistry(rm)
			if err != nil {
				t.Fatal(err)
			}
			var sub tool.Tool
			switch form {
			case "FromFactory":
				sub, err = subagent.FromFactory("worker", "a child per call", func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(childModel, agent.WithRegistry(reg), agent.WithPolicy(wide))
				})
			case "FromReact":
				sub, err = subagent.FromReact("improv", "a child per call", childModel, reg, subagent.WithReactOptions(agent.WithPolicy(wide)))
			case "FromAgent":
				var child *agent.React
				if child, err = agent.NewReact(childModel, agent.WithRegistry(reg), agent.WithPolicy(wide)); err == nil {
					sub, err = subagent.FromAgent("expert", "a resident", child)
				}
			case "FromScoped":
				sub, err = subagent.FromScoped("expert", "a resident per scope", func(context.Context) (string, error) { return "s1", nil },
					func(string) (agent.Agent, error) {
						return agent.NewReact(childModel, agent.WithRegistry(reg), agent.WithPolicy(wide))
					})
			case "fork":
				sub, err = subagent.NewSpawner(childModel, reg, subagent.WithReactOptions(agent.WithPolicy(wide)))
			case "context fork":
				sub, err = subagent.NewSpawner(childModel, reg, subagent.WithContextForks(), subagent.WithReactOptions(agent.WithPolicy(wide)))
			}
			if err != nil {
				t.Fatal(err)
			}
			// The lead has no policy: the root's comes by the context,
			// which no constructor sees.
			l := newWidenLead(t, sub)
			if _, err := l.lead.Run(l.ctx(root), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if n := childModel.Calls(); n != 0 || rm.runs() != 0 {
				t.Fatalf("the child's model was called %d times and rm ran %d times under a policy the child's would widen", n, rm.runs())
			}
			if got := l.toolResult(t); !strings.Contains(got, `rule "wide"`) || !strings.Contains(got, `rule "tools"`) || !strings.Contains(got, "Narrow") {
				t.Errorf("the lead's model read %q", got)
			}
			if codes := l.errorCodes(); len(codes) != 1 || codes[0] != "policy_widens" {
				t.Errorf("SUBAGENT_ERROR codes %v, want [policy_widens]", codes)
			}
			// A Go caller of the tool finds the typed error.
			_, err = sub.Call(l.ctx(root), tool.Call{ID: "c1", Name: sub.Definition().Name, Arguments: json.RawMessage(`{"task":"clean up"}`)})
			if !errors.Is(err, subagent.ErrChildFailed) {
				t.Errorf("the tool's error %v is not subagent.ErrChildFailed", err)
			}
			wantWidening(t, "the tool's error", err)
			if childModel.Calls() != 0 {
				t.Error("the child's model was called")
			}
		})
	}
	t.Run("top level", func(t *testing.T) {
		model := fake.NewProvider(fake.Text("hi")).Loop()
		a, err := agent.NewReact(model, agent.WithPolicy(wide))
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := policy.With(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Run(ctx, agent.Input{Text: "go"})
		wantWidening(t, "the run's error", err)
		if model.Calls() != 0 {
			t.Error("the model was called")
		}
	})
	t.Run("only adds", func(t *testing.T) {
		for name, p := range narrowerPolicies(t, root) {
			search := &counted{name: "search"}
			childModel := fake.NewProvider(fake.Call("search", `{}`), fake.Text("found")).Loop()
			sub, err := subagent.FromFactory("worker", "a child per call", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(childModel, agent.WithTools(search), agent.WithPolicy(p))
			})
			if err != nil {
				t.Fatal(err)
			}
			l := newWidenLead(t, sub)
			if _, err := l.lead.Run(l.ctx(root), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if search.runs() != 1 || len(l.errorCodes()) != 0 {
				t.Errorf("%s: search ran %d times, SUBAGENT_ERROR codes %v: a policy that only adds was refused", name, search.runs(), l.errorCodes())
			}
		}
	})
}
