package jsonschema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// chain returns a schema of n definitions, each applying the previous one
// twice to the same value through op ("allOf" or "anyOf"): checking one
// value against it takes 2^n checks.
func chain(n int, op string) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{"d0":{"type":"string"}`)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `,"d%d":{%q:[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, op, i-1, i-1)
	}
	fmt.Fprintf(&b, `},"$ref":"#/$defs/d%d"}`, n)
	return b.String()
}

// nested returns n levels of {"items": …} around {}.
func nested(n int) string {
	return strings.Repeat(`{"items":`, n) + "{}" + strings.Repeat("}", n)
}

// A schema whose references check the same place for ever is refused when
// it is given, not when every value then fails.
func TestCompileRefusesReferenceCycles(t *testing.T) {
	for _, s := range []string{
		`{"$ref":"#"}`,
		`{"allOf":[{"type":"object"},{"$ref":"#"}]}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
		`{"$defs":{"a":{"not":{"$ref":"#/%24defs/a"}}},"properties":{"x":{"$ref":"#/$defs/a"}}}`,
	} {
		_, err := Compile(json.RawMessage(s))
		if err == nil || !strings.Contains(err.Error(), "reference cycle") {
			t.Errorf("Compile(%s) = %v, want a reference cycle refused", s, err)
		}
		if _, err := CompileUntrusted(json.RawMessage(s)); err == nil {
			t.Errorf("CompileUntrusted(%s) accepted a reference cycle", s)
		}
	}
	// Recursion through a member or an element is a tree, and is fine.
	for s, value := range map[string]string{
		`{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`: `{"children":[{"name":"a","children":[]}]}`,
		`{"$defs":{"node":{"type":"object","additionalProperties":{"$ref":"#/$defs/node"}}},"$ref":"#/$defs/node"}`:  `{"a":{"b":{}}}`,
	} {
		for name, compile := range map[string]func(json.RawMessage) (*Schema, error){"Compile": Compile, "CompileUntrusted": CompileUntrusted} {
			sch, err := compile(json.RawMessage(s))
			if err != nil {
				t.Errorf("%s(%s): %v", name, s, err)
				continue
			}
			if err := sch.Validate([]byte(value)); err != nil {
				t.Errorf("%s(%s).Validate: %v", name, s, err)
			}
		}
	}
}

// Each bound on a model's schema refuses a schema built to pass it, quickly
// and with a message that says what to change.
func TestUntrustedSchemaBounds(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"exponential allOf chain (30 levels, about 2 KB)", chain(30, "allOf"), "weighs more than 1000"},
		{"exponential anyOf chain (24 levels)", chain(24, "anyOf"), "weighs more than 1000"},
		{"nested items 1,600 deep (16 KB)", nested(1600), "nests deeper than 32"},
		{"nested items 1,000 deep", nested(1000), "nests deeper than 32"},
		{"nested items 9,000 deep (90 KB)", nested(9000), "bytes, over the bound"},
		{"nested items 33 deep", nested(33), "nests deeper than 32"},
		{"a file", `{"$ref":"file:///etc/passwd"}`, "is outside the schema"},
		{"a meta-schema", `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`, "is outside the schema"},
		{"an anchor", `{"$defs":{"a":{"$anchor":"x"}},"$ref":"#x"}`, "names an anchor"},
		{"a nested $id", `{"properties":{"a":{"$id":"http://x/y","$ref":"#"}}}`, "$id is not accepted"},
		{"a dynamic reference", `{"$dynamicRef":"#x"}`, "$dynamicRef is not accepted"},
		{"a dangling reference", `{"$ref":"#/$defs/none"}`, "points to nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := CompileUntrusted(json.RawMessage(tt.schema))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CompileUntrusted: %v, want an error saying %q", err, tt.want)
			}
			t.Logf("refused in %v: %v", time.Since(start), err)
		})
	}
	// Within the bounds: 32 levels, and a chain short enough to weigh less
	// than the bound.
	for _, s := range []string{nested(31), chain(7, "allOf")} {
		if _, err := CompileUntrusted(json.RawMessage(s)); err != nil {
			t.Errorf("CompileUntrusted(%.60s…): %v", s, err)
		}
	}
}

// A schema within the static bounds can still apply to each element of a
// value many times over; the work of a check is counted first, and a check
// that would pass MaxValidationWork is refused instead of run.
func TestValidationWorkIsBounded(t *testing.T) {
	// Each level of the value is checked twice per check of the level
	// above: 2^depth checks.
	sch, err := CompileUntrusted(json.RawMessage(
		`{"$defs":{"a":{"allOf":[{"items":{"$ref":"#/$defs/a"}},{"items":{"$ref":"#/$defs/a"}}]}},"$ref":"#/$defs/a"}`))
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	err = sch.Validate([]byte(value))
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "takes more than") {
		t.Fatalf("Validate: %v, want the work bound", err)
	}
	// An enum compared with every element, and a pattern scanning long
	// strings, count their work too.
	for schema, value := range map[string]string{
		`{"items":{"enum":[` + strings.Repeat(`"aaaaaa",`, 1500) + `"b"]}}`: "[" + strings.Repeat(`"b",`, 999) + `"b"]`,
		`{"items":{"pattern":"^a*$"}}`:                                      "[" + strings.Repeat(`"`+strings.Repeat("a", 1<<14)+`",`, 1023) + `"a"]`,
	} {
		sch, err := CompileUntrusted(json.RawMessage(schema))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate([]byte(value)); err == nil || !strings.Contains(err.Error(), "takes more than") {
			t.Errorf("Validate(%.40s…) against %.40s…: %v, want the work bound", value, schema, err)
		}
	}
	// Shallow values check as usual.
	if err := sch.Validate([]byte(`[[[]]]`)); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// A check stops when its context ends.
func TestValidateStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, compile := range map[string]func(json.RawMessage) (*Schema, error){"Compile": Compile, "CompileUntrusted": CompileUntrusted} {
		sch, err := compile(json.RawMessage(`{"type":"string"}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.ValidateContext(ctx, []byte(`"x"`)); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: ValidateContext on a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	// A count of the work in progress stops too.
	sch, err := CompileUntrusted(json.RawMessage(`{"items":{"items":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	w := workCheck{g: sch.work, ctx: ctx, left: MaxValidationWork}
	big := make([]any, 5000)
	for i := range big {
		big[i] = []any{}
	}
	w.walk(0, big)
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("the work count on a cancelled context: %v, want context.Canceled", w.err)
	}
}

// FuzzUntrustedSchema: whatever a model writes as a schema, compiling it
// and checking a value against it end, within the bounds, without a panic.
func FuzzUntrustedSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"$ref":"#"}`, chain(12, "allOf"), nested(40), `{"items":[{"$ref":"#/items/0"}]}`,
		`{"$defs":{"a":{"allOf":[{"items":{"$ref":"#/$defs/a"}},{"items":{"$ref":"#/$defs/a"}}]}},"$ref":"#/$defs/a"}`,
		`{"$ref":"#/$defs/a~1b"}`, `{"$defs":{"a/b":true},"$ref":"#/$defs/a~1b"}`, `true`, `[]`,
	} {
		f.Add(s, `[[[["x"]]]]`)
	}
	f.Fuzz(func(t *testing.T, schema, value string) {
		sch, err := CompileUntrusted(json.RawMessage(schema))
		if err != nil {
			return
		}
		if len(schema) > MaxUntrustedBytes {
			t.Fatalf("accepted a schema of %d bytes", len(schema))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = sch.ValidateContext(ctx, []byte(value))
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("checking %q against %s did not end in 10s", value, schema)
		}
	})
}

// BenchmarkValidateAtWorkBound checks a value of 13,000 elements against a
// model's schema that applies ten subschemas to each (19 units of work per
// element): just under MaxValidationWork, the costliest check the bounds
// let through with a schema of this shape.
func BenchmarkValidateAtWorkBound(b *testing.B) {
	sch, err := CompileUntrusted(json.RawMessage(`{"type":"array","items":{"allOf":[` +
		strings.Repeat(`{"type":"string"},`, 8) + `{"type":"string"}]}}`))
	if err != nil {
		b.Fatal(err)
	}
	value := "[" + strings.Repeat(`"x",`, 12999) + `"x"]`
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if err := sch.Validate([]byte(value)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileUntrustedAtBounds compiles the largest schema a
// model may send: 16 KiB of properties, each nesting to the depth bound.
func BenchmarkCompileUntrustedAtBounds(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"type":"object","properties":{`)
	for i := 0; s.Len() < MaxUntrustedBytes-400; i++ {
		if i > 0 {
			s.WriteString(",")
		}
		fmt.Fprintf(&s, `"p%d":%s`, i, nested(29))
	}
	s.WriteString(`}}`)
	raw := json.RawMessage(s.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileUntrusted(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// A value wrong in many places gets a message of its first maxProblems
// problems and a count of the others.
func TestValidationErrorListsTheFirstProblems(t *testing.T) {
	sch, err := Compile(json.RawMessage(`{"type":"array","items":{"type":"string"}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = sch.Validate([]byte("[" + strings.Repeat("1,", 19999) + "1]"))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate: %v", err)
	}
	if len(ve.Problems) != maxProblems || ve.Omitted != 20000-maxProblems {
		t.Errorf("%d problems and %d omitted, want %d and %d", len(ve.Problems), ve.Omitted, maxProblems, 20000-maxProblems)
	}
	if msg := ve.Error(); len(msg) > 2<<10 || !strings.HasSuffix(msg, "; and 19980 more problems of the same kinds") {
		t.Errorf("message of %d bytes: %.200q…", len(msg), msg)
	}
}

// A subschema with many subschemas of its own costs each of them, applied
// or not: 1,500 properties looked at for each of 200 elements pass the
// bound, although none applies.
func TestValidationWorkCountsEverySubschemaLookedAt(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"items":{"properties":{`)
	for i := range 1500 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"%d":{}`, i)
	}
	b.WriteString(`}}}`)
	sch, err := CompileUntrusted(json.RawMessage(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	value := "[" + strings.Repeat("0,", 199) + "0]"
	if err := sch.Validate([]byte(value)); err == nil || !strings.Contains(err.Error(), "takes more than") {
		t.Fatalf("Validate: %v, want the work bound", err)
	}
}
