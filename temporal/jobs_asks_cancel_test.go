package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A job cancelled while it waits for a person's approval ends cancelled
// with its question withdrawn, as in process: the cancel returns, its
// status lists no questions, the tree no longer waits on it
// (InterruptsQuery), an answer the person gives it afterwards is taken
// without effect, and the payment it asked for is never made. Before,
// the job's workflow waited on for the answer, so neither the job nor the
// cancel ended; and once it did, the tree still listed the question, and
// an answer to it failed, handed to a workflow that had ended. With
// models that name their calls afresh, not at all, or from call_0.
func TestJobCancelledWhileItAsksEndsCancelled(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { jobCancelledWhileItAsks(t, mode.id) })
	}
}

func jobCancelledWhileItAsks(t *testing.T, id func(n int64, i int) string) {
	var paid, holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := billPayer(id)
	reg, err := tool.NewRegistry(payer(&paid), holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	env.SetTestTimeout(time.Minute) // (a job that never ends holds the lead)
	var cancelled, answered goUpdate
	var asked, after []tool.Interrupt
	var jobs []subagent.JobStatus
	state, ticks := 0, 0
	everyTick(env, 50*time.Millisecond, func() bool {
		ticks++
		switch state {
		case 0: // The job asks: the program cancels it.
			if queried(env, InterruptsQuery, &asked) && len(asked) > 0 {
				env.UpdateWorkflow(JobCancelUpdate, "cancel", cancelled.callbacks(), "job_1")
				state = 1
			}
		case 1: // The job has ended: the person answers its question.
			if done, _ := cancelled.outcome(); done {
				queried(env, JobsQuery, &jobs)
				queried(env, InterruptsQuery, &after)
				env.UpdateWorkflow(AnswerUpdate, "answer", answered.callbacks(), []tool.Answer{{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}})
				state, ticks = 2, 0
			}
		case 2: // Once the answer is taken or refused, the lead goes on.
			if done, _ := answered.outcome(); done || ticks > 60 {
				close(release)
				return true
			}
		}
		return false
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 {
		t.Fatalf("asked %+v, want one question, the job's", asked)
	}
	if done, err := cancelled.outcome(); !done || err != nil {
		t.Fatalf("the cancel came to %v (done %v), want it done", err, done)
	}
	if len(jobs) != 1 || jobs[0].State != subagent.JobCancelled || len(jobs[0].Questions) != 0 {
		t.Errorf("the jobs once job_1 was cancelled: %+v, want it cancelled with no questions", jobs)
	}
	if len(after) != 0 {
		t.Errorf("the tree waits on %+v once its job was cancelled, want nothing: the job's question is withdrawn", after)
	}
	if done, err := answered.outcome(); !done || err != nil {
		t.Errorf("the answer to the withdrawn question came to %v (done %v), want it taken without effect", err, done)
	}
	if paid.Load() != 0 {
		t.Errorf("paid %d times, want never: the job was cancelled before its payment was approved", paid.Load())
	}
	if _, billed := m.total(); out.TotalUsage() != billed {
		t.Errorf("the lead reports %v; the model billed %v", out.TotalUsage(), billed)
	}
	if calls, _ := m.total(); calls != 4 || out.Answer != "lead done" {
		t.Errorf("%d model calls, the lead answered %q; want 4 (3 the lead's, 1 its job's) and the lead's answer", calls, out.Answer)
	}
}

// On a server, a job cancelled while it waits for a person's approval
// ends cancelled, its question withdrawn, and what its model call was
// billed comes back with it: the lead's usage is what the model billed,
// each call counted once, and the payment is never made. Before, the
// job's workflow task failed for good as it read the SDK's cancellation
// of its wait as a run's, and neither the job nor the cancel ended. With
// models that name their calls afresh, not at all, or from call_0.
func TestJobCancelledWhileItAsksCountsItsCallOnServer(t *testing.T) {
	hostPort, ns := serverAddr(t)
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Dial(ctx, hostPort, ns, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var paid, holds atomic.Int64
			holding, release := make(chan struct{}), make(chan struct{})
			m := billPayer(mode.id)
			reg, err := tool.NewRegistry(payer(&paid), holdOn("hold", &holds, holding, release))
			if err != nil {
				t.Fatal(err)
			}
			queue := fmt.Sprintf("deputy-jobs-ask-cancel-%d", time.Now().UnixNano())
			w := worker.New(c, queue, worker.Options{})
			Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			tree := "jobs-" + queue
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
				RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "hold"}, Spawn: true, Background: true}, Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			for {
				asked, err := Pending(ctx, c, tree)
				if err != nil {
					t.Fatal(err)
				}
				if len(asked) > 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Before, the job's workflow task panicked reading the usage of
			// the SDK's own cancellation, and the cancel never returned.
			cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
			st, err := CancelJob(cctx, c, tree, "job_1")
			ccancel()
			if err != nil {
				t.Fatal(err)
			}
			if st.State != subagent.JobCancelled || len(st.Questions) != 0 || st.Usage.Requests != 1 {
				t.Errorf("the cancelled job's status is %+v, want it cancelled, no questions, its one model call counted", st)
			}
			if asked, err := Pending(ctx, c, tree); err != nil || len(asked) != 0 {
				t.Errorf("the tree waits on %+v (%v) once its job was cancelled, want nothing", asked, err)
			}
			close(release)
			var out RunOutput
			if err := run.Get(ctx, &out); err != nil {
				t.Fatal(err)
			}
			if calls, spent := m.total(); calls != 4 || out.TotalUsage() != spent || out.Answer != "lead done" {
				t.Errorf("%d model calls costing %+v, the lead reported %+v and answered %q; want 4, each counted once, and the lead's answer", calls, spent, out.TotalUsage(), out.Answer)
			}
			if paid.Load() != 0 {
				t.Errorf("paid %d times, want never", paid.Load())
			}
		})
	}
}
