// Package exactkeys holds the JSON a model writes to the keys a Go type
// spells. encoding/json decodes a key into a struct field whose name
// matches it only when case is ignored ("TASK" into the field "task"), and
// keeps the last of a repeated key: {"task":"a","TASK":"b"} passes a
// schema that does not refuse other keys, and a policy, a validator or a
// viewer reads "a" where the decoded struct holds "b". Check refuses both
// before the value is decoded, so that what a program decodes is what was
// checked.
package exactkeys

import (
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// Check reports, for s, JSON text to be decoded into a value of type t, a
// key of an object that encoding/json would decode into a struct field
// only by ignoring case, or a field's key written twice in one object. The
// error says where, what is wrong and what to send; text that is not JSON
// is jsonvalue.ErrSyntax. It reads s once, allocating nothing but the keys
// that hold escapes.
func Check(s string, t reflect.Type) error {
	v := visitorOf(t)
	if v == nil {
		return nil
	}
	return jsonvalue.Walk(s, v)
}

// Unmarshal is json.Unmarshal of s into v, a non-nil pointer, after Check.
func Unmarshal(s string, v any) error {
	if err := Check(s, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), v)
}

// Problem reports whether err is one Check found in text that is JSON:
// a key in another case or a key repeated.
func Problem(err error) bool {
	var we *jsonvalue.WalkError
	var rk *jsonvalue.RepeatedKeyError
	return errors.As(err, &we) || errors.As(err, &rk)
}

// caseError is a key that matches a field's only when case is ignored.
type caseError struct{ key, field string }

func (e *caseError) Error() string {
	return "the key " + strconv.Quote(e.key) + " is read as " + strconv.Quote(e.field) +
		" only because case is ignored: spell it " + strconv.Quote(e.field) + ", exactly as the schema does, and write it once"
}

var (
	cache    sync.Map // reflect.Type: jsonvalue.Visitor, built
	mu       sync.Mutex
	visitors = map[reflect.Type]jsonvalue.Visitor{} // built or being built, under mu
)

// visitorOf returns the visitor of values of type t, or nil when nothing
// in them is decoded by a struct's field names.
func visitorOf(t reflect.Type) jsonvalue.Visitor {
	if t == nil {
		return nil
	}
	if v, ok := cache.Load(t); ok {
		vv, _ := v.(jsonvalue.Visitor)
		return vv
	}
	mu.Lock()
	defer mu.Unlock()
	v := build(t)
	cache.Store(t, v)
	return v
}

var (
	unmarshaler     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// build is visitorOf with mu held. A struct's visitor is kept before its
// fields are, so that a recursive type refers to itself.
func build(t reflect.Type) jsonvalue.Visitor {
	if v, ok := visitors[t]; ok {
		return v
	}
	var v jsonvalue.Visitor
	switch {
	case t.Kind() != reflect.Pointer && (t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)):
		// It decodes itself.
	case t.Kind() == reflect.Pointer:
		v = build(t.Elem())
	case t.Kind() == reflect.Struct:
		sv := &structVisitor{fields: map[string]field{}}
		visitors[t] = sv
		sv.fill(t)
		if len(sv.fields) == 0 {
			v = nil
		} else {
			v = sv
		}
	case t.Kind() == reflect.Map:
		if e := build(t.Elem()); e != nil {
			v = &mapVisitor{elem: e}
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if e := build(t.Elem()); e != nil {
			v = &listVisitor{elem: e}
		}
	}
	visitors[t] = v
	return v
}

type field struct {
	v    jsonvalue.Visitor
	slot int
}

// structVisitor checks the keys of an object decoded into a struct.
type structVisitor struct {
	fields map[string]field
	names  []string // the keys of fields, in the struct's order
}

func (s *structVisitor) Member(key string) (jsonvalue.Visitor, int, error) {
	if f, ok := s.fields[key]; ok {
		return f.v, f.slot, nil
	}
	for _, n := range s.names {
		if strings.EqualFold(key, n) {
			return nil, -1, &caseError{key: key, field: n}
		}
	}
	return nil, -1, nil // not decoded: a schema says whether it may be there
}

func (s *structVisitor) Element() jsonvalue.Visitor { return nil }

// fill reads the fields encoding/json decodes into t: exported ones, by
// their json tag's name or their own, and those of embedded structs
// without a name, a shallower one first.
func (s *structVisitor) fill(t reflect.Type) {
	level := []reflect.Type{t}
	visited := map[reflect.Type]bool{}
	for len(level) > 0 {
		var next []reflect.Type
		for _, lt := range level {
			if visited[lt] {
				continue
			}
			visited[lt] = true
			for i := range lt.NumField() {
				sf := lt.Field(i)
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				ft := sf.Type
				if sf.Anonymous {
					for ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if name == "" && ft.Kind() == reflect.Struct {
						next = append(next, ft)
						continue
					}
					if !sf.IsExported() {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				if name == "" {
					name = sf.Name
				}
				if _, ok := s.fields[name]; ok {
					continue // a shallower field has it
				}
				s.fields[name] = field{v: build(sf.Type), slot: len(s.names)}
				s.names = append(s.names, name)
			}
		}
		level = next
	}
}

// mapVisitor checks the values of an object decoded into a map.
type mapVisitor struct{ elem jsonvalue.Visitor }

func (m *mapVisitor) Member(string) (jsonvalue.Visitor, int, error) { return m.elem, -1, nil }
func (m *mapVisitor) Element() jsonvalue.Visitor                    { return nil }

// listVisitor checks the elements of an array decoded into a slice or an
// array.
type listVisitor struct{ elem jsonvalue.Visitor }

func (l *listVisitor) Member(string) (jsonvalue.Visitor, int, error) { return nil, -1, nil }
func (l *listVisitor) Element() jsonvalue.Visitor                    { return l.elem }
