package temporal

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

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
	if calls, _ := m.total(); calls != 4 || out.Answer != "lead done" {
		t.Errorf("%d model calls, the lead answered %q; want 4 (3 the lead's, 1 its job's) and the lead's answer", calls, out.Answer)
	}
}
