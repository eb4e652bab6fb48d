package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
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

// costOfUsage is what u costs at price.
func costOfUsage(price provider.Price, u provider.Usage) float64 {
	return float64(u.InputTokens)*price.Input + float64(u.OutputTokens)*price.Output
}

// A tree under a cost limit on Temporal spends at most its limit, as
// agent.WithCostLimit in process: ten forks that would each write 500
// tokens ($0.015 at these prices, $0.16 for the tree) under a $0.01
// limit, each call reserved at the workers' prices and each child given
// its share; the lead still answers, its wrap-up paid for out of what it
// kept back, and what the run reports costing is what the model billed.
func TestCostLimitOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	run := func(limit float64) (RunOutput, float64, int, error) {
		var sent []int
		p := wordy(10, &sent)
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, CostLimit: limit}, Text: "split the work in ten"})
		calls, billed := p.total()
		err := env.GetWorkflowError()
		var out RunOutput
		if err == nil {
			err = env.GetWorkflowResult(&out)
		} else {
			out.Cost = costOf(err)
		}
		t.Logf("limit $%v: %d calls billed %v, $%.6f; bounds sent %v; error %v", limit, calls, billed, costOfUsage(price, billed), sent, err)
		return out, costOfUsage(price, billed), calls, err
	}
	_, unlimited, _, err := run(0)
	if err != nil || unlimited < 0.1 {
		t.Fatalf("without a limit the tree cost $%v (%v): the test tries nothing", unlimited, err)
	}
	const limit = 0.01
	out, billed, calls, err := run(limit)
	if err != nil {
		// The lead's wrap-up, its note included, is paid for out of what
		// it kept back before its children got their shares.
		t.Fatalf("the lead ended with %v, want its answer", err)
	}
	if !strings.HasPrefix(out.Answer, "all parts done") {
		t.Errorf("the lead answered %q, want its summing up", out.Answer)
	}
	// The bound: the limit, plus what one call's input estimate may miss
	// (a token per four bytes against the model's count: a few tokens).
	if billed > limit+10*price.Input {
		t.Errorf("the tree cost $%.6f, past its limit of $%v", billed, limit)
	}
	if calls < 11 {
		t.Errorf("%d calls: want the lead's and one per child", calls)
	}
	if d := out.Cost - billed; d > 1e-9 || d < -1e-9 {
		t.Errorf("the run reports costing $%.9f, the model billed $%.9f", out.Cost, billed)
	}
}

// The first call of a run under a token limit reserves what its tools'
// definitions weigh, which the workflow names only and the worker fills
// in: the bound sent with it and what it reads fit the limit.
func TestToolDefinitionsCountInTheFirstReserve(t *testing.T) {
	const limit = 6000
	big := tool.Func{Def: tool.Definition{Name: "big", Description: strings.Repeat("Explains at length. ", 400), Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "ok"}, nil }}
	reg, err := tool.NewRegistry(big)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var first *provider.Request
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		mu.Lock()
		if first == nil {
			first = &req
		}
		mu.Unlock()
		s := "the answer " + strings.Repeat("word ", 400)
		if req.MaxTokens > 0 && len(s) > 4*req.MaxTokens {
			s = s[:4*req.MaxTokens]
		}
		return provider.AssistantMessage(s), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"big"}, TokenLimit: limit}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if first == nil {
		t.Fatal("no model call")
	}
	in := fake.Usage(*first, provider.Message{}).InputTokens
	if in < 1500 {
		t.Fatalf("the first request reads %d tokens: its tool's definition was not sent, the test tries nothing", in)
	}
	if first.MaxTokens <= 0 || in+int64(first.MaxTokens) > limit {
		t.Errorf("the first call reads %d tokens and was let write %d, past the limit of %d", in, first.MaxTokens, limit)
	}
	if _, billed := p.total(); billed.Tokens() > limit {
		t.Errorf("the run billed %d tokens, past its limit of %d", billed.Tokens(), limit)
	}
}

