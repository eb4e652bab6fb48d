package a2a

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/tool"
)

// answersFrom reads, from the message a client sent to a task waiting for
// input, the answers to the questions pending. A data part may hold
// answers in deputy's form — {"interruptId":…,"status":…,"payload":…},
// or {"answers":[…]} of them — or, when one question waits, its payload
// alone. Text answers the one question waiting: "yes" or "no" (and their
// usual synonyms) an approval; any other question takes the text as its
// payload, as a JSON string, or as the JSON it spells when the question's
// schema wants something else.
func answersFrom(m *sdk.Message, pending *tool.Interrupted) ([]tool.Answer, error) {
	if pending == nil || len(pending.Interrupts) == 0 {
		return nil, errors.New("the task waits for no answer")
	}
	var texts []string
	var answers []tool.Answer
	var payload json.RawMessage
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		switch c := p.Content.(type) {
		case sdk.Text:
			texts = append(texts, string(c))
		case sdk.Data:
			raw, err := json.Marshal(c.Value)
			if err != nil {
				return nil, fmt.Errorf("a data part that is not JSON: %v", err)
			}
			if as, ok := explicitAnswers(raw); ok {
				answers = append(answers, as...)
			} else if payload == nil {
				payload = raw
			}
		}
	}
	if len(answers) > 0 {
		return answers, nil
	}
	if len(pending.Interrupts) > 1 {
		return nil, fmt.Errorf("%d questions wait: answer each with a data part {\"answers\":[{\"interruptId\":…,\"status\":\"resolved\",\"payload\":…}]}", len(pending.Interrupts))
	}
	it := pending.Interrupts[0]
	if payload != nil {
		return []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: payload}}, nil
	}
	text := strings.TrimSpace(strings.Join(texts, "\n"))
	if text == "" {
		return nil, errors.New("the message holds no answer: reply with text or a data part")
	}
	if it.Reason == tool.ApprovalReason {
		switch strings.ToLower(strings.Trim(text, ".!")) {
		case "yes", "y", "approve", "approved", "ok", "allow":
			return []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}, nil
		case "no", "n", "reject", "rejected", "deny", "denied":
			return []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":false}`)}}, nil
		}
		return nil, fmt.Errorf("%q is neither yes nor no", clip(text, 40))
	}
	asString, _ := json.Marshal(text)
	if len(it.ResponseSchema) == 0 || fits(it.ResponseSchema, asString) || !json.Valid([]byte(text)) {
		return []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: asString}}, nil
	}
	return []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(text)}}, nil
}

// explicitAnswers reads answers in deputy's form from a data part.
func explicitAnswers(raw json.RawMessage) ([]tool.Answer, bool) {
	var many struct {
		Answers []tool.Answer `json:"answers"`
	}
	if json.Unmarshal(raw, &many) == nil && len(many.Answers) > 0 {
		return many.Answers, true
	}
	var one tool.Answer
	if json.Unmarshal(raw, &one) == nil && one.InterruptID != "" && one.Status != "" {
		return []tool.Answer{one}, true
	}
	return nil, false
}

func fits(schema, v json.RawMessage) bool {
	s, err := jsonschema.CompileUntrusted(schema)
	return err == nil && s.Validate(v) == nil
}

// clip cuts s to about n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// usableSchema reports whether a remote's response schema can be asked
// with: an object schema within the bounds of one from outside.
func usableSchema(schema json.RawMessage) bool {
	t := strings.TrimSpace(string(schema))
	if t == "" || t[0] != '{' {
		return false
	}
	_, err := jsonschema.CompileUntrusted(schema)
	return err == nil
}
