package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	invopop "github.com/invopop/jsonschema"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/provider"
)

type review struct {
	Verdict string   `json:"verdict" jsonschema:"enum=ship,enum=hold"`
	Notes   []string `json:"notes"`
}

// An agent built with OutputOf hands its caller a typed answer: the
// schema goes to the provider, an answer in prose or a fence is found and
// checked, one that does not fit is sent back once with what is wrong,
// and a second misfit fails the run with the answer and the usage kept.
func TestOutputOfGivesTheCallerATypedAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replies  []string
		want     *review
		requests int
	}{
		{"fits", []string{`{"verdict":"ship","notes":["tests pass"]}`}, &review{"ship", []string{"tests pass"}}, 1},
		{"in a fence", []string{"Here it is:\n```json\n{\"verdict\":\"hold\",\"notes\":[]}\n```"}, &review{"hold", []string{}}, 1},
		{"corrected", []string{`{"verdict":"maybe"}`, `{"verdict":"hold","notes":["flaky test"]}`}, &review{"hold", []string{"flaky test"}}, 2},
		{"never fits", []string{`no JSON here`, `{"verdict":1}`}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var replies []fake.Reply
			for _, r := range tc.replies {
				replies = append(replies, fake.Text(r).For("reviewer").WithUsage(provider.Usage{InputTokens: 10, OutputTokens: 3, Requests: 1}))
			}
			p := fake.NewProvider(replies...)
			a := newReact(t, p, agent.WithName("reviewer"), agent.OutputOf[review]())
			out, err := a.Run(context.Background(), agent.Input{Text: "Review the change."})
			if out.Usage.Requests != int64(tc.requests) {
				t.Errorf("usage %+v, want %d requests", out.Usage, tc.requests)
			}
			reqs := p.Requests()
			if len(reqs) == 0 || !strings.Contains(string(reqs[0].ResponseSchema), `"verdict"`) {
				t.Errorf("the provider was not sent the type's schema")
			}
			if tc.want == nil {
				if !errors.Is(err, agent.ErrInvalidOutput) || errcode.Of(err) != "invalid_output" || out.Answer != tc.replies[1] || out.Value != nil {
					t.Fatalf("%v (answer %q, value %v), want ErrInvalidOutput with the last answer kept", err, out.Answer, out.Value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := out.Value.(review)
			if !ok || got.Verdict != tc.want.Verdict || len(got.Notes) != len(tc.want.Notes) {
				t.Fatalf("Value %#v, want %+v", out.Value, *tc.want)
			}
			if tc.requests == 2 {
				last := reqs[1].Messages[len(reqs[1].Messages)-1]
				if last.Role != provider.RoleUser || !strings.Contains(last.Content, "verdict") {
					t.Errorf("the correction %q does not say what is wrong", last.Content)
				}
			}
		})
	}
}

// Without OutputOf the Value stays nil, and the answer is not checked.
func TestWithoutOutputOfTheAnswerIsText(t *testing.T) {
	a := newReact(t, fake.NewProvider(fake.Text("just words")), agent.WithName("a"))
	out, err := a.Run(context.Background(), agent.Input{Text: "hi"})
	if err != nil || out.Value != nil || out.Answer != "just words" {
		t.Fatalf("%q %v %v", out.Answer, out.Value, err)
	}
}

// openReview gives its own schema, which leaves other keys open.
type openReview struct {
	Verdict string `json:"verdict"`
}

func (openReview) JSONSchema() *invopop.Schema {
	return &invopop.Schema{Type: "object", Required: []string{"verdict"}}
}

// An answer that passes its schema but holds a key encoding/json would
// read into a field by ignoring case is sent back with the key to write,
// and the corrected answer is the value.
func TestOutputOfRefusesAKeyInAnotherCase(t *testing.T) {
	p := fake.NewProvider(
		fake.Text(`{"verdict":"hold","VERDICT":"ship"}`).For("reviewer"),
		fake.Text(`{"verdict":"hold"}`).For("reviewer"))
	a := newReact(t, p, agent.WithName("reviewer"), agent.OutputOf[openReview]())
	out, err := a.Run(context.Background(), agent.Input{Text: "Review the change."})
	if err != nil {
		t.Fatal(err)
	}
	if out.Value != (openReview{Verdict: "hold"}) {
		t.Fatalf("Value %#v, want the corrected answer", out.Value)
	}
	reqs := p.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1].Content; !strings.Contains(last, `the key "VERDICT" is read as "verdict" only because case is ignored: spell it "verdict"`) {
		t.Errorf("the correction says %q", last)
	}
}
