package jsonschema

import "slices"

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
	props    map[string]prop
	required []string
	closed   bool // additionalProperties is false
}

// flatOf returns doc as a flat schema, or nil when it is anything else. It
// recognizes only the few keywords it can check exactly; a schema with any
// other (a $schema, a pattern, a nested object's properties, …)
// is checked by the validator alone.
func flatOf(doc any) *flat {
	m, ok := doc.(map[string]any)
	if !ok || m["type"] != "object" {
		return nil
	}
	f := &flat{props: map[string]prop{}}
	for k, v := range m {
		switch k {
		case "type", "description", "title":
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, p := range props {
				t, ok := plainProp(p)
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

// prop is what a flat schema asks of one property: one of types (none:
// any), and, when enum is not nil, a string among enum.
type prop struct {
	types []string
	enum  []string
}

// plainProp returns what a property's schema asks for, and whether the
// schema is so plain: a type (or a list of types) of string, boolean,
// object, array or null, an enum of strings, and nothing more than a
// description or title. (true, or an object with none of these, is any.)
func plainProp(p any) (prop, bool) {
	if b, ok := p.(bool); ok {
		return prop{}, b
	}
	m, ok := p.(map[string]any)
	if !ok {
		return prop{}, false
	}
	var t prop
	for k, v := range m {
		switch k {
		case "description", "title":
		case "type":
			list, isList := v.([]any)
			if !isList {
				list = []any{v}
			}
			if len(list) == 0 {
				return prop{}, false
			}
			for _, x := range list {
				s, _ := x.(string)
				switch s {
				case "string", "boolean", "object", "array", "null":
					t.types = append(t.types, s)
				default:
					return prop{}, false // numbers are the validator's
				}
			}
		case "enum":
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return prop{}, false
			}
			t.enum = make([]string, 0, len(list))
			for _, x := range list {
				s, ok := x.(string)
				if !ok {
					return prop{}, false // other values are the validator's
				}
				t.enum = append(t.enum, s)
			}
		default:
			return prop{}, false
		}
	}
	return t, true
}

// holds reports whether x certainly meets what t asks.
func (t prop) holds(x any) bool {
	if len(t.types) > 0 && !slices.ContainsFunc(t.types, func(s string) bool { return hasType(x, s) }) {
		return false
	}
	if t.enum != nil {
		s, ok := x.(string)
		return ok && slices.Contains(t.enum, s)
	}
	return true
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
		if !t.holds(x) {
			return false
		}
	}
	return true
}

// hasType reports whether x is a value of the JSON type t.
func hasType(x any, t string) bool {
	switch t {
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
