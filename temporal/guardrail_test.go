package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// guardedTree is a lead that hands its task to a writer, a fixed child
// guarded by two guardrails, and answers with what the writer said: the
// writer answers with answers[0], then, if sent back, answers[1].
func guardedTree(answers []string, writes *atomic.Int64) (*script, Spec, []policy.Guardrail) {
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case strings.Contains(lastUser(req), "write:") || strings.HasPrefix(lastUser(req), "Your answer was rejected"):
			n := writes.Add(1)
			return provider.AssistantMessage(answers[min(int(n)-1, len(answers)-1)]), nil
		case last.Role == provider.RoleTool:
			return provider.AssistantMessage("lead: " + last.Content), nil
		}
		args, _ := json.Marshal(map[string]string{"task": "write: " + lastUser(req)})
		return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "writer", Arguments: args}), nil
	}}
	spec := Spec{Name: "lead", Provider: "m", SubAgents: []SubAgent{{Name: "writer", Description: "Writes.",
		Agent: &Spec{Name: "writer", Provider: "m", Guardrails: []string{"no-secret", "no-todo"}}}}}
	gs := []policy.Guardrail{
		{Name: "no-secret", Stage: policy.Input, Check: func(_ context.Context, text string) (policy.Finding, error) {
			if strings.Contains(text, "sk-live") {
				return policy.Finding{Problem: "the task holds a key"}, nil
			}
			return policy.Finding{}, nil
		}},
		{Name: "no-todo", Stage: policy.Output, Retry: true, Check: func(_ context.Context, text string) (policy.Finding, error) {
			if strings.Contains(text, "TODO") {
				return policy.Finding{Problem: "the answer leaves a TODO"}, nil
			}
			return policy.Finding{}, nil
		}},
	}
	return p, spec, gs
}

