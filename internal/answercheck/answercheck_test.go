package answercheck

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deputy-go/deputy/jsonschema"
)

// verdictSchema asks for an object with a verdict of two values and a
// number of points: flat enough for the text check, and one the validator
// decides when a number is there.
const verdictSchema = `{"type":"object","properties":{"verdict":{"type":"string","enum":["ship","hold"]},"points":{"type":"integer"}},"required":["verdict"],"additionalProperties":false}`

func compile(t *testing.T, raw string, untrusted bool) *jsonschema.Schema {
	t.Helper()
	compileFn := jsonschema.Compile
	if untrusted {
		compileFn = jsonschema.CompileUntrusted
	}
	s, err := compileFn(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCheck: what Check decides of an answer — whether it holds JSON,
// which part is the JSON, whether that fits the schema, and what the
// caller gets — for each way an answer can come.
func TestCheck(t *testing.T) {
	s := compile(t, verdictSchema, false)
	refuseHold := func(raw string) (any, error) {
		if strings.Contains(raw, "hold") {
			return nil, errors.New("hold is not decodable here")
		}
		return DecodeAny(raw)
	}
	for _, c := range []struct {
		name    string
		answer  string
		decode  func(string) (any, error)
		raw     string // the JSON found
		found   bool
		value   any    // when it fits
		problem string // a part of the problem; "" when it fits
	}{
		{name: "nothing", answer: "", problem: "the answer holds no JSON value"},
		{name: "prose only", answer: "I think we should ship.", problem: "the answer holds no JSON value"},
		{name: "the whole answer", answer: ` {"verdict":"ship"} `, raw: `{"verdict":"ship"}`, found: true, value: map[string]any{"verdict": "ship"}},
		{name: "a number decodes as float64", answer: `{"verdict":"ship","points":3}`, raw: `{"verdict":"ship","points":3}`, found: true,
			value: map[string]any{"verdict": "ship", "points": float64(3)}},
		{name: "a fenced block", answer: "Here:\n```json\n{\"verdict\":\"ship\"}\n```\nDone.", raw: `{"verdict":"ship"}`, found: true, value: map[string]any{"verdict": "ship"}},
		{name: "the last object in prose", answer: `First {"verdict":"hold"} then {"verdict":"ship"} at last.`, raw: `{"verdict":"ship"}`, found: true,
			value: map[string]any{"verdict": "ship"}},
		{name: "a value outside the enum", answer: `{"verdict":"maybe"}`, raw: `{"verdict":"maybe"}`, found: true, problem: "at /verdict"},
		{name: "a required key missing", answer: `{"points":1}`, raw: `{"points":1}`, found: true, problem: "verdict"},
		{name: "a key the schema refuses", answer: `{"verdict":"ship","extra":true}`, raw: `{"verdict":"ship","extra":true}`, found: true, problem: "extra"},
		{name: "not an object", answer: `["ship"]`, raw: `["ship"]`, found: true, problem: "want object"},
		{name: "a repeated key", answer: `{"verdict":"hold","verdict":"ship"}`, raw: `{"verdict":"hold","verdict":"ship"}`, found: true,
			problem: `the key "verdict" appears more than once`},
		{name: "a fraction where an integer goes", answer: `{"verdict":"ship","points":1.5}`, raw: `{"verdict":"ship","points":1.5}`, found: true, problem: "at /points"},
		{name: "fits but does not decode", answer: `{"verdict":"hold"}`, decode: refuseHold, raw: `{"verdict":"hold"}`, found: true,
			problem: "hold is not decodable here"},
	} {
		t.Run(c.name, func(t *testing.T) {
			decode := c.decode
			if decode == nil {
				decode = DecodeAny
			}
			v, err := Check(context.Background(), s, decode, c.answer)
			if err != nil {
				t.Fatalf("Check failed: %v", err)
			}
			if v.Raw != c.raw || v.Found != c.found {
				t.Errorf("found %v %q, want %v %q", v.Found, v.Raw, c.found, c.raw)
			}
			if c.problem == "" {
				if v.Problem != nil {
					t.Fatalf("problem %v, want none", v.Problem)
				}
				if got, _ := json.Marshal(v.Value); !jsonEqual(t, got, c.value) {
					t.Errorf("value %#v, want %#v", v.Value, c.value)
				}
				if c.value != nil {
					if m, ok := v.Value.(map[string]any); ok {
						if p, ok := m["points"]; ok {
							if _, isFloat := p.(float64); !isFloat {
								t.Errorf("points decoded as %T, want float64", p)
							}
						}
					}
				}
				return
			}
			if v.Problem == nil || !strings.Contains(v.Problem.Error(), c.problem) {
				t.Fatalf("problem %v, want one saying %q", v.Problem, c.problem)
			}
			if v.Value != nil {
				t.Errorf("value %#v beside a problem", v.Value)
			}
		})
	}
}

func jsonEqual(t *testing.T, got []byte, want any) bool {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	return string(got) == string(w)
}

// TestCheckWhenTheContextEnds: a check that could not be made fails with
// the context's error and no verdict, while a verdict that needed no
// check (no JSON, a repeated key) is still given.
func TestCheckWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, untrusted := range []bool{false, true} {
		s := compile(t, verdictSchema, untrusted)
		v, err := Check(ctx, s, DecodeAny, `{"verdict":"ship"}`)
		if !errors.Is(err, context.Canceled) || v != (Verdict{}) {
			t.Errorf("untrusted %v: verdict %+v, error %v: want the context's error and no verdict", untrusted, v, err)
		}
		v, err = Check(ctx, s, DecodeAny, "no JSON here")
		if err != nil || v.Found || v.Problem == nil {
			t.Errorf("untrusted %v: verdict %+v, error %v: want no JSON found, and no error", untrusted, v, err)
		}
		v, err = Check(ctx, s, DecodeAny, `{"verdict":"ship","verdict":"ship"}`)
		if err != nil || !v.Found || v.Problem == nil || !strings.Contains(v.Problem.Error(), "more than once") {
			t.Errorf("untrusted %v: verdict %+v, error %v: want the repeated key refused, and no error", untrusted, v, err)
		}
	}
}

// TestCheckBoundsAModelsSchema: a schema the model wrote is checked within
// its work bound, and a check past it is a problem the child is told of,
// not an error of the caller's.
func TestCheckBoundsAModelsSchema(t *testing.T) {
	s := compile(t, `{"type":"array","items":{"anyOf":[{"type":"string","pattern":"^a"},{"type":"string","pattern":"b$"},{"type":"string","pattern":"c"},{"type":"string","pattern":"d"}]}}`, true)
	answer := "[" + strings.Repeat(`"abcd",`, jsonschema.MaxValidationWork/4) + `"abcd"]` // each element passes
	v, err := Check(context.Background(), s, DecodeAny, answer)
	if err != nil {
		t.Fatalf("Check failed: %v", err)
	}
	if !v.Found || v.Problem == nil || !strings.Contains(v.Problem.Error(), "steps: make the value smaller") || v.Value != nil {
		t.Fatalf("verdict found %v, problem %v, value %v: want the check refused as too much work", v.Found, v.Problem, v.Value != nil)
	}
	short := `["abcd","abcd"]`
	if v, err := Check(context.Background(), s, DecodeAny, short); err != nil || v.Problem != nil {
		t.Fatalf("a short answer: problem %v, error %v", v.Problem, err)
	}
}

func TestDecodeAny(t *testing.T) {
	v, err := DecodeAny(`{"a":[1,"x",true,null]}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(v); string(got) != `{"a":[1,"x",true,null]}` {
		t.Errorf("decoded %s", got)
	}
	if _, ok := v.(map[string]any)["a"].([]any)[0].(float64); !ok {
		t.Errorf("a number decoded as %T, want float64", v.(map[string]any)["a"].([]any)[0])
	}
	if _, err := DecodeAny(`{"a":`); err == nil || !strings.Contains(err.Error(), "answer with JSON of the shape asked for") {
		t.Errorf("bad JSON: %v", err)
	}
}

// TestCorrection: what a child is told after a rejected answer — the
// problem and the prompt — with a long list of problems cut, on a rune
// boundary, to a few kilobytes.
func TestCorrection(t *testing.T) {
	const prompt = "Answer with JSON matching the schema."
	for _, c := range []struct {
		name    string
		problem string
		want    string // the whole message, or, for a cut one, its end
		cut     bool
	}{
		{"short", "at /verdict: value must be one of 'ship', 'hold'", "Your answer was rejected: at /verdict: value must be one of 'ship', 'hold'.\n" + prompt, false},
		{"exactly the bound", strings.Repeat("x", maxCorrection), "Your answer was rejected: " + strings.Repeat("x", maxCorrection) + ".\n" + prompt, false},
		{"one byte over", strings.Repeat("x", maxCorrection+1), " … (the rest of the problems cut).\n" + prompt, true},
		{"a rune across the bound", strings.Repeat("x", maxCorrection-1) + "é" + strings.Repeat("y", 100), " … (the rest of the problems cut).\n" + prompt, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Correction(prompt, errors.New(c.problem))
			if !c.cut {
				if got != c.want {
					t.Fatalf("got %q", got)
				}
				return
			}
			if !strings.HasSuffix(got, c.want) || !utf8.ValidString(got) {
				t.Fatalf("got …%q (valid UTF-8: %v)", got[max(0, len(got)-80):], utf8.ValidString(got))
			}
			kept := strings.TrimSuffix(strings.TrimPrefix(got, "Your answer was rejected: "), c.want)
			if len(kept) > maxCorrection || !strings.HasPrefix(c.problem, kept) || len(kept) < maxCorrection-utf8.UTFMax {
				t.Errorf("kept %d bytes of the problem, want its first %d or a rune fewer", len(kept), maxCorrection)
			}
		})
	}
}
