package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
