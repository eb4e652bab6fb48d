package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// perByte bills a request as a tokenizer of one token a byte would, the
// worst case the estimate's documented error allows for (it counts a
// token per four bytes of what it has no count for).
func perByte(req provider.Request, reply provider.Message) provider.Usage {
	u := fake.Usage(req, reply)
	in := len(req.System)
	for _, m := range req.Messages {
		in += len(m.Content)
		for _, c := range m.ToolCalls {
			in += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		in += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	out := len(reply.Content)
	for _, c := range reply.ToolCalls {
		out += len(c.Name) + len(c.Arguments)
	}
	u.InputTokens, u.OutputTokens = int64(in), int64(out)
	return u
}

// TestTokenLimitBoundUnderEstimationError runs an agent under a token
// limit against a model that counts a token a byte, four times what the
// estimate counts for the bytes it has no count for: the run spends
// exactly its limit plus the shortfall e of its last call's estimate, and
// e is at most three quarters of a token per byte estimated, the
// documented error.
func TestTokenLimitBoundUnderEstimationError(t *testing.T) {
	const limit = 3000
	found := strings.Repeat("a fact the lookup found; ", 16) // 400 bytes a result
	lookup := toolFunc("lookup", func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: found}, nil
	})
	p := fake.NewProvider(fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		msg := provider.AssistantMessage(strings.Repeat("All I found, at length. ", 200))
		if len(req.Tools) > 0 {
			msg = provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprint("c", len(req.Messages)), Name: "lookup", Arguments: json.RawMessage(`{}`)})
		}
		return provider.Response{Message: msg, Usage: perByte(req, msg)}, nil
	})).Loop()
	out, err := newReact(t, p, agent.WithTools(lookup), agent.WithMaxSteps(50), agent.WithTokenLimit(limit)).Run(t.Context(), agent.Input{Text: "find everything"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if len(reqs) < 3 || !out.Partial {
		t.Fatalf("%d calls, partial %v: want several, the last a wrap-up", len(reqs), out.Partial)
	}
	// The last call's estimate: the previous call's count, in and out,
	// and a token per four bytes of what was added since: the tool
	// result (its text and call id) and the budget note.
	last, prev := reqs[len(reqs)-1].Request, reqs[len(reqs)-2].Request
	prevReply := last.Messages[len(prev.Messages)]
	prevUsage := perByte(prev, prevReply)
	var added int64
	for _, m := range last.Messages[len(prev.Messages)+1 : len(last.Messages)-1] {
		added += int64(len(m.Content) + len(m.ToolCallID))
	}
	note := int64(len(last.Messages[len(last.Messages)-1].Content))
	est := prevUsage.InputTokens + prevUsage.OutputTokens + (added+3)/4 + (note+3)/4
	real := perByte(last, provider.Message{}).InputTokens
	e := real - est
	spent := out.TotalUsage().Tokens()
	t.Logf("%d calls; spent %d under %d; the last call read %d tokens against an estimate of %d (e = %d over %d bytes estimated)", len(reqs), spent, limit, real, est, e, added+note)
	if spent != limit+e {
		t.Errorf("spent %d, want exactly the limit and the last call's shortfall: %d + %d", spent, limit, e)
	}
	if e <= 0 || e > (3*(added+note)+3)/4+2 {
		t.Errorf("the last estimate was short by %d tokens over %d bytes; the documented error is at most 3/4 a byte", e, added+note)
	}
}

// stepModel asks, while it is offered tools, for one more step of work,
// which a person approves; offered none, it answers. It bills a token per
// four bytes, as the estimate counts, and counts its calls and what it
// billed.
func stepModel(id func(int64) string, calls, billed *atomic.Int64) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := calls.Add(1)
		msg := provider.AssistantMessage("Stopped where the budget ends.")
		if len(req.Tools) > 0 {
			msg = provider.AssistantMessage("One more step.", provider.ToolCall{ID: id(n), Name: "step", Arguments: json.RawMessage(`{}`)})
		}
		u := fake.Usage(req, msg)
		billed.Add(u.Tokens())
		return provider.Response{Message: msg, Usage: u, StopReason: provider.StopEndTurn}, nil
	})
}

