package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// FromAgent and FromFactory hand the child the arguments' JSON text, or
// what WithInputFromArgs maps them to; the child's answer is the result as it is.
func TestChildInputAndAnswer(t *testing.T) {
	question := func(args json.RawMessage) (agent.Input, error) {
		var a struct{ Task string }
		if err := json.Unmarshal(args, &a); err != nil {
			return agent.Input{}, err
		}
		return agent.Input{Text: "Question: " + a.Task, Messages: []provider.Message{provider.UserMessage("Context: none.")}}, nil
	}
	tests := []struct {
		name      string
		opts      []Option
		args      string
		answer    string
		wantInput []provider.Message
	}{
		{"the task's text by default", nil, ` {"task": "Say \"hi\"."} `, "hi",
			[]provider.Message{provider.UserMessage(`Say "hi".`)}},
		{"JSON text with parameters of its own", []Option{WithParams(json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`))}, ` {"q": "Say \"hi\"."} `, "hi",
			[]provider.Message{provider.UserMessage(` {"q": "Say \"hi\"."} `)}},
		{"WithInputFromArgs", []Option{WithInputFromArgs(question)}, `{"task":"Why?"}`, "Because.",
			[]provider.Message{provider.UserMessage("Context: none."), provider.UserMessage("Question: Why?")}},
		{"answer with quotes and lines", nil, `{"task":"x"}`, "He said \"hi\".\n\tThen: {\"a\": 1}", nil},
		{"answer that is a JSON string", nil, `{"task":"x"}`, `"quoted"`, nil},
		{"answer that is JSON", nil, `{"task":"x"}`, `{"n": 1}`, nil},
	}
	for _, f := range forms[:2] {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				p := fake.NewProvider(fake.Text(tt.answer).For("child"))
				sub := f.build(t, p, nil, tt.opts...)
				res, err := callTool(context.Background(), sub, "call_1", tt.args)
				if err != nil {
					t.Fatal(err)
				}
				if res.Content != tt.answer || res.IsError {
					t.Errorf("result = %+v, want the answer %q as it is", res, tt.answer)
				}
				if tt.wantInput != nil {
					if diff := cmp.Diff(tt.wantInput, p.RequestsFor("child")[0].Messages); diff != "" {
						t.Errorf("child's input (-want +got):\n%s", diff)
					}
				}
			})
		}
	}
}

// An error from WithInputFromArgs reaches the model as invalid arguments, and
// the child does not run.
func TestWithInputError(t *testing.T) {
	errNoTask := errors.New("task is blank: say what to do")
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider()
			sub := f.build(t, p, nil, WithInputFromArgs(func(json.RawMessage) (agent.Input, error) { return agent.Input{}, errNoTask }))
			_, err := callTool(context.Background(), sub, "call_1", `{"task":" "}`)
			if !errors.Is(err, tool.ErrInvalidArguments) || !tool.IsCorrectable(err) {
				t.Errorf("error = %v, want invalid arguments", err)
			}
			if p.Calls() != 0 {
				t.Errorf("the child ran")
			}
		})
	}
	if _, err := FromAgent("x", "x", agent.Func(nil), WithInputFromArgs(nil)); err == nil {
		t.Error("WithInputFromArgs(nil) accepted")
	}
}

// WithRender renders the result from the child's whole Outcome, which is
// where a Go caller captures the inner Output.
func TestWithRenderCapturesOutput(t *testing.T) {
	for _, f := range forms {
		for _, validated := range []bool{false, true} {
			name := f.name
			if validated {
				name += "/WithReport"
			}
			t.Run(name, func(t *testing.T) {
				u := provider.Usage{InputTokens: 7, OutputTokens: 3, Requests: 1}
				answer := `{"status":"success","summary":"2 files"}`
				p := fake.NewProvider(fake.Text(answer).For("child").WithUsage(u))
				var got Outcome
				opts := []Option{WithRender(func(_ context.Context, o Outcome) (string, error) {
					got = o
					return "rendered: " + o.Output.Answer, nil
				})}
				if validated {
					opts = append(opts, WithReport())
				}
				sub := f.build(t, p, nil, opts...)
				res, err := callTool(context.Background(), sub, "call_1", `{"task":"count"}`)
				if err != nil {
					t.Fatal(err)
				}
				if res.Content != "rendered: "+answer {
					t.Errorf("content = %q, want the rendered text", res.Content)
				}
				if got.Output.Answer != answer || got.Output.RunID == "" || got.Usage != u || got.Output.Usage != u {
					t.Errorf("captured outcome = %+v", got)
				}
				wantMsgs := []provider.Message{p.RequestsFor("child")[0].Messages[0], provider.AssistantMessage(answer)}
				if diff := cmp.Diff(wantMsgs, got.Output.Messages); diff != "" {
					t.Errorf("captured messages (-want +got):\n%s", diff)
				}
				var wantValue any
				if validated {
					wantValue = Report{Status: ReportSuccess, Summary: "2 files"}
				}
				if diff := cmp.Diff(wantValue, got.Value); diff != "" {
					t.Errorf("captured value (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(wantValue, res.Value); diff != "" {
					t.Errorf("result value (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A failing render is the program's error, and a resident's
// conversation is left as it was.
func TestWithRenderError(t *testing.T) {
	errTemplate := errors.New("template broken")
	p := fake.NewProvider(fake.Text("answer").For("child"))
	child := newReact(t, p, agent.WithName("child"))
	sub := must(FromAgent("child", "x", child, WithRender(func(context.Context, Outcome) (string, error) { return "", errTemplate })))(t)
	_, err := callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
	if !errors.Is(err, errTemplate) || tool.IsCorrectable(err) {
		t.Errorf("error = %v, want the render's, not correctable", err)
	}
	if h := child.History(); len(h) != 0 {
		t.Errorf("history after a failed call = %v, want empty", h)
	}
	if _, err := FromAgent("x", "x", child, WithRender(nil)); err == nil {
		t.Error("WithRender(nil) accepted")
	}
}
