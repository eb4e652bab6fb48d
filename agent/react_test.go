package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

func TestReactRun(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(100, 10)),
		fake.Text("It is sunny in Lisbon.").WithUsage(u(120, 8)),
	)
	a := newReact(t, p, agent.WithName("assistant"), agent.WithSystemPrompt("Be brief."), agent.WithTools(weather(t)),
		agent.WithModel("small"), agent.WithMaxTokens(256), agent.WithTemperature(0.5))
	out, err := a.Run(t.Context(), agent.Input{Text: "Weather in Lisbon?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) < 2 || len(out.Messages[1].ToolCalls) != 1 {
		t.Fatalf("messages %+v: want a tool call second", out.Messages)
	}
	wantMsgs := turn("Weather in Lisbon?", out.Messages[1].ToolCalls[0].ID, `{"city":"Lisbon"}`, "sunny in Lisbon", "It is sunny in Lisbon.")
	want := agent.Output{RunID: out.RunID, Answer: "It is sunny in Lisbon.", Messages: wantMsgs, Usage: provider.Usage{InputTokens: 220, OutputTokens: 18, Requests: 2}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("Output (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(out.RunID, "run_") {
		t.Errorf("RunID %q", out.RunID)
	}
	if diff := cmp.Diff(wantMsgs, a.History()); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}

	reqs := p.RequestsFor("assistant")
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	temp := 0.5
	wantReq := provider.Request{
		Model: "small", System: "Be brief.", Messages: wantMsgs[:1],
		Tools: []provider.ToolDef{weather(t).Definition()}, MaxTokens: 256, Temperature: &temp,
		CacheKey: "assistant", // the agent's name, by default
	}
	if diff := cmp.Diff(wantReq, reqs[0]); diff != "" {
		t.Errorf("first request (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMsgs[:3], reqs[1].Messages); diff != "" {
		t.Errorf("second request's messages (-want +got):\n%s", diff)
	}
}

func TestReactKeepsTheConversation(t *testing.T) {
	p := fake.NewProvider(fake.Text("Hello, Ana."), fake.Text("Your name is Ana."), fake.Text("I don't know."))
	a := newReact(t, p)
	if _, err := a.Run(t.Context(), agent.Input{Text: "I am Ana."}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(t.Context(), agent.Input{Text: "Who am I?"})
	if err != nil {
		t.Fatal(err)
	}
	second := []provider.Message{provider.UserMessage("Who am I?"), provider.AssistantMessage("Your name is Ana.")}
	if diff := cmp.Diff(second, out.Messages); diff != "" {
		t.Errorf("the second run's messages (-want +got):\n%s", diff)
	}
	whole := append([]provider.Message{provider.UserMessage("I am Ana."), provider.AssistantMessage("Hello, Ana.")}, second[0])
	if diff := cmp.Diff(whole, p.Requests()[1].Messages); diff != "" {
		t.Errorf("the second request carries the first run (-want +got):\n%s", diff)
	}
	h := a.History()
	h[0].Content = "changed"
	if a.History()[0].Content != "I am Ana." {
		t.Error("History returned the agent's own slice")
	}

	a.Reset()
	if len(a.History()) != 0 {
		t.Errorf("History after Reset: %v", a.History())
	}
	if _, err := a.Run(t.Context(), agent.Input{Text: "Who am I?"}); err != nil {
		t.Fatal(err)
	}
	if got := p.Requests()[2].Messages; len(got) != 1 {
		t.Errorf("after Reset the request carries %d messages, want 1", len(got))
	}
}

func TestReactInputMessages(t *testing.T) {
	handover := []provider.Message{
		provider.UserMessage("Find the capital of Portugal."),
		provider.AssistantMessage("", provider.ToolCall{ID: "c9", Name: "search", Arguments: json.RawMessage(`{}`)}),
		provider.ToolMessage("c9", "Lisbon", false),
	}
	tests := []struct {
		name     string
		in       agent.Input
		wantMsgs []provider.Message // sent to the model
		wantErr  string
	}{
		{name: "text", in: agent.Input{Text: "hi"}, wantMsgs: []provider.Message{provider.UserMessage("hi")}},
		{name: "messages", in: agent.Input{Messages: handover}, wantMsgs: handover},
		{name: "messages and text", in: agent.Input{Messages: handover[:1], Text: "Be quick."},
			wantMsgs: []provider.Message{handover[0], provider.UserMessage("Be quick.")}},
		{name: "system message", in: agent.Input{Messages: []provider.Message{{Role: provider.RoleSystem, Content: "Be brief."}, provider.UserMessage("hi")}},
			wantErr: `agent "agent": agent: invalid input messages: message 0: a system message: the system prompt goes in WithSystemPrompt, not in the conversation`},
		{name: "unanswered call", in: agent.Input{Messages: handover[:2], Text: "go on"},
			wantErr: `agent "agent": agent: invalid input messages: the conversation ends with tool calls left without a result, and Text would follow them: leave Text empty to run those calls`},
		{name: "unanswered call mid-conversation", in: agent.Input{Messages: append(handover[:2:2], provider.UserMessage("go on"))},
			wantErr: `agent "agent": agent: invalid input messages: message 2 (user): tool calls [c9] have no result`},
		{name: "orphan result", in: agent.Input{Messages: handover[2:]},
			wantErr: `agent "agent": agent: invalid input messages: message 0: tool result for "c9" answers no pending call`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("ok"))
			a := newReact(t, p)
			out, err := a.Run(t.Context(), tt.in)
			if tt.wantErr != "" {
				if !errors.Is(err, agent.ErrBadMessages) || err.Error() != tt.wantErr {
					t.Fatalf("error:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				if p.Calls() != 0 || len(a.History()) != 0 {
					t.Errorf("a refused input reached the model (%d calls) or the history (%d messages)", p.Calls(), len(a.History()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantMsgs, p.Requests()[0].Messages); diff != "" {
				t.Errorf("messages sent (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(append(tt.wantMsgs, provider.AssistantMessage("ok")), out.Messages); diff != "" {
				t.Errorf("Output.Messages (-want +got):\n%s", diff)
			}
		})
	}
}

// Bad input from the model reaches it as an error result it can correct,
// and nothing is lost on the way.
func TestReactBadToolCalls(t *testing.T) {
	huge := `{"city":"` + strings.Repeat("a", 10<<20) + `"}`
	tests := []struct {
		name       string
		call, args string
		wantResult string
	}{
		{"malformed JSON", "weather", `{"city":`,
			"tool: invalid arguments for weather: not valid JSON: unexpected EOF: fix the arguments to match the tool's schema and call it again"},
		{"wrong type", "weather", `{"city":5}`,
			"tool: invalid arguments for weather: at /city: got number, want string: fix the arguments to match the tool's schema and call it again"},
		{"null", "weather", `null`,
			"tool: invalid arguments for weather: at the top level: got null, want object: fix the arguments to match the tool's schema and call it again"},
		{"array", "weather", `[{"city":"Lisbon"}]`,
			"tool: invalid arguments for weather: at the top level: got array, want object: fix the arguments to match the tool's schema and call it again"},
		{"10 MB of arguments", "weather", huge,
			"tool: invalid arguments for weather: the arguments are 10485771 bytes, more than the limit of 1048576: send less, or pass a reference instead of the content"},
		{"unknown tool", "forecast", `{"city":"Lisbon"}`,
			`tool: unknown tool "forecast": call one of: weather`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call(tt.call, tt.args),
				fake.Call("weather", `{"city":"Lisbon"}`),
				fake.Text("It is sunny in Lisbon."),
			)
			a := newReact(t, p, agent.WithTools(weather(t)))
			out, err := a.Run(t.Context(), agent.Input{Text: "Weather in Lisbon?"})
			if err != nil {
				t.Fatalf("the run did not recover: %v", err)
			}
			if out.Answer != "It is sunny in Lisbon." {
				t.Errorf("Answer %q", out.Answer)
			}
			msgs := out.Messages
			if len(msgs) != 6 {
				t.Fatalf("%d messages, want 6: %v", len(msgs), msgs)
			}
			badCall := msgs[1].ToolCalls[0]
			if diff := cmp.Diff(provider.ToolMessage(badCall.ID, tt.wantResult, true), msgs[2]); diff != "" {
				t.Errorf("the error result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(msgs[2], p.Requests()[1].Messages[2]); diff != "" {
				t.Errorf("the model did not see the error result (-want +got):\n%s", diff)
			}
			if string(badCall.Arguments) != tt.args {
				t.Error("the model's bad arguments were not kept as sent")
			}
			if diff := cmp.Diff(provider.ToolMessage(msgs[3].ToolCalls[0].ID, "sunny in Lisbon", false), msgs[4]); diff != "" {
				t.Errorf("the corrected call's result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(msgs, a.History(), rawEqual); diff != "" {
				t.Errorf("History (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("empty reply", func(t *testing.T) {
		p := fake.NewProvider(fake.Text("").WithUsage(u(50, 0)))
		a := newReact(t, p, agent.WithTools(weather(t)))
		out, err := a.Run(t.Context(), agent.Input{Text: "Weather in Lisbon?"})
		if !errors.Is(err, agent.ErrEmptyReply) {
			t.Fatalf("error %v, want ErrEmptyReply", err)
		}
		want := `agent "agent": agent: model reply has neither text nor tool calls (stop reason "end_turn"): check the model and its max tokens`
		if err.Error() != want {
			t.Errorf("error:\n%s\nwant:\n%s", err, want)
		}
		if out.Usage != u(50, 0) || len(a.History()) != 0 {
			t.Errorf("usage %v, history %v: want the usage kept and the history untouched", out.Usage, a.History())
		}
	})
}

// A failed run leaves the conversation as it was and still reports what it
// spent.
func TestReactFailureLeavesTheConversation(t *testing.T) {
	errDisk := errors.New("disk on fire")
	outage := &provider.Error{Provider: "fake", StatusCode: 503, Kind: provider.KindTransient}
	broken := toolFunc("broken", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Usage: u(30, 3)}, errDisk
	})
	tests := []struct {
		name      string
		second    []fake.Reply
		wantIs    error
		wantCode  string
		wantUsage provider.Usage
		wantChild provider.Usage
	}{
		{"provider error", []fake.Reply{fake.Error(outage)}, outage, "provider_error", provider.Usage{}, provider.Usage{}},
		{"provider error after a step", []fake.Reply{fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(10, 1)), fake.Error(outage)}, outage, "provider_error", u(10, 1), provider.Usage{}},
		{"tool program error", []fake.Reply{fake.Call("broken", `{}`).WithUsage(u(10, 1))}, errDisk, "error", u(10, 1), u(30, 3)},
		{"script exhausted", []fake.Reply{fake.Call("weather", `{"city":"Porto"}`).WithUsage(u(10, 1))}, fake.ErrScriptExhausted, "error", u(10, 1), provider.Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("Hello."))
			a := newReact(t, p, agent.WithTools(weather(t), broken))
			if _, err := a.Run(t.Context(), agent.Input{Text: "Hi."}); err != nil {
				t.Fatal(err)
			}
			before := a.History()
			p.Add(tt.second...)
			out, err := a.Run(t.Context(), agent.Input{Text: "And now?"})
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v in the chain", err, tt.wantIs)
			}
			if got := errcode.Of(err); got != tt.wantCode {
				t.Errorf("code = %q, want %q", got, tt.wantCode)
			}
			if diff := cmp.Diff(before, a.History()); diff != "" {
				t.Errorf("the failed run changed the history (-before +after):\n%s", diff)
			}
			if out.Usage != tt.wantUsage || out.ChildUsage != tt.wantChild || out.RunID == "" {
				t.Errorf("Output %+v: want usage %v, child usage %v and a run id", out, tt.wantUsage, tt.wantChild)
			}
			if len(out.Messages) == 0 || out.Messages[0].Content != "And now?" {
				t.Errorf("Output.Messages %v: want the run's messages so far", out.Messages)
			}
		})
	}
}

func TestReactCancelledMidRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			fake.Text("Hello."),
			fake.Call("weather", `{"city":"Lisbon"}`).WithUsage(u(100, 10)),
			fake.Text("too late").After(time.Hour),
		)
		a := newReact(t, p, agent.WithTools(weather(t)))
		if _, err := a.Run(t.Context(), agent.Input{Text: "Hi."}); err != nil {
			t.Fatal(err)
		}
		before := a.History()

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Minute, cancel)
		start := time.Now()
		out, err := a.Run(ctx, agent.Input{Text: "Weather in Lisbon?"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled in the chain", err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Errorf("Run returned %v after it started, want 1m (when it was cancelled)", got)
		}
		if errcode.Of(err) != "cancelled" {
			t.Errorf("code = %q", errcode.Of(err))
		}
		if diff := cmp.Diff(before, a.History()); diff != "" {
			t.Errorf("the cancelled run changed the history (-before +after):\n%s", diff)
		}
		if out.Usage != u(100, 10) {
			t.Errorf("usage %v, want the first step's %v", out.Usage, u(100, 10))
		}
		if len(out.Messages) != 3 {
			t.Errorf("Output.Messages %v: want the question, the call and its result", out.Messages)
		}

		// A context already done: no model call at all.
		calls := p.Calls()
		if _, err := a.Run(ctx, agent.Input{Text: "again"}); !errors.Is(err, context.Canceled) {
			t.Errorf("Run with a done context: %v", err)
		}
		if p.Calls() != calls {
			t.Error("Run with a done context called the model")
		}
	})
}

