package jsonschema

import (
	"slices"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

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
//
// A value still in its text is checked by passesText without being
// decoded, when it is an object of strings, booleans and nulls: the map a
// decoded object is costs a third of a kilobyte, twice in a validated
// delegation (its arguments and its answer).
type flat struct {
	props    map[string]prop
	required []string
	closed   bool // additionalProperties is false
	// requiredBits are the bits of the required properties, and text
	// whether passesText can decide: each property has a bit, and each
	// required name is a property's.
	requiredBits uint64
	text         bool
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
	f.text = len(f.props) <= 64
	i := 0
	for name, p := range f.props {
		if f.text {
			p.bit = 1 << i
			f.props[name] = p
		}
		i++
	}
	for _, r := range f.required {
		p, ok := f.props[r]
		f.text = f.text && ok
		f.requiredBits |= p.bit
	}
	return f
}

// prop is what a flat schema asks of one property: one of types (none:
// any), and, when enum is not nil, a string among enum.
type prop struct {
	types []string
	enum  []string
	bit   uint64 // this property's, for passesText
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

// passesText is passes for s, the JSON text of a value, read without
// decoding it: false when s is anything but a valid object of the
// schema's properties, each once, with a string, a boolean or null that
// passes (a number, an object or an array, and a key the schema does not
// name, are left to the decoded check, with the key repeated).
func (f *flat) passesText(s string) bool {
	if !f.text {
		return false
	}
	var seen uint64
	ok := jsonvalue.Members(s, func(key, value string) bool {
		t, known := f.props[key]
		if !known || seen&t.bit != 0 {
			return false
		}
		seen |= t.bit
		return t.holdsText(value)
	})
	return ok && seen&f.requiredBits == f.requiredBits
}

// holdsText is holds for value, the JSON text of a string, a boolean or
// null; it is false for anything else.
func (t prop) holdsText(value string) bool {
	var kind string
	switch value[0] {
	case '"':
		kind = "string"
	case 't', 'f':
		kind = "boolean"
	case 'n':
		kind = "null"
	default:
		return false
	}
	if len(t.types) > 0 && !slices.Contains(t.types, kind) {
		return false
	}
	if t.enum != nil {
		s, ok := jsonvalue.String(value)
		return ok && slices.Contains(t.enum, s)
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
