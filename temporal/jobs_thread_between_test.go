package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A job that takes a message and ends while no turn of its thread runs
// is known to the next turn as it ended: the message delivered at the
// step the job took it, its last step and last words, though the job
// told them to no turn. (Its receipt stayed queued, and its step and last
// words were those the last turn heard.)
func TestJobEndedBetweenTurnsIsKnownAsItEnded(t *testing.T) {
	inEachIDMode(t, jobEndedBetweenTurns)
}

func jobEndedBetweenTurns(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, long, steer = "start the count", "how did it go?", "count the stars", "also the moons"
	var n, held atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task := firstUserOf(req); {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			heard := strings.Contains(lastUser(req), steer)
			return provider.AssistantMessage(fmt.Sprintf("stars counted, moons heard: %v", heard)), nil
		case task == turn1 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+long+`","background":true}`)
		case task == turn1 && len(rs) == 1:
			return call(subagent.JobsToolName, `{"action":"send","job_id":"job_1","message":"`+steer+`"}`)
		case task == turn2 && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)
		}
		return provider.AssistantMessage(rs[len(rs)-1]), nil
	}}
	reg, err := tool.NewRegistry(tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		if held.Add(1) == 1 {
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
	queue := fmt.Sprintf("deputy-thread-between-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "cy")
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	var r subagent.Receipt
	if err := json.Unmarshal([]byte(out1.Answer), &r); err != nil || r.State != subagent.MessageQueued {
		t.Fatalf("the first turn answered %q, want the message queued for the job that holds on (%v)", out1.Answer, err)
	}
	<-holding
	close(release) // the turn has ended: the job takes the message and ends
	for {
		d, err := describe(ctx, c, ThreadWorkflowID("cy", "thread-"+queue)+"/job_1")
		if err == nil && d.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not end between turns: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	var st subagent.JobStatus
	if err := json.Unmarshal([]byte(out2.Answer), &st); err != nil {
		t.Fatalf("the second turn answered %q, want job_1's status (%v)", out2.Answer, err)
	}
	const last = "stars counted, moons heard: true"
	if st.State != subagent.JobDone || st.Step != 2 || st.LastWords != last || len(st.Messages) != 1 ||
		st.Messages[0].State != subagent.MessageDelivered || st.Messages[0].Step != 2 {
		t.Errorf("the second turn read job_1 as %+v, want it done at step 2 with its last words %q, the message delivered at step 2", st, last)
	}
}

// A turn of a thread that asks a person while a job of an earlier turn
// runs hands the question on at once: the turn's wait for that job (an
// activity) is not work of the turn's tree that might ask more. (Run read
// the tree as working until the job ended, up to its Spec.JobTime, and
// the question reached no one meanwhile.)
func TestTurnAsksWhileAnEarlierTurnsJobRuns(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { asksWhileEarlierJobRuns(t, mode.id) })
	}
}

func asksWhileEarlierJobRuns(t *testing.T, id func(n int64, i int) string) {
	const turn1, turn2, long = "start the count", "pay the bill", "count the stars"
	var n, paid, runs, stopped atomic.Int64
	blocked := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch task := firstUserOf(req); {
		case task == long:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == turn1 && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}), nil
		case task == turn2 && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "pay", Arguments: json.RawMessage(`{"amount":5}`)}), nil
		}
		return provider.AssistantMessage("done: " + strings.Join(rs, "; ")), nil
	}}
	reg := payTools(t, &paid)
	if err := reg.Register(blocking(t, "block", &runs, &stopped, blocked)); err != nil {
		t.Fatal(err)
	}
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "block"}, Spawn: true, Background: true,
		JobsAcrossTurns: true, JobTime: 10 * time.Minute}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "dee")
	if _, err := lead.Run(tctx, agent.Input{Text: turn1}); err != nil {
		t.Fatal(err)
	}
	<-blocked
	rctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()
	out2, err := lead.Run(rctx, agent.Input{Text: turn2})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) || len(asked.Interrupts) != 1 {
		t.Fatalf("the second turn ended %v, want it waiting on its one question, asked at once", err)
	}
	if paid.Load() != 0 {
		t.Errorf("%d payments before the answer", paid.Load())
	}
	// The tree's own question, as the run handed it on.
	pending, err := Pending(ctx, c, out2.RunID)
	if err != nil || len(pending) != 1 {
		t.Fatalf("the tree waits on %+v (%v), want one question", pending, err)
	}
	if err := Answer(ctx, c, out2.RunID, tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
		t.Fatal(err)
	}
	var res RunOutput
	if err := c.GetWorkflow(ctx, out2.RunID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done: paid 5" || paid.Load() != 1 {
		t.Errorf("the second turn answered %q after %d payments, want one payment, answered with it", res.Answer, paid.Load())
	}
	// The job of the first turn still runs: cancel it, so that nothing
	// outlives the test.
	if err := c.CancelWorkflow(ctx, ThreadWorkflowID("dee", "thread-"+queue)+"/job_1", ""); err != nil {
		t.Error(err)
	}
}
