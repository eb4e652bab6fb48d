package jsonschema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/jsonschema"
)

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		name, schema, wantErr string
	}{
		{"empty", ``, `jsonschema: empty JSON Schema: pass a schema object such as {"type":"object"}`},
		{"blank", " \n", `jsonschema: empty JSON Schema`},
		{"not JSON", `{"type":`, `jsonschema: JSON Schema is not valid JSON`},
		{"an array", `[]`, `jsonschema: a JSON Schema must be an object or a boolean, not an array`},
		{"a string", `"object"`, `jsonschema: a JSON Schema must be an object or a boolean, not a string`},
		{"a number", `1`, `not a number`},
		{"null", `null`, `not null`},
		{"bad keyword value", `{"type":5}`, `jsonschema: JSON Schema does not compile`},
		{"dangling reference", `{"$ref":"#/$defs/missing"}`, `jsonschema: JSON Schema does not compile`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := jsonschema.Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatalf("Compile returned %v, want an error", s)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	s, err := jsonschema.Compile(json.RawMessage(`{
		"type": "object",
		"properties": {
			"status": {"enum": ["success", "failed"]},
			"findings": {"type": ["object", "null"]},
			"tags": {"type": "array", "items": {"type": "string"}}
		},
		"required": ["status"],
		"additionalProperties": false
	}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data string
		want []string // the problems; nil when valid
	}{
		{"valid", `{"status":"success"}`, nil},
		{"null where allowed", `{"status":"failed","findings":null}`, nil},
		{"several problems", `{"status":"maybe","tags":["a",2],"extra":true}`, []string{
			"at /status: value must be one of 'success', 'failed'",
			"at /tags/1: got number, want string",
			"at the top level: additional properties 'extra' not allowed",
		}},
		{"missing", `{}`, []string{"at the top level: missing property 'status'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate([]byte(tt.data))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate error %v (%T), want a *ValidationError", err, err)
			}
			if diff := cmp.Diff(tt.want, ve.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if ve.Error() != strings.Join(ve.Problems, "; ") {
				t.Errorf("Error() = %q, want the problems joined", ve.Error())
			}
		})
	}
	if err := s.Validate([]byte(`{"status":`)); err == nil || !strings.HasPrefix(err.Error(), "not valid JSON: ") {
		t.Errorf("Validate(malformed) = %v, want a 'not valid JSON' error", err)
	}
	if err := s.ValidateValue(map[string]any{"status": "success", "tags": []any{"x"}}); err != nil {
		t.Errorf("ValidateValue: %v", err)
	}
}

// The same mistake reads the same every time, although the validator walks
// an object's properties in map order.
func TestValidationErrorIsStable(t *testing.T) {
	s, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{
		"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"},"e":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"e":1,"d":2,"c":3,"b":4,"a":5}`)
	first := s.Validate(data).Error()
	want := "at /a: got number, want string; at /b: got number, want string; at /c: got number, want string; at /d: got number, want string; at /e: got number, want string"
	if first != want {
		t.Errorf("error:\n%s\nwant:\n%s", first, want)
	}
	for range 50 {
		if got := s.Validate(data).Error(); got != first {
			t.Fatalf("the same data gave two errors:\n%s\n%s", first, got)
		}
	}
	// The properties an object may not hold are named in order too.
	closed, err := jsonschema.Compile(json.RawMessage(`{"type":"object","additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	want = "at the top level: additional properties 'a', 'b', 'c', 'd', 'e' not allowed"
	for range 50 {
		if got := closed.Validate(data).Error(); got != want {
			t.Fatalf("error:\n%s\nwant:\n%s", got, want)
		}
	}
}

func TestCompileKeepsItsOwnCopy(t *testing.T) {
	raw := []byte(`{"type":"object"}`)
	s, err := jsonschema.Compile(raw)
	if err != nil {
		t.Fatal(err)
	}
	copy(raw, `{"type":"string"}`)
	if got := string(s.Raw()); got != `{"type":"object"}` {
		t.Errorf("Raw() = %s after the caller changed its bytes", got)
	}
	if b, err := jsonschema.Compile(json.RawMessage(`true`)); err != nil || b.Validate([]byte(`[1]`)) != nil {
		t.Errorf("the boolean schema true: %v", err)
	}
}

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=the city to report on"`
	Days int    `json:"days,omitempty"`
}

func TestFor(t *testing.T) {
	s, err := jsonschema.For[weatherArgs]()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"properties":{"city":{"type":"string","description":"the city to report on"},"days":{"type":"integer"}},"additionalProperties":false,"type":"object","required":["city"]}`
	if diff := cmp.Diff(want, string(s.Raw())); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
}
