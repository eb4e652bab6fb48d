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
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// failsOn is a guardrail that fails a text holding word.
func failsOn(name string, stage policy.Stage, retry bool, word string) policy.Guardrail {
	return policy.Guardrail{Name: name, Stage: stage, Retry: retry, Check: func(_ context.Context, text string) (policy.Finding, error) {
		if strings.Contains(text, word) {
			return policy.Finding{Problem: "the text is not clean"}, nil
		}
		return policy.Finding{}, nil
	}}
}

// judgeModel is a judge's model: it fails a text that holds "DIRTY" and
// passes any other, and counts what it was asked.
type judgeModel struct {
	calls atomic.Int64
	usage provider.Usage
}

func (m *judgeModel) Name() string { return "judgeco" }

func (m *judgeModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	m.calls.Add(1)
	text := req.Messages[len(req.Messages)-1].Content
	answer := `{"pass": true}`
	if strings.Contains(text, "DIRTY") {
		answer = `{"pass": false, "problem": "the answer is dirty"}`
	}
	return provider.Response{Message: provider.AssistantMessage(answer), Model: "judge-1", Usage: m.usage}, nil
}

// formLead returns a lead whose one child, named kid, is delegated to in
// the form given, guarded by gs; model scripts every agent. It returns
// the lead and the arguments of the lead's call to the child.
func formLead(t *testing.T, form string, model *fake.Provider, gs ...policy.Guardrail) (*agent.React, tool.Tool) {
	t.Helper()
	return formLeadWith(t, form, model, nil, gs...)
}

// formLeadWith is formLead with options of the lead's.
func formLeadWith(t *testing.T, form string, model *fake.Provider, leadOpts []agent.Option, gs ...policy.Guardrail) (*agent.React, tool.Tool) {
	t.Helper()
	kid := func() agent.Agent {
		a, err := agent.NewReact(model, agent.WithName("kid"))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	factory := func(context.Context, json.RawMessage) (agent.Agent, error) { return kid(), nil }
	var tl tool.Tool
	var err error
	switch form {
	case "factory":
		tl, err = subagent.FromFactory("kid", "A child.", factory, subagent.WithGuardrails(gs...))
	case "react":
		tl, err = subagent.FromReact("kid", "A child.", model, nil, subagent.WithGuardrails(gs...))
	case "resident":
		tl, err = subagent.FromAgent("kid", "A child.", kid(), subagent.WithGuardrails(gs...))
	case "roster":
		var m *subagent.SubAgentTool
		if m, err = subagent.FromFactory("kid", "A child.", factory, subagent.WithGuardrails(gs...)); err == nil {
			tl, err = subagent.NewSpawner(model, nil, subagent.WithRoster(m))
		}
	case "fork":
		tl, err = subagent.NewSpawner(model, nil, subagent.WithForkName("kid"), subagent.WithGuardrails(gs...))
	}
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, append([]agent.Option{agent.WithName("lead"), agent.WithTools(tl)}, leadOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lead, tl
}

// callKid is the lead's call of its child in form, with task.
func callKid(form, task string) fake.Reply {
	switch form {
	case "roster":
		return fake.Call(subagent.SpawnToolName, fmt.Sprintf(`{"task":%q,"agent":"kid"}`, task)).For("lead")
	case "fork":
		return fake.Call(subagent.SpawnToolName, fmt.Sprintf(`{"task":%q}`, task)).For("lead")
	}
	return fake.Call("kid", fmt.Sprintf(`{"task":%q}`, task)).For("lead")
}

var forms = []string{"factory", "react", "resident", "roster", "fork"}

// events collects a run's events.
type events struct {
	mu  sync.Mutex
	all []event.Event
}

func (e *events) Emit(ev event.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// guardrailDecisions returns the verdicts of the guardrail events, as
// "name:stage:verdict:path".
func (e *events) guardrailDecisions(t *testing.T) []string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		if ev.Type != event.Custom || ev.Name != policy.GuardrailEvent {
			continue
		}
		var v struct{ Guardrail, Stage, Verdict, Path string }
		if err := json.Unmarshal(ev.Value, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v.Guardrail+":"+v.Stage+":"+v.Verdict+":"+v.Path)
	}
	return out
}

// A tripped output guardrail stops the lead's run in every form of
// delegation: the Go caller finds the *policy.GuardrailError, an event
// names the guardrail, and the lead's model never reads the answer.
func TestGuardrailTripwireStopsTheRun(t *testing.T) {
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "write the plan"),
				fake.Text("the SECRET-PLAN is here").For("kid"),
				fake.Text("never sent").For("lead"),
			)
			lead, _ := formLead(t, form, model, failsOn("no-plans", policy.Output, false, "SECRET-PLAN"))
			var evs events
			out, err := lead.Run(event.WithSink(context.Background(), &evs), agent.Input{Text: "go"})
			var g *policy.GuardrailError
			if !errors.As(err, &g) || !g.Tripwire || g.Guardrail != "no-plans" || g.Stage != policy.Output || g.Path != "lead/kid" {
				t.Fatalf("err = %v, want a tripwire of no-plans at lead/kid", err)
			}
			if !errors.Is(err, policy.ErrGuardrail) || tool.IsCorrectable(err) {
				t.Errorf("err %v: want ErrGuardrail, not correctable", err)
			}
			if strings.Contains(err.Error(), "SECRET-PLAN") || strings.Contains(out.Answer, "SECRET-PLAN") {
				t.Errorf("the tripped answer went on: %v / %q", err, out.Answer)
			}
			if n := len(model.RequestsFor("lead")); n != 1 {
				t.Errorf("the lead's model was asked %d times, want 1: it read the child's answer", n)
			}
			if got := evs.guardrailDecisions(t); len(got) != 1 || got[0] != "no-plans:output:trip:lead/kid" {
				t.Errorf("decisions %v", got)
			}
			if out.ChildUsage.Requests != 1 {
				t.Errorf("the child's usage is lost: %+v", out.ChildUsage)
			}
		})
	}
}