// A factory's child, run in process on the worker, spends its share of
// its caller's token limit, and of its cost limit, as a fork does: its
// model calls go with that share as their bound.
func TestFactoryChildGetsItsShare(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-5, Output: 3e-5}})
	if err != nil {
		t.Fatal(err)
	}
	for _, limits := range []Spec{{TokenLimit: 4000}, {CostLimit: 0.02}} {
		t.Run(fmt.Sprintf("tokens=%d,dollars=%v", limits.TokenLimit, limits.CostLimit), func(t *testing.T) {
			var mu sync.Mutex
			var bounds []int
			worker := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				mu.Lock()
				bounds = append(bounds, req.MaxTokens)
				mu.Unlock()
				msg := provider.AssistantMessage("worked")
				return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
			})
			lead := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
					return provider.AssistantMessage("done"), nil
				}
				return provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "worker", Arguments: json.RawMessage(`{"task":"work"}`)}), nil
			}}
			rt := &Runtime{Providers: map[string]provider.Provider{"m": lead}, Prices: prices, Factories: map[string]subagent.Factory{
				"worker": func(context.Context, json.RawMessage) (agent.Agent, error) {
					return agent.NewReact(worker, agent.WithName("worker"))
				},
			}}
			spec := limits
			spec.Name, spec.Provider, spec.SubAgents = "lead", "m", []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}
			env := newEnv(t, rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if len(bounds) != 1 {
				t.Fatalf("the worker's model was called %d times, want once", len(bounds))
			}
			// Its share: at most half of the lead's limit (one part for it,
			// one for the lead's next call), in tokens or at the output price.
			most := limits.TokenLimit / 2
			if limits.CostLimit > 0 {
				most = int64(limits.CostLimit / 2 / 3e-5)
			}
			if bounds[0] <= 0 || int64(bounds[0]) > most {
				t.Errorf("the worker's call went with the bound %d, want its share: at most %d", bounds[0], most)
			}
			if out.Cost <= 0 || out.ChildUsage.IsZero() {
				t.Errorf("the run reports $%v and child usage %v: the worker's call is not counted", out.Cost, out.ChildUsage)
			}
		})
	}
}

// Under a cost limit a lead whose children a factory runs in process on
// the worker ends with its answer wherever the same tree run in process
// does: what the lead keeps back before the children's shares pays for
// its wrap-up, note included, as in process. What the run reports is
// what the models billed, in tokens and in dollars.
func TestFactoryChildrenLeaveTheLeadItsWrapUp(t *testing.T) {
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("word ", 400) // 500 tokens
	bounded := func(req provider.Request, s string) provider.Message {
		if req.MaxTokens > 0 && len(s) > 4*req.MaxTokens {
			s = s[:4*req.MaxTokens]
		}
		return provider.AssistantMessage(s)
	}
	// billing answers as a model that honours MaxTokens and counts what
	// it bills.
	type billing struct {
		mu     sync.Mutex
		billed provider.Usage
	}
	answer := func(b *billing, fn func(provider.Request) provider.Message) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			msg := fn(req)
			u := fake.Usage(req, msg)
			b.mu.Lock()
			b.billed = b.billed.Add(u)
			b.mu.Unlock()
			return provider.Response{Message: msg, Usage: u}, nil
		})
	}
	models := func(b *billing) (lead, worker provider.Provider) {
		worker = answer(b, func(req provider.Request) provider.Message { return bounded(req, "done: "+long) })
		lead = answer(b, func(req provider.Request) provider.Message {
			if req.Messages[len(req.Messages)-1].Role == provider.RoleTool || len(req.Tools) == 0 {
				return bounded(req, "all done: "+long)
			}
			calls := make([]provider.ToolCall, 10)
			for i := range calls {
				calls[i] = provider.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "worker", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
			}
			return provider.AssistantMessage("", calls...)
		})
		return lead, worker
	}
	factory := func(worker provider.Provider) subagent.Factory {
		return func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(worker, agent.WithName("worker"))
		}
	}
	for _, limit := range []float64{0.008, 0.01, 0.015} {
		t.Run(fmt.Sprintf("$%v", limit), func(t *testing.T) {
			var local billing
			leadP, worker := models(&local)
			st, err := subagent.FromFactory("worker", "Works.", factory(worker))
			if err != nil {
				t.Fatal(err)
			}
			lead, err := agent.NewReact(leadP, agent.WithName("lead"), agent.WithTools(st), agent.WithPrices(prices), agent.WithCostLimit(limit))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lead.Run(t.Context(), agent.Input{Text: "split the work in ten"}); err != nil {
				t.Skipf("in process the lead ends with %v: the case proves nothing", err)
			}

			var remote billing
			leadP, worker = models(&remote)
			rt := &Runtime{Providers: map[string]provider.Provider{"m": leadP}, Prices: prices, Factories: map[string]subagent.Factory{"worker": factory(worker)}}
			env := newEnv(t, rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", CostLimit: limit,
				SubAgents: []SubAgent{{Name: "worker", Description: "Works.", Factory: "worker"}}}, Text: "split the work in ten"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatalf("on Temporal the lead ended with %v, want its answer, as in process", err)
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out.Answer, "all done") {
				t.Errorf("the lead answered %q, want its summing up", out.Answer)
			}
			billed := costOfUsage(price, remote.billed)
			if out.TotalUsage() != remote.billed {
				t.Errorf("the run reports %v, the models billed %v", out.TotalUsage(), remote.billed)
			}
			if d := out.Cost - billed; d > 1e-9 || d < -1e-9 {
				t.Errorf("the run reports costing $%.9f, the models billed $%.9f", out.Cost, billed)
			}
			if billed > limit {
				t.Errorf("the tree cost $%.6f under a limit of $%v", billed, limit)
			}
		})
	}
}

