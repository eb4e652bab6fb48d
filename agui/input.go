package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// RunInput is AG-UI's RunAgentInput: what a client sends to start a run.
type RunInput struct {
	// ThreadID names the conversation. It is required, and RUN_STARTED and
	// RUN_FINISHED echo it.
	ThreadID string
	// RunID names this run. It is required, and RUN_STARTED and
	// RUN_FINISHED echo it.
	RunID string
	// ParentRunID is the run this one continues, if the client says so.
	ParentRunID string
	// Messages is the conversation so far, oldest first.
	Messages []Message
	// Tools are tools the client offers (frontend tools). The handler does
	// not give them to the agent; a Builder may.
	Tools []Tool
	// Context is extra context the client supplies.
	Context []ContextItem
	// State is the client's agent state, as sent (nil when absent or null).
	State json.RawMessage
	// ForwardedProps is free-form data for the server, as sent (nil when
	// absent or null).
	ForwardedProps json.RawMessage
	// Resume answers the interrupts the thread's previous run ended with
	// (see WithThreads).
	Resume []tool.Answer

	// Owner is not sent by the client: it is the owner WithAuthorize's
	// function named for the request ("" without it), for a Builder that
	// builds the agent per user.
	Owner string
}

// Message is one message of an AG-UI conversation.
type Message struct {
	// ID is the message's id, as the client sent it.
	ID string
	// Role is one of developer, system, assistant, user, tool, activity
	// and reasoning.
	Role string
	// Content is the message's text: its content when that is a string,
	// the text parts joined by a newline when it is a list of parts.
	Content string
	// RawContent is the content as sent (nil when absent).
	RawContent json.RawMessage
	// Name is the author's name, when given.
	Name string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string
	// Error, on a tool message, says the call failed and why.
	Error string
	// SubagentRunID names the sub-agent run whose message this is; it is
	// empty for the conversation's own messages. AG-UI clients keep the
	// messages of the sub-agents they were streamed (tagged so) and send
	// them back with the next request.
	SubagentRunID string
}

// ToolCall is a tool call of an assistant message.
type ToolCall struct {
	// ID identifies the call; a tool message's ToolCallID names it.
	ID string
	// Name is the tool called.
	Name string
	// Arguments is the JSON text of the arguments, as the client sent it.
	Arguments string
}

// Tool is a tool a client offers.
type Tool struct {
	// Name is what a model calls the tool by.
	Name string
	// Description says what the tool does.
	Description string
	// Parameters is the JSON Schema of its arguments (nil when not sent).
	Parameters json.RawMessage
}

// ContextItem is a piece of context a client supplies.
type ContextItem struct {
	// Description says what the context is.
	Description string
	// Value is the context itself.
	Value string
}

// InputFunc maps a request to the agent's input. An error wrapping
// ErrBadInput (such as one from Conversation or LastUserMessage) is answered
// with 400 and its message.
type InputFunc func(in *RunInput) (agent.Input, error)

// Conversation hands the agent the whole conversation as Input.Messages:
// user, assistant (with their tool calls) and tool messages, in order. Only
// the agent's own messages belong to its conversation: a message of a
// sub-agent (one with a SubagentRunID, which a client keeps from an earlier
// run's stream) is left out, since the agent never wrote or read it. A
// tool message with an Error is a failed result, its text the Content or,
// when that is empty, the Error. System, developer, activity and reasoning
// messages are left out: the agent has its own system prompt. It fails with
// ErrBadInput when no message is left or when a model API would refuse the
// conversation, such as a tool call whose
// result the client has not sent.
//
// It suits an agent built for each request (NewPerRequest), which starts
// with no conversation of its own.
func Conversation(in *RunInput) (agent.Input, error) {
	msgs := make([]provider.Message, 0, len(in.Messages))
	for _, m := range in.Messages {
		if m.SubagentRunID != "" {
			continue
		}
		switch m.Role {
		case "user":
			msgs = append(msgs, provider.UserMessage(m.Content))
		case "assistant":
			if m.Content == "" && len(m.ToolCalls) == 0 {
				continue
			}
			calls := make([]provider.ToolCall, len(m.ToolCalls))
			for i, c := range m.ToolCalls {
				calls[i] = provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)}
			}
			msgs = append(msgs, provider.AssistantMessage(m.Content, calls...))
		case "tool":
			text := m.Content
			if text == "" {
				text = m.Error
			}
			msgs = append(msgs, provider.ToolMessage(m.ToolCallID, text, m.Error != ""))
		}
	}
	if len(msgs) == 0 {
		return agent.Input{}, fmt.Errorf("%w: messages has no user, assistant or tool message to answer", ErrBadInput)
	}
	if err := conversation.Check(msgs); err != nil {
		return agent.Input{}, fmt.Errorf("%w: messages: %v", ErrBadInput, err)
	}
	return agent.Input{Messages: msgs}, nil
}