// A tripwire deep in the tree stops every run up to the top: the middle
// agent's model does not read the grandchild's answer, nor the lead's the
// middle's failure.
func TestGuardrailTripwireStopsEveryRunAbove(t *testing.T) {
	model := fake.NewProvider(
		fake.Call("mid", `{"task":"a"}`).For("lead"),
		fake.Call("deep", `{"task":"b"}`).For("mid"),
		fake.Text("SECRET-PLAN").For("deep"),
		fake.Text("never").For("mid"),
		fake.Text("never").For("lead"),
	)
	deep, err := subagent.FromFactory("deep", "Deeper.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("deep"))
	}, subagent.WithMaxDepth(2), subagent.WithGuardrails(failsOn("no-plans", policy.Output, false, "SECRET-PLAN")))
	if err != nil {
		t.Fatal(err)
	}
	mid, err := subagent.FromFactory("mid", "Middle.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("mid"), agent.WithTools(deep))
	})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(mid))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lead.Run(context.Background(), agent.Input{Text: "go"})
	var g *policy.GuardrailError
	if !errors.As(err, &g) || !g.Tripwire || g.Path != "lead/mid/deep" {
		t.Fatalf("err = %v, want the tripwire at lead/mid/deep", err)
	}
	if l, m := len(model.RequestsFor("lead")), len(model.RequestsFor("mid")); l != 1 || m != 1 {
		t.Errorf("lead asked %d times, mid %d: a run above the tripwire went on", l, m)
	}
}

// A tripped input guardrail stops the run before the child starts.
func TestGuardrailInputTripwire(t *testing.T) {
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "rm -rf the FORBIDDEN dir"),
				fake.Text("done").For("kid"),
				fake.Text("never").For("lead"),
			)
			lead, _ := formLead(t, form, model, failsOn("no-forbidden", policy.Input, false, "FORBIDDEN"))
			_, err := lead.Run(context.Background(), agent.Input{Text: "go"})
			var g *policy.GuardrailError
			if !errors.As(err, &g) || !g.Tripwire || g.Stage != policy.Input {
				t.Fatalf("err = %v, want an input tripwire", err)
			}
			if n := len(model.RequestsFor("kid")); n != 0 {
				t.Errorf("the child's model was asked %d times: it started", n)
			}
		})
	}
}

