package subagent

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/tool"
)

// checker validates a child's answer against a schema compiled once, when
// the tool is built.
type checker struct {
	schema *tool.Schema
	// result: ResultSchema semantics for the final failure (a tool error for
	// non-JSON, a failed Result for invalid JSON).
	result bool
	// decode turns valid JSON into the Go value a caller gets.
	decode func(json.RawMessage) (any, error)
	// prompt tells a child the shape to answer in.
	prompt string
}

// WithResult validates the child's answer against ResultSchema. The value a
// Go caller gets is a Result. After the corrective retry, an answer with no
// JSON is a tool error, and JSON that does not fit becomes
// Result{Status: StatusFailed, Summary: <the raw answer>}.
func WithResult() Option {
	return func(c *config) error {
		s, err := tool.CompileSchema(json.RawMessage(ResultSchema))
		if err != nil {
			return err
		}
		c.check = &checker{schema: s, result: true, decode: decodeAs[Result], prompt: ResultSystemPrompt()}
		return nil
	}
}

// WithOutputSchema validates the child's answer against a JSON Schema. The
// value a Go caller gets is the decoded JSON. After the corrective retry, an
// answer that still does not fit comes back as it is, followed by
// "[validation failed: …]".
func WithOutputSchema(schema json.RawMessage) Option {
	return func(c *config) error {
		s, err := tool.CompileSchema(schema)
		if err != nil {
			return fmt.Errorf("output schema: %w", err)
		}
		c.check = &checker{schema: s, decode: decodeAny, prompt: SchemaPrompt(s.Raw())}
		return nil
	}
}

// OutputOf validates the child's answer against the JSON Schema reflected
// from T, like WithOutputSchema; the value a Go caller gets is a T.
func OutputOf[T any]() Option {
	return func(c *config) error {
		s, err := tool.SchemaFor[T]()
		if err != nil {
			return fmt.Errorf("output type: %w", err)
		}
		c.check = &checker{schema: s, decode: decodeAs[T], prompt: SchemaPrompt(s.Raw())}
		return nil
	}
}

func decodeAs[T any](raw json.RawMessage) (any, error) {
	var v T
	err := json.Unmarshal(raw, &v)
	return v, err
}

func decodeAny(raw json.RawMessage) (any, error) {
	var v any
	err := json.Unmarshal(raw, &v)
	return v, err
}

// verdict is the checker's reading of one answer.
type verdict struct {
	raw     json.RawMessage // the JSON found, if any
	value   any             // the decoded value, when valid
	problem error           // nil when valid
}

func (c *checker) check(answer string) verdict {
	raw, ok := ExtractJSON(answer)
	if !ok {
		return verdict{problem: errors.New("the answer holds no JSON value")}
	}
	if err := c.schema.Validate(raw); err != nil {
		return verdict{raw: raw, problem: err}
	}
	v, err := c.decode(raw)
	if err != nil {
		return verdict{raw: raw, problem: err}
	}
	return verdict{raw: raw, value: v}
}

// correction is what a child is told after a rejected answer.
func (c *checker) correction(problem error) string {
	return "Your answer was rejected: " + problem.Error() + ".\n" + c.prompt
}
