package temporal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The policy of the lead's workers binds a resident expert as it binds
// any sub-agent: each call's hand-off (the task, a secret in it
// redacted), the resident's model calls (as a sub-agent's, one level
// below its caller) and its tool calls, of which a denied one never runs —
// whatever ids the model gives its calls. A call that names its caller is
// checked at the caller's path and depth, and the resident's run under
// it, as the same tree is checked in process; one that names none is made
// from outside any agent.
func TestPolicyBindsAResidentOnTemporal(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		expert := &steps{name: "expert", id: id, n: new(atomic.Int64), steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"rm", `{}`}}}}
		tools := &countedTools{args: map[string][]string{}}
		reg, err := tool.NewRegistry(tools.tool(t, "search"), tools.tool(t, "rm"))
		if err != nil {
			t.Fatal(err)
		}
		w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
		depths := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
		places := &placeSet{seen: map[string]bool{}}
		pol, err := policy.New(w, places, policy.Func("depths", func(ctx context.Context, c *policy.Check) policy.Decision {
			return depths.Decide(ctx, &policy.Check{Point: c.Point, Tool: c.Tool, Path: fmt.Sprint(c.Depth)})
		}), policy.DenyTools("no-rm", policy.AnyDepth, "rm"), policy.Redact("secrets", []string{temporalSecret}),
			policy.Func("no-forbidden", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation && strings.HasPrefix(c.Task, "forbidden") {
					return policy.Denied("not for the expert")
				}
				return policy.Decision{}
			}))
		if err != nil {
			t.Fatal(err)
		}
		queue := fmt.Sprintf("deputy-resident-policy-%d", time.Now().UnixNano())
		wk := worker.New(c, queue, worker.Options{})
		Register(wk, &Runtime{Providers: map[string]provider.Provider{"m": expert}, Tools: reg, Policy: pol})
		if err := wk.Start(); err != nil {
			t.Fatal(err)
		}
		defer wk.Stop()
		res, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "resident-" + queue, TaskQueue: queue}, ResidentWorkflowName,
			ResidentInput{Spec: Spec{Name: "expert", Provider: "m", Tools: []string{"search", "rm"}}})
		if err != nil {
			t.Fatal(err)
		}
		// Each call names its caller but the first, made from outside any
		// agent.
		callers := []string{"", "lead", "lead/planner"}
		asks := len(callers)
		for i, caller := range callers {
			args := []any{fmt.Sprintf("audit %d with key %s", i, temporalSecret)}
			if caller != "" {
				args = append(args, caller)
			}
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: res.GetID(), UpdateName: AskUpdate,
				Args: args, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := h.Get(ctx, &out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.Answer, "search done") || !strings.Contains(out.Answer, "rm is not allowed here") {
				t.Errorf("the resident answered %q, want search's result and rm's denial", out.Answer)
			}
		}
		// A hand-off the policy denies fails the call, and the resident
		// never runs it.
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: res.GetID(), UpdateName: AskUpdate,
			Args: []any{"forbidden work", "lead"}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Get(ctx, new(RunOutput)); err == nil || !strings.Contains(err.Error(), `"no-forbidden" denied the hand-off to expert at lead`) {
			t.Errorf("a denied hand-off: %v", err)
		}
		// A caller's path with an empty name in it is refused before the
		// call is taken, with what to send.
		h, err = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: res.GetID(), UpdateName: AskUpdate,
			Args: []any{"audit", "lead//planner"}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, new(RunOutput))
		}
		if err == nil || !strings.Contains(err.Error(), "empty name") {
			t.Errorf("a call from %q: %v, want it refused", "lead//planner", err)
		}
		if err := c.SignalWorkflow(ctx, res.GetID(), "", CloseSignal, nil); err != nil {
			t.Fatal(err)
		}
		if err := res.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		requests, leaked := expert.sent(temporalSecret)
		if expert.calls != 2*asks || requests != 2*asks {
			t.Fatalf("the resident's model asked for %d calls in %d requests, want %d in %d: it did not run as built", expert.calls, requests, 2*asks, 2*asks)
		}
		if tools.runs("rm") != 0 || tools.runs("search") != asks {
			t.Errorf("rm, denied, ran %d times and search %d times (want 0 and %d)", tools.runs("rm"), tools.runs("search"), asks)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.tools["rm"] != asks || w.tools["search"] != asks {
			t.Errorf("the policy saw %d calls of rm and %d of search, want %d of each", w.tools["rm"], w.tools["search"], asks)
		}
		if got := w.points[policy.BeforeModel]; got != requests {
			t.Errorf("the policy saw %d model calls; the model was asked %d times", got, requests)
		}
		if got := w.points[policy.BeforeDelegation]; got != asks+1 {
			t.Errorf("the policy saw %d hand-offs to the resident, want %d", got, asks+1)
		}
		if got := w.points[policy.AfterResult]; got != 2*asks {
			t.Errorf("the policy saw %d results, want search's %d and the resident's answers", got, 2*asks)
		}
		for _, want := range []string{"tool search@expert", "tool rm@expert", "model @expert", "delegation expert@", "result expert@"} {
			if !w.paths[want] {
				t.Errorf("no check %q; the checks were %v", want, w.paths)
			}
		}
		depths.mu.Lock()
		defer depths.mu.Unlock()
		for _, want := range []string{"tool search@1", "tool rm@1", "model @1", "delegation expert@0", "result expert@0", "model @2", "delegation expert@1"} {
			if !depths.paths[want] {
				t.Errorf("no check %q (point tool@depth); the checks were %v", want, depths.paths)
			}
		}
		// The calls that named a caller were checked where the same tree
		// is checked in process, the caller's path and depth and the
		// resident's run below it.
		places.mu.Lock()
		defer places.mu.Unlock()
		for _, caller := range callers[1:] {
			for want := range residentChecksInProcess(t, caller, id) {
				if !places.seen[want] {
					t.Errorf("the call from %s: no check %q, which the same tree makes in process; the checks were %v", caller, want, places.seen)
				}
			}
		}
		for got := range places.seen {
			if strings.Contains(got, "@lead") && !strings.Contains(got, "@lead/expert#") && !strings.Contains(got, "@lead/planner/expert#") &&
				!strings.HasSuffix(got, "@lead#0") && !strings.HasSuffix(got, "@lead/planner#1") {
				t.Errorf("a check %q stands where no agent of the tree does", got)
			}
		}
		if leaked {
			t.Error("the secret in the task reached the resident's model")
		}
		tools.mu.Lock()
		defer tools.mu.Unlock()
		for name, args := range tools.args {
			for _, a := range args {
				if strings.Contains(a, temporalSecret) {
					t.Errorf("the secret reached the tool %s: %s", name, a)
				}
			}
		}
	})
}

