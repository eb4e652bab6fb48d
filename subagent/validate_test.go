package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/jsonextract"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// The answer's JSON is found tolerantly.
func TestExtractJSON(t *testing.T) {
	tests := []struct {
		name, answer string
		want         string // "" means none found
	}{
		{"bare object", `{"a":1}`, `{"a":1}`},
		{"bare with blanks", " \n{\"a\": 1}\n\t", `{"a": 1}`},
		{"bare array", `[1, {"a":2}]`, `[1, {"a":2}]`},
		{"bare string", `"yes"`, `"yes"`},
		{"bare number", `42`, `42`},
		{"fenced json", "Here it is:\n```json\n{\"a\":1}\n```\nDone.", `{"a":1}`},
		{"fenced JSON upper case", "```JSON\n{\"a\":1}\n```", `{"a":1}`},
		{"fenced plain", "Result:\n```\n{\"a\":1}\n```", `{"a":1}`},
		{"fenced on one line", "```{\"a\":1}```", `{"a":1}`},
		{"fenced array", "```json\n[1,2]\n```", `[1,2]`},
		{"last of two fences", "```json\n{\"a\":1}\n```\nor rather\n```json\n{\"a\":2}\n```", `{"a":2}`},
		{"last valid fence", "```json\n{\"a\":1}\n```\n```json\n{oops}\n```", `{"a":1}`},
		{"invalid fence, object in prose", "```json\n{oops}\n```\nFinal: {\"a\":2}", `{"a":2}`},
		{"object in prose", `The result is {"status":"success","summary":"ok"}. Bye.`, `{"status":"success","summary":"ok"}`},
		{"last object in prose", `First {"a":1}, then {"b":2}.`, `{"b":2}`},
		{"stray braces", `Use {braces} like }this{. Answer: {"a":1}`, `{"a":1}`},
		{"stray quote in prose", `He said "don't {worry}. Result: {"ok":true}`, `{"ok":true}`},
		{"stray quote in a stray brace", `{he said "hi} then {"a":1}`, `{"a":1}`},
		{"unclosed brace after the object", `{"a":1} and then {"b":`, `{"a":1}`},
		{"many stray braces", strings.Repeat("{ ", 40) + `answer: {"a":1}`, `{"a":1}`},
		{"a megabyte of braces", strings.Repeat("{", 1<<20), ""},
		{"a megabyte of braces, then an object", strings.Repeat("{", 1<<20) + `{"a":1}`, ""},
		{"nested objects", `Result: {"a":{"b":[1,{"c":2}]}} end`, `{"a":{"b":[1,{"c":2}]}}`},
		{"braces inside strings", `Result: {"a":"}{"} end`, `{"a":"}{"}`},
		{"escaped quotes", `Result: {"a":"say \"}\""} end`, `{"a":"say \"}\""}`},
		{"nothing", "I could not find anything.", ""},
		{"empty", "", ""},
		{"blank", " \n\t", ""},
		{"object-like prose", "{not json}", ""},
		{"unclosed object", `{"a":1`, ""},
		{"array in prose is not taken", "The list: [1, 2]", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := findJSON(tt.answer)
			if ok != (tt.want != "") || string(got) != tt.want {
				t.Errorf("findJSON(%q) = (%s, %v), want (%s, %v)", tt.answer, got, ok, tt.want, tt.want != "")
			}
		})
	}
}