func TestReactCancelledInTool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := toolFunc("slow", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			select {
			case <-time.After(time.Hour):
				return tool.Result{Content: "done"}, nil
			case <-ctx.Done():
				return tool.Result{Usage: u(5, 5)}, ctx.Err()
			}
		})
		p := fake.NewProvider(fake.Call("slow", `{}`), fake.Text("never"))
		a := newReact(t, p, agent.WithTools(slow))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		out, err := a.Run(ctx, agent.Input{Text: "go"})
		if !errors.Is(err, context.DeadlineExceeded) || errcode.Of(err) != "timeout" {
			t.Fatalf("error %v (code %q), want a timeout", err, errcode.Of(err))
		}
		if len(a.History()) != 0 || out.ChildUsage != u(5, 5) {
			t.Errorf("history %v, child usage %v", a.History(), out.ChildUsage)
		}
	})
}

// Fifty callers share one agent: the runs take turns, and the history ends
// with exactly fifty complete turns.
func TestReactConcurrentRuns(t *testing.T) {
	const n = 50
	var script []fake.Reply
	for range n {
		script = append(script, fake.Call("weather", `{"city":"Lisbon"}`), fake.Text("sunny"))
	}
	p := fake.NewProvider(script...)
	a := newReact(t, p, agent.WithTools(weather(t)))
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := a.Run(context.Background(), agent.Input{Text: fmt.Sprint("question ", i)})
			if err != nil {
				t.Error(err)
				return
			}
			if len(out.Messages) != 4 || out.Messages[0].Content != fmt.Sprint("question ", i) || out.Answer != "sunny" {
				t.Errorf("run %d: %v", i, out.Messages)
			}
			_ = a.History()
		})
	}
	wg.Wait()
	h := a.History()
	if len(h) != 4*n {
		t.Fatalf("history has %d messages, want %d", len(h), 4*n)
	}
	if err := conversation.Check(h); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < len(h); i += 4 {
		roles := []provider.Role{h[i].Role, h[i+1].Role, h[i+2].Role, h[i+3].Role}
		want := []provider.Role{provider.RoleUser, provider.RoleAssistant, provider.RoleTool, provider.RoleAssistant}
		if diff := cmp.Diff(want, roles); diff != "" {
			t.Fatalf("turn %d interleaved (-want +got):\n%s", i/4, diff)
		}
		seen[h[i].Content] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct questions in the history, want %d", len(seen), n)
	}
}

func TestReactWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(fake.Text("slow answer").After(time.Hour), fake.Text("unused"))
		a := newReact(t, p, agent.WithName("expert"))
		first := make(chan error, 1)
		go func() {
			_, err := a.Run(t.Context(), agent.Input{Text: "first"})
			first <- err
		}()
		synctest.Wait() // the first run holds the agent

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		out, err := a.Run(ctx, agent.Input{Text: "second"})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want context.DeadlineExceeded", err)
		}
		want := `agent "expert": waiting for the previous run to end: context deadline exceeded`
		if err.Error() != want {
			t.Errorf("error:\n%s\nwant:\n%s", err, want)
		}
		if time.Since(start) != time.Second || out.RunID != "" {
			t.Errorf("gave up after %v with %+v", time.Since(start), out)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if p.Calls() != 1 || len(a.History()) != 2 {
			t.Errorf("the waiter that gave up reached the model (%d calls) or the history (%v)", p.Calls(), a.History())
		}
	})
}

func TestReactMaxSteps(t *testing.T) {
	p := fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`)).Loop()
	a := newReact(t, p, agent.WithTools(weather(t)), agent.WithMaxSteps(3))
	out, err := a.Run(t.Context(), agent.Input{Text: "loop"})
	if !errors.Is(err, agent.ErrMaxSteps) {
		t.Fatalf("error %v, want ErrMaxSteps", err)
	}
	want := `agent "agent": agent: max steps exceeded: no answer after 3 model calls: raise WithMaxSteps or give a narrower task`
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}
	if p.Calls() != 3 || out.Usage.Requests != 3 || len(out.Messages) != 7 {
		t.Errorf("%d model calls, usage %v, %d messages; want 3, 3 requests, 7", p.Calls(), out.Usage, len(out.Messages))
	}

	// The last allowed step may answer.
	p = fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`), fake.Call("weather", `{"city":"Porto"}`), fake.Text("done"))
	a = newReact(t, p, agent.WithTools(weather(t)), agent.WithMaxSteps(3))
	if _, err := a.Run(t.Context(), agent.Input{Text: "go"}); err != nil {
		t.Errorf("an answer at the last step: %v", err)
	}
}