// A lead on Temporal that forks ten children under a token limit none of
// whose shares can pay for a child's first call (each reads the lead's
// long system prompt) answers, as in process: each child says in a short
// line, read out of its share, that its budget could not pay for a model
// call, and the lead's wrap-up is paid for out of what it kept back,
// note included; the tree spends no more than its limit, and the run
// reports what the model billed. Before, each child's failure (some 440
// bytes) was read unreserved and the lead ended with usage_limit; and
// before deputy.unstarted-line-floor the lead counted 112 bytes for each
// such line, which it reads in 57, and at 1,200 tokens left calls not
// run. With models that name their calls afresh, not at all, and from
// call_0.
func TestTenForksTooSmallToStartOnTemporal(t *testing.T) {
	const limit = 1200
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			var fresh atomic.Int64
			p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				if strings.HasPrefix(lastUser(req), "part ") {
					return provider.AssistantMessage("done"), nil
				}
				if req.Messages[len(req.Messages)-1].Role == provider.RoleTool || len(req.Tools) == 0 {
					return provider.AssistantMessage("Not written."), nil
				}
				msg := spawnCalls(10)
				resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
				return msg, nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, TokenLimit: limit,
				System: strings.Repeat("You write surveys. ", 64)}, Text: "split the work in ten"})
			calls, billed := p.total()
			err := env.GetWorkflowError()
			var out RunOutput
			if err == nil {
				err = env.GetWorkflowResult(&out)
			}
			t.Logf("%d calls billed %d tokens under a limit of %d; answer %q; error %v", calls, billed.Tokens(), limit, out.Answer, err)
			if err != nil {
				t.Fatalf("the lead ended with %v, want its answer", err)
			}
			if out.Answer != "Not written." || calls != 2 {
				t.Errorf("the lead answered %q in a tree of %d model calls, want its answer and its two calls only", out.Answer, calls)
			}
			if out.TotalUsage() != billed {
				t.Errorf("the run reports %v, the model billed %v", out.TotalUsage(), billed)
			}
			if billed.Tokens() > limit {
				t.Errorf("the tree billed %d tokens, past its limit of %d", billed.Tokens(), limit)
			}
			n := 0
			for _, m := range out.Messages {
				if m.Role == provider.RoleTool {
					n++
					if m.Content != unstartedLine {
						t.Errorf("a child's result is %q, want the short line that says it could not start", m.Content)
					}
				}
			}
			if n != 10 {
				t.Errorf("the lead read %d results, want 10", n)
			}
		})
	}
}

