package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// The model defines the child: the system prompt is the arguments'
// system_prompt (empty when missing), the input is the task text (not the
// JSON).
func TestFromReactDefinesChild(t *testing.T) {
	permissive := json.RawMessage(`{"type":"object"}`)
	tests := []struct {
		name       string
		params     json.RawMessage
		opts       []Option
		args       string
		wantSystem string
		wantTask   string
	}{
		{"both fields", nil, nil, `{"system_prompt":"You are terse.","task":"Sum 2 and 2."}`, "You are terse.", "Sum 2 and 2."},
		{"no system prompt", nil, nil, `{"task":"Sum 2 and 2."}`, "", "Sum 2 and 2."},
		{"one wrong type", permissive, nil, `{"system_prompt":true,"task":"Sum."}`, "", "Sum."},
		{"extra fields of a custom schema", json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"},"lang":{"type":"string"}}}`),
			nil, `{"task":"Sum.","lang":"fr"}`, "", "Sum."},
		{"WithReport adds the result prompt", nil, []Option{WithReport()}, `{"system_prompt":"You are terse.","task":"Sum."}`,
			"You are terse.\n\n" + ReportPrompt(), "Sum."},
		{"WithReport alone", nil, []Option{WithReport()}, `{"task":"Sum."}`, ReportPrompt(), "Sum."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(`{"status":"success","summary":"4"}`).For("child"))
			opts := tt.opts
			if tt.params != nil {
				opts = append(opts, WithParams(tt.params))
			}
			sub := must(FromReact("child", "Runs a sub-agent.", p, nil, opts...))(t)
			if _, err := callTool(context.Background(), sub, "call_1", tt.args); err != nil {
				t.Fatal(err)
			}
			reqs := p.RequestsFor("child")
			if len(reqs) != 1 {
				t.Fatalf("%d child requests, want 1", len(reqs))
			}
			if reqs[0].System != tt.wantSystem {
				t.Errorf("system prompt = %q, want %q", reqs[0].System, tt.wantSystem)
			}
			want := []provider.Message{provider.UserMessage(tt.wantTask)}
			if diff := cmp.Diff(want, reqs[0].Messages); diff != "" {
				t.Errorf("child's messages (-want +got):\n%s", diff)
			}
		})
	}
}

// Nil params means ReactParams, whose properties are system_prompt and
// task, both strings.
func TestFromReactDefaultParams(t *testing.T) {
	sub := must(FromReact("child", "Runs a sub-agent.", fake.NewProvider(), nil))(t)
	var schema struct {
		Type       string                           `json:"type"`
		Properties map[string]struct{ Type string } `json:"properties"`
	}
	if err := json.Unmarshal(sub.Definition().Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for name, p := range schema.Properties {
		if p.Type != "string" {
			t.Errorf("property %s has type %q, want string", name, p.Type)
		}
		fields = append(fields, name)
	}
	slices.Sort(fields)
	if schema.Type != "object" || !slices.Equal(fields, []string{"system_prompt", "task"}) {
		t.Errorf("default params = %s, want an object with system_prompt and task", sub.Definition().Parameters)
	}
}

// Every call shares the provider and the tool registry; the children
// are configured with WithReactOptions.
func TestFromReactSharesToolsAndOptions(t *testing.T) {
	var calls int
	clock := tool.Must(tool.New("clock", "Tells the time.", func(context.Context, struct{}) (string, error) {
		calls++
		return "12:00", nil
	}))
	tools := must(tool.NewRegistry(clock))(t)
	p := fake.NewProvider(
		fake.Call("clock", `{}`).For("child"), fake.Text("It is noon.").For("child"),
		fake.Call("clock", `{}`).For("child"), fake.Text("Still noon.").For("child"),
		fake.Call("clock", `{}`).For("child"), fake.Call("clock", `{}`).For("child"),
	)
	sub := must(FromReact("child", "Runs a sub-agent.", p, tools, WithReactOptions(agent.WithMaxSteps(2), agent.WithModel("small"))))(t)
	for _, want := range []string{"It is noon.", "Still noon."} {
		res, err := callTool(context.Background(), sub, "call", `{"task":"time?"}`)
		if err != nil || res.Content != want {
			t.Errorf("call = (%q, %v), want %q", res.Content, err, want)
		}
	}
	if calls != 2 {
		t.Errorf("the shared tool ran %d times, want 2", calls)
	}
	for _, r := range p.RequestsFor("child") {
		if r.Model != "small" || len(r.Tools) != 1 || r.Tools[0].Name != "clock" {
			t.Errorf("child's request has model %q and tools %v, want small and [clock]", r.Model, r.Tools)
		}
	}
	// The third child meets WithMaxSteps(2).
	_, err := callTool(context.Background(), sub, "call", `{"task":"loop"}`)
	if !errors.Is(err, agent.ErrMaxSteps) {
		t.Errorf("third call's error = %v, want one wrapping agent.ErrMaxSteps", err)
	}
}

// FromReact rejects a nil provider.
func TestFromReactNilProvider(t *testing.T) {
	if _, err := FromReact("child", "x", nil, nil); err == nil {
		t.Error("FromReact(nil provider) did not fail")
	}
}

// A FromReact call without a usable task never reaches the child's model
// (an empty user message is refused by model APIs): the calling model is
// told to pass the task, as an invalid-arguments error it can correct. The
// default schema requires the task; a custom schema that does not is
// covered by the same check.
func TestFromReactWithoutTask(t *testing.T) {
	permissive := json.RawMessage(`{"type":"object"}`)
	tests := []struct {
		name   string
		params json.RawMessage
		args   string
		want   string
	}{
		{"no task", nil, `{"system_prompt":"You are terse."}`, "task"},
		{"no arguments at all", nil, ``, ""},
		{"empty object", nil, `{}`, "task"},
		{"empty task", nil, `{"task":""}`, `"task" is missing or empty`},
		{"blank task", nil, `{"task":" \n\t"}`, `"task" is missing or empty`},
		{"no task under a permissive schema", permissive, `{"system_prompt":"x"}`, `"task" is missing or empty`},
		{"task of the wrong type under a permissive schema", permissive, `{"task":["a"]}`, `"task" is missing or empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("should not be asked").For("child"))
			sub := must(FromReact("child", "Runs a sub-agent.", p, nil, WithParams(tt.params)))(t)
			_, err := callTool(context.Background(), sub, "call_1", tt.args)
			if !errors.Is(err, tool.ErrInvalidArguments) {
				t.Fatalf("error = %v, want one wrapping tool.ErrInvalidArguments", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if n := p.Calls(); n != 0 {
				t.Errorf("the child's model was called %d times", n)
			}
		})
	}
}

// The default schema of FromReact tells the model the task is required.
func TestFromReactParamsRequireTask(t *testing.T) {
	var schema struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal([]byte(ReactParams), &schema); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(schema.Required, []string{"task"}) {
		t.Errorf("ReactParams requires %v, want [task]", schema.Required)
	}
}