func TestReactToolRetries(t *testing.T) {
	flaky := toolFunc("flaky", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		if string(c.Arguments) == `"fail"` {
			return tool.Result{}, tool.Correctable(errors.New("flaky failed: try again"))
		}
		return tool.Result{Content: "fine"}, nil
	})
	fail, ok := fake.Call("flaky", `"fail"`), fake.Call("flaky", `"ok"`)
	tests := []struct {
		name    string
		retries int
		script  []fake.Reply
		wantErr string
	}{
		{"no retries", 0, []fake.Reply{fail},
			`agent "agent": agent: tool error retries exhausted: 1 steps in a row had a failed tool call, the last: flaky failed: try again`},
		{"within the budget", 2, []fake.Reply{fail, fail, fake.Text("done")}, ""},
		{"over the budget", 2, []fake.Reply{fail, fail, fail},
			`agent "agent": agent: tool error retries exhausted: 3 steps in a row had a failed tool call, the last: flaky failed: try again`},
		{"a success resets the count", 2, []fake.Reply{fail, fail, ok, fail, fail, fake.Text("done")}, ""},
		{"one failed call among several fails the step", 1, []fake.Reply{
			fake.Calls(provider.ToolCall{Name: "flaky", Arguments: json.RawMessage(`"ok"`)}, provider.ToolCall{Name: "flaky", Arguments: json.RawMessage(`"fail"`)}),
			fake.Calls(provider.ToolCall{Name: "flaky", Arguments: json.RawMessage(`"fail"`)}, provider.ToolCall{Name: "flaky", Arguments: json.RawMessage(`"ok"`)}),
		}, `2 steps in a row had a failed tool call`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(tt.script...)
			a := newReact(t, p, agent.WithTools(flaky), agent.WithToolRetries(tt.retries))
			_, err := a.Run(t.Context(), agent.Input{Text: "go"})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, agent.ErrToolRetries) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%v\nwant ErrToolRetries containing:\n%s", err, tt.wantErr)
			}
			if errcode.Of(err) != "tool_retries" || len(a.History()) != 0 {
				t.Errorf("code %q, history %v", errcode.Of(err), a.History())
			}
		})
	}
}

