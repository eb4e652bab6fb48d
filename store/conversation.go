package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	// head is how it is stored: in parts, or (zero) whole or not at all.
	head partsHead
}

// A conversation is stored as a small head record under its key, which
// names the parts that hold its messages: the whole conversation as it was
// last saved, then what each AppendConversation added. The head and a part
// are written in one transaction. The whole conversation is written again,
// under a new id, when the appended parts would outweigh it (or pass
// minLogBytes, for a short one) or number maxParts, so that an append
// writes, amortized, at most about twice what it adds, and a read gets at
// most maxParts records in one listing. A conversation saved whole before
// parts existed is read as it is, and replaced by the next save or append.
const (
	maxParts    = 1024
	minLogBytes = 64 << 10
)

// partsHead is the stored head of a conversation kept in parts: their id
// and number, what the first weighs and the others together.
type partsHead struct {
	ID    string `json:"id"`
	Parts int    `json:"parts"`
	Base  int    `json:"base"`
	Log   int    `json:"log"`
}

type headJSON struct {
	Parts *partsHead `json:"parts"`
}

// partPrefix is the beginning of the keys of conversation key's parts
// under id ("": of all its parts). U+001F is in no key a user gives, so no
// other conversation's parts start the same way.
func partPrefix(key, id string) string {
	if id == "" {
		return nsPart + key + "\x1f"
	}
	return nsPart + key + "\x1f" + id + "\x1f"
}

func partKey(key, id string, i int) string {
	return partPrefix(key, id) + fmt.Sprintf("%06d", i)
}

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
	payload, version, err := s.get(ctx, nsConv+key)
	if errors.Is(err, ErrNotFound) {
		return Conversation{}, nil
	}
	if err != nil {
		return Conversation{}, err
	}
	var hj headJSON
	if err := json.Unmarshal(payload, &hj); err != nil {
		return Conversation{}, fmt.Errorf("%w: conversation %q: %v: delete it with DeleteConversation", ErrCorrupt, key, err)
	}
	if hj.Parts == nil { // saved whole, before parts
		msgs, err := decodeMessages(payload)
		if err != nil {
			return Conversation{}, fmt.Errorf("%w: conversation %q: %v: delete it with DeleteConversation", ErrCorrupt, key, err)
		}
		return Conversation{Messages: msgs, Version: version}, nil
	}
	h := *hj.Parts
	if h.ID == "" || h.Parts < 1 || h.Parts > maxParts {
		return Conversation{}, fmt.Errorf("%w: conversation %q names %d parts under %q: delete it with DeleteConversation", ErrCorrupt, key, h.Parts, h.ID)
	}
	items, err := s.b.List(ctx, partPrefix(key, h.ID))
	if err != nil {
		return Conversation{}, err
	}
	var msgs []provider.Message
	next := 0
	for _, it := range items {
		if next == h.Parts {
			break // a part written by an append whose head was not: never read
		}
		if it.Key != partKey(key, h.ID, next) {
			return Conversation{}, fmt.Errorf("%w: conversation %q lacks part %d: delete it with DeleteConversation", ErrCorrupt, key, next)
		}
		part, err := open(it.Key, it.Value)
		if err != nil {
			return Conversation{}, err
		}
		m, err := decodeMessages(part)
		if err != nil {
			return Conversation{}, fmt.Errorf("%w: conversation %q, part %d: %v: delete it with DeleteConversation", ErrCorrupt, key, next, err)
		}
		msgs = append(msgs, m...)
		next++
	}
	if next < h.Parts {
		return Conversation{}, fmt.Errorf("%w: conversation %q has %d of its %d parts: delete it with DeleteConversation", ErrCorrupt, key, next, h.Parts)
	}
	return Conversation{Messages: msgs, Version: version, head: h}, nil
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
	// The parts of the conversation this replaces, deleted once it is.
	var old partsHead
	if version > 0 {
		if payload, v, err := s.get(ctx, nsConv+key); err == nil && v == version {
			var hj headJSON
			if json.Unmarshal(payload, &hj) == nil && hj.Parts != nil {
				old = *hj.Parts
			}
		}
	}
	if _, err := s.saveWhole(ctx, key, msgs, version, old); err != nil {
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
	part, err := encodeMessages(msgs)
	if err != nil {
		return fmt.Errorf("store: conversation %q: %w", key, err)
	}
	all := append(conv.Messages[:len(conv.Messages):len(conv.Messages)], msgs...)
	h := conv.head
	if h.ID == "" || h.Parts >= maxParts || h.Log+len(part) > max(h.Base, minLogBytes) {
		h, err = s.saveWhole(ctx, key, all, conv.Version, h)
		if err != nil {
			return fmt.Errorf("store: appending to conversation %q: %w", key, err)
		}
	} else {
		pk := partKey(key, h.ID, h.Parts)
		h.Parts++
		h.Log += len(part)
		if err := s.putHeadAndPart(ctx, key, h, conv.Version, pk, part); err != nil {
			return fmt.Errorf("store: appending to conversation %q: %w", key, err)
		}
	}
	*conv = Conversation{Messages: all, Version: max(conv.Version, 0) + 1, head: h}
	return nil
}

// saveWhole writes msgs as the first part under a new id and its head, at
// version, then deletes the parts of old. It returns the new head.
func (s *Store) saveWhole(ctx context.Context, key string, msgs []provider.Message, version int64, old partsHead) (partsHead, error) {
	part, err := encodeMessages(msgs)
	if err != nil {
		return partsHead{}, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	h := partsHead{ID: hex.EncodeToString(rnd[:]), Parts: 1, Base: len(part)}
	if err := s.putHeadAndPart(ctx, key, h, version, partKey(key, h.ID, 0), part); err != nil {
		return partsHead{}, err
	}
	if old.ID != "" {
		// No head names them now; a part a failed delete leaves is never
		// read, and DeleteConversation takes it.
		_ = s.deleteAll(ctx, partPrefix(key, old.ID))
	}
	return h, nil
}

// putHeadAndPart writes a part and the head naming it in one transaction,
// the head at version.
func (s *Store) putHeadAndPart(ctx context.Context, key string, h partsHead, version int64, pk string, part []byte) error {
	prec, err := s.seal(pk, part)
	if err != nil {
		return err
	}
	head, _ := json.Marshal(headJSON{Parts: &h}) // strings and numbers: it cannot fail
	hrec, err := s.seal(nsConv+key, head)
	if err != nil {
		return err
	}
	return s.b.Put(ctx, Write{Key: pk, Value: prec, Version: AnyVersion}, Write{Key: nsConv + key, Value: hrec, Version: version})
}

// DeleteConversation forgets the conversation under key.
func (s *Store) DeleteConversation(ctx context.Context, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.deleteAll(ctx, partPrefix(key, "")); err != nil {
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
