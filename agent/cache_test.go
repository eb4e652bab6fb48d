package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Input.ResponseSchema travels with every model call of the run, and only
// of that run.
func TestResponseSchemaOnEveryCall(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	p := fake.NewProvider(fake.Call("weather", `{"city":"Lisbon"}`), fake.Text(`{"n":1}`), fake.Text("plain"))
	a := newReact(t, p, agent.WithTools(weather(t)))
	if _, err := a.Run(t.Context(), agent.Input{Text: "go", ResponseSchema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(t.Context(), agent.Input{Text: "again"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.Requests() {
		got = append(got, string(r.ResponseSchema))
	}
	if diff := cmp.Diff([]string{string(schema), string(schema), ""}, got); diff != "" {
		t.Errorf("ResponseSchema per request (-want +got):\n%s", diff)
	}
}

// Each model call names its conversation for the prompt cache: the run's
// Input.CacheKey, else WithCacheKey, else the agent's name.
func TestCacheKey(t *testing.T) {
	tests := []struct {
		name string
		opts []agent.Option
		in   string
		want string
	}{
		{"the agent's name", []agent.Option{agent.WithName("expert")}, "", "expert"},
		{"WithCacheKey", []agent.Option{agent.WithName("expert"), agent.WithCacheKey("tenant-7/expert")}, "", "tenant-7/expert"},
		{"the run's", []agent.Option{agent.WithCacheKey("tenant-7/expert")}, "thread-42", "thread-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("ok"))
			a := newReact(t, p, tt.opts...)
			if _, err := a.Run(t.Context(), agent.Input{Text: "go", CacheKey: tt.in}); err != nil {
				t.Fatal(err)
			}
			if got := p.Requests()[0].CacheKey; got != tt.want {
				t.Errorf("CacheKey = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := agent.NewReact(fake.NewProvider(), agent.WithCacheKey("")); err == nil || !strings.Contains(err.Error(), "empty cache key") {
		t.Errorf("WithCacheKey(\"\") error = %v", err)
	}
}

// Near its token limit the agent adds a budget note after the conversation,
// not to the system prompt, so that what it sent before stays a prefix of
// what it sends now (the part a provider can read from its cache), and the
// note is not kept in the conversation.
func TestBudgetNoteKeepsThePrefix(t *testing.T) {
	// A sub-agent behind the tool spends most of the budget, leaving the
	// run room for its own next call.
	delegate := toolFunc("delegate", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: "found", Usage: provider.Usage{InputTokens: 8000}}, nil
	})
	p := fake.NewProvider(
		fake.Call("delegate", `{}`).WithUsage(provider.Usage{InputTokens: 100}),
		fake.Text("done").WithUsage(provider.Usage{InputTokens: 10}),
	)
	a := newReact(t, p, agent.WithSystemPrompt("Be brief."), agent.WithTools(delegate), agent.WithTokenLimit(10000))
	out, err := a.Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if reqs[1].System != "Be brief." {
		t.Errorf("second system prompt = %q, want it unchanged", reqs[1].System)
	}
	first, second := reqs[0].Messages, reqs[1].Messages
	if diff := cmp.Diff(first, second[:len(first)]); diff != "" {
		t.Errorf("the first request's messages are not a prefix of the second's (-first +second):\n%s", diff)
	}
	note := second[len(second)-1]
	if note.Role != provider.RoleUser || !strings.HasPrefix(note.Content, "Budget note: you have used 8100 of your 10000 tokens. Finish now") {
		t.Errorf("last message = %+v, want the budget note", note)
	}
	for _, m := range append(out.Messages, a.History()...) {
		if strings.Contains(m.Content, "Budget note") {
			t.Errorf("the note was kept in the conversation: %+v", m)
		}
	}
}
