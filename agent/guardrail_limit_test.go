package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// An answer that a guardrail with Retry rejects, given by a run its own
// model's reply took past its token or cost limit (the estimate's error),
// is not sent back: the run cannot pay for the corrected answer. It fails
// with the guardrail's error, which says why it was not corrected and
// what the check found, not with a usage limit's; and makes no more
// model calls. Within its limit, the same answer is sent back once.
func TestGuardrailFailurePastTheLimitIsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   agent.Option
		calls int64
	}{
		{"tokens", agent.WithTokenLimit(1000), 1},
		{"cost", agent.WithCostLimit(0.001), 1},
		{"within", agent.WithTokenLimit(100_000), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				calls.Add(1)
				// It reads far more than the request's bytes say.
				return provider.Response{Message: provider.AssistantMessage("a draft"), Usage: provider.Usage{InputTokens: 900, OutputTokens: 200, Requests: 1}}, nil
			})
			cited := policy.Guardrail{Name: "cited", Stage: policy.Output, Retry: true, Check: func(context.Context, string) (policy.Finding, error) {
				return policy.Finding{Problem: "the draft names no source"}, nil
			}}
			prices, err := provider.NewPrices(map[string]provider.Price{"": {Input: 1e-6, Output: 1e-6}})
			if err != nil {
				t.Fatal(err)
			}
			a, err := agent.NewReact(model, tc.opt, agent.WithPrices(prices), agent.WithGuardrails(cited))
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.Run(context.Background(), agent.Input{Text: "write"})
			var ge *policy.GuardrailError
			if !errors.As(err, &ge) || ge.Guardrail != "cited" || !strings.Contains(err.Error(), "the draft names no source") {
				t.Fatalf("the run failed with %v: want the guardrail's error, with what it found", err)
			}
			if calls.Load() != tc.calls {
				t.Errorf("%d model calls, want %d", calls.Load(), tc.calls)
			}
			if past := tc.calls == 1; past != strings.Contains(err.Error(), "past its limit") || past != (ge.Unretried != "") || errors.Is(err, agent.ErrUsageLimit) {
				t.Errorf("the run failed with %v (Unretried %q): want it to say it was past its limit when it was", err, ge.Unretried)
			}
		})
	}
}
