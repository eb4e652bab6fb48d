package subagent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// A resident expert's conversation grows with every consultation; with the
// prompt cache, what it re-sends is read from the cache rather than billed
// in full. Over 10 consultations (each a tool call and an answer) on a
// fake that accounts for caching as each vendor documents, most input
// tokens are cache reads.
func TestResidentPromptCacheShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     fake.Cache
		minShare float64
	}{
		{"anthropic", fake.AnthropicCache, 0.75},
		{"openai", fake.OpenAICache, 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := residentConsultations(t, tc.kind, 10)
			share := float64(u.CacheReadTokens) / float64(u.InputTokens)
			t.Logf("%s: %d of %d input tokens read from the cache (%.1f%%), %d written, over %d requests",
				tc.name, u.CacheReadTokens, u.InputTokens, 100*share, u.CacheWriteTokens, u.Requests)
			if share < tc.minShare {
				t.Errorf("cache reads are %.1f%% of input tokens, want at least %.0f%%", 100*share, 100*tc.minShare)
			}
		})
	}
}

// residentConsultations consults a resident expert n times and returns
// what its model calls cost.
func residentConsultations(t testing.TB, kind fake.Cache, n int) provider.Usage {
	type query struct {
		Topic string `json:"topic"`
	}
	lookup := must(tool.New("lookup", "Looks a topic up in the handbook.", func(_ context.Context, q query) (string, error) {
		return "Handbook entry on " + q.Topic + ": " + strings.Repeat("details ", 60), nil
	}))(t)
	p := fake.NewProvider(
		fake.Call("lookup", `{"topic":"retention"}`).For("expert"),
		fake.Text("Retention is 30 days, per the handbook's section on data.").For("expert"),
	).Loop().PromptCache(kind)
	// A resident's system prompt: who it is and the rules it keeps, some
	// 6 KB, as experts' prompts are.
	system := "You are the compliance expert of the team. " + strings.Repeat("Follow the handbook and cite its sections. ", 140)
	expert := must(agent.NewReact(p, agent.WithName("expert"), agent.WithSystemPrompt(system), agent.WithTools(lookup)))(t)
	sub := must(FromAgent("expert", "Answers compliance questions.", expert, WithInputFromArgs(argsTask)))(t)
	var total provider.Usage
	for i := range n {
		res, err := callTool(context.Background(), sub, fmt.Sprintf("call_%d", i), fmt.Sprintf(`{"task":"Question %d: how long do we keep records of kind %d?"}`, i+1, i))
		if err != nil {
			t.Fatal(err)
		}
		total = total.Add(res.Usage)
	}
	return total
}
