package fake_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
)

// The prompt caches account as the vendors document: Anthropic reads what
// an earlier breakpoint wrote and writes the rest up to its last one;
// OpenAI reads the longest earlier prefix of the same key, from 1024
// tokens in steps of 128; a short prompt is not cached.
func TestPromptCache(t *testing.T) {
	system := strings.Repeat("s", 5000) // 1250 tokens
	first := provider.Request{System: system, Messages: []provider.Message{provider.UserMessage("q1")}, CacheKey: "k"}
	// 5002 bytes: 1250 tokens of system prompt, 1250 of the whole prefix.
	second := first
	second.Messages = append(first.Messages[:1:1], provider.AssistantMessage(strings.Repeat("a", 998)), provider.UserMessage("q2"))
	// 5002 + 998 + 2 = 6002 bytes: 1500 tokens.
	otherKey := second
	otherKey.CacheKey = "other"
	short := provider.Request{System: "brief", Messages: []provider.Message{provider.UserMessage("q")}}

	type usage struct{ read, write int64 }
	tests := []struct {
		name string
		kind fake.Cache
		reqs []provider.Request
		want []usage
	}{
		{"anthropic", fake.AnthropicCache, []provider.Request{first, second, second},
			[]usage{{0, 1250}, {1250, 250}, {1500, 0}}},
		{"anthropic, short prompts", fake.AnthropicCache, []provider.Request{short, short}, []usage{{0, 0}, {0, 0}}},
		{"openai", fake.OpenAICache, []provider.Request{first, second, second, otherKey},
			// 1250 tokens cached: 1024 + 128; then 1500: 1024 + 3×128.
			[]usage{{0, 0}, {1152, 0}, {1408, 0}, {0, 0}}},
		{"openai, short prompts", fake.OpenAICache, []provider.Request{short, short}, []usage{{0, 0}, {0, 0}}},
		{"none", fake.NoCache, []provider.Request{first, second}, []usage{{0, 0}, {0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("ok")).Loop().PromptCache(tt.kind)
			var got []usage
			for _, r := range tt.reqs {
				resp, err := p.Complete(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				u := resp.Usage
				if u.CacheReadTokens+u.CacheWriteTokens > u.InputTokens {
					t.Errorf("cached tokens %+v exceed the input", u)
				}
				got = append(got, usage{u.CacheReadTokens, u.CacheWriteTokens})
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(usage{})); diff != "" {
				t.Errorf("cache read and write per request (-want +got):\n%s", diff)
			}
		})
	}
}
