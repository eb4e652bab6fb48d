package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// routed is a provider whose default model ("auto", which the workers'
// prices do not hold, as a router's) is answered by another, m1, that
// each reply names: a model honouring a request's MaxTokens that looks
// once with a tool, then writes about 500 tokens, and records each
// call's bound.
type routed struct {
	idMode string
	ids    atomic.Int64
	mu     sync.Mutex
	usage  provider.Usage
	sent   []int
}

func (*routed) Model() string { return "auto" }

func (r *routed) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, req.MaxTokens)
	msg := provider.AssistantMessage("found: " + strings.Repeat("word ", 400))
	if req.MaxTokens > 0 && len(msg.Content) > 4*req.MaxTokens {
		msg.Content = msg.Content[:4*req.MaxTokens]
	}
	if req.Messages[len(req.Messages)-1].Role == provider.RoleUser && len(req.Tools) > 0 {
		id := ""
		switch r.idMode {
		case "fresh ids":
			id = fmt.Sprint("call_", 1000+r.ids.Add(1))
		case "ids from call_0":
			id = "call_0"
		}
		msg = provider.AssistantMessage("", provider.ToolCall{ID: id, Name: "look", Arguments: json.RawMessage(`{}`)})
	}
	u := provider.Usage{InputTokens: int64(len(req.System)+len(req.Messages[len(req.Messages)-1].Content)+3) / 4, Requests: 1}
	u.OutputTokens = int64(len(msg.Content)+3)/4 + 5
	r.usage = r.usage.Add(u)
	return provider.Response{Message: msg, Usage: u, StopReason: provider.StopEndTurn, Model: "m1"}, nil
}

// A run under a cost limit on Temporal reserves each call at the price of
// the model that answered its last, as in process, not at the one the
// request names or the provider's default: under $0.01 at m1's prices
// ($0.015 for 500 tokens written) the answer after the tool's result is
// bound to what is left, though auto, which the request asks for, has no
// price; what the run reports costing is what the model billed.
func TestCallReservedAtTheModelThatAnsweredOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	look, err := tool.New("look", "Looks.", func(ctx context.Context, in struct{}) (string, error) { return "nothing", nil })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(look)
	if err != nil {
		t.Fatal(err)
	}
	for _, idMode := range []string{"fresh ids", "no ids", "ids from call_0"} {
		t.Run(idMode, func(t *testing.T) {
			const limit = 0.01
			p := &routed{idMode: idMode}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg, Prices: prices})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"look"}, CostLimit: limit}, Text: "look, then tell"})
			var out RunOutput
			err := env.GetWorkflowError()
			if err == nil {
				err = env.GetWorkflowResult(&out)
			} else {
				out.Cost = costOf(err)
			}
			billed := costOfUsage(price, p.usage)
			t.Logf("billed %v, $%.6f; the run reports $%.6f; bounds sent %v; error %v", p.usage, billed, out.Cost, p.sent, err)
			if len(p.sent) != 2 {
				t.Fatalf("%d calls, want the look and the answer", len(p.sent))
			}
			if billed > limit+10*price.Input {
				t.Errorf("the run cost $%.6f, past its limit of $%v", billed, limit)
			}
			if err != nil || !strings.HasPrefix(out.Answer, "found: ") {
				t.Errorf("the run ended with %q, %v: want its answer, bound to what was left", out.Answer, err)
			}
			if math.Abs(out.Cost-billed) > 1e-12 || out.TotalUsage() != p.usage {
				t.Errorf("the run reports %v, $%.6f; the model billed %v, $%.6f", out.TotalUsage(), out.Cost, p.usage, billed)
			}
		})
	}
}

// routerScript is a script whose provider's default model is "auto",
// which the workers' prices do not hold, as a router's.
type routerScript struct{ *script }

func (routerScript) Model() string { return "auto" }

// Ten forks of a lead on a router under a cost limit on Temporal: a fork
// asks what its parent asked, auto, which m1 answers; its calls are
// reserved at the price of the model that answered its parent, as in
// process, so the tree keeps to its limit. Reserved at auto, which costs
// nothing against the limit, each fork's first call went with no output
// bound and wrote its 500 tokens at m1's price.
func TestForksOfARouterKeepToTheCostLimitOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	var sent []int
	s := wordy(10, &sent)
	s.model = "m1"
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": routerScript{s}}, Prices: prices})
	const limit = 0.01
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, CostLimit: limit}, Text: "split the work in ten"})
	calls, usage := s.total()
	billed := costOfUsage(price, usage)
	var out RunOutput
	err = env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&out)
	} else {
		out.Cost = costOf(err)
	}
	t.Logf("%d calls billed %v, $%.6f; bounds sent %v; error %v", calls, usage, billed, sent, err)
	if billed > limit+10*price.Input {
		t.Errorf("the tree cost $%.6f, past its limit of $%v", billed, limit)
	}
	if err != nil || !strings.HasPrefix(out.Answer, "all parts done") {
		t.Errorf("the lead ended with %q, %v: want its summing up", out.Answer, err)
	}
	if calls < 11 {
		t.Errorf("%d calls: want the lead's and one per fork", calls)
	}
	if math.Abs(out.Cost-billed) > 1e-9 {
		t.Errorf("the run reports costing $%.9f, the model billed $%.9f", out.Cost, billed)
	}
}

// A run on a router under a cost limit on Temporal: its first call, which
// asks auto (no price names it) before any reply has named the model that
// answers, is reserved at the dearest price the workers hold, as in
// process, so its reply is bounded and the run keeps to its limit
// (before, it went with no output bound, and m1 wrote its 500 tokens:
// $0.015 under a limit of $0.01).
func TestARoutersFirstCallKeepsToTheCostLimitOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 0.01
	p := &routed{}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", CostLimit: limit}, Text: "tell"})
	var out RunOutput
	err = env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&out)
	}
	billed := costOfUsage(price, p.usage)
	t.Logf("billed %v, $%.6f; the run reports $%.6f; bounds sent %v; error %v", p.usage, billed, out.Cost, p.sent, err)
	if err != nil || !strings.HasPrefix(out.Answer, "found: ") {
		t.Fatalf("the run ended with %q, %v: want its answer, bound to the limit", out.Answer, err)
	}
	if len(p.sent) != 1 || p.sent[0] <= 0 || p.sent[0] >= 500 {
		t.Errorf("bounds sent %v: want one call, bound by what the limit pays for at m1's price", p.sent)
	}
	// routed bills five tokens past the bound it was sent.
	if billed > limit+5*price.Output+10*price.Input {
		t.Errorf("the run cost $%.6f, past its limit of $%v", billed, limit)
	}
	if math.Abs(out.Cost-billed) > 1e-12 {
		t.Errorf("the run reports $%.6f; the model billed $%.6f", out.Cost, billed)
	}
}
