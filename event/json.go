package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MarshalJSON encodes e as the AG-UI event of its type: exactly the fields
// @ag-ui/core defines for that type, required ones always present (an empty
// string stays ""), optional ones only when set, never a null. See
// AppendJSON.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 160))
}

// AppendJSON appends the JSON encoding of e to dst and returns the extended
// buffer; MarshalJSON is AppendJSON on an empty one. It is the cheap path for
// code that encodes every event, such as a server streaming them: it does not
// use reflection and allocates only when dst must grow.
//
// Per type it writes:
//
//	RUN_STARTED          threadId, runId; parentRunId when set
//	RUN_FINISHED         threadId, runId; result, outcome, usage when set
//	RUN_ERROR            message; code when set (never threadId or runId)
//	STEP_*               stepName
//	TEXT_MESSAGE_START   messageId, role (AG-UI's roles; "assistant" when empty or unknown)
//	TEXT_MESSAGE_CONTENT messageId, delta
//	TEXT_MESSAGE_END     messageId
//	TOOL_CALL_START      toolCallId, toolCallName; parentMessageId when set
//	TOOL_CALL_ARGS       toolCallId, delta
//	TOOL_CALL_END        toolCallId
//	TOOL_CALL_RESULT     messageId, toolCallId, content, role "tool"
//	SUBAGENT_STARTED     subagentRunId, name; description, parentSubagentRunId,
//	                     parentToolCallId, parentMessageId, metadata when set
//	SUBAGENT_FINISHED    subagentRunId; result, outcome, metadata when set
//	SUBAGENT_ERROR       subagentRunId, message; code, metadata when set
//	CUSTOM               name, value (null when not set)
//
// after "type" and, when not zero, "timestamp" (integer milliseconds). Every
// type but RUN_* and SUBAGENT_* ends with subagentRunId when it is set.
// AG-UI 1.0 gives SUBAGENT_FINISHED and SUBAGENT_ERROR no usage field (a
// client drops unknown fields), so their Usage and Model travel in the
// event's metadata object: "metadata":{"usage":[…],"model":"…"}, as
// SUBAGENT_STARTED's Model does. A
// type not listed gets every field that is set. Result, when set, must be valid
// JSON; a JSON null counts as not set. AppendJSON fails only on an
// invalid Result, Outcome or Usage.
func (e Event) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"type":`...)
	b = appendString(b, string(e.Type))
	if e.Timestamp != 0 {
		b = append(b, `,"timestamp":`...)
		b = strconv.AppendInt(b, e.Timestamp, 10)
	}
	var err error
	switch e.Type {
	case RunStarted:
		b = field(b, "threadId", e.ThreadID)
		b = field(b, "runId", e.RunID)
		b = optField(b, "parentRunId", e.ParentRunID)
	case RunFinished:
		b = field(b, "threadId", e.ThreadID)
		b = field(b, "runId", e.RunID)
		b, err = rawField(b, "result", e.Result)
		if err == nil && len(e.Outcome) > 0 {
			b, err = rawField(b, "outcome", e.Outcome)
		}
		if err == nil && len(e.Usage) > 0 {
			b, err = rawField(b, "usage", e.Usage)
		}
	case RunError:
		b = field(b, "message", e.Message)
		b = optField(b, "code", e.Code)
	case StepStarted, StepFinished:
		b = field(b, "stepName", e.StepName)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case TextMessageStart:
		b = field(b, "messageId", e.MessageID)
		b = field(b, "role", textRole(e.Role))
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case TextMessageContent:
		b = field(b, "messageId", e.MessageID)
		b = field(b, "delta", e.Delta)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case TextMessageEnd:
		b = field(b, "messageId", e.MessageID)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case ToolCallStart:
		b = field(b, "toolCallId", e.ToolCallID)
		b = field(b, "toolCallName", e.ToolCallName)
		b = optField(b, "parentMessageId", e.ParentMessageID)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case ToolCallArgs:
		b = field(b, "toolCallId", e.ToolCallID)
		b = field(b, "delta", e.Delta)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case ToolCallEnd:
		b = field(b, "toolCallId", e.ToolCallID)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case ToolCallResult:
		b = field(b, "messageId", e.MessageID)
		b = field(b, "toolCallId", e.ToolCallID)
		b = field(b, "content", e.Content)
		b = append(b, `,"role":"tool"`...)
		b = optField(b, "subagentRunId", e.SubagentRunID)
	case SubagentStarted:
		b = field(b, "subagentRunId", e.SubagentRunID)
		b = field(b, "name", e.Name)
		b = optField(b, "description", e.Description)
		b = optField(b, "parentSubagentRunId", e.ParentSubagentRunID)
		b = optField(b, "parentToolCallId", e.ParentToolCallID)
		b = optField(b, "parentMessageId", e.ParentMessageID)
		b, err = e.appendSpent(b)
	case SubagentFinished:
		b = field(b, "subagentRunId", e.SubagentRunID)
		b, err = rawField(b, "result", e.Result)
		if err == nil && len(e.Outcome) > 0 {
			b, err = rawField(b, "outcome", e.Outcome)
		}
		if err == nil {
			b, err = e.appendSpent(b)
		}
	case SubagentError:
		b = field(b, "subagentRunId", e.SubagentRunID)
		b = field(b, "message", e.Message)
		b = optField(b, "code", e.Code)
		b, err = e.appendSpent(b)
	case Custom:
		b = field(b, "name", e.Name)
		if len(e.Value) > 0 {
			b, err = rawField(b, "value", e.Value)
		} else {
			b = append(b, `,"value":null`...)
		}
		b = optField(b, "subagentRunId", e.SubagentRunID)
	default:
		b, err = e.appendAll(b)
	}
	if err != nil {
		return dst, err
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes an event as MarshalJSON encodes it, so that
// json.Unmarshal gives back what was sent: a SUBAGENT_* event's usage and
// model, which travel in its "metadata" object, land in Usage and Model
// as they do at the top level of other events. A "metadata" that is not an
// object holding them (another sender's: a usage that is not an array, a
// model that is not a string, or on an event of another type) is ignored.
func (e *Event) UnmarshalJSON(b []byte) error {
	type fields Event // Event's fields without this method
	var w struct {
		fields
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event(w.fields)
	switch e.Type {
	case SubagentStarted, SubagentFinished, SubagentError:
	default:
		return nil // only these send their usage and model there
	}
	if len(w.Metadata) > 0 {
		var spent struct {
			Usage json.RawMessage `json:"usage"`
			Model string          `json:"model"`
		}
		if json.Unmarshal(w.Metadata, &spent) == nil {
			// Usage is AG-UI's array of TokenUsage; anything else is
			// another sender's.
			if len(e.Usage) == 0 && bytes.HasPrefix(bytes.TrimSpace(spent.Usage), []byte("[")) {
				e.Usage = spent.Usage
			}
			if e.Model == "" {
				e.Model = spent.Model
			}
		}
	}
	return nil
}

// appendSpent writes Usage and Model as the metadata object of a
// SUBAGENT_* event, when either is set.
func (e Event) appendSpent(b []byte) ([]byte, error) {
	usage := len(e.Usage) > 0 && string(e.Usage) != "null"
	if !usage && e.Model == "" {
		return b, nil
	}
	b = append(b, `,"metadata":{`...)
	n := len(b)
	var err error
	if usage {
		b, err = rawField(b, "usage", e.Usage)
	}
	b = optField(b, "model", e.Model)
	if len(b) > n && b[n] == ',' {
		b = append(b[:n], b[n+1:]...) // the object's first member has no comma
	}
	return append(b, '}'), err
}

// appendAll writes every field that is set, for a type this package does
// not describe.
func (e Event) appendAll(b []byte) ([]byte, error) {
	b = optField(b, "threadId", e.ThreadID)
	b = optField(b, "runId", e.RunID)
	b = optField(b, "parentRunId", e.ParentRunID)
	b = optField(b, "stepName", e.StepName)
	b = optField(b, "messageId", e.MessageID)
	b = optField(b, "role", e.Role)
	b = optField(b, "delta", e.Delta)
	b = optField(b, "toolCallId", e.ToolCallID)
	b = optField(b, "toolCallName", e.ToolCallName)
	b = optField(b, "parentMessageId", e.ParentMessageID)
	b = optField(b, "content", e.Content)
	b = optField(b, "name", e.Name)
	b = optField(b, "description", e.Description)
	b = optField(b, "parentSubagentRunId", e.ParentSubagentRunID)
	b = optField(b, "parentToolCallId", e.ParentToolCallID)
	b, err := rawField(b, "result", e.Result)
	b = optField(b, "message", e.Message)
	b = optField(b, "code", e.Code)
	if err == nil && len(e.Outcome) > 0 {
		b, err = rawField(b, "outcome", e.Outcome)
	}
	if err == nil && len(e.Usage) > 0 {
		b, err = rawField(b, "usage", e.Usage)
	}
	b = optField(b, "model", e.Model)
	b = optField(b, "subagentRunId", e.SubagentRunID)
	return b, err
}

// textRole is the role of a TEXT_MESSAGE_START: one AG-UI allows for
// streamed text, "assistant" otherwise.
func textRole(r string) string {
	switch r {
	case "developer", "system", "user":
		return r
	}
	return "assistant"
}

func field(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

func optField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return field(b, name, v)
}

// badJSON is what AppendJSON reports for a field that is not JSON.
func badJSON(name string) error {
	if name == "result" {
		return errors.New("event: Result is not valid JSON: set it with json.Marshal, or JSONString for text")
	}
	return fmt.Errorf("event: %s is not valid JSON: set it with json.Marshal", strings.ToUpper(name[:1])+name[1:])
}

func rawField(b []byte, name string, v json.RawMessage) ([]byte, error) {
	if len(v) == 0 {
		return b, nil
	}
	if !json.Valid(v) {
		return b, badJSON(name)
	}
	if bytes.ContainsAny(v, " \t\r\n") {
		// One line per event: SSE frames end at a blank line.
		var buf bytes.Buffer
		_ = json.Compact(&buf, v) // v is valid
		v = buf.Bytes()
	}
	if string(v) == "null" {
		return b, nil
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return append(b, v...), nil
}

// JSONString returns s encoded as a JSON string, for Result. It is cheaper
// than json.Marshal(s) and, unlike it, leaves <, > and & as they are.
func JSONString(s string) json.RawMessage {
	return appendString(make([]byte, 0, quotedLen(s)), s)
}

// quotedLen is the length of s encoded by appendString.
func quotedLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n++
			case c < 0x20:
				n += 5
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 5 // one byte becomes \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 3
		}
		i += size
	}
	return n
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced with U+FFFD, and U+2028 and
// U+2029 escaped (as encoding/json does) so the text is safe in JavaScript.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
