package anthropic_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
)

// This file is a small Messages API server for the conformance suite: it
// checks what the provider sent the way the API would, decodes it into the
// provider vocabulary, and answers a providertest.Reply in the wire format
// Anthropic documents.

type wireRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   bool            `json:"is_error"`
	Content   json.RawMessage `json:"content"`
}

// blocks reads content that is a string or a list of blocks.
func blocks(raw json.RawMessage) ([]wireBlock, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []wireBlock{{Type: "text", Text: s}}, nil
	}
	var bs []wireBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, fmt.Errorf("content is neither a string nor blocks: %s", raw)
	}
	return bs, nil
}

// textOf joins the text blocks of content.
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	bs, err := blocks(raw)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, x := range bs {
		if x.Type != "text" {
			return "", fmt.Errorf("a %s block where only text is allowed", x.Type)
		}
		b.WriteString(x.Text)
	}
	return b.String(), nil
}

// decodeRequest checks a Messages request body as the API would and turns
// it into the vocabulary.
func decodeRequest(body []byte) (wireRequest, provider.Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return w, provider.Request{}, err
	}
	req := provider.Request{Model: w.Model, MaxTokens: w.MaxTokens}
	if w.MaxTokens <= 0 {
		return w, req, fmt.Errorf("max_tokens: %d; the field is required and positive", w.MaxTokens)
	}
	system, err := textOf(w.System)
	if err != nil {
		return w, req, fmt.Errorf("system: %v", err)
	}
	req.System = system
	if len(w.Messages) == 0 || w.Messages[0].Role != "user" {
		return w, req, fmt.Errorf("the first message must have role user")
	}
	var pending []string // tool_use IDs of the previous assistant turn
	for i, m := range w.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return w, req, fmt.Errorf("messages.%d: %v", i, err)
		}
		if len(bs) == 0 {
			return w, req, fmt.Errorf("messages.%d: content is empty", i)
		}
		switch m.Role {
		case "user":
			var text strings.Builder
			for j, b := range bs {
				switch b.Type {
				case "tool_result":
					if j >= len(pending) || text.Len() > 0 {
						return w, req, fmt.Errorf("messages.%d.content.%d: tool_result blocks must come first and answer the previous tool_use blocks", i, j)
					}
					if b.ToolUseID != pending[j] {
						return w, req, fmt.Errorf("messages.%d.content.%d: tool_use_id %q, want %q", i, j, b.ToolUseID, pending[j])
					}
					content, err := textOf(b.Content)
					if err != nil {
						return w, req, fmt.Errorf("messages.%d.content.%d: %v", i, j, err)
					}
					req.Messages = append(req.Messages, provider.ToolMessage(b.ToolUseID, content, b.IsError))
				case "text":
					if b.Text == "" {
						return w, req, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
					}
					text.WriteString(b.Text)
				default:
					return w, req, fmt.Errorf("messages.%d.content.%d: unexpected %s block", i, j, b.Type)
				}
			}
			if n := countResults(bs); n != len(pending) {
				return w, req, fmt.Errorf("messages.%d: %d tool_result blocks answer %d tool_use blocks", i, n, len(pending))
			}
			pending = nil
			if text.Len() > 0 {
				req.Messages = append(req.Messages, provider.UserMessage(text.String()))
			}
		case "assistant":
			if len(pending) > 0 {
				return w, req, fmt.Errorf("messages.%d: tool_use ids %v have no tool_result", i, pending)
			}
			msg := provider.AssistantMessage("")
			for j, b := range bs {
				switch b.Type {
				case "text":
					if b.Text == "" {
						return w, req, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
					}
					msg.Content += b.Text
				case "tool_use":
					var input map[string]any
					if err := json.Unmarshal(b.Input, &input); err != nil || input == nil {
						return w, req, fmt.Errorf("messages.%d.content.%d.tool_use.input: Input should be a valid dictionary", i, j)
					}
					if b.ID == "" || strings.Trim(b.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
						return w, req, fmt.Errorf("messages.%d.content.%d.tool_use.id: %q does not match ^[a-zA-Z0-9_-]+$", i, j, b.ID)
					}
					pending = append(pending, b.ID)
					msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
				default:
					return w, req, fmt.Errorf("messages.%d.content.%d: unexpected %s block", i, j, b.Type)
				}
			}
			req.Messages = append(req.Messages, msg)
		default:
			return w, req, fmt.Errorf("messages.%d: unknown role %q", i, m.Role)
		}
	}
	if len(pending) > 0 {
		return w, req, fmt.Errorf("the conversation ends with tool_use ids %v that have no tool_result", pending)
	}
	for _, t := range w.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema["type"] != "object" {
			return w, req, fmt.Errorf("tools: input_schema of %q must be an object schema", t.Name)
		}
		req.Tools = append(req.Tools, provider.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return w, req, nil
}

func countResults(bs []wireBlock) int {
	n := 0
	for _, b := range bs {
		if b.Type == "tool_result" {
			n++
		}
	}
	return n
}

// scriptHandler answers each request with the script's next reply.
func scriptHandler(t *testing.T, s *providertest.Script) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wire, req, err := decodeRequest(body)
		if err != nil {
			t.Errorf("the provider sent a request the API would reject: %v\n%s", err, body)
			writeError(w, http.StatusBadRequest)
			return
		}
		reply := s.Next(req)
		switch {
		case reply.Status != 0:
			writeError(w, reply.Status)
		case wire.Stream:
			writeStream(w, r, reply)
		case reply.Stall:
			<-r.Context().Done()
		default:
			writeJSON(w, http.StatusOK, message(reply))
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorType is the error type Anthropic reports with status.
func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func errorBody(status int) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": errorType(status), "message": http.StatusText(status)}}
}

func writeError(w http.ResponseWriter, status int) {
	w.Header().Set("request-id", "req_script")
	writeJSON(w, status, errorBody(status))
}

const wireModel = "claude-sonnet-5-5"

func stopReason(r providertest.Reply) string {
	if len(r.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func usage(r providertest.Reply) map[string]any {
	return map[string]any{
		"input_tokens":                r.Usage.InputTokens,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
		"output_tokens":               r.Usage.OutputTokens,
	}
}

func message(r providertest.Reply) map[string]any {
	content := []any{}
	if r.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": r.Text})
	}
	for _, c := range r.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": c.Arguments})
	}
	return map[string]any{
		"id": "msg_script", "type": "message", "role": "assistant", "model": wireModel,
		"content": content, "stop_reason": stopReason(r), "stop_sequence": nil, "usage": usage(r),
	}
}

// writeStream answers with server-sent events, as Anthropic streams a reply.
func writeStream(w http.ResponseWriter, r *http.Request, reply providertest.Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	event := func(v map[string]any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	start := usage(reply)
	start["output_tokens"] = 1
	event(map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_script", "type": "message", "role": "assistant", "model": wireModel, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": start,
	}})
	index := 0
	if reply.Text != "" {
		event(map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		event(map[string]any{"type": "ping"})
		for _, piece := range providertest.Split(reply.Text) {
			event(map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": piece}})
		}
		if reply.Stall {
			<-r.Context().Done()
			return
		}
		event(map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	if reply.Stall {
		<-r.Context().Done()
		return
	}
	for _, c := range reply.ToolCalls {
		event(map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{
			"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{},
		}})
		for _, piece := range providertest.Split(string(c.Arguments)) {
			event(map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
		}
		event(map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	event(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(reply), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": reply.Usage.OutputTokens}})
	event(map[string]any{"type": "message_stop"})
}