// Guardrails named by a Spec guard that agent on Temporal as
// agent.WithGuardrails does in process: an answer an output guardrail
// fails is sent back once and the corrected one goes up; failed again,
// the child fails and its parent's model reads so; an input guardrail's
// tripwire stops the child before its model is called, and every run
// above it. Each decision is an event of the tree.
func TestGuardrailsOnTemporal(t *testing.T) {
	t.Run("corrected once", func(t *testing.T) {
		var writes atomic.Int64
		p, spec, gs := guardedTree([]string{"draft, TODO: the ending", "the whole story"}, &writes)
		hub := NewHub()
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs, Events: hub})
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "guarded"})
		var rec recorder
		defer hub.Subscribe(event.WithSink(context.Background(), &rec), "guarded")()
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		var out RunOutput
		if err := env.GetWorkflowResult(&out); err != nil {
			t.Fatal(err)
		}
		if out.Answer != "lead: the whole story" || writes.Load() != 2 {
			t.Errorf("answer %q after %d writes, want the corrected story after two", out.Answer, writes.Load())
		}
		var verdicts []string
		finished := 0
		for _, e := range rec.events {
			switch {
			case e.Type == event.Custom && e.Name == policy.GuardrailEvent:
				var v struct{ Guardrail, Verdict, Path string }
				_ = json.Unmarshal(e.Value, &v)
				verdicts = append(verdicts, v.Guardrail+" "+v.Verdict+" @"+v.Path)
			case e.Type == event.SubagentFinished:
				finished++
				var r string
				if _ = json.Unmarshal(e.Result, &r); r != "the whole story" {
					t.Errorf("SUBAGENT_FINISHED with %q, want the corrected answer", r)
				}
			}
		}
		want := []string{"no-secret pass @lead/writer", "no-todo retry @lead/writer", "no-todo pass @lead/writer"}
		if !slices.Equal(verdicts, want) {
			t.Errorf("the guardrail events were %q, want %q", verdicts, want)
		}
		if finished != 1 {
			t.Errorf("%d SUBAGENT_FINISHED, want the writer's once, with its corrected answer", finished)
		}
	})
	t.Run("failed twice", func(t *testing.T) {
		var writes atomic.Int64
		p, spec, gs := guardedTree([]string{"TODO", "still TODO"}, &writes)
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		var out RunOutput
		if err := env.GetWorkflowResult(&out); err != nil {
			t.Fatal(err)
		}
		if writes.Load() != 2 || !strings.Contains(out.Answer, "writer failed") || !strings.Contains(out.Answer, `guardrail "no-todo" rejected the answer of lead/writer again`) || strings.Contains(out.Answer, "still TODO") {
			t.Errorf("answer %q after %d writes: want the lead to read that the writer failed, not its answer", out.Answer, writes.Load())
		}
	})
	t.Run("past its limit", func(t *testing.T) {
		// The writer's answer, read far past what its request's bytes
		// say, takes it past its limit: it cannot pay for a corrected
		// answer, and fails with the guardrail's error, saying so, as in
		// process; before, it went on to a model call that failed for
		// want of room.
		var writes atomic.Int64
		p, spec, gs := guardedTree([]string{"TODO", "the whole story"}, &writes)
		spec.SubAgents[0].Agent.TokenLimit = 1000
		big := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			r, err := p.Complete(ctx, req)
			if err == nil && strings.Contains(lastUser(req), "write:") {
				r.Usage.InputTokens += 2000
			}
			return r, err
		})
		hub := NewHub()
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": big}, Guardrails: gs, Events: hub})
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "past"})
		var rec recorder
		defer hub.Subscribe(event.WithSink(context.Background(), &rec), "past")()
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
		var out RunOutput
		if err := env.GetWorkflowResult(&out); err != nil {
			t.Fatal(err)
		}
		if writes.Load() != 1 || !strings.Contains(out.Answer, `guardrail "no-todo" rejected the answer of lead/writer, which was not sent back for correction (the run is past its limit`) {
			t.Errorf("answer %q after %d writes: want the lead to read that the writer's answer was rejected and not corrected, after one write", out.Answer, writes.Load())
		}
		var verdicts []string
		for _, e := range rec.events {
			if e.Type == event.Custom && e.Name == policy.GuardrailEvent {
				var v struct{ Guardrail, Verdict string }
				_ = json.Unmarshal(e.Value, &v)
				verdicts = append(verdicts, v.Guardrail+" "+v.Verdict)
			}
		}
		if want := []string{"no-secret pass", "no-todo fail"}; !slices.Equal(verdicts, want) {
			t.Errorf("the guardrail events were %q, want %q", verdicts, want)
		}
	})
	t.Run("tripwire", func(t *testing.T) {
		var writes atomic.Int64
		p, spec, gs := guardedTree([]string{"story"}, &writes)
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story for sk-live-123"})
		err := env.GetWorkflowError()
		var app *sdktemporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != ErrTypeGuardrailTripped || !strings.Contains(app.Message(), `guardrail "no-secret" tripped on the input of lead/writer`) {
			t.Fatalf("the run ended with %v, want the writer's tripwire", err)
		}
		calls, billed := p.total()
		if writes.Load() != 0 || calls != 1 {
			t.Errorf("the writer wrote %d times and the model was called %d times: want the lead's one call only", writes.Load(), calls)
		}
		if u := UsageOf(err); u != billed {
			t.Errorf("the failure carries %v, the model billed %v", u, billed)
		}
	})
}

// A tripwire in a factory's agent, run in process on a worker, stops
// every run above it on Temporal too, as it does in process: the lead
// fails with it and makes no further call.
func TestFactoryTripwireStopsTheTree(t *testing.T) {
	var writes atomic.Int64
	p, spec, _ := guardedTree([]string{"a story with TODO"}, &writes)
	trip := policy.Guardrail{Name: "no-todo", Stage: policy.Output, Check: func(_ context.Context, text string) (policy.Finding, error) {
		if strings.Contains(text, "TODO") {
			return policy.Finding{Problem: "the answer leaves a TODO"}, nil
		}
		return policy.Finding{}, nil
	}}
	spec.SubAgents = []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}
	rt := &Runtime{Providers: map[string]provider.Provider{"m": p}, Factories: map[string]subagent.Factory{
		"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("writer"), agent.WithGuardrails(trip))
		},
	}}
	env := newEnv(t, rt)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
	err := env.GetWorkflowError()
	var app *sdktemporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrTypeGuardrailTripped || !strings.Contains(app.Message(), `guardrail "no-todo" tripped`) {
		t.Fatalf("the run ended with %v, want the writer's tripwire", err)
	}
	calls, billed := p.total()
	if writes.Load() != 1 || calls != 2 {
		t.Errorf("the writer wrote %d times and the model was called %d times: want the lead's first call and the writer's", writes.Load(), calls)
	}
	if u := UsageOf(err); u != billed {
		t.Errorf("the failure carries %v, the model billed %v", u, billed)
	}
}

