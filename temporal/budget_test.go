package temporal

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/deputy-go/deputy/provider"
)

// wordy is a lead that spawns n children, each of which answers with
// about 500 tokens, and then sums up at as much length: a model that
// honours a request's MaxTokens, as real ones do, and writes as much as
// it is let otherwise. maxSent records the bound of each call.
func wordy(n int, maxSent *[]int) *script {
	long := strings.Repeat("word ", 400) // 2,000 bytes: 500 tokens
	var mu sync.Mutex
	bounded := func(req provider.Request, s string) string {
		mu.Lock()
		*maxSent = append(*maxSent, req.MaxTokens)
		mu.Unlock()
		if req.MaxTokens > 0 && len(s) > 4*req.MaxTokens {
			s = s[:4*req.MaxTokens]
		}
		return s
	}
	return &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage(bounded(req, "done: "+task+" "+long)), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool, len(req.Tools) == 0:
			return provider.AssistantMessage(bounded(req, "all parts done: "+long)), nil
		default:
			bounded(req, "")
			return spawnCalls(n), nil
		}
	}}
}

// A tree under a token limit spends at most its limit: each model call is
// reserved before it is made and carries its share as MaxTokens, and each
// child gets a share of what its parent has left, as in process. Checked
// after each reply only, the same tree spends its four children's 500
// tokens each and the lead's 500 more, three times its limit.
func TestTokenLimitReservedBeforeEachCall(t *testing.T) {
	const limit = 1000
	var sent []int
	p := wordy(4, &sent)
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, TokenLimit: limit}, Text: "split the work in four"})
	calls, billed := p.total()
	err := env.GetWorkflowError()
	var out RunOutput
	if err == nil {
		err = env.GetWorkflowResult(&out)
	}
	t.Logf("%d calls billed %d tokens (%v) under a limit of %d; bounds sent %v; error %v", calls, billed.Tokens(), billed, limit, sent, err)
	if billed.Tokens() > limit {
		t.Errorf("the tree billed %d tokens, past its limit of %d", billed.Tokens(), limit)
	}
	for i, m := range sent {
		if m <= 0 {
			t.Errorf("call %d went without an output bound under a token limit", i+1)
		}
	}
	var app *sdktemporal.ApplicationError
	switch {
	case err == nil:
		if out.TotalUsage() != billed {
			t.Errorf("the run reports %v, the model billed %v", out.TotalUsage(), billed)
		}
	case errors.As(err, &app) && app.Type() == ErrTypeUsageLimit:
		if u := usageOf(err); u != billed {
			t.Errorf("the failure carries %v, the model billed %v", u, billed)
		}
	default:
		t.Fatalf("error %v", err)
	}
	if calls < 6 {
		t.Errorf("%d calls: want the lead's two and one per child", calls)
	}
}
