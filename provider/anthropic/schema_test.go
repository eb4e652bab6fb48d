package anthropic

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOutputSchema(t *testing.T) {
	deep := `{"type":"string"}`
	for range formatMaxDepth + 1 {
		deep = `{"type":"object","properties":{"a":` + deep + `}}`
	}
	tests := []struct {
		name, schema string
		want         string // "" when the schema is not sent
	}{
		{"closed as is", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`,
			`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`},
		{"closed when open by default", `{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
			`{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}},"additionalProperties":false}`},
		{"bounds left out", `{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9},"s":{"type":"string","maxLength":3,"pattern":"^a"},"xs":{"type":"array","items":{"type":"string"},"minItems":2}},"$schema":"https://json-schema.org/draft/2020-12/schema"}`,
			`{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"},"xs":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`},
		{"type list to anyOf", `{"type":"object","properties":{"v":{"type":["string","null"],"description":"d","format":"date"}}}`,
			`{"type":"object","properties":{"v":{"description":"d","anyOf":[{"type":"string","format":"date"},{"type":"null"}]}},"additionalProperties":false}`},
		{"object in a type list closed", `{"type":"object","properties":{"v":{"type":["object","null"],"properties":{"a":{"type":"string"}}}}}`,
			`{"type":"object","properties":{"v":{"anyOf":[{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false},{"type":"null"}]}},"additionalProperties":false}`},
		{"refs and defs", `{"type":"object","$defs":{"p":{"type":"object","properties":{"x":{"type":"number"}}}},"properties":{"p":{"$ref":"#/$defs/p"}}}`,
			`{"type":"object","$defs":{"p":{"type":"object","properties":{"x":{"type":"number"}},"additionalProperties":false}},"properties":{"p":{"$ref":"#/$defs/p"}},"additionalProperties":false}`},
		{"free-form object", `{"type":"object","properties":{"f":{"type":["object","null"]}}}`, ""},
		{"open with a schema", `{"type":"object","properties":{},"additionalProperties":{"type":"string"}}`, ""},
		{"open with true", `{"type":"object","properties":{},"additionalProperties":true}`, ""},
		{"unknown keyword", `{"type":"object","properties":{"v":{"oneOf":[{"type":"string"}]}}}`, ""},
		{"root not an object", `{"type":"array","items":{"type":"string"}}`, ""},
		{"type list beside anyOf", `{"type":"object","properties":{"v":{"type":["string","null"],"anyOf":[{"type":"string"}]}}}`, ""},
		{"too deep", deep, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in map[string]any
			if err := json.Unmarshal([]byte(tt.schema), &in); err != nil {
				t.Fatal(err)
			}
			before := clone(t, in)
			got, ok := outputSchema(in)
			if !reflect.DeepEqual(before, in) {
				t.Errorf("outputSchema changed its input")
			}
			if tt.want == "" {
				if ok {
					b, _ := json.Marshal(got)
					t.Errorf("sent %s, want no output format", b)
				}
				return
			}
			if !ok {
				t.Fatalf("not sent, want %s", tt.want)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("output schema (-want +got):\n%s", diff)
			}
		})
	}
}

func clone(t testing.TB, v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzOutputFormat narrows arbitrary schemas. It never panics or changes
// its input; what it sends has only keywords the API takes, no type list,
// every object closed with properties; and narrowing what it sends changes
// nothing more.
func FuzzOutputFormat(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"]}`,
		`{"type":"object","properties":{"v":{"type":["object","null"],"properties":{"a":{"type":"string"}}}}}`,
		`{"type":"object","properties":{"f":{"type":["object","null"]}}}`,
		`{"type":"object","$defs":{"p":{"type":"object","properties":{}}},"properties":{"p":{"$ref":"#/$defs/p"}}}`,
		`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":["integer","null"]}]}}}`,
		`{"type":"object","properties":{"a":{"type":[1]}}}`, `{"type":"object","properties":[]}`,
		`{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"array","items":`, 40) + `{}` + strings.Repeat(`}`, 40) + `}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		var in map[string]any
		if json.Unmarshal([]byte(schema), &in) != nil || in == nil {
			return
		}
		before := clone(t, in)
		got, ok := outputSchema(in)
		if !reflect.DeepEqual(before, in) {
			t.Fatalf("outputSchema changed its input %s", schema)
		}
		if !ok {
			return
		}
		if err := sendable(got); err != "" {
			b, _ := json.Marshal(got)
			t.Fatalf("%s: sends %s", err, b)
		}
		again, ok := outputSchema(clone(t, got))
		if !ok || !reflect.DeepEqual(clone(t, got), clone(t, again)) {
			b, _ := json.Marshal(got)
			t.Fatalf("narrowing %s again gives %v (%v)", b, again, ok)
		}
	})
}

// sendable says what in v the API would refuse, or "".
func sendable(v any) string {
	node, ok := v.(map[string]any)
	if !ok {
		return "a schema that is not an object"
	}
	for k, e := range node {
		if !formatKeywords[k] {
			return "keyword " + k
		}
		switch k {
		case "type":
			if _, ok := e.(string); !ok {
				return "a type that is not one name"
			}
		case "properties", "$defs", "definitions":
			for _, s := range e.(map[string]any) {
				if msg := sendable(s); msg != "" {
					return msg
				}
			}
		case "items":
			if msg := sendable(e); msg != "" {
				return msg
			}
		case "anyOf":
			for _, s := range e.([]any) {
				if msg := sendable(s); msg != "" {
					return msg
				}
			}
		}
	}
	if node["type"] == "object" {
		if _, ok := node["properties"]; !ok {
			return "an object without properties"
		}
		if node["additionalProperties"] != false {
			return "an object not closed"
		}
	}
	return ""
}
