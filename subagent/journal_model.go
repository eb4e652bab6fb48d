package subagent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
)

// JournalModel returns p with its answers journaled: under WithJournal,
// each answer is recorded in the journal of the agent whose run asks it,
// and a request the journal already answered gets the recorded answer, at
// zero usage, without calling p. Without a journal in the context it is p.
//
// Give it to the agents of a journaled turn (the lead at least) when their
// model may answer the same request differently the next time, as a real
// model does: a resumed turn then replays the lead's decisions up to the
// crash, asks for the same children, and finds them in the journal. A
// request is known by everything it holds (model, system prompt, messages,
// tools, settings) and by how many identical requests came before it in
// the same run. The returned provider does not stream.
func JournalModel(p provider.Provider) provider.Provider {
	return &journalModel{p: p}
}

type journalModel struct{ p provider.Provider }

// Name is the wrapped provider's name (provider.Namer), or "".
func (m *journalModel) Name() string {
	if n, ok := m.p.(provider.Namer); ok {
		return n.Name()
	}
	return ""
}

// Model is the wrapped provider's default model, when it names one.
func (m *journalModel) Model() string {
	if d, ok := m.p.(interface{ Model() string }); ok {
		return d.Model()
	}
	return ""
}

// journalAnswer is the stored form of a model's answer beside its text.
type journalAnswer struct {
	ToolCalls  []journalCall       `json:"tool_calls,omitempty"`
	StopReason provider.StopReason `json:"stop_reason,omitempty"`
	Model      string              `json:"model,omitempty"`
}

// journalCall holds a tool call's arguments as text, malformed ones too.
type journalCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

func (m *journalModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	js := journalFrom(ctx)
	if js == nil {
		return m.p.Complete(ctx, req)
	}
	key := js.key("model", requestDigest(req))
	if e, ok := js.j.Lookup(key); ok {
		var a journalAnswer
		if err := json.Unmarshal(e.Value, &a); err == nil {
			msg := provider.AssistantMessage(e.Content)
			for _, c := range a.ToolCalls {
				var args json.RawMessage
				if c.Arguments != "" {
					args = json.RawMessage(c.Arguments)
				}
				msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
			}
			return provider.Response{Message: msg, StopReason: a.StopReason, Model: a.Model}, nil
		}
		// An entry this code cannot read is asked again.
	}
	resp, err := m.p.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	a := journalAnswer{StopReason: resp.StopReason, Model: resp.Model}
	for _, c := range resp.Message.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, journalCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
	}
	value, _ := json.Marshal(a) // strings and a string type only: it cannot fail
	if err := js.j.Record(ctx, key, store.Entry{Content: resp.Message.Content, Value: value, Usage: resp.Usage}); err != nil {
		// The answer is paid for; the caller still counts it.
		return provider.Response{Usage: resp.Usage}, fmt.Errorf("subagent: recording the model's answer in the journal: %w: resume the turn when the store is back", err)
	}
	return resp, nil
}

// requestDigest identifies a request by everything in it.
func requestDigest(req provider.Request) []byte {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field(req.Model)
	field(req.System)
	field(strconv.Itoa(req.MaxTokens))
	if req.Temperature != nil {
		field(strconv.FormatFloat(*req.Temperature, 'g', -1, 64))
	}
	field(string(req.ResponseSchema))
	for _, t := range req.Tools {
		field(t.Name)
		field(t.Description)
		field(string(t.Parameters))
	}
	field("messages")
	for _, msg := range req.Messages {
		field(string(msg.Role))
		field(msg.Content)
		field(msg.ToolCallID)
		field(strconv.FormatBool(msg.IsError))
		for _, c := range msg.ToolCalls {
			field(c.ID)
			field(c.Name)
			field(string(c.Arguments))
		}
		field("end")
	}
	return h.Sum(nil)
}