func TestReactTokenLimit(t *testing.T) {
	child := func(used provider.Usage) tool.Tool {
		return toolFunc("delegate", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "the child's answer", Usage: used}, nil
		})
	}
	tests := []struct {
		name      string
		limit     int64
		childUsed provider.Usage
		wantErr   string
		wantChild provider.Usage
	}{
		{"under the limit", 1000, u(300, 100), "", u(300, 100)},
		// The last call needs its input (about 118 tokens, and 63 of the
		// wrap-up's note) and a reply's room: 700 leaves 190 after the
		// first step, for a wrap-up.
		{"room for a wrap-up", 700, u(300, 100), "", u(300, 100)},
		// Past the limit after a step, no call is left.
		{"over it by the child", 500, u(300, 100),
			`agent "agent": agent: usage limit exceeded: 510 tokens used, the limit is 500, and the next model call, reading about 181 tokens, would leave no room for a reply in the 0 left: raise WithTokenLimit or give a smaller task`, u(300, 100)},
		// No tool call the first reply could write could be read after
		// it: the first call is the wrap-up, and the model, asked for
		// tools anyway, is cut at its bound (6 tokens) with no answer.
		{"over it by the model alone", 100, u(0, 0),
			`agent "agent": agent: usage limit exceeded: 106 tokens used, the limit is 100, and the last reply, asked to wrap up, had no answer: raise WithTokenLimit or give a smaller task`, provider.Usage{}},
		{"no limit", 0, u(1e9, 1e9), "", u(1e9, 1e9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call("delegate", `{}`).WithUsage(u(100, 10)),
				fake.Text("done").WithUsage(u(120, 10)),
			)
			a := newReact(t, p, agent.WithTools(child(tt.childUsed)), agent.WithTokenLimit(tt.limit))
			out, err := a.Run(t.Context(), agent.Input{Text: "go"})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if !errors.Is(err, agent.ErrUsageLimit) || err.Error() != tt.wantErr {
					t.Fatalf("error:\n%v\nwant:\n%s", err, tt.wantErr)
				}
				if errcode.Of(err) != "usage_limit" || len(a.History()) != 0 {
					t.Errorf("code %q, history %v", errcode.Of(err), a.History())
				}
			}
			if out.ChildUsage != tt.wantChild {
				t.Errorf("ChildUsage %v, want %v", out.ChildUsage, tt.wantChild)
			}
			if got, want := out.TotalUsage(), out.Usage.Add(out.ChildUsage); got != want {
				t.Errorf("TotalUsage %v, want %v", got, want)
			}
		})
	}
}