// placeSet is a rule that keeps each check's point, tool, path and depth
// ("point tool@path#depth").
type placeSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (p *placeSet) Name() string { return "places" }

func (p *placeSet) Decide(_ context.Context, c *policy.Check) policy.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[fmt.Sprintf("%s %s@%s#%d", c.Point, c.Tool, c.Path, c.Depth)] = true
	return policy.Decision{}
}

// residentChecksInProcess returns the checks (placeSet's) a policy makes
// in process when the agent at caller ("lead/planner": a lead that
// consults a planner, which consults the resident) calls a resident
// expert (subagent.FromAgent) that calls search and rm, as the resident of
// TestPolicyBindsAResidentOnTemporal does: the hand-off to the resident
// and its answer, and the resident's own model and tool calls (not the
// caller's own model calls and its call of the resident's tool, which a
// caller outside Temporal makes).
func residentChecksInProcess(t *testing.T, caller string, id func(n int64, i int) string) map[string]bool {
	t.Helper()
	places := &placeSet{seen: map[string]bool{}}
	pol, err := policy.New(places, policy.DenyTools("no-rm", policy.AnyDepth, "rm"))
	if err != nil {
		t.Fatal(err)
	}
	tools := &countedTools{args: map[string][]string{}}
	n := new(atomic.Int64)
	react := func(m provider.Provider, name string, tools ...tool.Tool) *agent.React {
		a, err := agent.NewReact(m, agent.WithName(name), agent.WithTools(tools...))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	resident := react(&steps{name: "expert", id: id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}, {"rm", `{}`}}}}, "expert", tools.tool(t, "search"), tools.tool(t, "rm"))
	var next tool.Tool
	next, err = subagent.FromAgent("expert", "A resident.", resident)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(caller, "/")
	var lead *agent.React
	for i := len(names) - 1; i >= 0; i-- {
		a := react(&steps{name: names[i], id: id, n: n, steps: [][][2]string{{{next.Definition().Name, `{"task":"{task}"}`}}}}, names[i], next)
		if i == 0 {
			lead = a
			break
		}
		if next, err = subagent.FromAgent(names[i], "Consults.", a); err != nil {
			t.Fatal(err)
		}
	}
	ctx, err := policy.With(context.Background(), pol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Run(ctx, agent.Input{Text: "audit"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for c := range places.seen {
		if strings.Contains(c, "/expert#") || strings.HasPrefix(c, "delegation expert@") || strings.HasPrefix(c, "result expert@") {
			out[c] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("in process, the resident was not called from %s: the checks were %v", caller, places.seen)
	}
	return out
}
