package jsonschema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/jsonschema"
)

// A schema a model wrote is compiled within bounds: one whose references
// would make checking an answer take exponential time is refused with an
// error the model can act on, and checks against an accepted one stop when
// their context ends.
func ExampleCompileUntrusted() {
	_, err := jsonschema.CompileUntrusted(json.RawMessage(`{"$ref":"https://example.com/schema.json"}`))
	fmt.Println(err)

	s, err := jsonschema.CompileUntrusted(json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fmt.Println(s.ValidateContext(ctx, []byte(`{"city":7}`)))
	cancel()
	fmt.Println(errors.Is(s.ValidateContext(ctx, []byte(`{"city":"Lisbon"}`)), context.Canceled))
	// Output:
	// jsonschema: JSON Schema rejected: at the top level: $ref https://example.com/schema.json is outside the schema: refer to parts of this schema with "#/$defs/name"
	// at /city: got number, want string
	// true
}
