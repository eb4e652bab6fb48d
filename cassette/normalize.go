package cassette

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"

	"github.com/deputy-go/deputy/provider"
)

// Request is a model request as a cassette keeps it: what the model was
// asked, with what changes from run to run left out. Tool call ids, which
// a provider or the agent loop draws afresh, are numbered by their order
// of appearance ("c0", "c1", …); the tools are kept by name, with a hash
// of their whole definitions; the model, the output bound, the sampling
// temperature and the cache key do not count. Arguments and the schema
// are kept as the text they were, byte for byte.
type Request struct {
	System    string    `json:"system,omitempty"`
	Messages  []Message `json:"messages"`
	Tools     []string  `json:"tools,omitempty"`
	ToolsHash string    `json:"tools_hash,omitempty"`
	Schema    string    `json:"schema,omitempty"`
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
// numbered; in a Response it is the id the model gave. Arguments is the
// text the model wrote, which may not be JSON.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// ids numbers the tool call ids of one request by their first appearance;
// a request holds few, so a list searched in order serves.
type ids []string

func (m *ids) of(id string) int {
	for i, s := range *m {
		if s == id {
			return i
		}
	}
	*m = append(*m, id)
	return len(*m) - 1
}

func callID(n int) string { return "c" + strconv.Itoa(n) }

// normalize returns req as a cassette keeps it.
func normalize(req provider.Request) Request {
	n := Request{System: req.System, Messages: make([]Message, len(req.Messages)), Schema: string(req.ResponseSchema)}
	var m ids
	for i, msg := range req.Messages {
		nm := Message{Role: msg.Role, Content: msg.Content, IsError: msg.IsError}
		for _, c := range msg.ToolCalls {
			nm.ToolCalls = append(nm.ToolCalls, ToolCall{ID: callID(m.of(c.ID)), Name: c.Name, Arguments: string(c.Arguments)})
		}
		if msg.ToolCallID != "" {
			nm.ToolCallID = callID(m.of(msg.ToolCallID))
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

// hasher writes fields, each with its length first so that no two
// sequences of fields write the same bytes, through a buffer of its own
// (writing a string to a hash.Hash would copy it to the heap).
type hasher struct {
	h   hash.Hash
	n   int
	buf [512]byte
}

func newHasher() *hasher { return &hasher{h: sha256.New()} }

// put writes s through the buffer.
func put[T ~string | ~[]byte](w *hasher, s T) {
	for len(s) > 0 {
		if w.n == len(w.buf) {
			w.h.Write(w.buf[:])
			w.n = 0
		}
		k := copy(w.buf[w.n:], s)
		w.n += k
		s = s[k:]
	}
}

// field writes s with its length first.
func field[T ~string | ~[]byte](w *hasher, s T) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	put(w, n[:])
	put(w, s)
}

func (w *hasher) field(s string) { field(w, s) }

func (w *hasher) int(i int) {
	var b [20]byte
	field(w, strconv.AppendInt(b[:0], int64(i), 10))
}

// callID writes the numbered id of call n as callID names it.
func (w *hasher) callID(n int) {
	var b [21]byte
	b[0] = 'c'
	field(w, strconv.AppendInt(b[:1], int64(n), 10))
}

func (w *hasher) sum(size int) string {
	w.h.Write(w.buf[:w.n])
	var out [sha256.Size]byte
	return hex.EncodeToString(w.h.Sum(out[:0])[:size])
}

func toolsHash(tools []provider.ToolDef) string {
	w := newHasher()
	for _, t := range tools {
		w.field(t.Name)
		w.field(t.Description)
		field(w, t.Parameters)
	}
	return w.sum(12)
}

// Hash returns the hash a cassette keys r by: of its system prompt,
// messages, tools and schema.
func (r *Request) Hash() string {
	w := newHasher()
	w.field(r.System)
	w.int(len(r.Messages))
	for _, m := range r.Messages {
		w.field(string(m.Role))
		w.field(m.Content)
		w.field(m.ToolCallID)
		w.isError(m.IsError)
		w.int(len(m.ToolCalls))
		for _, c := range m.ToolCalls {
			w.field(c.ID)
			w.field(c.Name)
			w.field(c.Arguments)
		}
	}
	w.int(len(r.Tools))
	for _, t := range r.Tools {
		w.field(t)
	}
	w.field(r.ToolsHash)
	w.field(r.Schema)
	return w.sum(16)
}

func (w *hasher) isError(b bool) {
	if b {
		w.field("error")
	} else {
		w.field("")
	}
}

// hashRequest returns the Hash of normalize(req), without building it:
// what a replayed call costs to key.
func hashRequest(req *provider.Request, tools string) string {
	w := newHasher()
	w.field(req.System)
	w.int(len(req.Messages))
	// On the heap: a large frame here would grow the stack of every
	// goroutine a tool call starts, which costs more than the allocation.
	m := make(ids, 0, 8)
	for i := range req.Messages {
		msg := &req.Messages[i]
		w.field(string(msg.Role))
		w.field(msg.Content)
		// The message's calls are numbered before the id it answers, as
		// normalize numbers them.
		for _, c := range msg.ToolCalls {
			m.of(c.ID)
		}
		if msg.ToolCallID != "" {
			w.callID(m.of(msg.ToolCallID))
		} else {
			w.field("")
		}
		w.isError(msg.IsError)
		w.int(len(msg.ToolCalls))
		for _, c := range msg.ToolCalls {
			w.callID(m.of(c.ID))
			w.field(c.Name)
			field(w, c.Arguments)
		}
	}
	w.int(len(req.Tools))
	for i := range req.Tools {
		w.field(req.Tools[i].Name)
	}
	w.field(tools)
	field(w, req.ResponseSchema)
	return w.sum(16)
}