func TestReactHistoryLimit(t *testing.T) {
	twoSteps := []fake.Reply{fake.Call("weather", `{"city":"A"}`), fake.Call("weather", `{"city":"B"}`), fake.Text("both sunny")} // 6 messages
	oneStep := []fake.Reply{fake.Call("weather", `{"city":"C"}`), fake.Text("sunny")}                                             // 4 messages
	chat := []fake.Reply{fake.Text("hi")}                                                                                         // 2 messages
	tests := []struct {
		name  string
		limit int
		turns [][]fake.Reply
		want  []int // history length after each run
	}{
		{"no limit", 0, [][]fake.Reply{oneStep, twoSteps, chat}, []int{4, 10, 12}},
		{"room for everything", 100, [][]fake.Reply{oneStep, twoSteps, chat}, []int{4, 10, 12}},
		{"keeps whole turns", 5, [][]fake.Reply{oneStep, oneStep, chat, chat, chat}, []int{4, 4, 2, 4, 4}},
		{"a turn longer than the limit is kept whole", 3, [][]fake.Reply{chat, twoSteps, chat}, []int{2, 6, 2}},
		{"cut lands inside a tool turn", 7, [][]fake.Reply{twoSteps, oneStep, chat, twoSteps}, []int{6, 4, 6, 6}},
		{"limit of one", 1, [][]fake.Reply{oneStep, chat}, []int{4, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider()
			a := newReact(t, p, agent.WithTools(weather(t)), agent.WithHistoryLimit(tt.limit))
			var got []int
			for i, replies := range tt.turns {
				p.Add(replies...)
				out, err := a.Run(t.Context(), agent.Input{Text: fmt.Sprint("turn ", i)})
				if err != nil {
					t.Fatal(err)
				}
				h := a.History()
				got = append(got, len(h))
				if h[0].Role != provider.RoleUser {
					t.Errorf("after turn %d the history starts with a %s message", i, h[0].Role)
				}
				if err := conversation.Check(h); err != nil {
					t.Errorf("after turn %d: %v", i, err)
				}
				if diff := cmp.Diff(out.Messages, h[len(h)-len(out.Messages):]); diff != "" {
					t.Errorf("turn %d is not whole at the end of the history (-want +got):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("history lengths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReactSnapshotRestore(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("weather", `{"city":`), // malformed: the model corrects it
		fake.Calls(
			provider.ToolCall{Name: "weather", Arguments: json.RawMessage(`{"city":"Lisbon"}`)},
			provider.ToolCall{Name: "weather", Arguments: json.RawMessage(` {"city": "Porto"} `)},
		).Saying("Checking both."),
		fake.Text("Sunny in both <cities> & more."),
		fake.Text("Still sunny."),
	)
	a := newReact(t, p, agent.WithTools(weather(t)))
	if _, err := a.Run(t.Context(), agent.Input{Text: "Lisbon and Porto?"}); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot of a conversation with malformed arguments: %v", err)
	}

	b := newReact(t, p, agent.WithTools(weather(t)))
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a.History(), b.History()); diff != "" {
		t.Errorf("restored history (-want +got):\n%s", diff)
	}
	again, err := b.Snapshot()
	if err != nil || string(again) != string(snap) {
		t.Errorf("a second snapshot differs: %v\n%s\n%s", err, snap, again)
	}
	if _, err := b.Run(t.Context(), agent.Input{Text: "And tomorrow?"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a.History(), p.Requests()[3].Messages[:len(a.History())]); diff != "" {
		t.Errorf("the restored agent did not send its history (-want +got):\n%s", diff)
	}

	empty := newReact(t, p)
	snap, err = empty.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(snap); err != nil || len(b.History()) != 0 {
		t.Errorf("restoring an empty snapshot: %v, %v", err, b.History())
	}
}

func TestReactRestoreVersion1(t *testing.T) {
	v1 := `{"version":1,"messages":[
		{"role":"user","content":"hi"},
		{"role":"assistant","tool_calls":[{"id":"c1","name":"weather","arguments":{"city":"Faro"}}]},
		{"role":"tool","content":"sunny","tool_call_id":"c1"},
		{"role":"assistant","content":"Sunny."}]}`
	a := newReact(t, fake.NewProvider())
	if err := a.Restore([]byte(v1)); err != nil {
		t.Fatal(err)
	}
	want := turn("hi", "c1", `{"city":"Faro"}`, "sunny", "Sunny.")
	if diff := cmp.Diff(want, a.History()); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

func TestReactRestoreRejects(t *testing.T) {
	tests := []struct {
		name, snap, wantErr string
	}{
		{"not JSON", `{"version":2,`, "agent: invalid conversation snapshot: unexpected end of JSON input: pass what Snapshot returned"},
		{"empty", ``, "agent: invalid conversation snapshot: unexpected end of JSON input"},
		{"no version", `{"messages":[]}`, "agent: invalid conversation snapshot: version 0, want 1 or 2: pass what Snapshot returned"},
		{"future version", `{"version":3,"messages":[]}`, "version 3, want 1 or 2"},
		{"a list", `[]`, "cannot unmarshal array"},
		{"call without result", `{"version":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","name":"w","arguments":"{}"}]}]}`,
			"agent: invalid conversation snapshot: tool calls [c1] have no result"},
		{"two calls without result", `{"version":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c2","name":"w","arguments":"{}"},{"id":"c1","name":"w","arguments":"{}"}]},{"role":"user","content":"?"}]}`,
			"agent: invalid conversation snapshot: message 2 (user): tool calls [c1 c2] have no result"},
		{"result without call", `{"version":2,"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"x"}]}`,
			`agent: invalid conversation snapshot: message 1: tool result for "c1" answers no pending call`},
		{"system message", `{"version":2,"messages":[{"role":"system","content":"be brief"}]}`,
			"agent: invalid conversation snapshot: message 0: a system message"},
		{"unknown role", `{"version":2,"messages":[{"role":"robot","content":"beep"}]}`,
			`agent: invalid conversation snapshot: message 0: role "robot" is not user, assistant or tool`},
		{"calls on a user message", `{"version":2,"messages":[{"role":"user","tool_calls":[{"id":"c1","name":"w","arguments":"{}"}]}]}`,
			"agent: invalid conversation snapshot: message 0: only assistant messages carry tool calls"},
		{"arguments not text", `{"version":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","name":"w","arguments":{}}]},{"role":"tool","tool_call_id":"c1"}]}`,
			"agent: invalid conversation snapshot: message 1, tool call 0: arguments must be a JSON string in a version 2 snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newReact(t, fake.NewProvider())
			good := `{"version":2,"messages":[{"role":"user","content":"keep me"},{"role":"assistant","content":"kept"}]}`
			if err := a.Restore([]byte(good)); err != nil {
				t.Fatal(err)
			}
			before := a.History()
			err := a.Restore([]byte(tt.snap))
			if !errors.Is(err, agent.ErrBadSnapshot) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%v\nwant ErrBadSnapshot containing:\n%s", err, tt.wantErr)
			}
			if diff := cmp.Diff(before, a.History()); diff != "" {
				t.Errorf("a rejected snapshot changed the history (-before +after):\n%s", diff)
			}
		})
	}
}

// The ids a reply's tool calls are known by: a provider may leave them out,
// repeat one, or give one a call of the conversation had (the second
// run's "dup" is the first's); the agent fills them in without touching
// the provider's memory, so that every call of the conversation, and of
// a stream of its events, has an id of its own.
func TestReactToolCallIDs(t *testing.T) {
	script := []provider.ToolCall{
		{Name: "weather", Arguments: json.RawMessage(`{"city":"A"}`)},
		{ID: "dup", Name: "weather", Arguments: json.RawMessage(`{"city":"B"}`)},
		{ID: "dup", Name: "weather", Arguments: json.RawMessage(`{"city":"C"}`)},
	}
	step := 0
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		step++
		if step%2 == 1 {
			return provider.Response{Message: provider.AssistantMessage("", script...)}, nil // the same slice each time
		}
		return provider.Response{Message: provider.AssistantMessage("done")}, nil
	})
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprint("events ", events), func(t *testing.T) {
			a := newReact(t, p, agent.WithTools(weather(t)))
			ctx := t.Context()
			rec := &recorder{}
			if events {
				ctx = withSink(ctx, rec)
			}
			var ids []string
			for range 2 {
				out, err := a.Run(ctx, agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range out.Messages[1].ToolCalls {
					ids = append(ids, c.ID)
				}
			}
			if err := conversation.Check(a.History()); err != nil {
				t.Fatal(err)
			}
			if ids[1] != "dup" {
				t.Errorf("ids %v: a provider's own unique id must be kept", ids)
			}
			seen := map[string]int{}
			for _, id := range ids {
				seen[id]++
			}
			if len(seen) != 6 || seen["dup"] != 1 {
				t.Errorf("ids %v: want fresh ids for missing and repeated ones, and for one the conversation had", ids)
			}
			if script[0].ID != "" || script[2].ID != "dup" {
				t.Errorf("the provider's tool calls were changed: %+v", script)
			}
			if events {
				var started, results []string
				for _, e := range rec.of("TOOL_CALL_START") {
					started = append(started, e.ToolCallID)
				}
				for _, e := range rec.of("TOOL_CALL_RESULT") {
					results = append(results, e.ToolCallID)
				}
				if diff := cmp.Diff(ids, started); diff != "" {
					t.Errorf("TOOL_CALL_START ids (-calls +events):\n%s", diff)
				}
				if diff := cmp.Diff(ids, results); diff != "" {
					t.Errorf("TOOL_CALL_RESULT ids (-calls +events):\n%s", diff)
				}
			}
		})
	}
}

func TestNewReactRejects(t *testing.T) {
	p := fake.NewProvider()
	tests := []struct {
		name    string
		p       provider.Provider
		opt     agent.Option
		wantIs  error
		wantErr string
	}{
		{"nil provider", nil, nil, agent.ErrNilProvider, "agent: nil provider: pass a provider, such as fake.NewProvider(...) or openai.New()"},
		{"empty name", p, agent.WithName(""), agent.ErrInvalidOption, "agent: invalid option: empty name: give the agent a name or leave the option out"},
		{"zero max steps", p, agent.WithMaxSteps(0), agent.ErrInvalidOption, "agent: invalid option: max steps 0: use 1 or more"},
		{"negative retries", p, agent.WithToolRetries(-1), agent.ErrInvalidOption, "agent: invalid option: tool retries -1: use 0 or more"},
		{"negative token limit", p, agent.WithTokenLimit(-5), agent.ErrInvalidOption, "agent: invalid option: token limit -5: use 0 (no limit) or more"},
		{"negative history limit", p, agent.WithHistoryLimit(-1), agent.ErrInvalidOption, "agent: invalid option: history limit -1: use 0 (no limit) or more"},
		{"negative max tokens", p, agent.WithMaxTokens(-1), agent.ErrInvalidOption, "agent: invalid option: max tokens -1: use 0 (provider default) or more"},
		{"temperature too high", p, agent.WithTemperature(2.5), agent.ErrInvalidOption, "agent: invalid option: temperature 2.5: use a value from 0 to 2"},
		{"duplicate tools", p, agent.WithTools(weather(t), weather(t)), agent.ErrInvalidOption, `agent: invalid option: WithTools: tool: a tool named "weather" is already registered`},
		{"zero parallelism", p, agent.WithParallelism(0), agent.ErrInvalidOption, "agent: invalid option: parallelism 0: use 1 or more"},
		{"parallelism without tools", p, agent.WithParallelism(4), agent.ErrInvalidOption,
			"agent: invalid option: WithParallelism(4) on an agent without tools: give it tools (WithTools or WithRegistry) or leave the option out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := agent.NewReact(tt.p, tt.opt)
			if err == nil {
				t.Fatalf("NewReact returned %v, want an error", a)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want %v in the chain", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
	a, err := agent.NewReact(p, nil, agent.WithRegistry(nil))
	if err != nil || a.Name() != "agent" || a.Tools() != nil || a.Provider() != p || a.SystemPrompt() != "" {
		t.Errorf("defaults: %v, %v", a, err)
	}
}

// A model that calls a tool on an agent without tools is told there are none.
func TestReactWithoutTools(t *testing.T) {
	p := fake.NewProvider(fake.Call("weather", `{}`), fake.Text("I'll answer directly."))
	a := newReact(t, p)
	out, err := a.Run(t.Context(), agent.Input{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Messages[2]; !got.IsError || !strings.Contains(got.Content, "no tools are available") {
		t.Errorf("result %+v", got)
	}
	if p.Requests()[0].Tools != nil {
		t.Errorf("tools sent: %v", p.Requests()[0].Tools)
	}
}

// A provider or a caller that appends to the messages it was handed gets a
// slice of its own: the agent's next message does not overwrite theirs.
func TestReactMessagesAreNotShared(t *testing.T) {
	marker := provider.UserMessage("the provider's own note")
	var kept []provider.Message
	step := 0
	p := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		step++
		if step == 1 {
			kept = append(req.Messages, marker)
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "weather", Arguments: json.RawMessage(`{"city":"Faro"}`)})}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("done")}, nil
	})
	a := newReact(t, p, agent.WithTools(weather(t)))
	out, err := a.Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.Message{provider.UserMessage("go"), marker}, kept); diff != "" {
		t.Errorf("the provider's slice was overwritten (-want +got):\n%s", diff)
	}
	before := a.History()
	_ = append(out.Messages, marker)
	if diff := cmp.Diff(before, a.History()); diff != "" {
		t.Errorf("appending to Output.Messages changed the agent (-before +after):\n%s", diff)
	}
	if cap(out.Messages) != len(out.Messages) {
		t.Errorf("Output.Messages has room to grow into: len %d, cap %d", len(out.Messages), cap(out.Messages))
	}
}

