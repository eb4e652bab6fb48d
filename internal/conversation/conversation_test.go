package conversation_test

import (
	"encoding/json"
	"testing"

	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
)

func TestCheck(t *testing.T) {
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
			err := conversation.Check(tt.msgs)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Check: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}
