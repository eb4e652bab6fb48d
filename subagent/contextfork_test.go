package subagent_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// leadContext is a lead's conversation of about tokens tokens (the fake
// counts four bytes a token).
func leadContext(tokens int) string {
	var b strings.Builder
	for i := 0; b.Len() < tokens*4; i++ {
		fmt.Fprintf(&b, "Finding %d: the survey of site %d reports its soil, water and traffic figures in full. ", i, i)
	}
	return b.String()
}

// fanOut is a lead that, over a long context, starts n children with one
// spawn call each and then answers; fresh children get the context in
// their context argument, as a fresh child must.
type fanOut struct {
	kind     fake.Cache
	n        int
	context  string
	forked   bool
	p        *fake.Provider
	out      agent.Output
	tree     *subagent.Tree
	children []provider.ModelUsage
}

func (f *fanOut) run(t *testing.T, prices *provider.Prices) {
	t.Helper()
	calls := make([]provider.ToolCall, f.n)
	for i := range calls {
		args := map[string]any{"task": fmt.Sprintf("Summarize what the findings say about site %d.", i)}
		if !f.forked {
			args["context"] = f.context
		}
		raw, _ := json.Marshal(args)
		calls[i] = provider.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: subagent.SpawnToolName, Arguments: raw}
	}
	replies := []fake.Reply{fake.Calls(calls...).For("lead"), fake.Text("All sites summarized.").For("lead")}
	for range f.n {
		replies = append(replies, fake.Text("Site summary: soil fine, water fine, traffic heavy.").For(subagent.DefaultForkName))
	}
	f.p = fake.NewProvider(replies...).Named("acme", "m").PromptCache(f.kind)
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	opts := []subagent.SpawnOption{subagent.WithMaxSpawns(f.n)}
	if f.forked {
		opts = append(opts, subagent.WithContextForks())
	}
	sp, err := subagent.NewSpawner(f.p, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(f.p, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithPrices(prices),
		agent.WithSystemPrompt("You lead a survey team. Delegate one site to each sub-agent."))
	if err != nil {
		t.Fatal(err)
	}
	f.tree = subagent.NewTree(nil)
	f.out, err = lead.Run(event.WithSink(t.Context(), f.tree), agent.Input{Text: "Survey findings:\n" + f.context + "\nSummarize every site."})
	if err != nil {
		t.Fatal(err)
	}
	roots := f.tree.Roots()
	if len(roots) != f.n {
		t.Fatalf("%d children, want %d", len(roots), f.n)
	}
	for _, r := range roots {
		if r.State != subagent.StateSucceeded || len(r.Usage) != 1 {
			t.Fatalf("child %s: %s, usage %+v", r.RunID, r.State, r.Usage)
		}
		f.children = append(f.children, r.Usage[0])
	}
}

var (
	anthropicLike = provider.Price{Input: 3e-6, Output: 15e-6, CacheRead: 0.3e-6, CacheWrite: 3.75e-6}
	openAILike    = provider.Price{Input: 2e-6, Output: 8e-6, CacheRead: 0.5e-6}
)

// TestContextForksReadTheirParentFromTheCache runs a lead over a 20k-token
// context that starts 16 context forks at once, on the accounting of each
// vendor's prompt cache: every fork's first request starts with the
// lead's request byte for byte, so every fork reads at least 90% of its
// input from the cache (the lead's own request wrote it), and the fan-out
// costs less than 16 fresh children given the same context, which read
// none of it.
func TestContextForksReadTheirParentFromTheCache(t *testing.T) {
	for _, tt := range []struct {
		name  string
		kind  fake.Cache
		price provider.Price
	}{
		{"anthropic", fake.AnthropicCache, anthropicLike},
		{"openai", fake.OpenAICache, openAILike},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prices, err := provider.NewPrices(map[string]provider.Price{"acme/m": tt.price})
			if err != nil {
				t.Fatal(err)
			}
			ctx := leadContext(20_000)
			forked := &fanOut{kind: tt.kind, n: 16, context: ctx, forked: true}
			forked.run(t, prices)
			fresh := &fanOut{kind: tt.kind, n: 16, context: ctx}
			fresh.run(t, prices)

			leadReqs := forked.p.RequestsFor("lead")
			forkReqs := forked.p.RequestsFor(subagent.DefaultForkName)
			if len(forkReqs) != 16 {
				t.Fatalf("%d fork requests, want 16", len(forkReqs))
			}
			first := leadReqs[0]
			for i, r := range forkReqs {
				// The prefix, byte for byte: the lead's system prompt,
				// tools, cache key and messages, then the task.
				if r.System != first.System || !reflect.DeepEqual(r.Tools, first.Tools) || r.CacheKey != first.CacheKey ||
					len(r.Messages) != len(first.Messages)+1 || !reflect.DeepEqual(r.Messages[:len(first.Messages)], first.Messages) {
					t.Fatalf("fork request %d does not start with the lead's request: system %q, %d tools, key %q, %d messages",
						i, r.System, len(r.Tools), r.CacheKey, len(r.Messages))
				}
				if r.SharedPrefix != len(first.Messages) {
					t.Errorf("fork request %d marks %d shared messages, want %d", i, r.SharedPrefix, len(first.Messages))
				}
				if !strings.Contains(r.Messages[len(r.Messages)-1].Content, "Summarize what the findings say about site") {
					t.Errorf("fork request %d ends with %q, want its task", i, r.Messages[len(r.Messages)-1].Content)
				}
			}
			var forkCost, freshCost, forkSaved float64
			for i, u := range forked.children {
				share := float64(u.Usage.CacheReadTokens) / float64(u.Usage.InputTokens)
				if share < 0.9 {
					t.Errorf("fork %d read %.1f%% of its input from the cache (%+v), want at least 90%%", i, 100*share, u.Usage)
				}
				forkCost += u.Cost
				forkSaved += u.CacheSaved
			}
			for _, u := range fresh.children {
				freshCost += u.Cost
			}
			t.Logf("16 children over a 20k-token context on %s's accounting: context forks $%.4f (the cache saved $%.4f), fresh children $%.4f; whole trees $%.4f and $%.4f",
				tt.name, forkCost, forkSaved, freshCost, forked.out.Cost, fresh.out.Cost)
			if forkCost >= freshCost || forked.out.Cost >= fresh.out.Cost {
				t.Errorf("context forks cost $%.4f (tree $%.4f), fresh children $%.4f (tree $%.4f): want the forks cheaper",
					forkCost, forked.out.Cost, freshCost, fresh.out.Cost)
			}
			if forkSaved <= 0 {
				t.Errorf("the cache saved the forks $%v, want more than nothing", forkSaved)
			}
		})
	}
}
