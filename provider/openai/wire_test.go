package openai_test

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

// This file is a small Chat Completions server for the conformance suite: it
// decodes what the provider sent into the provider vocabulary and answers a
// providertest.Reply in the wire format OpenAI documents.

type wireRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text reads a message's content, a string or an array of text parts.
func (m wireMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor text parts: %s", m.Content)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// decodeRequest turns a Chat Completions request body into the vocabulary.
func decodeRequest(body []byte) (wireRequest, provider.Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return w, provider.Request{}, err
	}
	req := provider.Request{Model: w.Model}
	for i, m := range w.Messages {
		text, err := m.text()
		if err != nil {
			return w, req, fmt.Errorf("message %d: %v", i, err)
		}
		switch m.Role {
		case "system", "developer":
			if i != 0 {
				return w, req, fmt.Errorf("message %d: a system message after the conversation started", i)
			}
			req.System = text
		case "user":
			req.Messages = append(req.Messages, provider.UserMessage(text))
		case "assistant":
			msg := provider.AssistantMessage(text)
			for _, c := range m.ToolCalls {
				if c.Type != "function" {
					return w, req, fmt.Errorf("message %d: tool call of type %q", i, c.Type)
				}
				msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: json.RawMessage(c.Function.Arguments)})
			}
			req.Messages = append(req.Messages, msg)
		case "tool":
			if m.ToolCallID == "" {
				return w, req, fmt.Errorf("message %d: a tool message without tool_call_id", i)
			}
			req.Messages = append(req.Messages, provider.ToolMessage(m.ToolCallID, text, false))
		default:
			return w, req, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, provider.ToolDef{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return w, req, nil
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
			if !wire.StreamOptions.IncludeUsage {
				t.Errorf("the provider streamed without asking for usage (stream_options.include_usage)")
			}
			writeStream(w, r, reply)
		case reply.Stall:
			<-r.Context().Done()
		default:
			writeJSON(w, http.StatusOK, completion(reply))
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with the error body OpenAI sends for status.
func writeError(w http.ResponseWriter, status int) {
	typ, code := "invalid_request_error", any(nil)
	switch status {
	case http.StatusUnauthorized:
		code = "invalid_api_key"
	case http.StatusForbidden:
		code = "unsupported_country_region_territory"
	case http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	default:
		if status >= 500 {
			typ = "server_error"
		}
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": http.StatusText(status), "type": typ, "param": nil, "code": code,
	}})
}

const wireModel = "gpt-5.4-mini-2026-03-17"

func finishReason(r providertest.Reply) string {
	if len(r.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func usage(r providertest.Reply) map[string]any {
	return map[string]any{
		"prompt_tokens":     r.Usage.InputTokens,
		"completion_tokens": r.Usage.OutputTokens,
		"total_tokens":      r.Usage.InputTokens + r.Usage.OutputTokens,
	}
}

func completion(r providertest.Reply) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if r.Text != "" {
		msg["content"] = r.Text
	}
	if len(r.ToolCalls) > 0 {
		var calls []any
		for _, c := range r.ToolCalls {
			calls = append(calls, map[string]any{
				"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": string(c.Arguments)},
			})
		}
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id": "chatcmpl-script", "object": "chat.completion", "created": 1741569952, "model": wireModel,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finishReason(r)}},
		"usage":   usage(r),
	}
}

// writeStream answers with server-sent events, as OpenAI streams a reply.
func writeStream(w http.ResponseWriter, r *http.Request, reply providertest.Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	chunk := func(delta map[string]any, finish any, usage any) {
		choices := []any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish})
		}
		b, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-script", "object": "chat.completion.chunk", "created": 1741569952, "model": wireModel,
			"choices": choices, "usage": usage,
		})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for _, piece := range providertest.Split(reply.Text) {
		chunk(map[string]any{"content": piece}, nil, nil)
	}
	if reply.Stall {
		<-r.Context().Done()
		return
	}
	for i, c := range reply.ToolCalls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""},
		}}}, nil, nil)
		for _, piece := range providertest.Split(string(c.Arguments)) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": piece},
			}}}, nil, nil)
		}
	}
	chunk(map[string]any{}, finishReason(reply), nil)
	chunk(nil, nil, usage(reply))
	fmt.Fprint(w, "data: [DONE]\n\n")
}
