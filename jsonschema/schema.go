package jsonschema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	invopop "github.com/invopop/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// Schema is a compiled JSON Schema: the raw document a model is shown and
// the validator built from it. It is compiled once and is safe for
// concurrent use.
type Schema struct {
	raw      json.RawMessage
	compiled *validator.Schema
	// work is the shape of a model's schema, by which a check's work is
	// counted before it is done; nil for a program's schema.
	work *graph
	// flat is the schema as a flat one, whose values that pass need no
	// validator (see flat); nil when it is not one.
	flat *flat
}

// Compile compiles a JSON Schema document (draft 2020-12 unless the
// document names another draft). The document must be self-contained: a
// $ref may point into it, or to a JSON Schema meta-schema, but never to a
// file or a URL, which are not loaded, so that no schema can make the
// program read its files. It is for schemas the program's author wrote
// (tool parameters, an output schema given in Go): it bounds neither their
// size nor the work of checking a value. A schema from outside the program
// — a model's output_schema, an MCP server's input schema, an interrupt's
// response schema an HTTP client echoes — goes to CompileUntrusted.
//
// A schema whose references make a subschema check the same place of a
// value for ever, such as {"$ref":"#"}, is refused here rather than failing
// every value later.
func Compile(raw json.RawMessage) (*Schema, error) {
	return compile(raw, false)
}

// CompileUntrusted compiles a JSON Schema from outside the program —
// one a model wrote (the output_schema of a spawn), an MCP server's input
// schema, an interrupt's response schema — within bounds that keep compiling it and
// checking values against it short: at most MaxUntrustedBytes of
// text, nesting at most MaxUntrustedDepth deep, references only to
// its own parts ("#/$defs/name"), and a weight of at most MaxWeight.
// Each check against it (ValidateContext) also counts its work first and
// stops at MaxValidationWork or when its context ends. A schema beyond a
// bound is refused with an error that says which and how to fix it.
func CompileUntrusted(raw json.RawMessage) (*Schema, error) {
	if len(raw) > MaxUntrustedBytes {
		return nil, fmt.Errorf("jsonschema: JSON Schema rejected: it is %d bytes, over the bound of %d: send a shorter schema", len(raw), MaxUntrustedBytes)
	}
	return compile(raw, true)
}

func compile(raw json.RawMessage, untrusted bool) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("jsonschema: empty JSON Schema: pass a schema object such as {\"type\":\"object\"}")
	}
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("jsonschema: JSON Schema is not valid JSON: %w: pass a JSON Schema document", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, isBool := doc.(bool); !isBool {
			return nil, fmt.Errorf("jsonschema: a JSON Schema must be an object or a boolean, not %s: pass an object such as {\"type\":\"object\"}", jsonKind(doc))
		}
	}
	if err := checkNumbers(doc); err != nil {
		return nil, fmt.Errorf("jsonschema: JSON Schema rejected: %w", err)
	}
	if untrusted && depth(doc, MaxUntrustedDepth+1) > MaxUntrustedDepth {
		return nil, fmt.Errorf("jsonschema: JSON Schema rejected: it nests deeper than %d levels: send a flatter schema", MaxUntrustedDepth)
	}
	g, err := buildGraph(doc, untrusted)
	if err != nil {
		return nil, fmt.Errorf("jsonschema: JSON Schema rejected: %w", err)
	}
	if !untrusted {
		g = nil
	}
	c := validator.NewCompiler()
	c.UseLoader(noLoader{})
	const loc = "mem:///schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("jsonschema: JSON Schema rejected: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		var se *validator.SchemaValidationError
		var ve *validator.ValidationError
		if errors.As(err, &se) && errors.As(se.Err, &ve) {
			err = &ValidationError{Problems: problems(ve, message.NewPrinter(language.English), nil)}
		}
		return nil, fmt.Errorf("jsonschema: JSON Schema does not compile: %w: fix the schema", err)
	}
	return &Schema{raw: bytes.Clone(raw), compiled: compiled, work: g, flat: flatOf(doc)}, nil
}

