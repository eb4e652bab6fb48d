package temporal_test

import (
	"context"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/temporal"
	"github.com/deputy-go/deputy/tool"
)

// docs/temporal.md quotes the snippet below; the test in
// examples/internal/readme checks that it does, and this module's build
// checks that it compiles.

// snippet of docs/temporal.md
// fanOutOnTemporal puts deputy on a worker and runs a lead whose model may
// spawn children, each a child workflow that any worker can run.
func fanOutOnTemporal(ctx context.Context, c client.Client, p provider.Provider, reg *tool.Registry) (temporal.RunOutput, error) {
	w := worker.New(c, "deputy", worker.Options{}) // on each worker process
	temporal.Register(w, &temporal.Runtime{
		Providers: map[string]provider.Provider{"main": p},
		Tools:     reg,
	})
	if err := w.Start(); err != nil {
		return temporal.RunOutput{}, err
	}
	defer w.Stop()

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "deputy"},
		temporal.AgentWorkflowName, temporal.RunInput{
			Spec: temporal.Spec{Provider: "main", System: "You plan the work.", Spawn: true},
			Text: "the task",
		})
	if err != nil {
		return temporal.RunOutput{}, err
	}
	var out temporal.RunOutput
	err = run.Get(ctx, &out)
	return out, err
}

// end of snippet

// snippet of docs/temporal.md
// steerJobs sends each job still running in the run of workflow lead (a
// Spec with Background) a message, which the job reads before its next
// step, and returns the receipts.
func steerJobs(ctx context.Context, c client.Client, lead, text string) ([]subagent.Receipt, error) {
	jobs, err := temporal.Jobs(ctx, c, lead)
	if err != nil {
		return nil, err
	}
	var receipts []subagent.Receipt
	for _, j := range jobs {
		if j.State != subagent.JobRunning {
			continue
		}
		r, err := temporal.SendToJob(ctx, c, lead, j.ID, text)
		if err != nil {
			return receipts, err
		}
		receipts = append(receipts, r)
	}
	return receipts, nil
}

// end of snippet

// snippet of docs/temporal.md
// turnOfThread runs one turn of owner's thread: the jobs its model starts
// in the background work on after it, and the thread's next turn is told
// which ended meanwhile and acts on the others.
func turnOfThread(ctx context.Context, c client.Client, owner, thread, text string) (agent.Output, error) {
	lead := &temporal.Agent{Client: c, TaskQueue: "deputy", Spec: temporal.Spec{
		Provider: "main", Spawn: true, Background: true, JobsAcrossTurns: true,
	}}
	ctx = agent.WithOwner(agent.WithThread(ctx, thread), owner)
	return lead.Run(ctx, agent.Input{Text: text})
}

// end of snippet

var _, _, _ = fanOutOnTemporal, steerJobs, turnOfThread