// TestResumedTurnKeepsItsLimit runs a journaled turn whose every step a
// person approves, under 1,000 tokens and under $1, whatever ids the
// model gives its calls: resumed at every step, three times and more, it
// spends no more than its limit (it spent 2,800 when each resume started
// the limit afresh), each approved step runs once, no model answer is
// paid twice, and it does the same work as the turn run unbroken.
func TestResumedTurnKeepsItsLimit(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"m": {Input: 1e-3, Output: 1e-3}}) // $1 is 1,000 tokens
	if err != nil {
		t.Fatal(err)
	}
	system := agent.WithSystemPrompt(strings.Repeat("Work step by step; each step needs a person's approval. ", 8))
	for _, limit := range []struct {
		name string
		opts []agent.Option
	}{
		{"1,000 tokens", []agent.Option{agent.WithTokenLimit(1000)}},
		{"$1", []agent.Option{agent.WithModel("m"), agent.WithPrices(prices), agent.WithCostLimit(1)}},
	} {
		for _, mode := range idModes {
			t.Run(limit.name+", "+mode.name, func(t *testing.T) {
				// The same work run unbroken: the steps need no approval.
				var calls, billed, steps atomic.Int64
				step := toolFunc("step", func(context.Context, tool.Call) (tool.Result, error) {
					steps.Add(1)
					return tool.Result{Content: "step done"}, nil
				})
				unbroken, err := newReact(t, stepModel(mode.id, &calls, &billed), append([]agent.Option{system, agent.WithTools(step), agent.WithMaxSteps(50)}, limit.opts...)...).
					Run(t.Context(), agent.Input{Text: "do the work"})
				if err != nil && !errors.Is(err, agent.ErrUsageLimit) {
					t.Fatal(err)
				}
				wantSteps, wantBilled := steps.Load(), billed.Load()

				calls.Store(0)
				billed.Store(0)
				steps.Store(0)
				st := journalStore(t)
				approved := tool.RequireApproval(step, "does one step", 0)
				lead := newReact(t, stepModel(mode.id, &calls, &billed), append([]agent.Option{system, agent.WithTools(approved), agent.WithMaxSteps(50)}, limit.opts...)...)
				ctx := context.Background()
				var out agent.Output
				resumes := 0
				for ; ; resumes++ {
					j, err := st.Journal(ctx, "turn")
					if err != nil {
						t.Fatal(err)
					}
					out, err = lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "do the work"})
					var in *tool.Interrupted
					if !errors.As(err, &in) {
						if err != nil && !errors.Is(err, agent.ErrUsageLimit) {
							t.Fatal(err)
						}
						break
					}
					if resumes > 20 {
						t.Fatalf("still asking after %d resumes", resumes)
					}
					it := in.Interrupts[0]
					if ctx, err = tool.Resume(context.Background(), in, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("%d resumes, %d steps, %d model calls, %d tokens billed ($%.3f reported); unbroken: %d steps, %d tokens (%d model calls in all)",
					resumes, steps.Load(), calls.Load(), billed.Load(), out.Cost, wantSteps, wantBilled, unbroken.Usage.Requests)
				if resumes < 3 {
					t.Errorf("%d resumes, want three at least: the test needs a turn that asks at every step", resumes)
				}
				if got := billed.Load(); got > 1000 {
					t.Errorf("the resumed turn was billed %d tokens under a limit of 1,000 (or $1 at $0.001 a token)", got)
				}
				if steps.Load() != int64(resumes) || steps.Load() != wantSteps {
					t.Errorf("%d steps ran for %d approvals; run unbroken the turn ran %d", steps.Load(), resumes, wantSteps)
				}
				if got := out.TotalUsage(); got.Tokens() != billed.Load() || got.Requests != calls.Load() {
					t.Errorf("the turn reports %d tokens in %d requests; the model billed %d in %d calls: a journaled answer was paid twice or not counted", got.Tokens(), got.Requests, billed.Load(), calls.Load())
				}
			})
		}
	}
}

// TestCostLimitPricesAFirstCallWithNoModelNamed runs an agent that names
// no model under a cost limit its first call's input alone would pass: no
// model has answered yet to say which price is its, so the call is
// reserved at the dearest price the table holds, and is not made.
func TestCostLimitPricesAFirstCallWithNoModelNamed(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"cheap": {Input: 1e-6, Output: 1e-6}, "dear": {Input: 1e-3, Output: 4e-3}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		calls.Add(1)
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: provider.Usage{InputTokens: 1000, OutputTokens: 1, Requests: 1}, Model: "dear"}, nil
	})
	// About 250 tokens of task: $0.25 at the dear model's input price.
	a, err := agent.NewReact(p, agent.WithPrices(prices), agent.WithCostLimit(0.1))
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(context.Background(), agent.Input{Text: strings.Repeat("word ", 200)})
	if !errors.Is(err, agent.ErrUsageLimit) || calls.Load() != 0 {
		t.Fatalf("made %d calls, cost $%v, err %v; want none, ErrUsageLimit", calls.Load(), out.Cost, err)
	}
}
