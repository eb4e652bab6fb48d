package cassette

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strconv"

	"github.com/deputy-go/deputy/provider"
)

// Request is a model request as a cassette keeps it: what the model was
// asked, with what changes from run to run left out. Tool call ids, which
// a provider or the agent loop draws afresh, are numbered by their order
// of appearance ("c0", "c1", …); the tools are kept by name, with a hash
// of their whole definitions; the model, the output bound, the sampling
// temperature and the cache key do not count.
type Request struct {
	System    string          `json:"system,omitempty"`
	Messages  []Message       `json:"messages"`
	Tools     []string        `json:"tools,omitempty"`
	ToolsHash string          `json:"tools_hash,omitempty"`
	Schema    json.RawMessage `json:"schema,omitempty"`
}

// Message is one message of a Request, its tool call ids numbered.
type Message struct {
	Role       provider.Role `json:"role"`
	Content    string        `json:"content,omitempty"`
	ToolCalls  []ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
	IsError    bool          `json:"is_error,omitempty"`
}

// ToolCall is a tool call as a cassette keeps it: in a Request its id is
// numbered; in a Response it is the id the model gave.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ids numbers the tool call ids of one request by their first appearance.
type ids map[string]string

func (m ids) of(id string) string {
	if v, ok := m[id]; ok {
		return v
	}
	v := "c" + strconv.Itoa(len(m))
	m[id] = v
	return v
}

// normalize returns req as a cassette keeps it.
func normalize(req provider.Request) Request {
	n := Request{System: req.System, Messages: make([]Message, len(req.Messages)), Schema: compact(req.ResponseSchema)}
	m := ids{}
	for i, msg := range req.Messages {
		nm := Message{Role: msg.Role, Content: msg.Content, IsError: msg.IsError}
		if msg.ToolCallID != "" {
			nm.ToolCallID = m.of(msg.ToolCallID)
		}
		for _, c := range msg.ToolCalls {
			nm.ToolCalls = append(nm.ToolCalls, ToolCall{ID: m.of(c.ID), Name: c.Name, Arguments: compact(c.Arguments)})
		}
		n.Messages[i] = nm
	}
	if len(req.Tools) > 0 {
		n.Tools = make([]string, len(req.Tools))
		for i, t := range req.Tools {
			n.Tools[i] = t.Name
		}
		n.ToolsHash = toolsHash(req.Tools)
	}
	return n
}

// compact returns raw without insignificant spaces, or as it is when it is
// not JSON (a model may write broken arguments).
func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func toolsHash(tools []provider.ToolDef) string {
	h := sha256.New()
	for _, t := range tools {
		field(h, t.Name)
		field(h, t.Description)
		field(h, string(compact(t.Parameters)))
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// field writes s to h with its length first, so that no two sequences of
// fields write the same bytes.
func field(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// Hash returns the hash a cassette keys r by: of its system prompt,
// messages, tools and schema.
func (r *Request) Hash() string {
	h := sha256.New()
	field(h, r.System)
	for _, m := range r.Messages {
		field(h, string(m.Role))
		field(h, m.Content)
		field(h, m.ToolCallID)
		if m.IsError {
			field(h, "error")
		} else {
			field(h, "")
		}
		field(h, strconv.Itoa(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			field(h, c.ID)
			field(h, c.Name)
			field(h, string(c.Arguments))
		}
	}
	field(h, strconv.Itoa(len(r.Tools)))
	for _, t := range r.Tools {
		field(h, t)
	}
	field(h, r.ToolsHash)
	field(h, string(r.Schema))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
