package jsonschema_test

import (
	"strings"
	"testing"
	"unsafe"

	invopop "github.com/invopop/jsonschema"

	"github.com/deputy-go/deputy/jsonschema"
)

type withChan struct {
	Name   string
	Events chan int
}

type step struct {
	Title string
	Done  func() bool
}

type job struct {
	Steps []step
}

type point struct{ Z complex128 }

type byPoint struct {
	Index map[string]map[string]*point
}

type unsafeField struct{ P unsafe.Pointer }

type addr struct{ A uintptr }

type keyedByStruct struct {
	M map[struct{ X int }]string
}

type keyedByChan struct {
	M map[chan int]string
}

type Base struct {
	Hook func()
}

type embedded struct {
	Base
	Name string
}

type embeddedPtr struct {
	*Base
}

type deepArray struct {
	Grid [2][3]struct{ C chan struct{} }
}

type node struct {
	Next     *node
	Children []node
	Signal   chan bool
}

type complexRoot complex64

// Fields JSON leaves out, and types that give their own schema, are fine.
type ignoredFields struct {
	Name    string
	Skipped chan int `json:"-"`
	Hidden  func()   `jsonschema:"-"`
	//lint:ignore U1000 never set: the walk must pass over an unexported field of any type
	private chan int
	Own     ownSchema
}

type ownSchema struct{ C chan int }

func (ownSchema) JSONSchema() *invopop.Schema { return &invopop.Schema{Type: "string"} }

type recursiveFine struct {
	Name     string
	Children []recursiveFine
}

type textKey struct{ A, B int }

func (k textKey) MarshalText() ([]byte, error) { return []byte("k"), nil }

type keyedByText struct {
	M map[textKey]string
}

// For returns an error naming the field it cannot describe, at any depth,
// instead of panicking; types it can describe are unaffected.
func TestForRefusesWhatJSONCannotHold(t *testing.T) {
	tests := []struct {
		name string
		for_ func() (*jsonschema.Schema, error)
		want string // in the error; "" for none
	}{
		{"chan field", jsonschema.For[withChan], "field Events of jsonschema_test.withChan: its type chan int is a channel"},
		{"func in a slice's struct", jsonschema.For[job], "field Steps[].Done of jsonschema_test.job: its type func() bool is a function"},
		{"complex in a map of maps", jsonschema.For[byPoint], "field Index[key][key].Z of jsonschema_test.byPoint: its type complex128 is a complex number"},
		{"unsafe pointer", jsonschema.For[unsafeField], "field P of jsonschema_test.unsafeField: its type unsafe.Pointer is an unsafe pointer"},
		{"uintptr", jsonschema.For[addr], "field A of jsonschema_test.addr: its type uintptr is a uintptr"},
		{"map keyed by a struct", jsonschema.For[keyedByStruct], "field M of jsonschema_test.keyedByStruct: its type map[struct { X int }]string has keys of type struct { X int }"},
		{"map keyed by a channel", jsonschema.For[keyedByChan], "has keys of type chan int"},
		{"embedded struct", jsonschema.For[embedded], "field Base.Hook of jsonschema_test.embedded: its type func() is a function"},
		{"embedded pointer", jsonschema.For[embeddedPtr], "field Base.Hook of jsonschema_test.embeddedPtr"},
		{"arrays of arrays", jsonschema.For[deepArray], "field Grid[][].C of jsonschema_test.deepArray: its type chan struct {} is a channel"},
		{"recursive type", jsonschema.For[node], "field Signal of jsonschema_test.node: its type chan bool"},
		{"pointer to the struct", jsonschema.For[*withChan], "field Events of *jsonschema_test.withChan"},
		{"slice at the root", jsonschema.For[[]withChan], "field [].Events of []jsonschema_test.withChan"},
		{"root not describable", jsonschema.For[complexRoot], "cannot describe type jsonschema_test.complexRoot: its type jsonschema_test.complexRoot is a complex number"},
		{"chan at the root", jsonschema.For[chan int], "cannot describe type chan int"},
		{"ignored and self-described fields", jsonschema.For[ignoredFields], ""},
		{"recursive, describable", jsonschema.For[recursiveFine], ""},
		{"map keyed by a TextMarshaler", jsonschema.For[keyedByText], ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *jsonschema.Schema
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("For panicked: %v", p)
					}
				}()
				s, err = tt.for_()
			}()
			if tt.want == "" {
				if err != nil || s == nil {
					t.Fatalf("For = %v, %v; want a schema", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || s != nil {
				t.Fatalf("For = %v, %v; want an error saying %q", s, err, tt.want)
			}
			if !strings.Contains(err.Error(), `json:"-"`) {
				t.Errorf("the error %q does not say what to do", err)
			}
		})
	}
}

// A property whose schema a type names through JSONSchemaProperty is
// reflected by the library itself; one it cannot describe is an error too.
type propertyAlias struct{ X string }

func (propertyAlias) JSONSchemaProperty(prop string) any {
	if prop == "X" {
		return make(chan int)
	}
	return nil
}

func TestForRefusesAnAliasedPropertyJSONCannotHold(t *testing.T) {
	s, err := jsonschema.For[propertyAlias]()
	if err == nil || s != nil || !strings.Contains(err.Error(), "cannot describe jsonschema_test.propertyAlias: unsupported type chan int") {
		t.Fatalf("For = %v, %v; want an error naming the type", s, err)
	}
}
