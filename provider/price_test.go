package provider_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// A table in LiteLLM's format, as its file has it: a sample entry, models
// priced per token with and without cache prices, one under a provider
// prefix, and an image model priced otherwise.
const liteLLM = `{
  "sample_spec": {"max_tokens": "set to max_output_tokens if provider specifies it", "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": "one of https://docs.litellm.ai/docs/providers", "mode": "one of: chat, embedding"},
  "gpt-4o": {"max_tokens": 16384, "max_input_tokens": 128000, "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "cache_read_input_token_cost": 1.25e-06, "litellm_provider": "openai", "mode": "chat"},
  "anthropic/claude-sonnet": {"max_input_tokens": 200000, "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05, "cache_read_input_token_cost": 3e-07, "cache_creation_input_token_cost": 3.75e-06, "litellm_provider": "anthropic", "mode": "chat"},
  "dall-e-3": {"input_cost_per_pixel": 1e-07, "litellm_provider": "openai", "mode": "image_generation"}
}`

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// Usage is priced per token, the cached input at its own prices; a model
// the table lacks is named, not guessed.
func TestPricesCostUsage(t *testing.T) {
	prices, err := provider.ReadPrices(strings.NewReader(liteLLM), 0)
	if err != nil {
		t.Fatal(err)
	}
	u := provider.Usage{InputTokens: 1_000_000, CacheReadTokens: 400_000, CacheWriteTokens: 100_000, OutputTokens: 10_000, Requests: 3}
	got, unpriced := prices.Cost(
		provider.ModelUsage{Provider: "openai", Model: "gpt-4o", Usage: u},
		provider.ModelUsage{Provider: "anthropic", Model: "claude-sonnet", Usage: u},
		provider.ModelUsage{Provider: "local", Model: "llama", Usage: u},
	)
	// gpt-4o: 500k plain and 100k written at 2.5 $/M, 400k read at 1.25, 10k out at 10.
	gpt := 0.6*2.5 + 0.4*1.25 + 0.01*10
	// claude: 500k plain at 3, 400k read at 0.3, 100k written at 3.75, 10k out at 15.
	claude := 0.5*3 + 0.4*0.3 + 0.1*3.75 + 0.01*15
	if !near(got, gpt+claude) {
		t.Errorf("cost %v, want %v", got, gpt+claude)
	}
	if len(unpriced) != 1 || unpriced[0] != "local/llama" {
		t.Errorf("unpriced %v, want the one model the table lacks", unpriced)
	}
	if p, ok := prices.Lookup("", "gpt-4o"); !ok || p.Window != 128000 {
		t.Errorf("gpt-4o by name alone: %+v %v", p, ok)
	}
	if _, ok := prices.Lookup("openai", "dall-e-3"); ok {
		t.Error("a model priced per pixel has a per-token price")
	}
	if _, ok := prices.Lookup("", "sample_spec"); ok {
		t.Error("the sample entry is a model")
	}
}

// A table that is not one says what is wrong, and a reader that never
// ends is read no further than the bound.
func TestReadPricesRefusesBadTables(t *testing.T) {
	tests := []struct {
		name, in, want string
		max            int64
	}{
		{"not JSON", `{"gpt-4o": `, "give a JSON object of models", 0},
		{"an array", `[1, 2]`, "give a JSON object of models", 0},
		{"a price that is text", `{"m": {"input_cost_per_token": "cheap"}}`, `model "m"`, 0},
		{"a negative price", `{"m": {"input_cost_per_token": -1e-6}}`, `model "m": -1e-06 dollars a token`, 0},
		{"a window past reason", `{"m": {"input_cost_per_token": 1e-6, "max_input_tokens": 1e300}}`, "is no context window", 0},
		{"over the bound", `{"m": {"input_cost_per_token": 1e-6}}` + strings.Repeat(" ", 2000), "more than 1024 bytes", 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := provider.ReadPrices(strings.NewReader(tt.in), tt.max)
			if !errors.Is(err, provider.ErrBadPrices) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrBadPrices saying %q", err, tt.want)
			}
		})
	}
	if _, err := provider.ReadPrices(endless{}, 1<<20); !errors.Is(err, provider.ErrBadPrices) {
		t.Fatalf("an endless table: %v, want ErrBadPrices", err)
	}
	if _, err := provider.NewPrices(map[string]provider.Price{"m": {Output: math.Inf(1)}}); err == nil {
		t.Error("an infinite price was taken")
	}
}

// endless is a reader that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
