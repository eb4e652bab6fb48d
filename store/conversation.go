package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/provider"
)

// Conversation is a stored conversation and the version it was read at.
type Conversation struct {
	Messages []provider.Message
	// Version is what SaveConversation needs to replace this conversation;
	// 0 when none is stored.
	Version int64
	// at is where it stands in the store: what an append adds to.
	at Parts
}

// A conversation is kept in parts (see Parts): AppendConversation writes
// what it adds. A conversation saved whole before parts existed is read
// as it is, and written in parts by the next save or append.

// conversationJSON is a conversation's stored form. Tool-call arguments are
// kept as text: a model sometimes sends malformed arguments (and then
// corrects them), and the conversation must keep them as they were.
type conversationJSON struct {
	Messages []messageJSON `json:"messages"`
}

type messageJSON struct {
	Role       provider.Role `json:"role"`
	Content    string        `json:"content,omitempty"`
	ToolCalls  []callJSON    `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
	IsError    bool          `json:"is_error,omitempty"`
}

type callJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// Conversation returns the conversation stored under key; none stored is an
// empty Conversation at version 0, not an error.
func (s *Store) Conversation(ctx context.Context, key string) (Conversation, error) {
	if err := s.open(); err != nil {
		return Conversation{}, err
	}
	if err := checkKey(key); err != nil {
		return Conversation{}, err
	}
	parts, _, at, err := s.readParts(ctx, nsConv, key, Parts{})
	if errors.Is(err, ErrNotFound) {
		return Conversation{}, nil
	}
	if err != nil {
		return Conversation{}, fmt.Errorf("conversation %q: %w", key, err)
	}
	var msgs []provider.Message
	for i, part := range parts {
		m, err := decodeMessages(part)
		if err != nil {
			return Conversation{}, fmt.Errorf("%w: conversation %q, part %d: %v: delete it with DeleteConversation", ErrCorrupt, key, i, err)
		}
		msgs = append(msgs, m...)
	}
	return Conversation{Messages: msgs, Version: at.Version, at: at}, nil
}

func decodeMessages(payload []byte) ([]provider.Message, error) {
	var cj conversationJSON
	if err := json.Unmarshal(payload, &cj); err != nil {
		return nil, err
	}
	msgs := make([]provider.Message, len(cj.Messages))
	for i, m := range cj.Messages {
		msgs[i] = provider.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, IsError: m.IsError}
		for _, c := range m.ToolCalls {
			var args json.RawMessage
			if c.Arguments != "" {
				args = json.RawMessage(c.Arguments)
			}
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
	}
	return msgs, nil
}

func encodeMessages(msgs []provider.Message) ([]byte, error) {
	cj := conversationJSON{Messages: make([]messageJSON, len(msgs))}
	for i, m := range msgs {
		mj := messageJSON{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, IsError: m.IsError}
		for _, c := range m.ToolCalls {
			mj.ToolCalls = append(mj.ToolCalls, callJSON{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
		}
		cj.Messages[i] = mj
	}
	return json.Marshal(cj)
}

// SaveConversation replaces the conversation under key with msgs, whole, if
// it is still at version (the Version Conversation returned). When another
// writer got there first it fails with ErrConflict and writes nothing.
func (s *Store) SaveConversation(ctx context.Context, key string, msgs []provider.Message, version int64) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	at := Parts{Version: version}
	if version != 0 {
		// The parts this replaces, deleted once it is.
		now, _, err := s.headOf(ctx, nsConv, key)
		switch {
		case errors.Is(err, ErrNotFound) && version == AnyVersion:
			at = Parts{}
		case err != nil && !errors.Is(err, ErrNotFound):
			return fmt.Errorf("store: saving conversation %q: %w", key, err)
		case err == nil && (now.Version == version || version == AnyVersion):
			at = now
		}
	}
	whole := func() ([]byte, error) { return encodeMessages(msgs) }
	if _, err := s.appendPart(ctx, nsConv, key, at, nil, whole, nil); err != nil {
		return fmt.Errorf("store: saving conversation %q: %w", key, err)
	}
	return nil
}

// AppendConversation adds msgs at the end of *conv, the conversation under
// key as Conversation returned it (or as an earlier AppendConversation
// left it), if it is still at conv.Version, and updates *conv to what is
// stored now: its messages, version and parts. It writes msgs and a small
// head, not the messages before them (now and then, the whole conversation
// once). When another writer got there first it fails with ErrConflict,
// writes nothing and leaves *conv as it was.
func (s *Store) AppendConversation(ctx context.Context, key string, conv *Conversation, msgs []provider.Message) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	part, err := encodeMessages(msgs)
	if err != nil {
		return fmt.Errorf("store: conversation %q: %w", key, err)
	}
	all := append(conv.Messages[:len(conv.Messages):len(conv.Messages)], msgs...)
	at := conv.at
	at.Version = conv.Version
	now, err := s.appendPart(ctx, nsConv, key, at, part, func() ([]byte, error) { return encodeMessages(all) }, nil)
	if err != nil {
		return fmt.Errorf("store: appending to conversation %q: %w", key, err)
	}
	*conv = Conversation{Messages: all, Version: now.Version, at: now}
	return nil
}

// DeleteConversation forgets the conversation under key.
func (s *Store) DeleteConversation(ctx context.Context, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.deleteAll(ctx, partPrefix(nsConv, key, "")); err != nil {
		return err
	}
	return s.b.Delete(ctx, nsConv+key)
}

// MaxPage bounds one page of a listing (Conversations).
const MaxPage = 1000

// Conversations returns one page of the keys of the stored conversations
// whose keys start with prefix, in key order: at most limit (1 to
// MaxPage) keys after the key after ("": from the first). A page shorter
// than limit is the last; the next page starts after the last key of this
// one. It reads no conversation, so a page costs the same however long the
// conversations are.
func (s *Store) Conversations(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxPage {
		return nil, fmt.Errorf("store: a page of %d conversations: ask for 1 to %d", limit, MaxPage)
	}
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return nil, err
		}
	}
	if after != "" {
		if err := checkKey(after); err != nil {
			return nil, err
		}
	}
	keys, err := s.b.Keys(ctx, nsConv+prefix, nsConv+after, limit)
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		keys[i] = k[len(nsConv):]
	}
	return keys, nil
}
