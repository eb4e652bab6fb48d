package temporal

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
)

// The floor deputy's workflow tree is measured against is what Temporal
// itself costs for the same work: a parent workflow that makes a model
// call, starts one child workflow per part, each making one model call in
// one activity, and makes a last model call.

const floorModel = "floor.Complete"

// floorParent is the bare parent: its activities and children are the
// same model calls deputy's lead and children make.
func floorParent(ctx workflow.Context, n int) (int, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var r provider.Response
	if err := workflow.ExecuteActivity(actx, floorModel, "go").Get(ctx, &r); err != nil {
		return 0, err
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	futures := make([]workflow.ChildWorkflowFuture, n)
	for i := range futures {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: fmt.Sprintf("%s/%d", id, i)})
		futures[i] = workflow.ExecuteChildWorkflow(cctx, floorChild, fmt.Sprintf("part %d", i))
	}
	done := 0
	for _, f := range futures {
		var c provider.Response
		if err := f.Get(ctx, &c); err != nil {
			return done, err
		}
		done++
	}
	if err := workflow.ExecuteActivity(actx, floorModel, "sum up").Get(ctx, &r); err != nil {
		return done, err
	}
	return done, nil
}

func floorChild(ctx workflow.Context, task string) (provider.Response, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var r provider.Response
	err := workflow.ExecuteActivity(actx, floorModel, task).Get(ctx, &r)
	return r, err
}

// BenchmarkFloor runs, on a real Temporal server, a fan-out of 50 children
// as deputy's workflow tree (AgentWorkflow spawning 50 children, each one
// model call) and as the bare floor above, on one worker, and reports the
// milliseconds per child of each and their ratio (target: at most 1.3).
// It needs DEPUTY_TEST_TEMPORAL, as the server tests do.
func BenchmarkFloor(b *testing.B) {
	hostPort := os.Getenv("DEPUTY_TEST_TEMPORAL")
	if hostPort == "" {
		b.Skip("needs a Temporal server: set DEPUTY_TEST_TEMPORAL=host:port (and DEPUTY_TEST_TEMPORAL_NAMESPACE); .ci/temporal.sh starts one")
	}
	const n = 50
	c, err := Dial(context.Background(), hostPort, os.Getenv("DEPUTY_TEST_TEMPORAL_NAMESPACE"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	queue := fmt.Sprintf("floor-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	p := fanOut(n)
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	w.RegisterWorkflow(floorParent)
	w.RegisterWorkflow(floorChild)
	w.RegisterActivityWithOptions(func(ctx context.Context, task string) (provider.Response, error) {
		return p.Complete(ctx, provider.Request{Messages: []provider.Message{provider.UserMessage(task)}})
	}, activity.RegisterOptions{Name: floorModel})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	run := func(wf any, args ...any) time.Duration {
		start := time.Now()
		id := fmt.Sprintf("%s-%d", queue, time.Now().UnixNano())
		r, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, wf, args...)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Get(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var deputy, bare time.Duration
	for b.Loop() {
		deputy += run(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true, MaxSpawns: n}, Text: "go"})
		bare += run(floorParent, n)
	}
	perChild := func(d time.Duration) float64 { return float64(d) / float64(b.N*n) / float64(time.Millisecond) }
	b.ReportMetric(perChild(deputy), "deputy-ms/child")
	b.ReportMetric(perChild(bare), "bare-ms/child")
	b.ReportMetric(float64(deputy)/float64(bare), "x-floor")
}
