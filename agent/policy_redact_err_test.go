package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/tool"
)

// A tool's failure whose text holds a secret is redacted wherever it goes,
// not only in what the model reads: the span of the call, the result
// event, and the error of a run its failures end.
func TestRedactedToolErrorLeavesNoSecret(t *testing.T) {
	const secret = "sk-live-4242"
	rec, tp := newRecorder(t)
	vault := tool.Func{
		Def: tool.Definition{Name: "vault", Description: "Reads a key.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{}, tool.Correctable(fmt.Errorf("the key %s has expired", secret))
		},
	}
	pol, err := policy.New(policy.Redact("secrets", nil, regexp.MustCompile(`sk-live-[0-9]+`)))
	if err != nil {
		t.Fatal(err)
	}
	model := fake.NewProvider(fake.Call("vault", `{}`), fake.Call("vault", `{}`))
	a, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(vault), agent.WithPolicy(pol),
		agent.WithToolRetries(1), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var events []event.Event
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) { events = append(events, e) }))
	_, runErr := a.Run(ctx, agent.Input{Text: "read the key"})
	if runErr == nil {
		t.Fatal("the run did not fail: want it ended by its failed calls")
	}
	if strings.Contains(runErr.Error(), secret) {
		t.Errorf("the run's error holds the secret: %v", runErr)
	}
	if !errors.Is(runErr, agent.ErrToolRetries) {
		t.Errorf("the run's error is %v, want ErrToolRetries", runErr)
	}
	for _, r := range model.Requests() {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, secret) {
				t.Errorf("the model read the secret: %q", m.Content)
			}
		}
	}
	for _, e := range events {
		if b, _ := json.Marshal(e); strings.Contains(string(b), secret) {
			t.Errorf("a %s event holds the secret: %s", e.Type, b)
		}
	}
	spans := byName(rec.Ended(), "execute_tool vault")
	if len(spans) != 2 {
		t.Fatalf("%d spans of the tool's calls, want 2", len(spans))
	}
	for _, s := range spans {
		if strings.Contains(s.Status().Description, secret) {
			t.Errorf("the span's status holds the secret: %q", s.Status().Description)
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.String(), secret) {
					t.Errorf("the span's %s event holds the secret in %s: %q", ev.Name, kv.Key, kv.Value.String())
				}
			}
		}
	}
}

// A tool's error that ends the run, not one the model reads, is redacted
// as well wherever its text goes (the run's error, RUN_ERROR, the call's
// span), and still matches what it wraps.
func TestRedactedToolFailureLeavesNoSecret(t *testing.T) {
	const secret = "sk-live-2718"
	errVault := errors.New("the vault is sealed")
	rec, tp := newRecorder(t)
	vault := tool.Func{
		Def: tool.Definition{Name: "vault", Description: "Reads a key.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{}, fmt.Errorf("the key %s: %w", secret, errVault)
		},
	}
	pol, err := policy.New(policy.Redact("secrets", nil, regexp.MustCompile(`sk-live-[0-9]+`)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(fake.NewProvider(fake.Call("vault", `{}`)), agent.WithName("lead"), agent.WithTools(vault),
		agent.WithPolicy(pol), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var events []event.Event
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) { events = append(events, e) }))
	_, runErr := a.Run(ctx, agent.Input{Text: "read the key"})
	if !errors.Is(runErr, errVault) {
		t.Fatalf("the run's error is %v, want the tool's", runErr)
	}
	if strings.Contains(runErr.Error(), secret) || !strings.Contains(runErr.Error(), policy.Redacted) {
		t.Errorf("the run's error: %v: want the secret redacted", runErr)
	}
	for _, e := range events {
		if b, _ := json.Marshal(e); strings.Contains(string(b), secret) {
			t.Errorf("a %s event holds the secret: %s", e.Type, b)
		}
	}
	for _, s := range rec.Ended() {
		if strings.Contains(s.Status().Description, secret) {
			t.Errorf("the %s span's status holds the secret: %q", s.Name(), s.Status().Description)
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.String(), secret) {
					t.Errorf("the %s span's %s event holds the secret in %s", s.Name(), ev.Name, kv.Key)
				}
			}
		}
	}
}
