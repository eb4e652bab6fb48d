package jsonschema

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"

	invopop "github.com/invopop/jsonschema"
)

// The interfaces by which a type gives invopop/jsonschema its own schema:
// its fields are then not reflected.
var (
	customSchema = reflect.TypeFor[interface{ JSONSchema() *invopop.Schema }]()
	aliasSchema  = reflect.TypeFor[interface{ JSONSchemaAlias() any }]()
	textMarshal  = reflect.TypeFor[encoding.TextMarshaler]()
)

// describable returns an error naming the first field of t, at any depth,
// that a JSON Schema cannot describe — a channel, a function, a complex
// number, an unsafe pointer or a uintptr, or a map whose keys JSON cannot
// write — or nil. It follows the fields the reflector reads: exported
// ones and embedded structs, not those tagged json:"-" or
// jsonschema:"-", and not inside a type that gives its own schema.
func describable(t reflect.Type) error {
	d := describer{seen: map[reflect.Type]bool{}}
	if p := d.walk(t, ""); p != nil {
		where := "type " + t.String()
		if p.path != "" {
			where = "field " + strings.TrimPrefix(p.path, ".") + " of " + t.String()
		}
		return fmt.Errorf("jsonschema: cannot describe %s: its type %v %s: give it a type JSON can hold, or leave it out of the JSON with the tag json:\"-\"", where, p.t, p.why)
	}
	return nil
}

type describer struct {
	seen map[reflect.Type]bool
}

// problem is a place the schema cannot describe.
type problem struct {
	path string
	t    reflect.Type
	why  string
}

func (d describer) walk(t reflect.Type, path string) *problem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(customSchema) || reflect.PointerTo(t).Implements(customSchema) {
		return nil
	}
	if t.Implements(aliasSchema) {
		alias := reflect.New(t).Interface().(interface{ JSONSchemaAlias() any }).JSONSchemaAlias()
		if alias == nil {
			return nil
		}
		return d.walk(reflect.TypeOf(alias), path)
	}
	switch t.Kind() {
	case reflect.Chan:
		return &problem{path, t, "is a channel, which JSON has no value for"}
	case reflect.Func:
		return &problem{path, t, "is a function, which JSON has no value for"}
	case reflect.Complex64, reflect.Complex128:
		return &problem{path, t, "is a complex number, which JSON has no value for"}
	case reflect.UnsafePointer:
		return &problem{path, t, "is an unsafe pointer, which JSON has no value for"}
	case reflect.Uintptr:
		return &problem{path, t, "is a uintptr, an address, not a number to exchange (use uint64)"}
	case reflect.Slice, reflect.Array:
		return d.walk(t.Elem(), path+"[]")
	case reflect.Map:
		if !jsonKey(t.Key()) {
			return &problem{path, t, "has keys of type " + t.Key().String() + ", which a JSON object's keys (strings) cannot hold"}
		}
		return d.walk(t.Elem(), path+"[key]")
	case reflect.Struct:
		if d.seen[t] {
			return nil // a recursive type: its fields are being walked
		}
		d.seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == "-" {
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("jsonschema"), ","); name == "-" {
				continue
			}
			if p := d.walk(f.Type, path+"."+f.Name); p != nil {
				return p
			}
		}
	}
	return nil
}

// jsonKey reports whether encoding/json writes and reads map keys of type k.
func jsonKey(k reflect.Type) bool {
	switch k.Kind() {
	case reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return k.Implements(textMarshal) || reflect.PointerTo(k).Implements(textMarshal)
}
