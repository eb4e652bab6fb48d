package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type seen struct {
	RunID, ParentRunID, Name string
	Depth                    int
}

func identity(ctx context.Context) seen {
	return seen{agent.RunID(ctx), agent.ParentRunID(ctx), agent.Name(ctx), agent.Depth(ctx)}
}

// A parent whose tool runs a child: one provider scripts both, and each
// sees its own run identity in the context.
func TestRunIdentityAndDelegation(t *testing.T) {
	p := fake.NewProvider(
		fake.Call("ask_helper", `{}`).For("lead").WithUsage(u(10, 1)),
		fake.Call("probe", `{}`).For("helper").WithUsage(u(20, 2)),
		fake.Text("helper's answer").For("helper").WithUsage(u(30, 3)),
		fake.Text("lead's answer").For("lead").WithUsage(u(40, 4)),
	)
	var inLead, inHelper seen
	probe := toolFunc("probe", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		inHelper = identity(ctx)
		return tool.Result{Content: "probed"}, nil
	})
	helper := newReact(t, p, agent.WithName("helper"), agent.WithTools(probe))
	var helperOut agent.Output
	ask := toolFunc("ask_helper", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		inLead = identity(ctx)
		out, err := helper.Run(run.WithDepth(ctx, agent.Depth(ctx)+1), agent.Input{Text: "help"})
		helperOut = out
		return tool.Result{Content: out.Answer, Usage: out.TotalUsage()}, err
	})
	lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(ask))
	out, err := lead.Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead's answer" || helperOut.Answer != "helper's answer" {
		t.Errorf("answers %q, %q", out.Answer, helperOut.Answer)
	}
	if diff := cmp.Diff(seen{RunID: out.RunID, Name: "lead"}, inLead); diff != "" {
		t.Errorf("the lead's tool saw (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seen{RunID: helperOut.RunID, ParentRunID: out.RunID, Name: "helper", Depth: 1}, inHelper); diff != "" {
		t.Errorf("the helper's tool saw (-want +got):\n%s", diff)
	}
	if out.RunID == helperOut.RunID {
		t.Error("parent and child share a run id")
	}
	if out.Usage != (provider.Usage{InputTokens: 50, OutputTokens: 5, Requests: 2}) || out.ChildUsage != (provider.Usage{InputTokens: 50, OutputTokens: 5, Requests: 2}) {
		t.Errorf("usage %v, child usage %v", out.Usage, out.ChildUsage)
	}
	if len(p.RequestsFor("lead")) != 2 || len(p.RequestsFor("helper")) != 2 || p.Remaining() != 0 {
		t.Errorf("requests: %d by lead, %d by helper, %d replies left", len(p.RequestsFor("lead")), len(p.RequestsFor("helper")), p.Remaining())
	}
	if diff := cmp.Diff(seen{}, identity(t.Context())); diff != "" {
		t.Errorf("outside any run (-want +got):\n%s", diff)
	}
}

func TestFunc(t *testing.T) {
	var a agent.Agent = agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: strings.ToUpper(in.Text)}, nil
	})
	out, err := a.Run(t.Context(), agent.Input{Text: "hi"})
	if err != nil || out.Answer != "HI" {
		t.Errorf("Run = %+v, %v", out, err)
	}
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{context.Canceled, "cancelled"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", agent.ErrMaxSteps), "max_steps"},
		{agent.ErrToolRetries, "tool_retries"},
		{agent.ErrUsageLimit, "usage_limit"},
		{agent.ErrEmptyReply, "empty_reply"},
		{fmt.Errorf("x: %w", &provider.Error{Kind: provider.KindAuth}), "provider_error"},
		{errors.New("other"), "error"},
	}
	for _, tt := range tests {
		if got := agent.ErrorCode(tt.err); got != tt.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestCheckConversation(t *testing.T) {
	call := func(id string) provider.ToolCall {
		return provider.ToolCall{ID: id, Name: "w", Arguments: json.RawMessage(`{}`)}
	}
	user, answer := provider.UserMessage("q"), provider.AssistantMessage("a")
	tests := []struct {
		name    string
		msgs    []provider.Message
		wantErr string
	}{
		{"empty", nil, ""},
		{"chat", []provider.Message{user, answer, user, answer}, ""},
		{"calls answered in any order", []provider.Message{user, provider.AssistantMessage("", call("1"), call("2")),
			provider.ToolMessage("2", "", false), provider.ToolMessage("1", "", true), answer}, ""},
		{"call left open at the end", []provider.Message{user, provider.AssistantMessage("", call("1"))}, "tool calls [1] have no result"},
		{"call left open before a user message", []provider.Message{user, provider.AssistantMessage("", call("b"), call("a")), user},
			"message 2 (user): tool calls [a b] have no result"},
		{"result answered twice", []provider.Message{user, provider.AssistantMessage("", call("1")), provider.ToolMessage("1", "", false), provider.ToolMessage("1", "", false)},
			`message 3: tool result for "1" answers no pending call`},
		{"system message", []provider.Message{{Role: provider.RoleSystem}}, "message 0: a system message: the system prompt goes in WithSystemPrompt, not in the conversation"},
		{"empty role", []provider.Message{{Content: "x"}}, `message 0: role "" is not user, assistant or tool`},
		{"call without an id", []provider.Message{user, provider.AssistantMessage("", call("1"), call(""))},
			"message 1: tool call 1 (w) has no id for its result to name"},
		{"two calls with one id", []provider.Message{user, provider.AssistantMessage("", call("1"), call("1")), provider.ToolMessage("1", "", false)},
			`message 1: two tool calls share the id "1"`},
		{"user with calls", []provider.Message{{Role: provider.RoleUser, ToolCalls: []provider.ToolCall{call("1")}}}, "message 0: only assistant messages carry tool calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agent.CheckConversation(tt.msgs)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("CheckConversation: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}
