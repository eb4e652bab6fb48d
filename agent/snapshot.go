package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/deputy-go/deputy/internal/compact"
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
	r.mu.Lock()
	msgs := r.kept.msgs
	r.mu.Unlock()
	return r.encode(msgs)
}

// Parts opens the conversation to be stored a part at a time, for
// subagent.WithStore; its key is held only by deputy's own packages.
func (r *React) Parts(conversation.Key) conversation.Parts { return parts{r} }

// parts is a React's conversation as conversation.Parts, whose methods say
// what each does.
type parts struct{ r *React }

func (p parts) Mark() (epoch uint64, n int) {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kept.epoch, len(r.kept.msgs)
}

func (p parts) SnapshotFrom(n int) ([]byte, error) {
	r := p.r
	r.mu.Lock()
	msgs := r.kept.msgs
	r.mu.Unlock()
	if n < 0 || n > len(msgs) {
		return nil, fmt.Errorf("agent %q: SnapshotFrom(%d) of a conversation of %d messages: take n from Mark", r.name, n, len(msgs))
	}
	// The messages before the end are never changed in place, so they
	// are read outside the lock.
	return r.encode(msgs[n:])
}

func (r *React) encode(msgs []provider.Message) ([]byte, error) {
	s := snapshot{Version: snapshotVersion, Messages: make([]snapMessage, len(msgs))}
	for i, m := range msgs {
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

// Restore replaces the conversation with a Snapshot's, refusing one a model
// API would refuse (ErrBadSnapshot). It waits for a run in progress to end.
func (r *React) Restore(data []byte) error { return parts{r}.RestoreParts(data) }

func (p parts) RestoreParts(data ...[]byte) error {
	r := p.r
	msgs, err := decodeParts(data)
	if err != nil {
		return err
	}
	if err := conversation.Check(msgs); err != nil {
		return fmt.Errorf("%w: %v: pass only what Snapshot returned", ErrBadSnapshot, err)
	}
	_ = r.turn.Acquire(context.Background(), 1)
	defer r.turn.Release(1)
	r.mu.Lock()
	r.kept = kept{msgs: slices.Clip(msgs), bytes: compact.MsgsBytes(msgs), spare: true, epoch: r.newEpoch()}
	r.mu.Unlock()
	return nil
}

func (p parts) AppendParts(data ...[]byte) error {
	r := p.r
	add, err := decodeParts(data)
	if err != nil {
		return err
	}
	// The kept conversation leaves no call unanswered, so what is added
	// must be a conversation a model accepts on its own.
	if err := conversation.Check(add); err != nil {
		return fmt.Errorf("%w: %v: pass only what SnapshotFrom returned", ErrBadSnapshot, err)
	}
	_ = r.turn.Acquire(context.Background(), 1)
	defer r.turn.Release(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.kept
	if !k.spare {
		k.msgs = slices.Clone(k.msgs) // another may hold what lies past its end
	}
	k.msgs = append(k.msgs, add...)
	k.bytes += compact.MsgsBytes(add)
	k.spare = true
	r.kept = k
	return nil
}

// decodeParts decodes the messages of Snapshot's parts, in order.
func decodeParts(parts [][]byte) ([]provider.Message, error) {
	var msgs []provider.Message
	for k, data := range parts {
		part := "" // named only when there are several
		if len(parts) > 1 {
			part = "part " + strconv.Itoa(k) + ", "
		}
		var s snapshot
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%w: %s%v: pass what Snapshot returned", ErrBadSnapshot, part, err)
		}
		if s.Version != 1 && s.Version != snapshotVersion {
			return nil, fmt.Errorf("%w: version %d, want 1 or %d: pass what Snapshot returned", ErrBadSnapshot, s.Version, snapshotVersion)
		}
		for i, sm := range s.Messages {
			m := provider.Message{Role: sm.Role, Content: sm.Content, ToolCallID: sm.ToolCallID, IsError: sm.IsError}
			for j, c := range sm.ToolCalls {
				args, err := c.arguments(s.Version)
				if err != nil {
					return nil, fmt.Errorf("%w: %smessage %d, tool call %d: %v", ErrBadSnapshot, part, i, j, err)
				}
				m.ToolCalls = append(m.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
			}
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
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