// A lead on Temporal that forks as many of ten children as its reply's
// bound lets it write, under every token limit from 400 to 1,500 by 20,
// answers and spends no more than its limit, as in process: its reply's
// bound leaves room to read the reply again and wrap up, and the calls
// whose results what is left cannot pay to read are not run (before, from
// 400 to 600 its reply of calls left it unable to read them again, and it
// ended with usage_limit). With models that name their calls afresh, not
// at all, and from call_0.
func TestTightLimitsStillAnswerOnTemporal(t *testing.T) {
	tightLimits(t, false)
}

// The same lead under every cost limit from $0.0004 to $0.0015 by
// $0.00002, a token costing $0.000001 in and out, as in process: it
// answers, the tree costs no more than its limit, and the run reports
// what the model billed, in tokens and in dollars. With models that name
// their calls afresh, not at all, and from call_0.
func TestTightCostLimitsStillAnswerOnTemporal(t *testing.T) {
	tightLimits(t, true)
}

// tightLimits sweeps the limit of the lead of
// TestTightLimitsStillAnswerOnTemporal from 400 tokens to 1,500 by 20, as
// a token limit or, if cost, as a cost limit at $0.000001 a token, in and
// out, as in process (TestTightLimitsStillAnswer).
func tightLimits(t *testing.T, cost bool) {
	price := provider.Price{Input: 1e-6, Output: 1e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		cut := 0 // runs where the lead did not run every call it asked for
		for limit := int64(400); limit <= 1500; limit += 20 {
			var fresh atomic.Int64
			bounded := func(req provider.Request, text string) provider.Message {
				if n := 4 * req.MaxTokens; n > 0 && n < len(text) {
					text = text[:n] // a real model stops at its bound
				}
				return provider.AssistantMessage(text)
			}
			p := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				if strings.HasPrefix(lastUser(req), "part ") {
					return bounded(req, strings.Repeat("The part is written. ", 60)), nil
				}
				if req.Messages[len(req.Messages)-1].Role == provider.RoleTool || len(req.Tools) == 0 {
					return bounded(req, "Written."), nil
				}
				// As many forks as its bound lets it ask for.
				var msg provider.Message
				for n := 10; n > 0; n-- {
					msg = spawnCalls(n)
					if req.MaxTokens == 0 || fake.Usage(provider.Request{}, msg).OutputTokens <= int64(req.MaxTokens) {
						break
					}
					msg = bounded(req, "I could not fork the parts.")
				}
				resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
				return msg, nil
			}}
			hub := NewHub()
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Events: hub, Prices: prices})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "tree-w"})
			var rec recorder
			unsubscribe := hub.Subscribe(event.WithSink(context.Background(), &rec), "tree-w")
			spec := Spec{Name: "lead", Provider: "m", Spawn: true, TokenLimit: limit, System: strings.Repeat("You write surveys. ", 16)}
			if cost {
				spec.TokenLimit, spec.CostLimit = 0, float64(limit)*price.Input
			}
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "split the work in ten"})
			unsubscribe()
			// Each call the client saw start ends with one result, those
			// not run too.
			results := map[string]int{}
			for _, e := range rec.events {
				if e.Type == event.ToolCallResult {
					results[e.ToolCallID]++
				}
			}
			for _, e := range rec.events {
				if e.Type == event.ToolCallStart && results[e.ToolCallID] != 1 {
					t.Errorf("ids %d, limit %d: call %s started and has %d results, want one", ids, limit, e.ToolCallID, results[e.ToolCallID])
				}
			}
			calls, billed := p.total()
			err := env.GetWorkflowError()
			var out RunOutput
			if err == nil {
				err = env.GetWorkflowResult(&out)
			}
			if err != nil {
				t.Errorf("ids %d, limit %d: the lead ended with %v after %d model calls billed %d tokens, want its answer", ids, limit, err, calls, billed.Tokens())
				continue
			}
			if out.TotalUsage() != billed {
				t.Errorf("ids %d, limit %d: the run reports %v, the model billed %v", ids, limit, out.TotalUsage(), billed)
			}
			if d := out.Cost - costOfUsage(price, billed); d > 1e-12 || d < -1e-12 {
				t.Errorf("ids %d, limit %d: the run reports costing $%.9f, the model billed $%.9f", ids, limit, out.Cost, costOfUsage(price, billed))
			}
			if billed.Tokens() > limit {
				t.Errorf("ids %d, limit %d: the tree billed %d tokens, past its limit", ids, limit, billed.Tokens())
			}
			if c := costOfUsage(price, billed); cost && c > spec.CostLimit+1e-12 {
				t.Errorf("ids %d, limit %d: the tree cost $%.9f, past its limit of $%.9f", ids, limit, c, spec.CostLimit)
			}
			for _, m := range out.Messages {
				if m.Role == provider.RoleTool && m.Content == unpaidResult {
					cut++
					break
				}
			}
		}
		if cut == 0 {
			t.Errorf("ids %d: no limit cut the lead's calls: the sweep does not reach the limits it is for", ids)
		}
	}
}

