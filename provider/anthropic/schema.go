package anthropic

// Bounds of the walk over a response schema: a deeper or larger schema is
// not sent as an output format (the agent's prompt still describes it).
const (
	formatMaxDepth = 32
	formatMaxNodes = 2000
)

// formatKeywords are the JSON Schema keywords the Messages API's
// structured output takes as they are.
var formatKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true,
	"$ref": true, "$defs": true, "definitions": true,
	"description": true, "title": true, "format": true, "default": true,
}

// formatDropped are keywords the API refuses but that only bound a value
// (numbers, lengths, counts). They are left out of the output format,
// which then asks for a little more than the schema allows; the caller's
// validation of the answer still holds them.
var formatDropped = map[string]bool{
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "pattern": true,
	"minItems": true, "maxItems": true, "uniqueItems": true,
	"minProperties": true, "maxProperties": true,
	"$schema": true, "$id": true, "$comment": true, "examples": true,
}

// outputSchema returns the schema to send as output_config.format for a
// response schema, narrowed to what the API takes, or false when it cannot
// be: an object with no properties (free-form, which the API does not
// take) or with additionalProperties other than false, a keyword it does
// not know, a type list with anyOf beside it, or a schema past the bounds.
// An object that leaves additionalProperties out gets false, which only
// narrows what the model may answer. A type list becomes anyOf. schema is
// not changed.
func outputSchema(schema map[string]any) (map[string]any, bool) {
	if schema["type"] != "object" {
		return nil, false // the API wants an object at the root
	}
	nodes := 0
	out, ok := narrow(schema, 0, &nodes)
	if !ok {
		return nil, false
	}
	m, ok := out.(map[string]any)
	return m, ok
}

func narrow(v any, depth int, nodes *int) (any, bool) {
	*nodes++
	if depth > formatMaxDepth || *nodes > formatMaxNodes {
		return nil, false
	}
	node, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	out := make(map[string]any, len(node))
	for k, v := range node {
		switch {
		case formatDropped[k]:
			continue
		case !formatKeywords[k]:
			return nil, false
		}
		switch k {
		case "properties", "$defs", "definitions":
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			sub := make(map[string]any, len(m))
			for name, s := range m {
				n, ok := narrow(s, depth+1, nodes)
				if !ok {
					return nil, false
				}
				sub[name] = n
			}
			out[k] = sub
		case "items":
			n, ok := narrow(v, depth+1, nodes)
			if !ok {
				return nil, false
			}
			out[k] = n
		case "anyOf":
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return nil, false
			}
			branches := make([]any, len(list))
			for i, b := range list {
				n, ok := narrow(b, depth+1, nodes)
				if !ok {
					return nil, false
				}
				branches[i] = n
			}
			out[k] = branches
		default:
			out[k] = v
		}
	}
	if types, ok := node["type"].([]any); ok {
		return typeList(out, types)
	}
	if t, ok := node["type"]; ok {
		if _, ok := t.(string); !ok {
			return nil, false
		}
	}
	return closeObject(out, node["type"] == "object")
}

// closeObject checks an object schema's properties and closes it.
func closeObject(out map[string]any, object bool) (any, bool) {
	if !object {
		if _, ok := out["properties"]; ok {
			return nil, false
		}
		return out, true
	}
	if _, ok := out["properties"]; !ok {
		return nil, false // a free-form object
	}
	switch out["additionalProperties"] {
	case nil:
		out["additionalProperties"] = false
	case false:
	default:
		return nil, false
	}
	return out, true
}

// typeList turns {"type":[a, b, ...], ...} into {"anyOf":[{"type":a, ...},
// {"type":b, ...}]}, the keywords that belong to a type going with it, the
// others (description, title) staying outside.
func typeList(out map[string]any, types []any) (any, bool) {
	if _, ok := out["anyOf"]; ok || len(types) == 0 {
		return nil, false
	}
	shared := map[string]any{}
	for _, k := range []string{"description", "title", "default"} {
		if v, ok := out[k]; ok {
			shared[k] = v
			delete(out, k)
		}
	}
	delete(out, "type")
	branches := make([]any, 0, len(types))
	for _, t := range types {
		name, ok := t.(string)
		if !ok {
			return nil, false
		}
		b := map[string]any{"type": name}
		for k, v := range out {
			if belongs(k, name) {
				b[k] = v
			}
		}
		n, ok := closeObject(b, name == "object")
		if !ok {
			return nil, false
		}
		branches = append(branches, n)
	}
	shared["anyOf"] = branches
	return shared, true
}

// belongs reports whether keyword k applies to values of type t.
func belongs(k, t string) bool {
	switch k {
	case "properties", "required", "additionalProperties":
		return t == "object"
	case "items":
		return t == "array"
	case "format":
		return t == "string"
	}
	return true // enum, const, $ref, $defs: kept on every branch
}
