package jsonschema_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/jsonschema"
)

// A number beyond a float's range says so instead of reading as ∞, even
// where the validator would do arithmetic with it.
func TestNumberBeyondFloatRange(t *testing.T) {
	s, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"n":{"type":"number","multipleOf":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(json.RawMessage(`{"n":1e400}`)); err == nil || strings.Contains(err.Error(), "∞") || !strings.Contains(err.Error(), "too large") {
		t.Errorf("multipleOf of 1e400: %v", err)
	}
}
