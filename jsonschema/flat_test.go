package jsonschema

import (
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
	checked := 0
	for _, raw := range schemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil || s.flat == nil {
			t.Fatalf("%s: not compiled flat (%v)", raw, err)
		}
		for _, d := range docs {
			v, ok := jsonvalue.Decode(d)
			if !ok {
				t.Fatalf("%s: not JSON", d)
			}
			want := s.compiled.Validate(v) == nil
			if got := s.flat.passes(v); got != want {
				t.Errorf("schema %s, value %s: flat passes %v, the validator %v", raw, d, got, want)
			}
			checked++
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d checks", checked)
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
}
