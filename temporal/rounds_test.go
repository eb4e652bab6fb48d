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

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
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
