package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// A background job that would go past its cost limit (WithJobLimits)
// wraps up, and hands its parent a partial report, not a failure; one past
// its step limit hands back a partial report with its last words; what
// either spent stays within its limit and counts once.
func TestJobPastItsCostLimitReportsPartially(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits subagent.JobLimits
		want   []string
	}{
		{"cost", subagent.JobLimits{Cost: 0.002}, []string{"lead: dug ", "layers, no gold yet"}},
		{"steps", subagent.JobLimits{Steps: 3}, []string{"stopped at its limit", "at step 3", "partial report, its last words:\ndug layer 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) { jobPastLimit(t, tc.limits, tc.want) })
	}
}

func jobPastLimit(t *testing.T, limits subagent.JobLimits, want []string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	price := provider.Price{Input: 1e-6, Output: 1e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake/fake": price, "fake": price})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var billed provider.Usage
	var childCalls int
	model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: 100, OutputTokens: 20, Requests: 1}
		mu.Lock()
		defer mu.Unlock()
		billed = billed.Add(u)
		if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
			childCalls++
			if len(req.Tools) == 0 {
				return provider.Response{Usage: u, Message: provider.AssistantMessage(fmt.Sprintf("dug %d layers, no gold yet", childCalls-1))}, nil // asked to wrap up
			}
			return provider.Response{Usage: u, Message: provider.AssistantMessage(fmt.Sprintf("dug layer %d", childCalls),
				provider.ToolCall{ID: fmt.Sprint("c", childCalls), Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}
		switch len(toolResults(req.Messages)) {
		case 0:
			return provider.Response{Usage: u, Message: provider.AssistantMessage("", spawn(`{"task":"dig for ever","background":true}`))}, nil
		case 1:
			return provider.Response{Usage: u, Message: provider.AssistantMessage("", provider.ToolCall{Name: subagent.JobsToolName,
				Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":600,"job_id":"` + latestJob(req.Messages) + `"}`)})}, nil
		}
		return provider.Response{Usage: u, Message: provider.AssistantMessage("lead: " + toolResults(req.Messages)[1])}, nil
	})
	reg, _ := setup(t, model, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithJobLimits(limits)})
	out, err := lead(t, model, reg, agent.WithPrices(prices)).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(out.Answer, w) {
			t.Errorf("the lead read %q: want a partial report, with %q", out.Answer, w)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if spent := float64(childCalls) * (100*price.Input + 20*price.Output); limits.Cost > 0 && spent > limits.Cost || childCalls < 3 {
		t.Errorf("the job made %d model calls, $%.6f, under limits %+v", childCalls, spent, limits)
	}
	if got := out.TotalUsage(); got != billed {
		t.Errorf("the run counts %+v, the model billed %+v", got, billed)
	}
}

// The jobs alive in one owner's threads are capped (WithMaxOwnerJobs): a
// spawn past the cap is refused, with an event, while another owner's
// thread starts its own.
func TestOwnerJobsAreCapped(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, _ := threadLead(t, m, subagent.WithMaxOwnerJobs(1))
	ann := func(th string) context.Context { return agent.WithOwner(agent.WithThread(t.Context(), th), "ann") }
	if _, err := a.Run(ann("t1"), agent.Input{Text: "cmd start"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	out, err := a.Run(event.WithSink(ann("t2"), rec), agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	refused := rec.custom(subagent.RefusedEvent)
	if out.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_owner_jobs"`) {
		t.Errorf("Output.Refused %d, refusals %+v: want one, max_owner_jobs", out.Refused, refused)
	}
	if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) {
		t.Errorf("the lead read %q", out.Answer)
	}
	bob := agent.WithOwner(agent.WithThread(t.Context(), "t1"), "bob")
	out, err = a.Run(bob, agent.Input{Text: "cmd start"})
	if err != nil || out.Refused != 0 {
		t.Errorf("another owner's spawn: refused %d, %v", out.Refused, err)
	}
	close(m.dig)
}
