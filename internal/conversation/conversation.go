// Package conversation checks a conversation the way model APIs do, so that
// a run refuses, before it calls a model, what the model's server would.
package conversation

import (
	"fmt"
	"slices"

	"github.com/deputy-go/deputy/provider"
)

// Check reports the first reason a model API would refuse msgs:
// an unknown role or a system message, a tool call without an id or with
// the id of another, a tool result that answers no pending call, or a tool
// call left without its result.
func Check(msgs []provider.Message) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case provider.RoleUser, provider.RoleAssistant:
			if len(pending) > 0 {
				return fmt.Errorf("message %d (%s): tool calls %v have no result", i, m.Role, keys(pending))
			}
			for j, c := range m.ToolCalls {
				switch {
				case m.Role != provider.RoleAssistant:
					return fmt.Errorf("message %d: only assistant messages carry tool calls", i)
				case c.ID == "":
					return fmt.Errorf("message %d: tool call %d (%s) has no id for its result to name", i, j, c.Name)
				case pending[c.ID]:
					return fmt.Errorf("message %d: two tool calls share the id %q", i, c.ID)
				}
				pending[c.ID] = true
			}
		case provider.RoleTool:
			if !pending[m.ToolCallID] {
				return fmt.Errorf("message %d: tool result for %q answers no pending call", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		case provider.RoleSystem:
			return fmt.Errorf("message %d: a system message: the system prompt goes in WithSystemPrompt, not in the conversation", i)
		default:
			return fmt.Errorf("message %d: role %q is not user, assistant or tool", i, m.Role)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("tool calls %v have no result", keys(pending))
	}
	return nil
}

// CheckOpen is Check for a conversation that may end with a turn left
// open: its last assistant message's tool calls answered in part (the
// results that follow it). It returns the calls left without a result, in
// the order the message made them.
func CheckOpen(msgs []provider.Message) ([]provider.ToolCall, error) {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != provider.RoleTool {
			last = i
			break
		}
	}
	if last < 0 || msgs[last].Role != provider.RoleAssistant || len(msgs[last].ToolCalls) == 0 {
		return nil, Check(msgs)
	}
	if err := Check(msgs[:last]); err != nil {
		return nil, err
	}
	open := map[string]bool{}
	for j, c := range msgs[last].ToolCalls {
		switch {
		case c.ID == "":
			return nil, fmt.Errorf("message %d: tool call %d (%s) has no id for its result to name", last, j, c.Name)
		case open[c.ID]:
			return nil, fmt.Errorf("message %d: two tool calls share the id %q", last, c.ID)
		}
		open[c.ID] = true
	}
	for i := last + 1; i < len(msgs); i++ {
		if !open[msgs[i].ToolCallID] {
			return nil, fmt.Errorf("message %d: tool result for %q answers no pending call", i, msgs[i].ToolCallID)
		}
		delete(open, msgs[i].ToolCallID)
	}
	var pending []provider.ToolCall
	for _, c := range msgs[last].ToolCalls {
		if open[c.ID] {
			pending = append(pending, c)
		}
	}
	return pending, nil
}

// keys returns the keys of m in order, so that errors read the same each time.
func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
