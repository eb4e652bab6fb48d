package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/subagent"
)

// What a child answers, or the error it fails with, reaches the event
// sink (SUBAGENT_FINISHED, SUBAGENT_ERROR) as the tree's policy leaves it
// for the model that reads it: a secret redacted from the answer is
// redacted in the event too.
func TestPolicyRedactsChildAnswerInEvents(t *testing.T) {
	const key = "sk-live-7777"
	for _, fails := range []bool{false, true} {
		name := "answer"
		if fails {
			name = "error"
		}
		t.Run(name, func(t *testing.T) {
			vault := agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
				if fails {
					return agent.Output{}, errors.New("the vault refused the key " + key)
				}
				return agent.Output{Answer: "the key is " + key}, nil
			})
			child, err := subagent.FromAgent("vault", "Reads the vault.", vault)
			if err != nil {
				t.Fatal(err)
			}
			pol, err := policy.New(policy.Redact("secrets", []string{key}))
			if err != nil {
				t.Fatal(err)
			}
			model := fake.NewProvider(fake.Call("vault", `{"task":"read the key"}`), fake.Text("done"))
			lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(child), agent.WithPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var events []event.Event
			ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}))
			if _, err := lead.Run(ctx, agent.Input{Text: "what is the key?"}); err != nil {
				t.Fatal(err)
			}
			for _, r := range model.Requests() {
				for _, m := range r.Messages {
					if strings.Contains(m.Content, key) {
						t.Errorf("the lead's model read the key: %q", m.Content)
					}
				}
			}
			seen := false
			for _, e := range events {
				if e.Type != event.SubagentFinished && e.Type != event.SubagentError {
					continue
				}
				seen = true
				if b, _ := json.Marshal(e); strings.Contains(string(b), key) {
					t.Errorf("a %s event holds the key: %s", e.Type, b)
				}
			}
			if !seen {
				t.Error("no SUBAGENT_FINISHED or SUBAGENT_ERROR event: the test checks nothing")
			}
		})
	}
}
