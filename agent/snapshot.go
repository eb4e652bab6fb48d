package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
)

// snapshotVersion is the version Snapshot writes. Version 1 held tool-call
// arguments as raw JSON, which cannot hold the malformed arguments a model
// sometimes sends (and then corrects), so Snapshot failed on such a
// conversation; version 2 holds them as text. Restore reads both.
const snapshotVersion = 2

type snapshot struct {
	Version  int           `json:"version"`
	Messages []snapMessage `json:"messages"`
}

type snapMessage struct {
	Role       provider.Role `json:"role"`
	Content    string        `json:"content,omitempty"`
	ToolCalls  []snapCall    `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
	IsError    bool          `json:"is_error,omitempty"`
}

// snapCall is a tool call whose Arguments are a JSON string holding the
// model's text (version 2) or the JSON value itself (version 1).
type snapCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Snapshot returns the conversation as JSON, for Restore after a restart.
func (r *React) Snapshot() ([]byte, error) {
	h := r.History()
	s := snapshot{Version: snapshotVersion, Messages: make([]snapMessage, len(h))}
	for i, m := range h {
		sm := snapMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, IsError: m.IsError}
		for _, c := range m.ToolCalls {
			args, err := json.Marshal(string(c.Arguments))
			if err != nil {
				return nil, fmt.Errorf("agent %q: snapshot: %w", r.name, err)
			}
			sm.ToolCalls = append(sm.ToolCalls, snapCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
		s.Messages[i] = sm
	}
	return json.Marshal(s)
}

// Restore replaces the conversation with one taken by Snapshot. It rejects a
// snapshot whose conversation a model API would refuse (a tool call without
// its result, a result without its call, an unknown role), leaving the
// current conversation as it was. It waits for a run in progress to end.
func (r *React) Restore(data []byte) error {
	var s snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: %v: pass what Snapshot returned", ErrBadSnapshot, err)
	}
	if s.Version != 1 && s.Version != snapshotVersion {
		return fmt.Errorf("%w: version %d, want 1 or %d: pass what Snapshot returned", ErrBadSnapshot, s.Version, snapshotVersion)
	}
	msgs := make([]provider.Message, len(s.Messages))
	for i, sm := range s.Messages {
		m := provider.Message{Role: sm.Role, Content: sm.Content, ToolCallID: sm.ToolCallID, IsError: sm.IsError}
		for j, c := range sm.ToolCalls {
			args, err := c.arguments(s.Version)
			if err != nil {
				return fmt.Errorf("%w: message %d, tool call %d: %v", ErrBadSnapshot, i, j, err)
			}
			m.ToolCalls = append(m.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
		msgs[i] = m
	}
	if err := conversation.Check(msgs); err != nil {
		return fmt.Errorf("%w: %v: pass only what Snapshot returned", ErrBadSnapshot, err)
	}
	_ = r.turn.Acquire(context.Background(), 1)
	defer r.turn.Release(1)
	r.mu.Lock()
	r.kept = kept{msgs: msgs, bytes: msgsBytes(msgs), spare: true}
	r.mu.Unlock()
	return nil
}

func (c snapCall) arguments(version int) (json.RawMessage, error) {
	if len(c.Arguments) == 0 || string(c.Arguments) == "null" {
		return nil, nil
	}
	if version == 1 {
		return c.Arguments, nil
	}
	var text string
	if err := json.Unmarshal(c.Arguments, &text); err != nil {
		return nil, fmt.Errorf("arguments must be a JSON string in a version %d snapshot", version)
	}
	if text == "" {
		return nil, nil
	}
	return json.RawMessage(text), nil
}
