package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
)

type verdictOut struct {
	Verdict string `json:"verdict"`
}

// answering is a child that answers every task with answer, or fails.
func answering(answer string, fail error) agent.Agent {
	return agentFunc(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		if fail != nil {
			return agent.Output{Usage: provider.Usage{Requests: 1}}, fail
		}
		return agent.Output{Answer: answer, Usage: provider.Usage{InputTokens: 5, OutputTokens: 2, Requests: 1}}, nil
	})
}

type agentFunc func(ctx context.Context, in agent.Input) (agent.Output, error)

func (f agentFunc) Run(ctx context.Context, in agent.Input) (agent.Output, error) { return f(ctx, in) }

// WithOutcome hands a Go caller each finished call's typed value, usage
// and run id — the run id its events carry — and leaves what the model
// reads as it is; a failed call does not reach it, and a hook that panics
// fails its call instead of the program.
func TestWithOutcomeCapturesWithoutChangingTheResult(t *testing.T) {
	var mu sync.Mutex
	var got []Outcome
	capture := WithOutcome(func(ctx context.Context, o Outcome) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	})
	child := answering(`{"verdict":"ship it"}`, nil)
	plain := must(FromFactory("review", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) { return child, nil }, OutputOf[verdictOut]()))(t)
	hooked := must(FromFactory("review", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) { return child, nil }, OutputOf[verdictOut](), capture))(t)

	var rec recorder
	ctx := rec.context(context.Background())
	want, err := callTool(ctx, plain, "c1", `{"task":"look"}`)
	if err != nil {
		t.Fatal(err)
	}
	res, err := callTool(ctx, hooked, "c2", `{"task":"look"}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != want.Content {
		t.Errorf("with the hook the model reads %q, without it %q", res.Content, want.Content)
	}
	if len(got) != 1 {
		t.Fatalf("the hook saw %d outcomes, want 1", len(got))
	}
	o := got[0]
	if v, ok := o.Value.(verdictOut); !ok || v.Verdict != "ship it" {
		t.Errorf("Value %#v, want the typed verdict", o.Value)
	}
	if o.Usage.Requests != 1 || o.Usage.InputTokens != 5 {
		t.Errorf("Usage %+v, want the child's", o.Usage)
	}
	var started []string
	for _, e := range rec.subagentEvents() {
		if e.Type == event.SubagentStarted {
			started = append(started, e.SubagentRunID)
		}
	}
	if len(started) != 2 || o.RunID != started[1] {
		t.Errorf("RunID %q, want the second call's SUBAGENT_STARTED run id (%v)", o.RunID, started)
	}

	// Without events the run id is still there.
	if _, err := callTool(context.Background(), hooked, "c3", `{"task":"look"}`); err != nil {
		t.Fatal(err)
	}
	if id := got[len(got)-1].RunID; !strings.HasPrefix(id, "sub_") {
		t.Errorf("RunID without events %q", id)
	}

	n := len(got)
	failing := must(FromFactory("review", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return answering("", errors.New("model down")), nil
	}, capture))(t)
	if _, err := callTool(context.Background(), failing, "c4", `{"task":"look"}`); err == nil {
		t.Fatal("the failing child's call succeeded")
	}
	if len(got) != n {
		t.Error("a failed call reached the hook")
	}

	panicky := must(FromFactory("review", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) { return child, nil },
		WithOutcome(func(context.Context, Outcome) { panic("boom") })))(t)
	_, err = callTool(context.Background(), panicky, "c5", `{"task":"look"}`)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("a panicking hook: %v, want the call to fail saying so", err)
	}
	if _, err := FromFactory("review", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) { return child, nil }, WithOutcome(nil)); err == nil || !strings.Contains(err.Error(), "WithOutcome(nil)") {
		t.Errorf("WithOutcome(nil): %v", err)
	}
}