// Bounds on the numbers of JSON text. A number may be written with any
// exponent, and the validator makes exact rationals of numbers: 1e-9999999
// takes it seconds, and a longer exponent crashes it. Such numbers come only
// from a model probing, never from real data.
const (
	maxNumberLen = 400
	maxExponent  = 400
)

// checkNumbers reports the first number in the decoded JSON value v that is
// beyond the bounds.
func checkNumbers(v any) error {
	switch v := v.(type) {
	case json.Number:
		s := string(v)
		ok := len(s) <= maxNumberLen
		if i := strings.IndexAny(s, "eE"); ok && i >= 0 {
			exp, err := strconv.Atoi(s[i+1:])
			ok = err == nil && exp >= -maxExponent && exp <= maxExponent
		}
		if !ok {
			if len(s) > 40 {
				s = s[:40] + "…"
			}
			return fmt.Errorf("number %s is out of range: write numbers of at most %d characters with an exponent from -%d to %d",
				s, maxNumberLen, maxExponent, maxExponent)
		}
		if f, err := strconv.ParseFloat(s, 64); err != nil && math.IsInf(f, 0) {
			return fmt.Errorf("number %s is too large: send one within ±1.7e308, a 64-bit float's range", s)
		}
	case map[string]any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// noLoader refuses to load the documents a schema refers to.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema: refer only to the schema's own parts ($defs, #/...)", url)
}

// For reflects the JSON Schema of T with invopop/jsonschema and
// compiles it. Field names follow the json tags; fields without omitempty
// are required; unknown properties are rejected. A `jsonschema:"description=…"`
// tag documents a field for the model.
//
// A recursive type (a tree, a linked list) cannot be written out inline, so
// its schema keeps the top level an object and refers to the recursive parts
// through "$defs".
//
// A type with a field JSON cannot hold, at any depth (a channel, a
// function, a complex number, an unsafe pointer, a map keyed by a struct),
// is refused with an error naming the field.
func For[T any]() (s *Schema, err error) {
	var zero T
	t := reflect.TypeFor[T]()
	if err := describable(t); err != nil {
		return nil, err
	}
	defer func() {
		// What the check above did not foresee, the reflector panics on:
		// the caller gets an error, as the signature promises.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("jsonschema: cannot describe %v: %v: give its fields types JSON can hold", t, p)
		}
	}()
	return compileReflected(t, &zero)
}

// compileReflected reflects the schema of t, whose zero value is zero, and
// compiles it.
func compileReflected(t reflect.Type, zero any) (*Schema, error) {
	var s *invopop.Schema
	if recursive(t, nil) {
		r := invopop.Reflector{}
		s = r.Reflect(zero)
		if s.Ref != "" { // a named type: the root is one of the definitions
			root, ok := s.Definitions[strings.TrimPrefix(s.Ref, "#/$defs/")]
			if !ok {
				return nil, fmt.Errorf("jsonschema: reflecting the schema of %v: no definition for %q", t, s.Ref)
			}
			top := *root
			top.Definitions = s.Definitions
			s = &top
		}
	} else {
		r := invopop.Reflector{DoNotReference: true, ExpandedStruct: true}
		s = r.Reflect(zero)
	}
	s.Version = ""
	s.ID = ""
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("jsonschema: reflecting the schema of %v: %w", t, err)
	}
	return Compile(raw)
}

// Raw returns the schema document. The caller must not modify it.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Validate checks the JSON text data against s. The error names every
// offending place by its JSON pointer, in words a model can act on. An
// object that holds one key twice is refused: what a program reads from
// the text must be what was checked.
func (s *Schema) Validate(data []byte) error {
	return s.ValidateContext(context.Background(), data)
}

// ValidateContext is Validate that stops when ctx ends, and, for a model's
// schema (CompileUntrusted), refuses a value whose check would pass
// MaxValidationWork. When ctx ends first the error wraps ctx's error.
func (s *Schema) ValidateContext(ctx context.Context, data []byte) error {
	return s.ValidateText(ctx, string(data))
}

