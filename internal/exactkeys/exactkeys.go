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
	"unicode"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// Check reports, for s, JSON text to be decoded into a value of type t, a
// key of an object that encoding/json would decode into a struct field
// only by ignoring case, or a field's key written twice in one object. The
// error says where, what is wrong and what to send; text that is not JSON
// is jsonvalue.ErrSyntax. It reads s once, allocating nothing but the keys
// that hold escapes (and, in a struct of more than 256 fields, a bit for
// each field past them).
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

// fill reads the fields encoding/json decodes into t, by its rules:
// exported fields, by their json tag's name or their own, and those of
// the structs embedded without a name, level by level; of fields that
// share a name, the shallowest wins, a tagged one over untagged ones at
// its depth, and two at one depth both tagged or both untagged hide each
// other (neither is decoded). A struct type embedded twice at one depth
// has each of its fields there twice, so they hide each other too.
func (s *structVisitor) fill(t reflect.Type) {
	taken := map[string]bool{} // the names a shallower depth gave a field, kept or hidden
	level := []reflect.Type{t}
	count := map[reflect.Type]int{t: 1}
	visited := map[reflect.Type]bool{}
	for len(level) > 0 {
		var next []reflect.Type
		nextCount := map[reflect.Type]int{}
		var here []cand
		for _, lt := range level {
			if visited[lt] {
				continue
			}
			visited[lt] = true
			for i := range lt.NumField() {
				sf := lt.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTag(name) {
					name = ""
				}
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					nextCount[ft]++
					if nextCount[ft] == 1 {
						next = append(next, ft)
					}
					continue
				}
				c := cand{name: name, tagged: name != "", typ: sf.Type}
				if c.name == "" {
					c.name = sf.Name
				}
				here = append(here, c)
				if count[lt] > 1 {
					here = append(here, c) // it hides itself
				}
			}
		}
		// Of the names this depth gives, those a shallower depth gave are
		// hidden; the others are kept if one field alone is tagged, or
		// alone has the name.
		byName := map[string][]cand{}
		for _, c := range here {
			if !taken[c.name] {
				byName[c.name] = append(byName[c.name], c)
			}
		}
		for _, c := range here {
			same, ok := byName[c.name]
			if !ok {
				continue
			}
			delete(byName, c.name)
			taken[c.name] = true
			win, ok := winner(same)
			if !ok {
				continue // they hide each other
			}
			s.fields[win.name] = field{v: build(win.typ), slot: len(s.names)}
			s.names = append(s.names, win.name)
		}
		level, count = next, nextCount
	}
}

// cand is a field that gives a name at its depth: its tag's, or its own.
type cand struct {
	name   string
	tagged bool
	typ    reflect.Type
}

// winner returns the field of same, all giving one name at one depth,
// that encoding/json decodes under it: the only one, or the only one
// tagged; false when they hide each other.
func winner(same []cand) (cand, bool) {
	if len(same) == 1 {
		return same[0], true
	}
	var win cand
	tagged := 0
	for _, c := range same {
		if c.tagged {
			win = c
			tagged++
		}
	}
	return win, tagged == 1
}

// validTag reports whether name may be a key as encoding/json reads a
// tag: not empty, and letters, digits and punctuation but for backslash
// and quotes only.
func validTag(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if !strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c) && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
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
