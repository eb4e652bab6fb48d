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

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A child of a thread's job that asks a person while no turn of the
// thread runs waits for the next turn, as the job's own question does:
// the job holds it and asks it again when the turn asks where the job
// stands, and the turn hands it on attributed to the child's workflow.
// The child's next question, asked while that turn runs, goes the same
// way. Each approved call runs once, each model answer is asked for
// once, and the turns report what the model billed. (The child's call
// failed: the question went to the thread's workflow, closed.)
func TestThreadJobsChildAsksBetweenTurns(t *testing.T) {
	inEachIDMode(t, jobsChildAsksBetweenTurns)
}

func jobsChildAsksBetweenTurns(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, bill, part = "start paying", "settle up", "pay the bill", "pay the parts"
	var paid, tipped, n, childCalls atomic.Int64
	approved := func(name string, count *atomic.Int64) tool.Tool {
		return tool.RequireApproval(tool.Must(tool.New(name, "Moves money.", func(context.Context, struct{}) (string, error) {
			count.Add(1)
			return name + " done", nil
		})), "moves money", 0)
	}
	reg, err := tool.NewRegistry(approved("pay", &paid), approved("tip", &tipped))
	if err != nil {
		t.Fatal(err)
	}
	turnOver := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task := firstUserOf(req); {
		case task == part && len(rs) == 0:
			select { // it asks once the turn that started its job is over
			case <-turnOver:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			childCalls.Add(1)
			return call("pay", `{}`)
		case task == part && len(rs) == 1:
			return call("tip", `{}`) // asked while the second turn runs
		case task == part:
			return provider.AssistantMessage(strings.Join(rs, ", ")), nil
		case task == bill && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+part+`"}`)
		case task == bill:
			return provider.AssistantMessage("bill: " + rs[0]), nil
		case task == turn1 && len(rs) == 0:
			return call(SpawnToolName, `{"task":"`+bill+`","background":true}`)
		case task == turn2 && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)
		}
		return provider.AssistantMessage(firstUserOf(req) + ": " + rs[0]), nil
	}}
	queue := fmt.Sprintf("deputy-thread-relay-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "tip"}, Spawn: true, Background: true, JobsAcrossTurns: true, MaxDepth: 2}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	thread := ThreadWorkflowID("", "thread-"+queue)
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	close(turnOver)
	for childCalls.Load() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the child asks, and no turn hears it
	ofChild := func(qs []tool.Interrupt) bool {
		return len(qs) == 1 && strings.HasPrefix(qs[0].SubagentRunID, thread+"/job_1/")
	}
	_, err = lead.Run(tctx, agent.Input{Text: turn2})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) || !ofChild(asked.Interrupts) {
		t.Fatalf("the second turn ended with %v, want the question of job_1's child, attributed to its workflow", err)
	}
	// The second turn waits on: the person answers each question the
	// tree waits on, the one the child asks while the turn runs as well.
	var first string
	for round := 0; round < 2; round++ {
		var pending []tool.Interrupt
		for ctx.Err() == nil {
			if pending, err = Pending(ctx, c, thread); err == nil && ofChild(pending) && pending[0].ID != first {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ofChild(pending) {
			t.Fatalf("round %d: the thread's turn waits on %+v (%v), want one question of job_1's child", round+1, pending, err)
		}
		first = pending[0].ID
		if err := Answer(ctx, c, thread, tool.Answer{InterruptID: pending[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
			t.Fatal(err)
		}
	}
	var out2 RunOutput
	if err := c.GetWorkflow(ctx, thread, "").Get(ctx, &out2); err != nil {
		t.Fatal(err)
	}
	if want := turn2 + ": bill: pay done, tip done"; out2.Answer != want || paid.Load() != 1 || tipped.Load() != 1 {
		t.Errorf("the second turn answered %q, paid %d and tipped %d times; want %q, each once", out2.Answer, paid.Load(), tipped.Load(), want)
	}
	calls, billed := m.total()
	if spent := out1.TotalUsage().Add(out2.TotalUsage()); calls != 9 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 9 (2 of each turn, 2 of the job, 3 of its child), each counted once", calls, billed, spent)
	}
}
