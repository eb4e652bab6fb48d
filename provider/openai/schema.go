package openai

// Limits of strict structured output that strictFits checks: OpenAI takes
// at most this much nesting and this many properties in a strict schema.
const (
	strictMaxDepth      = 10
	strictMaxProperties = 5000
)

// strictKeywords are the JSON Schema keywords strictFits lets through:
// those OpenAI's strict mode documents, less a few (format, pattern) whose
// accepted values are narrower than JSON Schema's.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true,
	"$ref": true, "$defs": true, "definitions": true,
	"description": true, "title": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minItems": true, "maxItems": true,
}

// strictFits reports whether schema, the decoded JSON of a response
// schema, fits the subset OpenAI's strict structured output accepts: an
// object at the root; every object with properties, all of them required,
// and additionalProperties false; only strictKeywords; no deeper than
// strictMaxDepth. A schema that does not fit is sent without strict mode,
// which the API accepts for any schema. It reads schema only.
func strictFits(schema map[string]any) bool {
	if schema["type"] != "object" {
		return false
	}
	props := 0
	return strictNode(schema, 0, &props)
}

func strictNode(v any, depth int, props *int) bool {
	if depth > strictMaxDepth {
		return false
	}
	node, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k := range node {
		if !strictKeywords[k] {
			return false
		}
	}
	if isObjectType(node["type"]) {
		if node["additionalProperties"] != false {
			return false
		}
		properties, ok := node["properties"].(map[string]any)
		if !ok {
			return false
		}
		required, _ := node["required"].([]any)
		if len(required) != len(properties) {
			return false
		}
		for _, r := range required {
			name, ok := r.(string)
			if !ok {
				return false
			}
			if _, ok := properties[name]; !ok {
				return false
			}
		}
		*props += len(properties)
		if *props > strictMaxProperties {
			return false
		}
		for _, p := range properties {
			if !strictNode(p, depth+1, props) {
				return false
			}
		}
	} else if _, ok := node["properties"]; ok {
		return false // properties on something not typed an object
	}
	if items, ok := node["items"]; ok && !strictNode(items, depth+1, props) {
		return false
	}
	if branches, ok := node["anyOf"]; ok {
		list, ok := branches.([]any)
		if !ok || len(list) == 0 {
			return false
		}
		for _, b := range list {
			if !strictNode(b, depth+1, props) {
				return false
			}
		}
	}
	for _, key := range []string{"$defs", "definitions"} {
		defs, ok := node[key]
		if !ok {
			continue
		}
		m, ok := defs.(map[string]any)
		if !ok {
			return false
		}
		for _, d := range m {
			if !strictNode(d, depth+1, props) {
				return false
			}
		}
	}
	return true
}

// isObjectType reports whether a type keyword's value names "object",
// alone or in a list.
func isObjectType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "object"
	case []any:
		for _, e := range t {
			if e == "object" {
				return true
			}
		}
	}
	return false
}