// A run whose context has already ended says so, not that it waited for
// another run (the turn is free).
func TestReactNotStarted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := newReact(t, fake.NewProvider(fake.Text("x")), agent.WithName("child")).Run(ctx, agent.Input{Text: "hi"})
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "previous run") || !strings.Contains(err.Error(), "not started") {
		t.Errorf("error = %v, want one wrapping context.Canceled that says the run did not start", err)
	}
}

// A held turn keeps other runs out until it is released, and refuses runs
// after its release.
func TestHoldKeepsOtherRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(fake.Text("held"), fake.Text("other"))
		r, err := agent.NewReact(p)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		heldCtx, turn, err := r.Hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		other := make(chan error, 1)
		go func() { _, err := r.Run(ctx, agent.Input{Text: "other"}); other <- err }()
		synctest.Wait()
		if out, err := r.Run(heldCtx, agent.Input{Text: "held"}); err != nil || out.Answer != "held" {
			t.Fatalf("run in the held turn: %q, %v", out.Answer, err)
		}
		select {
		case err := <-other:
			t.Fatalf("another run ran while the turn was held: %v", err)
		default:
		}
		turn.Rollback()
		turn.Release()
		if err := <-other; err != nil {
			t.Fatal(err)
		}
		if h := r.History(); len(h) != 2 || h[1].Content != "other" {
			t.Fatalf("history %+v, want only the other run's turn", h)
		}
		// A caller waiting for the turn gives up when its context ends.
		_, turn2, _ := r.Hold(ctx)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := r.Hold(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Hold on a cancelled context: %v", err)
		}
		// A released turn's context waits for the turn like any other.
		late := make(chan error, 1)
		go func() { _, err := r.Run(heldCtx, agent.Input{Text: "late"}); late <- err }()
		synctest.Wait()
		select {
		case <-late:
			t.Fatal("a run under a released turn's context did not wait for the turn")
		default:
		}
		turn2.Release()
		<-late
	})
}
