package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/internal/answercheck"
	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/jsonvalue"
	"github.com/deputy-go/deputy/jsonschema"
)

// checker validates a child's answer against a schema compiled once, when
// the tool is built.
type checker struct {
	schema *jsonschema.Schema
	// result: ReportSchema semantics for the final failure (a tool error for
	// non-JSON, a failed Report for invalid JSON).
	result bool
	// decode turns the text of valid JSON into the Go value a caller gets.
	decode func(raw string) (any, error)
	// prompt tells a child the shape to answer in.
	prompt string
}

// WithReport checks the answer against ReportSchema.
func WithReport() Option {
	return func(c *config) error {
		s, err := reportSchema()
		if err != nil {
			return err
		}
		c.check = &checker{schema: s, result: true, decode: decodeReport, prompt: ReportPrompt()}
		return nil
	}
}

// reportSchema is ReportSchema compiled, once for all the tools that
// validate a Report.
var reportSchema = sync.OnceValues(func() (*jsonschema.Schema, error) { return jsonschema.Compile(json.RawMessage(ReportSchema)) })

// WithOutputSchema checks the answer against schema.
func WithOutputSchema(schema json.RawMessage) Option {
	s, err := jsonschema.Compile(schema)
	return func(c *config) error {
		if err != nil {
			return fmt.Errorf("output schema: %w", err)
		}
		c.check = &checker{schema: s, decode: answercheck.DecodeAny, prompt: SchemaPrompt(s.Raw())}
		return nil
	}
}

// OutputOf checks the answer against T's schema; a Go caller gets a T.
func OutputOf[T any]() Option {
	return func(c *config) error {
		s, err := jsonschema.For[T]()
		if err != nil {
			return fmt.Errorf("output type: %w", err)
		}
		c.check = &checker{schema: s, decode: decodeAs[T], prompt: SchemaPrompt(s.Raw())}
		return nil
	}
}

// decodeReport is decodeAs[Report] that reads the answer, which passed
// ReportSchema (no other key, none repeated), without json.Unmarshal when
// it has no findings: its status and summary are the text's strings.
// Findings, whose numbers json.Unmarshal makes float64s, are decoded.
func decodeReport(raw string) (any, error) {
	var r Report
	plain := jsonvalue.Members(raw, func(key, value string) bool {
		var ok bool
		switch key {
		case "status":
			var s string
			s, ok = jsonvalue.String(value)
			r.Status = ReportStatus(s)
		case "summary":
			r.Summary, ok = jsonvalue.String(value)
		case "findings":
			ok = value == "null"
		}
		return ok
	})
	if plain {
		return r, nil
	}
	return decodeAs[Report](raw)
}

func decodeAs[T any](raw string) (any, error) {
	var v T
	// A key the schema let through (one T's schema leaves open) that
	// encoding/json would read into a field by ignoring case is refused.
	if err := exactkeys.Check(raw, reflect.TypeFor[T]()); err != nil {
		return nil, fmt.Errorf("%v: answer with JSON of the shape asked for", err)
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, decodeProblem(err)
	}
	return v, nil
}

// decodeProblem says, in the words of a validation problem, why JSON that
// passed the schema does not decode into the Go type: a number such as 1.0
// is an integer to JSON Schema, but not to a Go int.
func decodeProblem(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("the answer does not decode: %v: answer with JSON of the shape asked for", err)
	}
	where := "at the top level"
	if te.Field != "" {
		where = "at /" + strings.ReplaceAll(te.Field, ".", "/")
	}
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Errorf("%s: %s is not a whole number in range: write an integer without a fraction or exponent, such as 1 rather than 1.0", where, te.Value)
	}
	return fmt.Errorf("%s: a %s does not fit here: write a value of the type the schema asks for", where, te.Value)
}

// verdict is the checker's reading of one answer.
type verdict struct {
	raw     string // the JSON found, if any: a part of the answer
	found   bool   // whether there was JSON at all
	value   any    // the decoded value, when valid
	problem error  // nil when valid
}

// check reads the answer. It fails only when ctx ends first.
func (c *checker) check(ctx context.Context, answer string) (verdict, error) {
	v, err := answercheck.Check(ctx, c.schema, c.decode, answer)
	return verdict{raw: v.Raw, found: v.Found, value: v.Value, problem: v.Problem}, err
}

// correction is what a child is told after a rejected answer.
func (c *checker) correction(problem error) string { return answercheck.Correction(c.prompt, problem) }
