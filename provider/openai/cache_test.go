package openai_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
)

// A resident's requests, as sent, repeat the request before byte for byte
// and add to its end (the system message first, nothing that changes ahead
// of the history), and all carry the resident's prompt_cache_key, so that
// OpenAI's automatic prompt caching can read the repeated prefix.
func TestStablePrefixOnTheWire(t *testing.T) {
	clearEnv(t)
	base := provider.Request{
		System:   "You are a weather expert.",
		Tools:    []provider.ToolDef{providertest.WeatherTool()},
		CacheKey: "weather-expert",
	}
	steps := [][]provider.Message{
		{provider.UserMessage("Weather in Paris?")},
		{provider.AssistantMessage("", provider.ToolCall{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}),
			provider.ToolMessage("call_1", "sunny", false)},
		{provider.AssistantMessage("Sunny in Paris."), provider.UserMessage("And in Rome?")},
	}
	s := &server{t: t}
	var conv []provider.Message
	for range steps {
		s.answers = append(s.answers, canned{status: 200, file: "text.json"})
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p := newTestProvider(t, srv)
	for _, step := range steps {
		conv = append(conv, step...)
		r := base
		r.Messages = append([]provider.Message(nil), conv...)
		if _, err := p.Complete(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	type body struct {
		Messages       []json.RawMessage `json:"messages"`
		Tools          json.RawMessage   `json:"tools"`
		PromptCacheKey string            `json:"prompt_cache_key"`
	}
	var prev *body
	for i, raw := range s.requests() {
		var b body
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		if b.PromptCacheKey != "weather-expert" {
			t.Errorf("request %d: prompt_cache_key %q, want the resident's key", i+1, b.PromptCacheKey)
		}
		if prev != nil {
			if !bytes.Equal(prev.Tools, b.Tools) {
				t.Errorf("request %d: the tools differ from the request before", i+1)
			}
			for j, m := range prev.Messages {
				if !bytes.Equal(m, b.Messages[j]) {
					t.Errorf("request %d: message %d differs from the request before:\n%s\nwas\n%s", i+1, j, b.Messages[j], m)
				}
			}
		}
		prev = &b
	}
}
