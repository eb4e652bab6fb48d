package temporal

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// The policy of the lead's workers binds a resident expert as it binds
// any sub-agent: each call's hand-off (the task, a secret in it
// redacted), the resident's model calls (as a sub-agent's, at depth 1)
// and its tool calls, of which a denied one never runs — whatever ids
// the model gives its calls.
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
		pol, err := policy.New(w, policy.Func("depths", func(ctx context.Context, c *policy.Check) policy.Decision {
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
		const asks = 2
		for i := range asks {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: res.GetID(), UpdateName: AskUpdate,
				Args: []any{fmt.Sprintf("audit %d with key %s", i, temporalSecret)}, WaitForStage: client.WorkflowUpdateStageCompleted})
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
			Args: []any{"forbidden work"}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Get(ctx, new(RunOutput)); err == nil || !strings.Contains(err.Error(), `"no-forbidden" denied the hand-off to expert`) {
			t.Errorf("a denied hand-off: %v", err)
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
		for _, want := range []string{"tool search@1", "tool rm@1", "model @1", "delegation expert@0", "result expert@0"} {
			if !depths.paths[want] {
				t.Errorf("no check %q (point tool@depth); the checks were %v", want, depths.paths)
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
