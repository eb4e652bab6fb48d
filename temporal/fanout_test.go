package temporal

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
)

// coroutines counts, per workflow, the coroutines its code starts and the
// most that were alive at once: the SDK wakes every live coroutine of a
// workflow at each event it applies, so what a workflow task costs grows
// with them.
type coroutines struct {
	interceptor.WorkerInterceptorBase
	mu   sync.Mutex
	live map[string]int
	peak map[string]int
}

func newCoroutines() *coroutines { return &coroutines{live: map[string]int{}, peak: map[string]int{}} }

func (c *coroutines) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &coroutinesIn{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, c: c}
}

func (c *coroutines) peakOf(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak[id]
}

type coroutinesIn struct {
	interceptor.WorkflowInboundInterceptorBase
	c *coroutines
}

func (in *coroutinesIn) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return in.Next.Init(&coroutinesOut{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, c: in.c})
}

type coroutinesOut struct {
	interceptor.WorkflowOutboundInterceptorBase
	c *coroutines
}

func (out *coroutinesOut) Go(ctx workflow.Context, name string, f func(ctx workflow.Context)) workflow.Context {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	c := out.c
	c.mu.Lock()
	c.live[id]++
	c.peak[id] = max(c.peak[id], c.live[id])
	c.mu.Unlock()
	return out.Next.Go(ctx, name, func(ctx workflow.Context) {
		defer func() {
			c.mu.Lock()
			c.live[id]--
			c.mu.Unlock()
		}()
		f(ctx)
	})
}

// A turn of many calls keeps a few coroutines alive in the run, not one a
// call: a lead of 1,000 children whose every workflow task woke 1,000
// coroutines took minutes to replay on a loaded worker after another
// died, past its workflow tasks' timeout, so it was replayed again and
// again and could not be asked or answered. A hundred calls show it (a
// coroutine a call ran a hundred): the SDK's test environment builds a
// whole environment for each child as the lead's coroutine starts it, and
// five hundred of them, under the race detector on a loaded machine, ran
// that coroutine past the second the SDK allows a workflow task.
func TestWideTurnKeepsFewCoroutines(t *testing.T) {
	const n = 100
	p := fanOut(n)
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	count := newCoroutines()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{count}, DeadlockDetectionTimeout: testDeadlockTimeout})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true}, Text: "do it"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("all %d parts done", n); out.Answer != want {
		t.Fatalf("answer %q, want %q", out.Answer, want)
	}
	if calls, _ := p.total(); calls != n+2 {
		t.Fatalf("%d model calls, want %d", calls, n+2)
	}
	// The lead's: the loop that hears its children's questions, and none
	// for its calls.
	if got := count.peakOf("default-test-workflow-id"); got > 4 {
		t.Fatalf("the lead ran %d coroutines at once for a turn of %d calls, want a few", got, n)
	}
}

// BenchmarkWideTurn runs a lead whose one turn spawns 500 children, in
// the SDK's test environment, whose dispatcher wakes coroutines as a
// worker's does: with its calls run from the lead's coroutine, and as
// workflows started before fanOutChange run them, a coroutine a call and
// a local activity a check.
func BenchmarkWideTurn(b *testing.B) {
	const n = 500
	for _, bc := range []struct {
		name    string
		version workflow.Version
	}{{"one-coroutine", 1}, {"coroutine-per-call", workflow.DefaultVersion}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				var ts testsuite.WorkflowTestSuite
				ts.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
				env := ts.NewTestWorkflowEnvironment()
				Register(env, &Runtime{Providers: map[string]provider.Provider{"m": fanOut(n)}})
				env.OnGetVersion(fanOutChange, workflow.DefaultVersion, 1).Return(bc.version)
				env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true}, Text: "do it"})
				var out RunOutput
				if err := env.GetWorkflowResult(&out); err != nil || out.Answer != "all 500 parts done" {
					b.Fatalf("answer %q, error %v", out.Answer, err)
				}
			}
		})
	}
}
