package jsonschema

// flat is a schema of the shape most tool parameters have — an object of
// named properties, each of one plain type or of any, some of them
// required, others allowed or not — whose check of a value that passes
// needs no validator: a FromFactory child's {"task": string} is one. It
// only ever says that a value passes; a value it does not pass goes to the
// validator, which decides, and says why, as for any schema.
//
// What it buys: the validator allocates about eight objects (and half a
// kilobyte) for each check, which was a quarter of the allocations of a
// whole delegation (BenchmarkDelegation/factory in subagent) and of each
// child of a fan-out (BenchmarkFanoutDefault).
type flat struct {
	props    map[string]string // a property's type, "" for any
	required []string
	closed   bool // additionalProperties is false
}

// flatOf returns doc as a flat schema, or nil when it is anything else. It
// recognizes only the few keywords it can check exactly; a schema with any
// other (a $schema, a pattern, an enum, a nested object's properties, …)
// is checked by the validator alone.
func flatOf(doc any) *flat {
	m, ok := doc.(map[string]any)
	if !ok || m["type"] != "object" {
		return nil
	}
	f := &flat{props: map[string]string{}}
	for k, v := range m {
		switch k {
		case "type", "description", "title":
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, p := range props {
				t, ok := plainType(p)
				if !ok {
					return nil
				}
				f.props[name] = t
			}
		case "required":
			names, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, n := range names {
				s, ok := n.(string)
				if !ok {
					return nil
				}
				f.required = append(f.required, s)
			}
		case "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			f.closed = !b
		default:
			return nil
		}
	}
	return f
}

// plainType returns the type a property's schema asks for ("" for any:
// true, or an object with no type), and whether the schema is so plain: a
// type of string, boolean, object, array or null, and nothing more than a
// description or title.
func plainType(p any) (string, bool) {
	if b, ok := p.(bool); ok {
		return "", b
	}
	m, ok := p.(map[string]any)
	if !ok {
		return "", false
	}
	t := ""
	for k, v := range m {
		switch k {
		case "description", "title":
		case "type":
			s, _ := v.(string)
			switch s {
			case "string", "boolean", "object", "array", "null":
				t = s
			default:
				return "", false // numbers, and lists of types, are the validator's
			}
		default:
			return "", false
		}
	}
	return t, true
}

// passes reports whether v, a decoded JSON value, certainly passes the
// schema; false says only that the validator must look.
func (f *flat) passes(v any) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, r := range f.required {
		if _, ok := obj[r]; !ok {
			return false
		}
	}
	for k, x := range obj {
		t, ok := f.props[k]
		if !ok {
			if f.closed {
				return false
			}
			continue
		}
		if !hasType(x, t) {
			return false
		}
	}
	return true
}

// hasType reports whether x is a value of the JSON type t ("" for any).
func hasType(x any, t string) bool {
	switch t {
	case "":
		return true
	case "string":
		_, ok := x.(string)
		return ok
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "object":
		_, ok := x.(map[string]any)
		return ok
	case "array":
		_, ok := x.([]any)
		return ok
	case "null":
		return x == nil
	}
	return false
}
