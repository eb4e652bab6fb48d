package subagent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/tool"
)

// A validating tool tells its child the answer's shape on the first try, in
// every form: in words (the first question, or the system prompt of a child
// the tool builds) and as the request's ResponseSchema, so that a model
// that answers in that shape is asked once.
func TestShapeOnFirstTry(t *testing.T) {
	countSchema := `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`
	options := []struct {
		name   string
		opt    Option
		answer string
	}{
		{"WithReport", WithReport(), `{"status":"success","summary":"ok"}`},
		{"WithOutputSchema", WithOutputSchema(json.RawMessage(countSchema)), `{"n":3}`},
		{"OutputOf", OutputOf[count](), `{"n":3}`},
	}
	for _, f := range forms {
		for _, o := range options {
			t.Run(f.name+"/"+o.name, func(t *testing.T) {
				p := fake.NewProvider(fake.Text(o.answer).For("child"))
				sub := f.build(t, p, nil, o.opt)
				if _, err := callTool(t.Context(), sub, "call_1", `{"task":"Count the files."}`); err != nil {
					t.Fatal(err)
				}
				reqs := p.RequestsFor("child")
				if len(reqs) != 1 {
					t.Fatalf("the child's model was called %d times, want 1: a conforming first answer needs no retry", len(reqs))
				}
				var c config
				if err := o.opt(&c); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(string(c.check.schema.Raw()), string(reqs[0].ResponseSchema)); diff != "" {
					t.Errorf("first request's ResponseSchema (-want +got):\n%s", diff)
				}
				told := reqs[0].System + "\n" + reqs[0].Messages[0].Content
				if n := strings.Count(told, c.check.prompt); n != 1 {
					t.Errorf("the shape is told %d times in the first request, want once:\nsystem: %s\nquestion: %s",
						n, reqs[0].System, reqs[0].Messages[0].Content)
				}
			})
		}
	}
}

// Every model call of a validated child carries the schema, the one after a
// tool call and the corrective retry too.
func TestShapeOnEveryCall(t *testing.T) {
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider(
				fake.Call("noop", `{}`).For("child"),
				fake.Text("no JSON here").For("child"),
				fake.Text(`{"status":"success","summary":"ok"}`).For("child"),
			)
			sub := f.build(t, p, noopTools(t), WithReport())
			if _, err := callTool(t.Context(), sub, "call_1", `{"task":"go"}`); err != nil {
				t.Fatal(err)
			}
			reqs := p.RequestsFor("child")
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			for i, r := range reqs {
				if string(r.ResponseSchema) != ReportSchema {
					t.Errorf("request %d has ResponseSchema %s, want ReportSchema", i+1, r.ResponseSchema)
				}
			}
		})
	}
}

// A FromReact child's system prompt is the one given with WithReactOptions,
// then the model's own system_prompt, then the shape: none is dropped.
func TestFromReactSystemPromptKeepsEveryPart(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		args string
		want string
	}{
		{"all three", []Option{WithReport(), WithReactOptions(agent.WithSystemPrompt("You are careful."))},
			`{"system_prompt":"You review code.","task":"go"}`, "You are careful.\n\nYou review code.\n\n" + ReportPrompt()},
		{"configured and shape", []Option{WithReactOptions(agent.WithSystemPrompt("You are careful.")), WithReport()},
			`{"task":"go"}`, "You are careful.\n\n" + ReportPrompt()},
		{"configured and the model's", []Option{WithReactOptions(agent.WithSystemPrompt("You are careful."))},
			`{"system_prompt":"You review code.","task":"go"}`, "You are careful.\n\nYou review code."},
		{"the model's only", nil, `{"system_prompt":"You review code.","task":"go"}`, "You review code."},
		{"none", nil, `{"task":"go"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(`{"status":"success","summary":"ok"}`).For("child"))
			sub := must(FromReact("child", "d", p, nil, tt.opts...))(t)
			if _, err := callTool(t.Context(), sub, "call_1", tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.RequestsFor("child")[0].System); diff != "" {
				t.Errorf("system prompt (-want +got):\n%s", diff)
			}
		})
	}
}

// A bad option given with WithReactOptions is reported when the tool is
// built, not on each call.
func TestFromReactBadReactOption(t *testing.T) {
	p := fake.NewProvider()
	if _, err := FromReact("child", "d", p, nil, WithReactOptions(agent.WithMaxSteps(0))); err == nil || !strings.Contains(err.Error(), "max steps") {
		t.Errorf("error = %v, want one about max steps", err)
	}
}

// noopTools is a registry with one tool, noop, that answers "ok".
func noopTools(t *testing.T) *tool.Registry {
	t.Helper()
	type none struct{}
	noop := must(tool.New("noop", "Does nothing.", func(context.Context, none) (string, error) { return "ok", nil }))(t)
	return must(tool.NewRegistry(noop))(t)
}
