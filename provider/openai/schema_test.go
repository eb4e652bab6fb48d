package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

func TestStrictFits(t *testing.T) {
	deep := `{"type":"string"}`
	for range strictMaxDepth + 1 {
		deep = `{"type":"object","properties":{"a":` + deep + `},"required":["a"],"additionalProperties":false}`
	}
	tests := []struct {
		name   string
		schema string
		want   bool
	}{
		{"closed, all required", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`, true},
		{"nullable by type list", `{"type":"object","properties":{"n":{"type":["integer","null"]}},"required":["n"],"additionalProperties":false}`, true},
		{"nested array of closed objects", `{"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}}},"required":["xs"],"additionalProperties":false}`, true},
		{"anyOf", `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["v"],"additionalProperties":false}`, true},
		{"an optional property", `{"type":"object","properties":{"n":{"type":"integer"},"m":{"type":"string"}},"required":["n"],"additionalProperties":false}`, false},
		{"open object", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, false},
		{"free-form nested object", `{"type":"object","properties":{"f":{"type":["object","null"]}},"required":["f"],"additionalProperties":false}`, false},
		{"required names a missing property", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["m"],"additionalProperties":false}`, false},
		{"unsupported keyword", `{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}},"required":["s"],"additionalProperties":false}`, false},
		{"default", `{"type":"object","properties":{"s":{"type":"string","default":"a"}},"required":["s"],"additionalProperties":false}`, false},
		{"root not an object", `{"type":"array","items":{"type":"string"}}`, false},
		{"too deep", deep, false},
		{"the deputy result schema", `{"type":"object","properties":{"status":{"type":"string","enum":["success","partial","failed"]},"summary":{"type":"string"},"findings":{"type":["object","null"]}},"required":["status","summary"],"additionalProperties":false}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal([]byte(tt.schema), &m); err != nil {
				t.Fatal(err)
			}
			if got := strictFits(m); got != tt.want {
				t.Errorf("strictFits(%s) = %v, want %v", tt.schema, got, tt.want)
			}
		})
	}
}

// FuzzResponseFormat maps arbitrary response schemas onto a request. It
// never panics; a schema that is not an object is refused with an error;
// the schema travels unchanged; and strict mode is only asked for a schema
// whose every object is closed and fully required.
func FuzzResponseFormat(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`,
		`{"type":"object","properties":{"f":{"type":["object","null"]}},"required":["f"],"additionalProperties":false}`,
		`{"type":"object","$defs":{"x":{"type":"object","properties":{},"required":[],"additionalProperties":false}},"properties":{"x":{"$ref":"#/$defs/x"}},"required":["x"],"additionalProperties":false}`,
		`{"type":"object","properties":{"v":{"anyOf":[{"type":"object"},{"type":"null"}]}},"required":["v"],"additionalProperties":false}`,
		`[]`, `null`, `{}`, `{"type":"object","required":"n"}`, strings.Repeat(`{"items":`, 50) + `{}` + strings.Repeat(`}`, 50),
	} {
		f.Add(s)
	}
	p, err := New(WithAPIKey("k"), WithBaseURL("http://127.0.0.1:1/v1"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		req := providerRequest(schema)
		params, err := p.params(req)
		var m map[string]any
		isObject := json.Unmarshal([]byte(schema), &m) == nil && m != nil
		if !isObject {
			if err == nil && json.Valid([]byte(schema)) {
				t.Fatalf("schema %s that is not an object was accepted", schema)
			}
			return
		}
		if err != nil {
			t.Fatalf("object schema %s refused: %v", schema, err)
		}
		f := params.ResponseFormat.OfJSONSchema
		if f == nil {
			t.Fatal("no response_format")
		}
		if got, _ := f.JSONSchema.Schema.(json.RawMessage); string(got) != schema {
			t.Errorf("schema changed on the way: %s, want %s", got, schema)
		}
		if f.JSONSchema.Strict.Value && !closed(m) {
			t.Errorf("strict mode for %s, which has an object that is not closed or not fully required", schema)
		}
	})
}

// closed reports whether every object schema reachable through properties,
// items and anyOf has additionalProperties false and requires all its
// properties.
func closed(v any) bool {
	node, ok := v.(map[string]any)
	if !ok {
		return true
	}
	if isObjectType(node["type"]) {
		props, _ := node["properties"].(map[string]any)
		req, _ := node["required"].([]any)
		if node["additionalProperties"] != false || props == nil || len(req) != len(props) {
			return false
		}
		for _, p := range props {
			if !closed(p) {
				return false
			}
		}
	}
	if !closed(node["items"]) {
		return false
	}
	branches, _ := node["anyOf"].([]any)
	for _, b := range branches {
		if !closed(b) {
			return false
		}
	}
	return true
}

func providerRequest(schema string) provider.Request {
	return provider.Request{Messages: []provider.Message{provider.UserMessage("go")}, ResponseSchema: json.RawMessage(schema)}
}