// jsonextract.Find never panics, and what it finds is valid JSON taken from
// the answer.
func FuzzExtractJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, "```json\n{\"a\":1}\n```", `x {"a":"}"} y {`, `"{`, "```\n```", `{"a":{"b":{}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		raw, ok := findJSON(answer)
		if !ok {
			if raw != nil {
				t.Errorf("not found, but returned %q", raw)
			}
			return
		}
		if !json.Valid(raw) {
			t.Errorf("findJSON(%q) = %q, not valid JSON", answer, raw)
		}
		if !strings.Contains(answer, string(raw)) {
			t.Errorf("findJSON(%q) = %q, not a part of the answer", answer, raw)
		}
	})
}

// ReportSchema under the real validator: findings may be null.
func TestReportSchema(t *testing.T) {
	s := must(jsonschema.Compile(json.RawMessage(ReportSchema)))(t)
	tests := []struct {
		doc   string
		valid bool
	}{
		{`{"status":"success","summary":"ok"}`, true},
		{`{"status":"partial","summary":"half","findings":null}`, true},
		{`{"status":"failed","summary":"no","findings":{"why":"denied"}}`, true},
		{`{"status":"success","summary":"ok","findings":[1]}`, false},
		{`{"status":"done","summary":"ok"}`, false},
		{`{"status":"success"}`, false},
		{`{"summary":"ok"}`, false},
		{`{"status":"success","summary":"ok","extra":1}`, false},
		{`{"status":"success","summary":null}`, false},
		{`null`, false},
	}
	for _, tt := range tests {
		if err := s.Validate([]byte(tt.doc)); (err == nil) != tt.valid {
			t.Errorf("Validate(%s) = %v, want valid %v", tt.doc, err, tt.valid)
		}
	}
	prompt := ReportPrompt()
	for _, want := range []string{ReportSchema, `"success"`, `"partial"`, `"failed"`} {
		if !strings.Contains(prompt, want) {
			t.Errorf("ReportPrompt() does not mention %s", want)
		}
	}
}

type count struct {
	N int `json:"n"`
}

// One validator wraps the three forms: one corrective retry carrying the
// validator's message, then the schema's own way of failing.
func TestAnswerValidation(t *testing.T) {
	countSchema := WithOutputSchema(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`))
	failed := func(raw string) (string, Report) {
		r := Report{Status: ReportFailed, Summary: raw}
		b, _ := json.Marshal(r)
		return string(b), r
	}
	extra := `{"status":"success","summary":"ok","extra":1}`
	extraContent, extraValue := failed(extra)
	tests := []struct {
		name         string
		opt          Option
		answers      []string
		wantContent  string
		wantValue    any
		wantErr      error
		wantRetryHas string // in the corrective message
	}{
		{"valid at once", WithReport(), []string{`{"status":"success","summary":"ok"}`},
			`{"status":"success","summary":"ok"}`, Report{Status: ReportSuccess, Summary: "ok"}, nil, ""},
		{"fenced in prose", WithReport(), []string{"Done.\n```json\n{\"status\":\"partial\",\"summary\":\"half\"}\n```"},
			`{"status":"partial","summary":"half"}`, Report{Status: ReportPartial, Summary: "half"}, nil, ""},
		{"null findings", WithReport(), []string{`{"status":"success","summary":"ok","findings":null}`},
			`{"status":"success","summary":"ok","findings":null}`, Report{Status: ReportSuccess, Summary: "ok"}, nil, ""},
		{"findings", WithReport(), []string{`{"status":"success","summary":"ok","findings":{"n":2}}`},
			`{"status":"success","summary":"ok","findings":{"n":2}}`, Report{Status: ReportSuccess, Summary: "ok", Findings: map[string]any{"n": 2.0}}, nil, ""},
		{"findings with nested numbers", WithReport(), []string{`{"status":"success","summary":"ok","findings":{"xs":[1,[2.5]],"m":{"n":-3e2}}}`},
			`{"status":"success","summary":"ok","findings":{"xs":[1,[2.5]],"m":{"n":-3e2}}}`,
			Report{Status: ReportSuccess, Summary: "ok", Findings: map[string]any{"xs": []any{1.0, []any{2.5}}, "m": map[string]any{"n": -300.0}}}, nil, ""},
		{"findings out of float64's range", WithReport(), []string{`{"status":"success","summary":"ok","findings":{"n":1e400}}`, `{"status":"success","summary":"ok"}`},
			`{"status":"success","summary":"ok"}`, Report{Status: ReportSuccess, Summary: "ok"}, nil, "1e400"},
		{"corrected on retry", WithReport(), []string{`{"status":"done"}`, `{"status":"success","summary":"fixed"}`},
			`{"status":"success","summary":"fixed"}`, Report{Status: ReportSuccess, Summary: "fixed"}, nil, "summary"},
		{"extra keys twice", WithReport(), []string{extra, extra}, extraContent, extraValue, nil, "extra"},
		{"no JSON twice", WithReport(), []string{"I could not.", "Still could not."}, "", nil, ErrNoJSON, "no JSON"},
		{"no JSON, then JSON", WithReport(), []string{"I could not.", `{"status":"failed","summary":"no access"}`},
			`{"status":"failed","summary":"no access"}`, Report{Status: ReportFailed, Summary: "no access"}, nil, "no JSON"},
		{"custom schema, extra keys accepted", countSchema, []string{`{"n":3,"extra":true}`},
			`{"n":3,"extra":true}`, map[string]any{"n": 3.0, "extra": true}, nil, ""},
		{"custom schema, invalid twice", countSchema, []string{`{"n":"three"}`, `{"n":"3"}`},
			"{\"n\":\"3\"}\n\n[validation failed: at /n: got string, want integer]", nil, nil, "/n"},
		{"custom schema, no JSON twice", countSchema, []string{"three", "3 items"},
			"3 items\n\n[validation failed: the answer holds no JSON value]", nil, nil, "no JSON"},
		{"OutputOf", OutputOf[count](), []string{"```json\n{\"n\":3}\n```"}, `{"n":3}`, count{N: 3}, nil, ""},
		{"OutputOf, corrected", OutputOf[count](), []string{`{"m":3}`, `{"n":4}`}, `{"n":4}`, count{N: 4}, nil, "n"},
	}
	for _, f := range forms {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				var replies []fake.Reply
				for _, a := range tt.answers {
					replies = append(replies, fake.Text(a).For("child"))
				}
				p := fake.NewProvider(replies...)
				sub := f.build(t, p, nil, tt.opt)
				const args = `{"task":"Count the files."}`
				res, err := callTool(context.Background(), sub, "call_1", args)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) || !tool.IsCorrectable(err) {
						t.Errorf("error = %v, want a correctable %v", err, tt.wantErr)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if res.Content != tt.wantContent {
					t.Errorf("content = %q, want %q", res.Content, tt.wantContent)
				}
				if diff := cmp.Diff(tt.wantValue, res.Value); diff != "" {
					t.Errorf("value (-want +got):\n%s", diff)
				}
				reqs := p.RequestsFor("child")
				if len(reqs) != len(tt.answers) {
					t.Fatalf("the child's model was called %d times, want %d", len(reqs), len(tt.answers))
				}
				if len(reqs) < 2 {
					return
				}
				retry := reqs[1].Messages
				correction := retry[len(retry)-1]
				if correction.Role != provider.RoleUser || !strings.Contains(correction.Content, tt.wantRetryHas) {
					t.Errorf("corrective message %q does not carry the validator's message (%q)", correction.Content, tt.wantRetryHas)
				}
				if f.name == "FromAgent" {
					// The resident continues its conversation, whose first
					// question carried the shape.
					want := []provider.Message{provider.UserMessage("Count the files.\n\n" + promptOf(t, tt.opt)), provider.AssistantMessage(tt.answers[0]), correction}
					if diff := cmp.Diff(want, retry); diff != "" {
						t.Errorf("resident's retry (-want +got):\n%s", diff)
					}
					return
				}
				// A transient child is run again with the task, the error and
				// its rejected answer.
				task := "Count the files." // the task's text, in every form
				if len(retry) != 1 || !strings.HasPrefix(correction.Content, task) || !strings.HasSuffix(correction.Content, "\n"+tt.answers[0]) {
					t.Errorf("transient retry = %+v, want one message with the task, the error and the rejected answer", retry)
				}
			})
		}
	}
}

// promptOf is the shape prompt the validating option opt tells a child.
func promptOf(t *testing.T, opt Option) string {
	t.Helper()
	var c config
	if err := opt(&c); err != nil {
		t.Fatal(err)
	}
	return c.check.prompt
}

// Schemas are compiled when the tool is built, so a bad one fails there.
func TestSchemaCompiledAtBuild(t *testing.T) {
	expert := agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{}, nil })
	for _, schema := range []string{`{"type":"nope"}`, `not JSON`, `[]`, ``} {
		if _, err := FromAgent("x", "x", expert, WithOutputSchema(json.RawMessage(schema))); err == nil {
			t.Errorf("WithOutputSchema(%q) accepted", schema)
		}
	}
	if _, err := FromAgent("x", "x", expert, WithParams(json.RawMessage(`{"type":3}`))); err == nil {
		t.Error("a bad parameter schema was accepted")
	}
}

// findJSON is jsonextract.Find as the validation of an answer sees it.
func findJSON(answer string) (json.RawMessage, bool) {
	raw, ok := jsonextract.Find(answer)
	if !ok {
		return nil, false
	}
	return json.RawMessage(raw), true
}