// A lead on Temporal under a cost limit, output priced at four times
// input, forks ten children whose model writes one token past each
// request's bound (an estimate one token short), under every limit from
// $0.0015 to $0.003 by $0.00002: each child's wrap-up answer, which passes
// its share by that token, is its answer, as in process, and the lead,
// which kept back enough to read answers, reads them and answers; the
// tree passes its limit by no more than a token at the output price per
// run. (Each such child failed, and at $0.00232 the lead, reading ten
// long failures, had no room left for its reply and failed.) With models
// that name their calls afresh, not at all, and from call_0.
func TestOvershootingChildrenLetTheLeadAnswerOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-6, Output: 4e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		for limit := int64(1500); limit <= 3000; limit += 20 {
			var fresh atomic.Int64
			over := func(req provider.Request, text string) provider.Message {
				if n := 4*req.MaxTokens + 4; req.MaxTokens > 0 && n < len(text) {
					text = text[:n] // a token past its bound
				}
				return provider.AssistantMessage(text)
			}
			p := &script{model: "m1", fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
				if strings.HasPrefix(lastUser(req), "part ") {
					return over(req, strings.Repeat("The part is written. ", 60)), nil
				}
				if req.Messages[len(req.Messages)-1].Role == provider.RoleTool || len(req.Tools) == 0 {
					return over(req, "Written."), nil
				}
				var msg provider.Message
				for n := 10; n > 0; n-- {
					msg = spawnCalls(n)
					if req.MaxTokens == 0 || fake.Usage(provider.Request{}, msg).OutputTokens <= int64(req.MaxTokens) {
						break
					}
					msg = over(req, "I could not fork the parts.")
				}
				resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
				return msg, nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Prices: prices})
			spec := Spec{Name: "lead", Provider: "m", Spawn: true, CostLimit: float64(limit) * price.Input, System: strings.Repeat("You write surveys. ", 16)}
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "split the work in ten"})
			calls, billed := p.total()
			err := env.GetWorkflowError()
			var out RunOutput
			if err == nil {
				err = env.GetWorkflowResult(&out)
			}
			if err != nil || out.Answer == "" {
				t.Errorf("ids %d, limit $%.6f: the lead ended with %.300v after %d model calls costing $%.6f, want its answer", ids, spec.CostLimit, err, calls, costOfUsage(price, billed))
				continue
			}
			if c := costOfUsage(price, billed); c > spec.CostLimit+11*price.Output+1e-12 {
				t.Errorf("ids %d, limit $%.6f: the tree cost $%.6f, past its limit by more than a token per run", ids, spec.CostLimit, c)
			}
		}
	}
}