// LastUserMessage hands the agent the text of the last user message as
// Input.Text, and nothing else (a sub-agent's message, one with a
// SubagentRunID, does not count). It fails with ErrBadInput when there is no
// user message with text.
//
// It suits an agent that keeps its own conversation across runs, such as a
// *agent.React served to every request (New): given the whole conversation
// each time, it would see the earlier turns twice.
func LastUserMessage(in *RunInput) (agent.Input, error) {
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if m := in.Messages[i]; m.Role == "user" && m.SubagentRunID == "" && strings.TrimSpace(m.Content) != "" {
			return agent.Input{Text: m.Content}, nil
		}
	}
	return agent.Input{}, fmt.Errorf("%w: messages has no user message with text", ErrBadInput)
}

// decodeInput reads a RunAgentInput body, saying precisely what is wrong
// with a bad one. Fields it does not know are ignored, as AG-UI allows.
func decodeInput(body []byte) (*RunInput, error) {
	var raw struct {
		ThreadID       *string            `json:"threadId"`
		RunID          *string            `json:"runId"`
		ParentRunID    *string            `json:"parentRunId"`
		State          json.RawMessage    `json:"state"`
		Messages       *[]json.RawMessage `json:"messages"`
		Tools          []json.RawMessage  `json:"tools"`
		Context        []json.RawMessage  `json:"context"`
		ForwardedProps json.RawMessage    `json:"forwardedProps"`
		Resume         []tool.Answer      `json:"resume"`
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, errors.New("the body is empty: send a RunAgentInput JSON object")
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return nil, fmt.Errorf("the body is not JSON: %v", syntaxError(trimmed))
		}
		return nil, errors.New("the body is not a JSON object: send a RunAgentInput object")
	}
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, describe("", err)
	}
	switch {
	case raw.ThreadID == nil:
		return nil, errors.New("threadId is missing: send the conversation's id as a string")
	case raw.RunID == nil:
		return nil, errors.New("runId is missing: send this run's id as a string")
	case raw.Messages == nil:
		return nil, errors.New("messages is missing: send the conversation as a list (it may be empty)")
	case *raw.ThreadID == "":
		return nil, errors.New("threadId is empty")
	case *raw.RunID == "":
		return nil, errors.New("runId is empty")
	}
	in := &RunInput{ThreadID: *raw.ThreadID, RunID: *raw.RunID, State: nullToNil(raw.State), ForwardedProps: nullToNil(raw.ForwardedProps), Resume: raw.Resume}
	for i, a := range in.Resume {
		if a.InterruptID == "" {
			return nil, fmt.Errorf("resume[%d]: interruptId is missing: name the interrupt this answers", i)
		}
	}
	if raw.ParentRunID != nil {
		in.ParentRunID = *raw.ParentRunID
	}
	if in.ForwardedProps != nil && in.ForwardedProps[0] != '{' {
		return nil, errors.New("forwardedProps: want an object")
	}
	in.Messages = make([]Message, len(*raw.Messages))
	for i, m := range *raw.Messages {
		if err := decodeMessage(m, &in.Messages[i]); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	for i, t := range raw.Tools {
		var v struct {
			Name        *string         `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(t, &v); err != nil {
			return nil, describe(fmt.Sprintf("tools[%d]", i), err)
		}
		if v.Name == nil || *v.Name == "" {
			return nil, fmt.Errorf("tools[%d]: name is missing", i)
		}
		in.Tools = append(in.Tools, Tool{Name: *v.Name, Description: v.Description, Parameters: nullToNil(v.Parameters)})
	}
	for i, c := range raw.Context {
		var v struct {
			Description string `json:"description"`
			Value       string `json:"value"`
		}
		if err := json.Unmarshal(c, &v); err != nil {
			return nil, describe(fmt.Sprintf("context[%d]", i), err)
		}
		in.Context = append(in.Context, ContextItem{Description: v.Description, Value: v.Value})
	}
	return in, nil
}

var roles = map[string]bool{"developer": true, "system": true, "assistant": true, "user": true, "tool": true, "activity": true, "reasoning": true}

func decodeMessage(raw json.RawMessage, m *Message) error {
	var v struct {
		ID        string          `json:"id"`
		Role      *string         `json:"role"`
		Content   json.RawMessage `json:"content"`
		Name      string          `json:"name"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"toolCalls"`
		ToolCallID    string `json:"toolCallId"`
		Error         string `json:"error"`
		SubagentRunID string `json:"subagentRunId"`
	}
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("want an object")
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return describe("", err)
	}
	if v.Role == nil {
		return errors.New("role is missing")
	}
	if !roles[*v.Role] {
		return fmt.Errorf("role %q: use developer, system, assistant, user, tool, activity or reasoning", *v.Role)
	}
	*m = Message{ID: v.ID, Role: *v.Role, RawContent: nullToNil(v.Content), Name: v.Name, ToolCallID: v.ToolCallID, Error: v.Error, SubagentRunID: v.SubagentRunID}
	for _, c := range v.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	switch m.Role {
	case "activity":
		if m.RawContent == nil || m.RawContent[0] != '{' {
			return errors.New("content: an activity message's content is an object")
		}
		return nil
	case "tool":
		if m.ToolCallID == "" {
			return errors.New("toolCallId is missing: say which tool call this message answers")
		}
	}
	if m.RawContent == nil {
		if m.Role == "assistant" {
			return nil
		}
		return errors.New("content is missing")
	}
	text, err := contentText(m.RawContent, m.Role == "user" || m.Role == "tool")
	if err != nil {
		return fmt.Errorf("content: %w", err)
	}
	m.Content = text
	return nil
}

// contentText is the text of a message's content: a string, or, where
// parts are allowed, the text of its text parts.
func contentText(raw json.RawMessage, parts bool) (string, error) {
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		if !parts {
			return "", errors.New("want a string")
		}
		var ps []struct {
			Type *string `json:"type"`
			Text string  `json:"text"`
		}
		if err := json.Unmarshal(raw, &ps); err != nil {
			return "", errors.New("want a string or a list of content parts")
		}
		var texts []string
		for i, p := range ps {
			if p.Type == nil {
				return "", fmt.Errorf("part %d has no type", i)
			}
			if *p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	if parts {
		return "", errors.New("want a string or a list of content parts")
	}
	return "", errors.New("want a string")
}

// describe turns a JSON decoding error into a sentence about the body.
func describe(where string, err error) error {
	prefix := ""
	if where != "" {
		prefix = where + ": "
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "value"
		}
		return fmt.Errorf("%s%s: want %s, got %s", prefix, field, goTypeToJSON(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%sthe body is not JSON: %v (at byte %d)", prefix, se, se.Offset)
	}
	return fmt.Errorf("%s%v", prefix, err)
}

func goTypeToJSON(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "struct", "map":
		return "an object"
	case "ptr":
		return "a value of another type"
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

func syntaxError(b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%v (at byte %d)", se, se.Offset)
	}
	return err
}

func nullToNil(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}
