package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/provider"
)

func TestUsage(t *testing.T) {
	a := provider.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 50, CacheWriteTokens: 5, Requests: 1}
	b := provider.Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: 1, Requests: 2}
	aBefore, bBefore := a, b
	sum := a.Add(b)
	want := provider.Usage{InputTokens: 110, OutputTokens: 22, CacheReadTokens: 51, CacheWriteTokens: 5, Requests: 3}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("Add (-want +got):\n%s", diff)
	}
	if a != aBefore || b != bBefore {
		t.Error("Add changed an operand")
	}
	if b.Add(a) != sum {
		t.Error("Add is not commutative")
	}
	if a.Add(provider.Usage{}) != a {
		t.Error("adding zero changed the usage")
	}
	tests := []struct {
		u      provider.Usage
		tokens int64
		zero   bool
		str    string
	}{
		{provider.Usage{}, 0, true, "0 req, 0 in, 0 out"},
		{a, 120, false, "1 req, 100 in, 20 out"},
		{provider.Usage{CacheReadTokens: 1}, 0, false, "0 req, 0 in, 0 out"},
	}
	for _, tt := range tests {
		if tt.u.Tokens() != tt.tokens || tt.u.IsZero() != tt.zero || tt.u.String() != tt.str {
			t.Errorf("%#v: Tokens %d, IsZero %v, String %q; want %d, %v, %q", tt.u, tt.u.Tokens(), tt.u.IsZero(), tt.u.String(), tt.tokens, tt.zero, tt.str)
		}
	}
}

func TestError(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	tests := []struct {
		name      string
		err       *provider.Error
		want      string
		retryable bool
	}{
		{"rate limit", &provider.Error{Provider: "openai", StatusCode: 429, Kind: provider.KindRateLimit, Message: "slow down"},
			"openai: rate limit (HTTP 429): slow down (slow down or raise the provider's max retries)", true},
		{"auth", &provider.Error{Provider: "anthropic", StatusCode: 401, Kind: provider.KindAuth, Err: cause},
			"anthropic: auth (HTTP 401): unexpected EOF (check the API key and the model's access)", false},
		{"bad request", &provider.Error{Provider: "openai", StatusCode: 400, Kind: provider.KindBadRequest, Message: "unknown model"},
			"openai: bad request (HTTP 400): unknown model", false},
		{"transient without status", &provider.Error{Kind: provider.KindTransient, Err: cause},
			"provider: transient: unexpected EOF (retry later)", true},
		{"context window", &provider.Error{Provider: "p", StatusCode: 413, Kind: provider.KindContextWindow},
			"p: context window exceeded (HTTP 413) (shorten the conversation or bound the agent's history)", false},
		{"malformed", &provider.Error{Provider: "p", Kind: provider.KindMalformed, Message: "no choices"},
			"p: malformed response: no choices", false},
		{"response too large", &provider.Error{Provider: "p", StatusCode: 200, Kind: provider.KindResponseTooLarge, Message: "the reply's text is over the limit"},
			"p: response too large (HTTP 200): the reply's text is over the limit (ask for a shorter reply, e.g. with a lower MaxTokens, or raise the limit)", false},
		{"unknown", &provider.Error{}, "provider: unknown", false},
		{"message wins over cause", &provider.Error{Provider: "p", Kind: provider.KindUnknown, Message: "m", Err: cause}, "p: unknown: m", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error():\n%s\nwant:\n%s", got, tt.want)
			}
			if tt.err.Retryable() != tt.retryable {
				t.Errorf("Retryable() = %v", tt.err.Retryable())
			}
			wrapped := fmt.Errorf("agent %q: %w", "a", tt.err)
			var pe *provider.Error
			if !errors.As(wrapped, &pe) || pe != tt.err {
				t.Error("errors.As did not find the *Error")
			}
			if errors.Is(wrapped, cause) != (tt.err.Err == cause) {
				t.Error("the cause is not in the chain")
			}
		})
	}
}

func TestKindForStatus(t *testing.T) {
	tests := []struct {
		status int
		want   provider.ErrorKind
	}{
		{0, provider.KindUnknown},
		{200, provider.KindUnknown},
		{http.StatusBadRequest, provider.KindBadRequest},
		{http.StatusUnauthorized, provider.KindAuth},
		{http.StatusForbidden, provider.KindAuth},
		{http.StatusNotFound, provider.KindBadRequest},
		{http.StatusRequestTimeout, provider.KindTransient},
		{http.StatusConflict, provider.KindTransient},
		{http.StatusRequestEntityTooLarge, provider.KindContextWindow},
		{http.StatusUnprocessableEntity, provider.KindBadRequest},
		{http.StatusTooManyRequests, provider.KindRateLimit},
		{http.StatusInternalServerError, provider.KindTransient},
		{529, provider.KindTransient}, // Anthropic's "overloaded"
	}
	for _, tt := range tests {
		if got := provider.KindForStatus(tt.status); got != tt.want {
			t.Errorf("KindForStatus(%d) = %v, want %v", tt.status, got, tt.want)
		}
	}
}

func TestErrorKindString(t *testing.T) {
	tests := []struct {
		k    provider.ErrorKind
		want string
	}{
		{provider.KindUnknown, "unknown"},
		{provider.KindRateLimit, "rate limit"},
		{provider.KindMalformed, "malformed response"},
		{provider.KindResponseTooLarge, "response too large"},
		{provider.ErrorKind(99), "ErrorKind(99)"},
		{provider.ErrorKind(-1), "ErrorKind(-1)"},
	}
	for _, tt := range tests {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("ErrorKind(%d).String() = %q, want %q", int(tt.k), got, tt.want)
		}
	}
}

func TestMessages(t *testing.T) {
	call := provider.ToolCall{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"go"}`)}
	tests := []struct {
		got  provider.Message
		want provider.Message
		json string
	}{
		{provider.UserMessage("hi"), provider.Message{Role: provider.RoleUser, Content: "hi"}, `{"role":"user","content":"hi"}`},
		{provider.AssistantMessage("ok"), provider.Message{Role: provider.RoleAssistant, Content: "ok"}, `{"role":"assistant","content":"ok"}`},
		{provider.AssistantMessage("", call), provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call}},
			`{"role":"assistant","tool_calls":[{"id":"c1","name":"search","arguments":{"q":"go"}}]}`},
		{provider.ToolMessage("c1", "failed", true), provider.Message{Role: provider.RoleTool, ToolCallID: "c1", Content: "failed", IsError: true},
			`{"role":"tool","content":"failed","tool_call_id":"c1","is_error":true}`},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		b, err := json.Marshal(tt.got)
		if err != nil || string(b) != tt.json {
			t.Errorf("JSON %s, %v; want %s", b, err, tt.json)
		}
		var back provider.Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.got, back); diff != "" {
			t.Errorf("JSON round trip (-want +got):\n%s", diff)
		}
	}
}

func TestFunc(t *testing.T) {
	var p provider.Provider = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(req.System + "/" + req.Messages[0].Content)}, ctx.Err()
	})
	resp, err := p.Complete(t.Context(), provider.Request{System: "s", Messages: []provider.Message{provider.UserMessage("u")}})
	if err != nil || resp.Message.Content != "s/u" {
		t.Errorf("Complete = %+v, %v", resp, err)
	}
	if _, ok := p.(provider.Streamer); ok {
		t.Error("a Func claims to stream")
	}
}
