package jsonschema

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// Which schemas are checked flat: only those made of the keywords flat
// checks exactly.
func TestFlatSchemasAreOnlyThePlainOnes(t *testing.T) {
	for _, c := range []struct {
		schema string
		flat   bool
	}{
		{`{"type":"object","properties":{"task":{"type":"string","description":"d"}},"required":["task"]}`, true},
		{`{"type":"object","title":"t","properties":{"a":{},"b":true,"c":{"type":"boolean"},"d":{"type":"array"},"e":{"type":"null"},"f":{"type":"object"}},"additionalProperties":false}`, true},
		{`{"type":"object"}`, true},
		{`{"properties":{"a":{"type":"string"}}}`, false},     // not only objects
		{`{"type":["object","null"],"properties":{}}`, false}, // a list of types
		{`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, false},
		{`{"type":"object","properties":{"n":{"type":"integer"}}}`, false},                                           // numbers
		{`{"type":"object","properties":{"s":{"type":"string","enum":["a"]},"o":{"type":["object","null"]}}}`, true}, // a Report's
		{`{"type":"object","properties":{"s":{"enum":["a",1]}}}`, false},                                             // an enum of more than strings
		{`{"type":"object","properties":{"s":{"type":["string","integer"]}}}`, false},                                // numbers in a list
		{`{"type":"object","properties":{"s":{"type":"string","minLength":1}}}`, false},
		{`{"type":"object","properties":{"o":{"type":"object","properties":{}}}}`, false},
		{`{"type":"object","properties":{"x":false}}`, false},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{`{"type":"object","minProperties":1}`, false},
	} {
		s, err := Compile(json.RawMessage(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		if got := s.flat != nil; got != c.flat {
			t.Errorf("%s: flat %v, want %v", c.schema, got, c.flat)
		}
	}
}

// A flat schema passes exactly the values the validator passes, over
// every mix of present, missing and extra keys and values of every type.
func TestFlatChecksAsTheValidatorDoes(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}`,
		`{"type":"object","properties":{"task":{"type":"string"},"bg":{"type":"boolean"},"o":{"type":"object"},"a":{"type":"array"},"z":{"type":"null"},"any":{}},"required":["task","bg"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":true},"required":["a","b"],"additionalProperties":true}`,
		`{"type":"object","properties":{"task":{"type":"string","enum":["s","u"]},"o":{"type":["object","null"]},"a":{"enum":["s"]},"z":{"type":["array","boolean"],"enum":["s"]}},"required":["task"],"additionalProperties":false}`,
	}
	values := []string{`"s"`, `true`, `{}`, `[]`, `null`, `1`, `{"x":1}`}
	keys := []string{"task", "bg", "o", "a", "z", "any", "b", "extra"}
	var docs []string
	for _, v := range values {
		docs = append(docs, v) // not an object
		for i, k := range keys {
			docs = append(docs, fmt.Sprintf(`{%q:%s}`, k, v))
			for _, k2 := range keys[i+1:] {
				for _, v2 := range values {
					docs = append(docs, fmt.Sprintf(`{%q:%s,%q:%s}`, k, v, k2, v2))
				}
			}
		}
	}
	// Escapes, and a key repeated, which DecodeOnce refuses.
	docs = append(docs, `{"task":"\u0073","bg":true}`, `{"t\u0061sk":"s","bg":false}`, `{"task":"s","bg":true,"task":"s"}`, `{"task":"s","task":"u"}`)
	checked, byText := 0, 0
	for _, raw := range schemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil || s.flat == nil {
			t.Fatalf("%s: not compiled flat (%v)", raw, err)
		}
		for _, d := range docs {
			v, err := jsonvalue.DecodeOnce(d)
			if err != nil {
				if s.flat.passesText(d) || s.ValidateText(t.Context(), d) == nil {
					t.Errorf("schema %s, value %s (%v): passed", raw, d, err)
				}
				continue
			}
			want := s.compiled.Validate(v) == nil
			if got := s.flat.passes(v); got != want {
				t.Errorf("schema %s, value %s: flat passes %v, the validator %v", raw, d, got, want)
			}
			// The text decides an object of the schema's properties whose
			// values are strings, booleans and nulls; it leaves the rest to
			// the decoded check.
			m, decides := v.(map[string]any)
			for k, x := range m {
				_, named := s.flat.props[k]
				switch x.(type) {
				case string, bool, nil:
				default:
					named = false
				}
				decides = decides && named
			}
			if want && decides {
				byText++
			}
			if got := s.flat.passesText(d); got != (want && decides) {
				t.Errorf("schema %s, value %s: flat passes the text %v, want %v", raw, d, got, want && decides)
			}
			if err := s.ValidateText(t.Context(), d); (err == nil) != want {
				t.Errorf("schema %s, value %s: ValidateText says %v, the validator %v", raw, d, err, want)
			}
			checked++
		}
	}
	if checked < 1000 || byText < 5 {
		t.Fatalf("only %d checks, %d passed by their text", checked, byText)
	}
}

// A value that passes a flat schema costs its check no allocation.
func TestFlatCheckAllocatesNothing(t *testing.T) {
	s, err := Compile(json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}`))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jsonvalue.Decode(`{"task":"count the files"}`)
	if n := testing.AllocsPerRun(100, func() {
		if err := s.ValidateValue(v); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a check", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := s.ValidateText(context.Background(), `{"task":"count the files"}`); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a check of the text", n)
	}
}
