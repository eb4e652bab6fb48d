package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// Two forks a lead starts in one step, each of which asks for an approval,
// the second askLater after the first (longer than the settleQuestions
// window), are presented in one round on a real server: Agent.Run hands
// the tree's questions on once no branch of the tree is working, however
// long the second fork takes; each is attributed to its fork, and
// answered in that round, each payment is made once and the lead answers
// with both.
func TestParallelChildrenAskInOneRound(t *testing.T) {
	const askLater = 3 * settleQuestions
	var paid atomic.Int64
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		switch {
		case strings.HasPrefix(task, "part ") && len(rs) == 0:
			n := strings.TrimPrefix(task, "part ")
			if n == "1" {
				// A model slower than the window.
				select {
				case <-time.After(askLater):
				case <-ctx.Done():
					return provider.Message{}, ctx.Err()
				}
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":1` + n + `}`)}), nil
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("fork: " + rs[0]), nil
		case len(rs) == 0:
			return spawnCalls(2), nil
		}
		return provider.AssistantMessage("lead: " + strings.Join(rs, "; ")), nil
	}}
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: payTools(t, &paid)})
	a := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true}}
	out, err := a.Run(ctx, agent.Input{Text: "pay twice"})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		t.Fatalf("the run ended %v, want it waiting on the forks' questions", err)
	}
	forks := map[string]bool{}
	for _, it := range asked.Interrupts {
		forks[it.SubagentRunID] = true
	}
	if len(asked.Interrupts) != 2 || len(forks) != 2 || forks[""] {
		t.Fatalf("the first round asked %+v, want the two forks' questions, one each", asked.Interrupts)
	}
	if paid.Load() != 0 {
		t.Fatalf("%d payments before the answers", paid.Load())
	}
	// The tree's own questions, as the run handed them on.
	pending, err := Pending(ctx, c, out.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var answers []tool.Answer
	for _, it := range pending {
		answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	}
	if err := Answer(ctx, c, out.RunID, answers...); err != nil {
		t.Fatal(err)
	}
	var res RunOutput
	if err := c.GetWorkflow(ctx, out.RunID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if want := fmt.Sprintf("fork: paid 1%d", i); !strings.Contains(res.Answer, want) {
			t.Errorf("the lead answered %q, want %q in it", res.Answer, want)
		}
	}
	if paid.Load() != 2 {
		t.Errorf("%d payments, want 2", paid.Load())
	}
}

// A background job still working does not hold a round: the lead that
// starts one and, in the same step, asks for an approval is asked at
// once, while the job's model is still thinking; the job runs beside the
// turn, as in process.
func TestRunningJobDoesNotHoldARound(t *testing.T) {
	const jobTakes = 20 * time.Second
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch {
		case firstUserOf(req) == "dig":
			select {
			case <-time.After(jobTakes):
				return provider.AssistantMessage("dug"), nil
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
		case len(rs) == 0:
			return provider.AssistantMessage("",
				provider.ToolCall{ID: "s1", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)},
				provider.ToolCall{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":1}`)}), nil
		}
		return provider.AssistantMessage("lead: " + strings.Join(rs, "; ")), nil
	}}
	var paid atomic.Int64
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: payTools(t, &paid)})
	a := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true}}
	start := time.Now()
	out, err := a.Run(ctx, agent.Input{Text: "dig, and pay"})
	took := time.Since(start)
	var asked *tool.Interrupted
	if !errors.As(err, &asked) || len(asked.Interrupts) != 1 {
		t.Fatalf("the run ended %v, want it waiting on the lead's question", err)
	}
	if took >= jobTakes {
		t.Errorf("the question was handed on after %v, once the job had ended: a job must not hold a round", took)
	}
	if err := c.CancelWorkflow(ctx, out.RunID, ""); err != nil {
		t.Fatal(err)
	}
}

// A branch that waits on a timer before it works on holds a round as a
// branch that works does: a fork asks at once while its sibling, before
// it asks too, waits with a timeout for a background job of its own (a
// durable timer; the job works beside the turn) or for its model call's
// retry after a transient failure (the activity's backoff); both
// questions come in one round, each attributed to its fork, and once
// answered each payment is made once and the lead answers with both. In
// each way a model names its calls.
func TestSiblingWaitingOnATimerHoldsTheRound(t *testing.T) {
	for _, wait := range []string{"job wait", "retry backoff"} {
		t.Run(wait, func(t *testing.T) {
			inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
				siblingWaitsThenAsks(t, c, id, wait)
			})
		})
	}
}

func siblingWaitsThenAsks(t *testing.T, c client.Client, id func(n int64, i int) string, wait string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, failed atomic.Int64
	var paid atomic.Int64
	call := func(name, args string) provider.Message {
		return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)})
	}
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch task := firstUserOf(req); {
		case task == "dig":
			// The job works on past its parent's wait.
			select {
			case <-time.After(6 * time.Second):
				return provider.AssistantMessage("dug"), nil
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
		case task == "part 1" && len(rs) == 0:
			return call("pay", `{"amount":11}`), nil
		case task == "part 2" && wait == "job wait" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`), nil
		case task == "part 2" && wait == "job wait" && len(rs) == 1:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":3}`), nil
		case task == "part 2" && wait == "retry backoff" && len(rs) == 0 && failed.Add(1) <= 2:
			// Retried after 1 s, then after 2 s.
			return provider.Message{}, &provider.Error{Provider: "m", StatusCode: 503, Kind: provider.KindTransient, Message: "overloaded"}
		case task == "part 2" && (wait == "job wait" && len(rs) == 2 || wait == "retry backoff" && len(rs) == 0):
			return call("pay", `{"amount":12}`), nil
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("fork: " + rs[len(rs)-1]), nil
		case len(rs) == 0:
			return provider.AssistantMessage("",
				provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 1"}`)},
				provider.ToolCall{ID: id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"part 2"}`)}), nil
		}
		return provider.AssistantMessage("lead: " + strings.Join(rs, "; ")), nil
	}}
	queue := fmt.Sprintf("deputy-rounds-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: payTools(t, &paid)})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Two levels: the forks start jobs of their own.
	a := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true, MaxDepth: 2}}
	out, err := a.Run(ctx, agent.Input{Text: "pay twice"})
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		t.Fatalf("the run ended %v, want it waiting on the forks' questions", err)
	}
	defer func() { _ = c.CancelWorkflow(context.Background(), out.RunID, "") }()
	forks := map[string]bool{}
	for _, it := range asked.Interrupts {
		forks[it.SubagentRunID] = true
	}
	if len(asked.Interrupts) != 2 || len(forks) != 2 || forks[""] {
		t.Fatalf("the first round asked %d questions, of %v; want the two forks' questions, one each: the fork waiting on a timer was read as idle", len(asked.Interrupts), slices.Sorted(maps.Keys(forks)))
	}
	if paid.Load() != 0 {
		t.Fatalf("%d payments before the answers", paid.Load())
	}
	pending, err := Pending(ctx, c, out.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var answers []tool.Answer
	for _, it := range pending {
		answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	}
	if err := Answer(ctx, c, out.RunID, answers...); err != nil {
		t.Fatal(err)
	}
	var res RunOutput
	if err := c.GetWorkflow(ctx, out.RunID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fork: paid 11", "fork: paid 12"} {
		if !strings.Contains(res.Answer, want) {
			t.Errorf("the lead answered %q, want %q in it", res.Answer, want)
		}
	}
	if paid.Load() != 2 {
		t.Errorf("%d payments, want 2", paid.Load())
	}
}
