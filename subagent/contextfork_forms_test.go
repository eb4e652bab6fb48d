package subagent_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// WithContextForks serves FromFactory, FromReact and a roster member as it
// serves the spawn tool: the child's first request is its parent's
// request of the step that called it, byte for byte, and then its task —
// FromReact's system prompts going before the task, since the parent's
// system prompt is what is sent. Without the option the child is fresh.
func TestContextForksOfEveryForm(t *testing.T) {
	for _, tt := range []struct {
		name     string
		forked   bool
		build    func(p *fake.Provider, opts ...subagent.Option) (tool.Tool, error)
		args     string
		wantTask string
	}{
		{"FromFactory", true, func(p *fake.Provider, opts ...subagent.Option) (tool.Tool, error) {
			return subagent.FromFactory("expert", "Checks a site.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("expert"), agent.WithSystemPrompt("You check sites."))
			}, opts...)
		}, `{"task":"check site 3"}`, "check site 3"},
		{"FromFactory fresh", false, func(p *fake.Provider, opts ...subagent.Option) (tool.Tool, error) {
			return subagent.FromFactory("expert", "Checks a site.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("expert"), agent.WithSystemPrompt("You check sites."))
			}, opts...)
		}, `{"task":"check site 3"}`, "check site 3"},
		{"FromReact", true, func(p *fake.Provider, opts ...subagent.Option) (tool.Tool, error) {
			return subagent.FromReact("expert", "Checks a site.", p, nil, append(opts, subagent.WithReactOptions(agent.WithSystemPrompt("Be careful.")))...)
		}, `{"system_prompt":"You check sites.","task":"check site 3"}`, "Be careful.\n\nYou check sites.\n\ncheck site 3"},
		{"roster member", true, func(p *fake.Provider, opts ...subagent.Option) (tool.Tool, error) {
			m, err := subagent.FromFactory("expert", "Checks a site.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(p, agent.WithName("expert"), agent.WithSystemPrompt("You check sites."))
			}, opts...)
			if err != nil {
				return nil, err
			}
			// The spawn tool's own forks are fresh: only the member forks.
			return subagent.NewSpawner(p, nil, subagent.WithRoster(m))
		}, `{"agent":"expert","task":"check site 3"}`, "check site 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []subagent.Option
			if tt.forked {
				opts = append(opts, subagent.WithContextForks())
			}
			p := fake.NewProvider(fake.Text("site 3 is fine").For("expert"))
			child, err := tt.build(p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			name := child.Definition().Name
			p.Add(fake.Call(name, tt.args).For("lead"), fake.Text("done").For("lead"))
			lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(child), agent.WithSystemPrompt("You lead."))
			if err != nil {
				t.Fatal(err)
			}
			history := []provider.Message{provider.UserMessage("the sites' findings"), provider.AssistantMessage("read")}
			if _, err := lead.Run(t.Context(), agent.Input{Messages: history, Text: "check the sites"}); err != nil {
				t.Fatal(err)
			}
			parent, got := p.RequestsFor("lead")[0], p.RequestsFor("expert")
			if len(got) != 1 {
				t.Fatalf("%d requests of the child, want 1", len(got))
			}
			r := got[0]
			if !tt.forked {
				if r.SharedPrefix != 0 || r.System != "You check sites." || len(r.Messages) != 1 {
					t.Fatalf("a child without WithContextForks sent system %q, %d messages (%d shared): want a fresh one", r.System, len(r.Messages), r.SharedPrefix)
				}
				return
			}
			n := len(parent.Messages)
			if r.System != parent.System || !reflect.DeepEqual(r.Tools, parent.Tools) || r.CacheKey != parent.CacheKey || r.SharedPrefix != n ||
				len(r.Messages) != n+1 || !reflect.DeepEqual(r.Messages[:n], parent.Messages) {
				t.Fatalf("the child sent system %q, %d tools, key %q, %d messages (%d shared): want the lead's request (%d messages) and its task",
					r.System, len(r.Tools), r.CacheKey, len(r.Messages), r.SharedPrefix, n)
			}
			if got := r.Messages[n].Content; !strings.HasPrefix(got, tt.wantTask) {
				t.Errorf("the child's task is %q, want %q", got, tt.wantTask)
			}
		})
	}
}

// A resident expert keeps a conversation of its own, which a context fork
// would have to replace: FromAgent and FromScoped refuse the option, and
// say which forms take it.
func TestContextForksRefusedByResidents(t *testing.T) {
	p := fake.NewProvider()
	a, err := agent.NewReact(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = subagent.FromAgent("expert", "Knows.", a, subagent.WithContextForks())
	if err == nil || !strings.Contains(err.Error(), "WithContextForks") || !strings.Contains(err.Error(), "FromAgent would ignore it") || !strings.Contains(err.Error(), "FromFactory or FromReact") {
		t.Errorf("FromAgent with WithContextForks: %v; want a refusal naming the option and the forms that take it", err)
	}
}
