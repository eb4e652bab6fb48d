package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/invopop/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
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
}

// CompileSchema compiles a JSON Schema document (draft 2020-12 unless the
// document names another draft).
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("tool: empty JSON Schema: pass a schema object such as {\"type\":\"object\"}")
	}
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tool: JSON Schema is not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, isBool := doc.(bool); !isBool {
			return nil, fmt.Errorf("tool: a JSON Schema must be an object or a boolean, not %s", jsonKind(doc))
		}
	}
	c := validator.NewCompiler()
	const loc = "mem:///schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("tool: JSON Schema rejected: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("tool: JSON Schema does not compile: %w", err)
	}
	return &Schema{raw: bytes.Clone(raw), compiled: compiled}, nil
}

// SchemaFor reflects the JSON Schema of T with invopop/jsonschema and
// compiles it. Field names follow the json tags; fields without omitempty
// are required; unknown properties are rejected. A `jsonschema:"description=…"`
// tag documents a field for the model.
func SchemaFor[T any]() (*Schema, error) {
	var zero T
	r := jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true}
	s := r.Reflect(&zero)
	s.Version = ""
	s.ID = ""
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("tool: reflecting the schema of %T: %w", zero, err)
	}
	return CompileSchema(raw)
}

// Raw returns the schema document. The caller must not modify it.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Validate checks the JSON text data against s. The error names every
// offending place by its JSON pointer, in words a model can act on.
func (s *Schema) Validate(data []byte) error {
	v, ok := jsonvalue.Decode(string(data))
	if !ok {
		// The slow decoder says where the text goes wrong.
		var err error
		if v, err = validator.UnmarshalJSON(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("not valid JSON: %v", syntaxMessage(err))
		}
	}
	return s.ValidateValue(v)
}

// ValidateValue checks a decoded JSON value (as produced by encoding/json
// into an any, numbers as float64 or json.Number) against s.
func (s *Schema) ValidateValue(v any) error {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *validator.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	return &ValidationError{Problems: problems(ve, message.NewPrinter(language.English), nil)}
}

// ValidationError lists what is wrong with a JSON value, one problem per
// offending place.
type ValidationError struct {
	Problems []string
}

// Error joins the problems.
func (e *ValidationError) Error() string { return strings.Join(e.Problems, "; ") }

func problems(ve *validator.ValidationError, p *message.Printer, out []string) []string {
	if len(ve.Causes) == 0 {
		where := "/" + strings.Join(ve.InstanceLocation, "/")
		if where == "/" {
			where = "at the top level"
		} else {
			where = "at " + where
		}
		return append(out, where+": "+ve.ErrorKind.LocalizedString(p))
	}
	for _, c := range ve.Causes {
		out = problems(c, p, out)
	}
	return out
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
