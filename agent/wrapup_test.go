package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// TestReactWrapUp checks the last call of a run after which another
// would not fit its token limit: it is made without tools, with a note
// that it is the last reply, and with what is left as its output bound;
// its answer ends the run as partial. A wrap-up reply with no text fails
// the run, and a run with no room left for any reply makes no call.
func TestReactWrapUp(t *testing.T) {
	t.Run("answers with what it has", func(t *testing.T) {
		// Each call reads what the one before read and wrote, and 10
		// more: after two, a third fits the limit of 1,200, a fourth
		// would not.
		p := fake.NewProvider(
			fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(300, 20)),
			fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(330, 20)),
			fake.Text("Lisbon is sunny; Porto not yet known.").WithUsage(u(400, 20)),
		)
		a := newReact(t, p, agent.WithTools(weather(t)), agent.WithTokenLimit(1200))
		out, err := a.Run(t.Context(), agent.Input{Text: "weather in Lisbon, Porto and Faro?"})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Partial || out.Answer != "Lisbon is sunny; Porto not yet known." {
			t.Errorf("Partial %v, answer %q; want the wrap-up's answer, partial", out.Partial, out.Answer)
		}
		reqs := p.Requests()
		if len(reqs) != 3 {
			t.Fatalf("%d model calls, want 3", len(reqs))
		}
		if len(reqs[1].Tools) == 0 || len(reqs[2].Tools) != 0 {
			t.Errorf("tools offered: %d, then %d on the last call; want tools until the wrap-up turn, none on it", len(reqs[1].Tools), len(reqs[2].Tools))
		}
		last := reqs[2].Messages[len(reqs[2].Messages)-1].Content
		if !strings.Contains(last, "This is your last reply") || !strings.Contains(last, "670 of your 1200 tokens") {
			t.Errorf("the wrap-up note is %q", last)
		}
		// The bound is what is left after the call's input: the last
		// report (350) and what was added since, the note included.
		added := int64(len(reqs[2].Messages[len(reqs[2].Messages)-2].Content) + len(reqs[2].Messages[len(reqs[2].Messages)-2].ToolCallID) + len(last))
		if want := 1200 - 670 - (350 + (added+3)/4); int64(reqs[2].MaxTokens) != want {
			t.Errorf("the wrap-up's output bound is %d, want %d: what is left after its estimated input", reqs[2].MaxTokens, want)
		}
		if got := out.TotalUsage().Tokens(); got != 1090 {
			t.Errorf("spent %d tokens, want 1090", got)
		}
	})
	t.Run("no room after a tool step", func(t *testing.T) {
		p := fake.NewProvider(
			fake.Call("delegate", `{}`).WithUsage(u(100, 10)),
			fake.Text("what the child found").WithUsage(u(120, 10)),
		)
		child := toolFunc("delegate", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "found", Usage: u(1000, 0)}, nil
		})
		out, err := newReact(t, p, agent.WithTools(child), agent.WithTokenLimit(500)).Run(t.Context(), agent.Input{Text: "go"})
		if !errors.Is(err, agent.ErrUsageLimit) || !strings.Contains(err.Error(), "would leave no room for a reply") || p.Calls() != 1 {
			t.Fatalf("got %v after %d calls; want ErrUsageLimit before a second call", err, p.Calls())
		}
		if got := out.TotalUsage().Tokens(); got != 1110 {
			t.Errorf("the failed run reports %d tokens, want all 1110 spent", got)
		}
	})
	t.Run("a wrap-up with no answer fails", func(t *testing.T) {
		p := fake.NewProvider(
			fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(300, 20)),
			fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(300, 20)),
		)
		_, err := newReact(t, p, agent.WithTools(weather(t)), agent.WithTokenLimit(900)).Run(t.Context(), agent.Input{Text: "go"})
		if !errors.Is(err, agent.ErrUsageLimit) || !strings.Contains(err.Error(), "asked to wrap up, had no answer") {
			t.Errorf("got %v, want ErrUsageLimit saying the wrap-up had no answer", err)
		}
	})
	t.Run("an empty wrap-up ends at the limit", func(t *testing.T) {
		// The model stops of its own accord (end_turn) with nothing
		// written: still the run's last reply at its limit, not a broken
		// reply (ErrEmptyReply), so a sub-agent's caller gets what it
		// said before.
		p := fake.NewProvider(
			fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(300, 20)),
			fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(330, 20)),
			fake.Text("").WithUsage(u(400, 0)),
		)
		// Its output bound (WithMaxTokens) is below what the limit leaves,
		// so the empty reply was not cut by the budget's bound.
		_, err := newReact(t, p, agent.WithTools(weather(t)), agent.WithTokenLimit(1200), agent.WithMaxTokens(50)).Run(t.Context(), agent.Input{Text: "go"})
		if p.Calls() != 3 || !errors.Is(err, agent.ErrUsageLimit) || errors.Is(err, agent.ErrEmptyReply) || !strings.Contains(err.Error(), "asked to wrap up, had no answer") {
			t.Errorf("got %v after %d calls, want ErrUsageLimit saying the wrap-up had no answer after 3", err, p.Calls())
		}
	})
	t.Run("a wrap-up with no answer under a cost limit says so", func(t *testing.T) {
		prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 1e-6}})
		if err != nil {
			t.Fatal(err)
		}
		p := fake.NewProvider(
			fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(300, 20)),
			fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(300, 20)),
		)
		out, err := newReact(t, p, agent.WithTools(weather(t)), agent.WithPrices(prices), agent.WithCostLimit(0.0009)).Run(t.Context(), agent.Input{Text: "go"})
		if !errors.Is(err, agent.ErrUsageLimit) || !strings.Contains(err.Error(), "had no answer: raise WithCostLimit") || strings.Contains(err.Error(), "the limit is 0") {
			t.Errorf("got %v, want ErrUsageLimit saying the wrap-up under the cost limit had no answer (cost $%v)", err, out.Cost)
		}
	})
	t.Run("a reply cut at its bound is the run's last", func(t *testing.T) {
		// Synthetic usage: a token per four bytes, as the estimate counts.
		p := fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`), fake.Text(strings.Repeat("sunny ", 400)))
		out, err := newReact(t, p, agent.WithTools(weather(t)), agent.WithTokenLimit(300)).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		reqs := p.Requests()
		if len(reqs) != 2 || !out.Partial || !strings.HasPrefix(out.Answer, "sunny sunny") {
			t.Fatalf("%d calls, partial %v, answer %q; want the cut reply as a partial answer", len(reqs), out.Partial, out.Answer)
		}
		if got := out.TotalUsage().Tokens(); got > 300 {
			t.Errorf("spent %d tokens under a limit of 300", got)
		}
	})
}

// TestReactOpenTurn checks a run handed a turn left open: an assistant
// message whose calls are answered in part. The run runs only the calls
// left without a result, then asks the model, with every result in the
// conversation.
func TestReactOpenTurn(t *testing.T) {
	var ran []string
	lookup := toolFunc("lookup", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		ran = append(ran, string(c.Arguments))
		return tool.Result{Content: "found " + string(c.Arguments)}, nil
	})
	p := fake.NewProvider(fake.Text("Both found."))
	a := newReact(t, p, agent.WithTools(lookup))
	in := []provider.Message{
		provider.UserMessage("look up a and b"),
		provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`"a"`)},
			provider.ToolCall{ID: "c2", Name: "lookup", Arguments: json.RawMessage(`"b, edited"`)}),
		provider.ToolMessage("c1", "found a, earlier", false),
	}
	out, err := a.Run(t.Context(), agent.Input{Messages: in})
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 || ran[0] != `"b, edited"` {
		t.Errorf("ran %q, want only the call left open", ran)
	}
	reqs := p.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want 1: the turn's own was made before", len(reqs))
	}
	got := reqs[0].Messages
	if len(got) != 4 || got[2].Content != "found a, earlier" || got[3].ToolCallID != "c2" || got[3].Content != `found "b, edited"` {
		t.Errorf("the model was sent %+v", got)
	}
	if out.Answer != "Both found." {
		t.Errorf("answer %q", out.Answer)
	}
}