// A guardrail with Retry sends the answer back once, in every form; a
// second failure fails the child, and the lead's model reads why, not the
// answer.
func TestGuardrailCorrection(t *testing.T) {
	for _, form := range forms {
		t.Run(form+"/corrected", func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "write it"),
				fake.Text("a DIRTY answer").For("kid"),
				fake.Text("a clean answer").For("kid"),
				fake.Text("thanks").For("lead"),
			)
			lead, _ := formLead(t, form, model, failsOn("clean", policy.Output, true, "DIRTY"))
			var evs events
			out, err := lead.Run(event.WithSink(context.Background(), &evs), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			kid := model.RequestsFor("kid")
			if len(kid) != 2 {
				t.Fatalf("the child was asked %d times, want 2", len(kid))
			}
			retry := kid[1].Messages[len(kid[1].Messages)-1].Content
			if !strings.Contains(retry, `rejected by the guardrail "clean": the text is not clean`) {
				t.Errorf("the corrective run was told %q", retry)
			}
			leadReqs := model.RequestsFor("lead")
			read := leadReqs[len(leadReqs)-1].Messages
			if got := read[len(read)-1].Content; !strings.Contains(got, "a clean answer") || strings.Contains(got, "DIRTY") {
				t.Errorf("the lead read %q", got)
			}
			if out.ChildUsage.Requests != 2 {
				t.Errorf("child usage %+v, want both runs", out.ChildUsage)
			}
			if got := evs.guardrailDecisions(t); fmt.Sprint(got) != "[clean:output:retry:lead/kid clean:output:pass:lead/kid]" {
				t.Errorf("decisions %v", got)
			}
		})
		t.Run(form+"/failed twice", func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "write it"),
				fake.Text("a DIRTY answer").For("kid"),
				fake.Text("DIRTY again").For("kid"),
				fake.Text("the child failed").For("lead"),
			)
			lead, _ := formLead(t, form, model, failsOn("clean", policy.Output, true, "DIRTY"))
			if _, err := lead.Run(context.Background(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if n := len(model.RequestsFor("kid")); n != 2 {
				t.Errorf("the child was asked %d times, want 2 (one correction)", n)
			}
			leadReqs := model.RequestsFor("lead")
			last := leadReqs[len(leadReqs)-1].Messages
			res := last[len(last)-1]
			if !res.IsError || !strings.Contains(res.Content, `guardrail "clean" rejected the answer of lead/kid again`) || strings.Contains(res.Content, "DIRTY") {
				t.Errorf("the lead read %+v", res)
			}
		})
	}
}

// A child whose answer a guardrail rejects after it spent its share of
// its parent's budget is not sent back: it fails, and its parent's model
// reads that the answer was not corrected and why, not that it failed
// again after a correction — in every form of sub-agent.
func TestGuardrailFailurePastTheShareIsNotRetried(t *testing.T) {
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "write it"),
				fake.Text("a DIRTY answer").For("kid").WithUsage(provider.Usage{InputTokens: 98_000, OutputTokens: 10, Requests: 1}),
				fake.Text("the child failed").For("lead"),
			)
			lead, _ := formLeadWith(t, form, model, []agent.Option{agent.WithTokenLimit(100_000)}, failsOn("clean", policy.Output, true, "DIRTY"))
			if _, err := lead.Run(context.Background(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if n := len(model.RequestsFor("kid")); n != 1 {
				t.Errorf("the child was asked %d times, want 1 (no correction)", n)
			}
			leadReqs := model.RequestsFor("lead")
			var res provider.Message // the child's result (a budget note may follow it)
			for _, m := range leadReqs[len(leadReqs)-1].Messages {
				if m.Role == provider.RoleTool {
					res = m
				}
			}
			if !res.IsError || !strings.Contains(res.Content, `guardrail "clean" rejected the answer of lead/kid, which was not sent back for correction (the sub-agent's share of its parent's budget could not pay`) ||
				strings.Contains(res.Content, "again") || strings.Contains(res.Content, "DIRTY") {
				t.Errorf("the lead read %+v", res)
			}
		})
	}
}

// A Go caller of a sub-agent tool tells a correction that failed twice
// (the child failed; its model may try another way) from a tripwire.
func TestGuardrailOutcomeForTheGoCaller(t *testing.T) {
	for _, retry := range []bool{true, false} {
		model := fake.NewProvider(fake.Text("DIRTY").For("kid"), fake.Text("DIRTY").For("kid"))
		_, tl := formLead(t, "factory", model, failsOn("clean", policy.Output, retry, "DIRTY"))
		_, err := tl.Call(context.Background(), tool.Call{ID: "c1", Name: "kid", Arguments: json.RawMessage(`{"task":"t"}`)})
		var g *policy.GuardrailError
		if !errors.As(err, &g) || g.Tripwire == retry || g.Guardrail != "clean" {
			t.Fatalf("retry=%v: err = %v", retry, err)
		}
		if retry != errors.Is(err, subagent.ErrChildFailed) || retry != tool.IsCorrectable(err) {
			t.Errorf("retry=%v: err = %v: a failed correction is the child's failure, a tripwire is not", retry, err)
		}
	}
}

