package temporal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A thread whose last turn can no longer be read (its history is gone:
// past the namespace's retention, or deleted) starts afresh, while a job
// of an earlier turn may still run under the id the new turn would give
// its first job: the new job starts under the next id, its turn collects
// it, and the old job works on untouched and ends once. (The new job
// could not start: its id was the running one's.)
func TestThreadJobIDsStayUniqueWhenTheLastTurnIsGone(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const turn1, turn2, long, quick = "start the count", "start again", "count the stars", "count the moons"
	var n, holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprint("call_", n.Add(1)), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task := firstUserOf(req); {
		case task == long && len(rs) == 0:
			return call("hold", `{}`)
		case task == long:
			return provider.AssistantMessage("stars counted"), nil
		case task == quick:
			return provider.AssistantMessage("moons counted"), nil
		case task == turn1 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+long+`","background":true}`)
		case task == turn2 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+quick+`","background":true}`)
		case task == turn2 && len(rs) == 1:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":60}`)
		case task == turn2:
			return provider.AssistantMessage(jobIDOf(rs[0]) + ": " + rs[1]), nil
		}
		return provider.AssistantMessage("started"), nil
	}}
	reg, err := tool.NewRegistry(tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		if holds.Add(1) == 1 {
			close(holding)
		}
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-ids-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	thread := ThreadWorkflowID("", "thread-"+queue)
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	// The first turn's history goes, as past the namespace's retention.
	if _, err := c.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: cmp.Or(ns, "default"), WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: thread}}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.DescribeWorkflow(ctx, thread, "")
		var gone *serviceerror.NotFound
		if errors.As(err, &gone) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the first turn's history is still there: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "job_2: moons counted"; out2.Answer != want {
		t.Errorf("the second turn answered %q, want %q: its job under the next id, collected", out2.Answer, want)
	}
	d, err := describeRun(ctx, c, thread+"/job_1")
	if st := d.GetWorkflowExecutionInfo().GetStatus(); err != nil || st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the first turn's job is %v (%v), want it still running", st, err)
	}
	close(release)
	var old RunOutput
	if err := c.GetWorkflow(ctx, thread+"/job_1", "").Get(ctx, &old); err != nil || old.Answer != "stars counted" {
		t.Errorf("the first turn's job ended with %q (%v), want its own answer", old.Answer, err)
	}
	calls, billed := m.total()
	if spent := out1.TotalUsage().Add(out2.TotalUsage()).Add(old.TotalUsage()); calls != 8 || spent != billed || holds.Load() != 1 {
		t.Errorf("%d model calls billing %+v, the turns and the old job reported %+v, the hold ran %d times; want 8 calls, each counted once, one hold",
			calls, billed, spent, holds.Load())
	}
}
