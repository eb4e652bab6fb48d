package anthropic_test

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/providertest"
)

// residentRequests are the requests a resident expert with a tool makes
// over two consultations: each repeats the one before and adds to it.
func residentRequests() []provider.Request {
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
		{provider.AssistantMessage("", provider.ToolCall{ID: "call_2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)}),
			provider.ToolMessage("call_2", "rain", false)},
	}
	var reqs []provider.Request
	var conv []provider.Message
	for _, s := range steps {
		conv = append(conv, s...)
		r := base
		r.Messages = append([]provider.Message(nil), conv...)
		reqs = append(reqs, r)
	}
	return reqs
}

// A resident's requests, as sent, mark cache breakpoints after the system
// prompt, where the previous request ended and at the end of the
// conversation; and each request repeats the one before byte for byte
// (breakpoints aside), so that the provider can read it from its cache.
func TestPromptCachingOnTheWire(t *testing.T) {
	clearEnv(t)
	reqs := residentRequests()
	answers := make([]canned, len(reqs))
	for i := range answers {
		answers[i] = canned{status: 200, file: "text.json"}
	}
	s := &server{t: t, answers: answers}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p := newTestProvider(t, srv)
	for _, r := range reqs {
		if _, err := p.Complete(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	bodies := s.requests()
	wiretest.Golden(t, "resident_cached", bodies[len(bodies)-1])

	var prev map[string]any
	for i, b := range bodies {
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		msgs := body["messages"].([]any)
		want := []string{"system[0]", lastBlockPath(msgs, len(msgs)-1)}
		if i > 0 {
			// The end of the previous request's conversation.
			want = []string{"system[0]", lastBlockPath(msgs, len(prev["messages"].([]any))-1), lastBlockPath(msgs, len(msgs)-1)}
		}
		if diff := cmp.Diff(want, breakpointPaths(body)); diff != "" {
			t.Errorf("request %d: breakpoints (-want +got):\n%s", i+1, diff)
		}
		stripCacheControl(body)
		if prev != nil {
			for _, k := range []string{"system", "tools", "model", "max_tokens"} {
				if !reflect.DeepEqual(prev[k], body[k]) {
					t.Errorf("request %d: %s differs from the request before", i+1, k)
				}
			}
			pm := prev["messages"].([]any)
			if !reflect.DeepEqual(pm, msgs[:len(pm)]) {
				t.Errorf("request %d does not repeat the conversation of the request before", i+1)
			}
		}
		prev = body
	}
}

// WithoutPromptCaching sends no breakpoint.
func TestWithoutPromptCaching(t *testing.T) {
	clearEnv(t)
	reqs := residentRequests()
	s := &server{t: t, answers: []canned{{status: 200, file: "text.json"}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	p := newTestProvider(t, srv, anthropic.WithoutPromptCaching())
	if _, err := p.Complete(t.Context(), reqs[len(reqs)-1]); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(s.requests()[0], &body); err != nil {
		t.Fatal(err)
	}
	if got := breakpointPaths(body); len(got) != 0 {
		t.Errorf("breakpoints at %v, want none", got)
	}
}

func lastBlockPath(msgs []any, i int) string {
	content := msgs[i].(map[string]any)["content"].([]any)
	return "messages[" + itoa(i) + "].content[" + itoa(len(content)-1) + "]"
}

// breakpointPaths lists where a request body has cache_control, in order.
func breakpointPaths(body map[string]any) []string {
	var out []string
	for _, k := range []string{"tools", "system"} {
		list, _ := body[k].([]any)
		for i, e := range list {
			if _, ok := e.(map[string]any)["cache_control"]; ok {
				out = append(out, k+"["+itoa(i)+"]")
			}
		}
	}
	msgs, _ := body["messages"].([]any)
	for i, m := range msgs {
		for j, b := range m.(map[string]any)["content"].([]any) {
			if _, ok := b.(map[string]any)["cache_control"]; ok {
				out = append(out, "messages["+itoa(i)+"].content["+itoa(j)+"]")
			}
		}
	}
	return out
}

func stripCacheControl(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "cache_control")
		for _, e := range v {
			stripCacheControl(e)
		}
	case []any:
		for _, e := range v {
			stripCacheControl(e)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