// A judge's model call is priced and counted like any call: in the
// lead's Output (usage and cost), in the tree's ledger (the child's Node),
// and its own events stay out of the stream.
func TestGuardrailJudgeUsage(t *testing.T) {
	jm := &judgeModel{usage: provider.Usage{InputTokens: 40, OutputTokens: 4, Requests: 1}}
	judge, err := subagent.Judge(jm, "Fail a dirty answer.")
	if err != nil {
		t.Fatal(err)
	}
	model := fake.NewProvider(
		fake.Call("kid", `{"task":"write it"}`).For("lead"),
		fake.Text("a DIRTY answer").For("kid"),
		fake.Text("a clean answer").For("kid"),
		fake.Text("thanks").For("lead"),
	)
	prices, err := provider.NewPrices(map[string]provider.Price{"judge-1": {Input: 0.01, Output: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	lead, _ := formLeadWith(t, "factory", model, []agent.Option{agent.WithPrices(prices)},
		policy.Guardrail{Name: "judged", Stage: policy.Output, Retry: true, Check: judge})
	var evs events
	tree := subagent.NewTree(&evs)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if n := jm.calls.Load(); n != 2 {
		t.Fatalf("judge asked %d times, want 2", n)
	}
	if out.ChildUsage.Requests != 4 || out.ChildUsage.InputTokens < 80 {
		t.Errorf("child usage %+v: want the child's 2 requests and the judge's 2 (80 input tokens)", out.ChildUsage)
	}
	if want := 2 * (40*0.01 + 4*0.1); out.Cost < want-1e-9 || out.Cost > want+1e-9 {
		t.Errorf("cost %v, want the judge's %v", out.Cost, want)
	}
	roots := tree.Roots()
	if len(roots) != 1 {
		t.Fatalf("%d roots", len(roots))
	}
	found := false
	for _, m := range roots[0].Usage {
		if m.Provider == "judgeco" && m.Model == "judge-1" {
			found = m.Usage.InputTokens == 80 && m.Cost > 1.59
		}
	}
	if !found {
		t.Errorf("the child's node does not count the judge: %+v", roots[0].Usage)
	}
	evs.mu.Lock()
	defer evs.mu.Unlock()
	for _, e := range evs.all {
		if strings.Contains(e.Delta+e.Content, `"pass"`) {
			t.Errorf("the judge's own event went out: %+v", e)
		}
	}
}

// A top-level agent's own guardrails: its input is checked before its
// model is asked, its answer before the caller gets it; a tripped answer
// is left out of the Output; a judge's usage counts in ChildUsage.
func TestGuardrailOnTheTopLevelAgent(t *testing.T) {
	jm := &judgeModel{usage: provider.Usage{InputTokens: 40, OutputTokens: 4, Requests: 1}}
	judge, err := subagent.Judge(jm, "Fail anything dirty.")
	if err != nil {
		t.Fatal(err)
	}
	build := func(model *fake.Provider, gs ...policy.Guardrail) *agent.React {
		a, err := agent.NewReact(model, agent.WithName("lead"), agent.WithGuardrails(gs...))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	t.Run("input tripwire", func(t *testing.T) {
		model := fake.NewProvider(fake.Text("never"))
		_, err := build(model, policy.Guardrail{Name: "in", Stage: policy.Input, Check: judge}).Run(context.Background(), agent.Input{Text: "a DIRTY request"})
		var g *policy.GuardrailError
		if !errors.As(err, &g) || !g.Tripwire || g.Stage != policy.Input || g.Path != "lead" || g.Problem != "the answer is dirty" {
			t.Fatalf("err = %v", err)
		}
		if model.Calls() != 0 {
			t.Errorf("the model was asked %d times", model.Calls())
		}
	})
	t.Run("output tripwire", func(t *testing.T) {
		model := fake.NewProvider(fake.Text("DIRTY words"))
		out, err := build(model, failsOn("out", policy.Output, false, "DIRTY")).Run(context.Background(), agent.Input{Text: "hi"})
		var g *policy.GuardrailError
		if !errors.As(err, &g) || !g.Tripwire || g.Stage != policy.Output {
			t.Fatalf("err = %v", err)
		}
		if out.Answer != "" {
			t.Errorf("answer %q", out.Answer)
		}
		for _, m := range out.Messages {
			if strings.Contains(m.Content, "DIRTY") {
				t.Errorf("the tripped answer is in the Output's messages: %+v", m)
			}
		}
	})
	t.Run("correction by a judge", func(t *testing.T) {
		jm.calls.Store(0)
		model := fake.NewProvider(fake.Text("DIRTY words"), fake.Text("kind words"))
		out, err := build(model, policy.Guardrail{Name: "in", Stage: policy.Input, Check: judge},
			policy.Guardrail{Name: "out", Stage: policy.Output, Retry: true, Check: judge}).Run(context.Background(), agent.Input{Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if out.Answer != "kind words" || jm.calls.Load() != 3 {
			t.Errorf("answer %q after %d judge calls, want the corrected one after 3", out.Answer, jm.calls.Load())
		}
		if out.ChildUsage.InputTokens != 120 || out.ChildUsage.Requests != 3 {
			t.Errorf("child usage %+v: want the judge's three calls", out.ChildUsage)
		}
		reqs := model.Requests()
		if last := reqs[1].Messages[len(reqs[1].Messages)-1].Content; !strings.Contains(last, `rejected by the guardrail "out": the answer is dirty`) {
			t.Errorf("the correction said %q", last)
		}
	})
	t.Run("failed twice", func(t *testing.T) {
		model := fake.NewProvider(fake.Text("DIRTY"), fake.Text("DIRTY still"))
		_, err := build(model, failsOn("out", policy.Output, true, "DIRTY")).Run(context.Background(), agent.Input{Text: "hi"})
		var g *policy.GuardrailError
		if !errors.As(err, &g) || g.Tripwire || model.Calls() != 2 {
			t.Fatalf("err = %v after %d calls", err, model.Calls())
		}
	})
}

// Bad guardrails are refused when the agent or the tool is built.
func TestGuardrailRefusedAtConstruction(t *testing.T) {
	ok := func(context.Context, string) (policy.Finding, error) { return policy.Finding{}, nil }
	for name, gs := range map[string][]policy.Guardrail{
		"no name":     {{Stage: policy.Output, Check: ok}},
		"no check":    {{Name: "a", Stage: policy.Output}},
		"no stage":    {{Name: "a", Check: ok}},
		"input retry": {{Name: "a", Stage: policy.Input, Retry: true, Check: ok}},
		"same name":   {{Name: "a", Stage: policy.Input, Check: ok}, {Name: "a", Stage: policy.Output, Check: ok}},
	} {
		if _, err := agent.NewReact(fake.NewProvider(), agent.WithGuardrails(gs...)); !errors.Is(err, agent.ErrInvalidOption) {
			t.Errorf("%s: agent: %v", name, err)
		}
		if _, err := subagent.FromFactory("kid", "A child.", func(context.Context, json.RawMessage) (agent.Agent, error) { return nil, nil },
			subagent.WithGuardrails(gs...)); err == nil {
			t.Errorf("%s: subagent: no error", name)
		}
	}
	if _, err := subagent.Judge(nil, "x"); err == nil {
		t.Error("Judge(nil): no error")
	}
	if _, err := subagent.Judge(fake.NewProvider(), " "); err == nil {
		t.Error("Judge without instructions: no error")
	}
}

// Under a journal, a guardrail's judge is asked once per check over the
// whole turn: a resumed run replays the verdicts of the checks made before
// the question (the lead's input, a child that finished, and a child that
// asked it, which runs again), at no new cost, and counts them once; each
// decision, a sub-agent tool's too, is reported once over the turn (one
// deputy.guardrail event); nothing that ran runs again — whatever ids the
// models give their calls.
func TestGuardrailJudgeAcrossResume(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			jm := &judgeModel{usage: provider.Usage{InputTokens: 1000, OutputTokens: 1, Requests: 1}}
			judge, err := subagent.Judge(jm, "Fail anything dirty.")
			if err != nil {
				t.Fatal(err)
			}
			both := []policy.Guardrail{{Name: "in", Stage: policy.Input, Check: judge}, {Name: "out", Stage: policy.Output, Retry: true, Check: judge}}
			fresh := new(atomic.Int64)
			lookup, pay := &counted{name: "lookup"}, &counted{name: "pay"}
			child := func(name string, tl tool.Tool) *subagent.SubAgentTool {
				m := &treeModel{name: name, ids: ids, fresh: fresh, steps: [][][2]string{{{tl.Definition().Name, `{}`}}}}
				st, err := subagent.FromFactory(name, "A child.", func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(m, agent.WithName(name), agent.WithTools(tl))
				}, subagent.WithGuardrails(both...))
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			ask, err := policy.New(policy.AskBefore("approve-pay", "pay"))
			if err != nil {
				t.Fatal(err)
			}
			leadModel := &treeModel{name: "lead", ids: ids, fresh: fresh, steps: [][][2]string{{{"finder", `{"task":"{task}"}`}, {"payer", `{"task":"{task}"}`}}}}
			lead, err := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(child("finder", lookup), child("payer", pay)),
				agent.WithPolicy(ask), agent.WithGuardrails(both...))
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			seen := &events{}
			ctx := event.WithSink(context.Background(), seen)
			j, err := st.Journal(ctx, "turn")
			if err != nil {
				t.Fatal(err)
			}
			out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("first run: %v", err)
			}
			if n := jm.calls.Load(); n != 4 {
				t.Fatalf("the judge was asked %d times before the question, want 4 (the lead's input; the finder's input and answer; the payer's input)", n)
			}
			rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out, err = lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			if n := jm.calls.Load(); n != 6 {
				t.Errorf("the judge was asked %d times over the turn, want 6: the payer's answer and the lead's are new, the rest replayed", n)
			}
			if lookup.runs() != 1 || pay.runs() != 1 {
				t.Errorf("lookup ran %d times, pay %d: want once each", lookup.runs(), pay.runs())
			}
			decisions := seen.guardrailDecisions(t)
			slices.Sort(decisions)
			want := []string{"in:input:pass:lead", "in:input:pass:lead/finder", "in:input:pass:lead/payer",
				"out:output:pass:lead", "out:output:pass:lead/finder", "out:output:pass:lead/payer"}
			if !slices.Equal(decisions, want) {
				t.Errorf("the guardrails' decisions reported over the turn:\n%s\nwant each once:\n%s", strings.Join(decisions, "\n"), strings.Join(want, "\n"))
			}
			// Every check counts once in what the turn spent: six judge
			// calls of 1000 input tokens, and the children's four model
			// calls of 10.
			if out.ChildUsage.InputTokens != 6*1000+4*10 {
				t.Errorf("child usage %+v: want 6040 input tokens", out.ChildUsage)
			}
		})
	}
}

// A guardrail's decision says whose run it was made in, as a policy's
// does: its event names the run's owner and thread, in every form of
// delegation.
func TestGuardrailEventsNameTheOwnerAndThread(t *testing.T) {
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			model := fake.NewProvider(
				callKid(form, "write the plan"),
				fake.Text("the SECRET-PLAN is here").For("kid"),
				fake.Text("never sent").For("lead"),
			)
			lead, _ := formLead(t, form, model, failsOn("no-plans", policy.Output, false, "SECRET-PLAN"))
			var evs events
			ctx := agent.WithThread(agent.WithOwner(event.WithSink(context.Background(), &evs), "alice"), "t1")
			if _, err := lead.Run(ctx, agent.Input{Text: "go"}); err == nil {
				t.Fatal("the tripwire did not stop the run")
			}
			evs.mu.Lock()
			defer evs.mu.Unlock()
			seen := 0
			for _, ev := range evs.all {
				if ev.Type != event.Custom || ev.Name != policy.GuardrailEvent {
					continue
				}
				seen++
				var v struct{ Owner, Thread string }
				if err := json.Unmarshal(ev.Value, &v); err != nil {
					t.Fatal(err)
				}
				if v.Owner != "alice" || v.Thread != "t1" {
					t.Errorf("the decision %s names owner %q and thread %q, want alice and t1", ev.Value, v.Owner, v.Thread)
				}
			}
			if seen != 1 {
				t.Errorf("%d guardrail events, want 1", seen)
			}
		})
	}
}