// A judge's model calls (subagent.Judge, run on the worker) are priced at
// the workers' prices and count once in what the run reports: its usage
// in ChildUsage and its dollars in RunOutput.Cost, for the judge of a
// child's answer and of the lead's own, the writer's sent back once; what
// the run reports is what the models billed.
func TestJudgeCostCountsOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	p, spec, _ := guardedTree([]string{"draft, TODO: the ending", "the whole story"}, &writes)
	judgeP := &script{model: "m1", fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if strings.Contains(lastUser(req), "TODO") {
			return provider.AssistantMessage(`{"pass": false, "problem": "it leaves a TODO"}`), nil
		}
		return provider.AssistantMessage(`{"pass": true}`), nil
	}}
	judge, err := subagent.Judge(judgeP, "Fail an answer that leaves work undone.")
	if err != nil {
		t.Fatal(err)
	}
	gs := []policy.Guardrail{{Name: "judge", Stage: policy.Output, Retry: true, Check: judge}}
	spec.Guardrails = []string{"judge"}
	spec.SubAgents[0].Agent.Guardrails = []string{"judge"}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs, Prices: prices})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	judged, judgeBilled := judgeP.total()
	_, billed := p.total()
	if judged != 3 || writes.Load() != 2 {
		t.Fatalf("the judge was asked %d times and the writer wrote %d times: want the writer's two answers and the lead's judged", judged, writes.Load())
	}
	all := billed.Add(judgeBilled)
	if out.TotalUsage() != all {
		t.Errorf("the run reports %v, the models billed %v (the judge %v)", out.TotalUsage(), all, judgeBilled)
	}
	if want := costOfUsage(price, all); math.Abs(out.Cost-want) > 1e-9 {
		t.Errorf("the run reports costing $%.9f, the models billed $%.9f (the judge $%.9f)", out.Cost, want, costOfUsage(price, judgeBilled))
	}
	// Per model, as in process: the judge's calls under its model, and
	// nothing left for an entry without one.
	var models provider.Usage
	var modelsCost float64
	judgeModel := false
	for _, m := range out.Models {
		models, modelsCost = models.Add(m.Usage), modelsCost+m.Cost
		if m.Model == "m1" && m.Usage.Tokens() >= judgeBilled.Tokens() {
			judgeModel = true
		}
	}
	if models.Tokens() != all.Tokens() || math.Abs(modelsCost-out.Cost) > 1e-9 || !judgeModel {
		t.Errorf("the run's usage per model %+v holds %d tokens ($%.9f) of %d ($%.9f): the judge's calls are not under its model", out.Models, models.Tokens(), modelsCost, all.Tokens(), out.Cost)
	}
}

// The answer an output guardrail passes ends its step, as in process,
// where the step ends once its answer is checked: the model activity
// leaves a guarded answer's step open (the guardrail may send it back),
// and the guardrail activity that passes it ends it. Each step the tree
// starts, the lead's and the writer's, ends once: an answer sent back
// ends its step with the next call, and one failed for good with the run.
func TestGuardedAnswerEndsItsStep(t *testing.T) {
	for name, answers := range map[string][]string{
		"passed":         {"the whole story"},
		"corrected once": {"draft, TODO: the ending", "the whole story"},
		"failed twice":   {"draft, TODO", "still TODO"},
	} {
		t.Run(name, func(t *testing.T) {
			var writes atomic.Int64
			p, spec, gs := guardedTree(answers, &writes)
			spec.Guardrails = []string{"no-todo"} // the lead's answer too
			hub := NewHub()
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs, Events: hub})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "guarded"})
			var rec recorder
			defer hub.Subscribe(event.WithSink(context.Background(), &rec), "guarded")()
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "a story"})
			if err := env.GetWorkflowError(); err != nil && name != "failed twice" {
				t.Fatal(err)
			}
			started, finished := map[string]int{}, map[string]int{}
			for _, e := range rec.snapshot() {
				switch e.Type {
				case event.StepStarted:
					started[e.SubagentRunID+" "+e.StepName]++
				case event.StepFinished:
					finished[e.SubagentRunID+" "+e.StepName]++
				}
			}
			if len(started) < 3 {
				t.Fatalf("steps started %v, want the lead's two and the writer's", started)
			}
			if d := cmp.Diff(started, finished); d != "" {
				t.Errorf("each step started must finish once (-started +finished):\n%s", d)
			}
		})
	}
}