// ValidateText is ValidateContext for JSON text held in a string, such as
// a model's answer: it checks and reports as ValidateContext does, without
// copying the text into a byte slice first.
func (s *Schema) ValidateText(ctx context.Context, text string) error {
	if s.flat != nil && s.work == nil && ctx.Err() == nil && s.flat.passesText(text) {
		return nil
	}
	v, err := jsonvalue.DecodeOnce(text)
	if err != nil {
		if rk, ok := err.(*jsonvalue.RepeatedKeyError); ok {
			return &ValidationError{Problems: []string{rk.Error()}}
		}
		// The slow decoder says where the text goes wrong.
		if _, err = validator.UnmarshalJSON(strings.NewReader(text)); err != nil {
			return fmt.Errorf("not valid JSON: %v", syntaxMessage(err))
		}
		return errors.New("not valid JSON")
	}
	return s.ValidateValueContext(ctx, v)
}

// ValidateValue checks a decoded JSON value (as produced by encoding/json
// into an any, numbers as float64 or json.Number) against s.
func (s *Schema) ValidateValue(v any) error {
	return s.ValidateValueContext(context.Background(), v)
}

// ValidateValueContext is ValidateValue bounded like ValidateContext.
func (s *Schema) ValidateValueContext(ctx context.Context, v any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jsonschema: validation stopped: %w", err)
	}
	if err := checkNumbers(v); err != nil {
		return &ValidationError{Problems: []string{err.Error()}}
	}
	if s.work != nil {
		w := workCheck{g: s.work, ctx: ctx, left: MaxValidationWork}
		w.walk(0, v)
		switch {
		case w.err == errValidationWork:
			return &ValidationError{Problems: []string{w.err.Error()}}
		case w.err != nil:
			return fmt.Errorf("jsonschema: validation stopped: %w", w.err)
		}
	}
	if s.flat != nil && s.flat.passes(v) {
		return nil
	}
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *validator.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	ps := problems(ve, message.NewPrinter(language.English), nil)
	// The validator visits an object's properties in map order: sort, so
	// that the same mistake reads the same every time.
	slices.Sort(ps)
	ps = slices.Compact(ps)
	e := &ValidationError{Problems: ps}
	if len(ps) > maxProblems {
		e.Problems, e.Omitted = slices.Clip(ps[:maxProblems]), len(ps)-maxProblems
	}
	return e
}

// maxProblems bounds the problems a ValidationError lists: a value wrong in
// twenty thousand places makes a message of its first few, which tell a
// model what to fix as well as all of them would.
const maxProblems = 20

// ValidationError lists what is wrong with a JSON value, one problem per
// offending place, in order of place: the first twenty (maxProblems), and a
// count of the others.
type ValidationError struct {
	// Problems name each offending place by its JSON pointer and say what
	// is wrong there, e.g. "at /city: got number, want string".
	Problems []string
	// Omitted counts the problems found beyond the first twenty.
	Omitted int
}

// Error joins the problems, and says how many more there are.
func (e *ValidationError) Error() string {
	s := strings.Join(e.Problems, "; ")
	if e.Omitted > 0 {
		s += "; and " + strconv.Itoa(e.Omitted) + " more problems of the same kinds"
	}
	return s
}

func problems(ve *validator.ValidationError, p *message.Printer, out []string) []string {
	if len(ve.Causes) == 0 {
		where := "/" + strings.Join(ve.InstanceLocation, "/")
		if where == "/" {
			where = "at the top level"
		} else {
			where = "at " + where
		}
		if k, ok := ve.ErrorKind.(*kind.AdditionalProperties); ok {
			slices.Sort(k.Properties) // found in map order
		}
		return append(out, where+": "+ve.ErrorKind.LocalizedString(p))
	}
	for _, c := range ve.Causes {
		out = problems(c, p, out)
	}
	return out
}

// recursive reports whether t contains itself, through its exported fields,
// elements or pointers. path holds the struct types being visited.
func recursive(t reflect.Type, path []reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return recursive(t.Elem(), path)
	case reflect.Struct:
		for _, p := range path {
			if p == t {
				return true
			}
		}
		path = append(path, t)
		for i := range t.NumField() {
			if f := t.Field(i); (f.IsExported() || f.Anonymous) && recursive(f.Type, path) {
				return true
			}
		}
	}
	return false
}

func syntaxMessage(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case []any:
		return "an array"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	}
	return "a number"
}
