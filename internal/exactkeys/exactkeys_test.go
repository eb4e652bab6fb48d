package exactkeys

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

type city struct {
	City string `json:"city"`
}

type Embedded struct {
	Deep string `json:"deep"`
}

type args struct {
	Task    string          `json:"task"`
	Plain   string          // keyed "Plain"
	Skipped string          `json:"-"`
	In      city            `json:"in"`
	Ptr     *city           `json:"ptr"`
	List    []city          `json:"list"`
	Map     map[string]city `json:"map"`
	Any     any             `json:"any"`
	Raw     json.RawMessage `json:"raw"`
	When    time.Time       `json:"when"`
	Embedded
}

// twoCases spells two fields alike but for case: each key is one of them.
type twoCases struct {
	Lower string `json:"a"`
	Upper string `json:"A"`
}

type tree struct {
	Name string `json:"name"`
	Kids []tree `json:"kids"`
}

func TestCheck(t *testing.T) {
	typ := reflect.TypeFor[args]()
	for _, c := range []struct {
		name, in string
		want     string // a part of the error; "" for none
	}{
		{"exact keys", `{"task":"a","Plain":"p","in":{"city":"c"},"list":[{"city":"x"}],"map":{"k":{"city":"y"}},"deep":"d"}`, ""},
		{"a key no field has", `{"task":"a","other":{"TASK":1}}`, ""},
		{"a key beside its field in another case", `{"task":"a","TASK":"b"}`, `at the top level: the key "TASK" is read as "task" only because case is ignored: spell it "task"`},
		{"a key alone in another case", `{"Task":"b"}`, `the key "Task" is read as "task"`},
		{"a Go name in another case", `{"plain":"p"}`, `the key "plain" is read as "Plain"`},
		{"the Kelvin sign", `{"tas\u212a":"b"}`, `is read as "task"`},
		{"a repeated key", `{"task":"a","task":"b"}`, `at the top level: the key "task" appears more than once`},
		{"in a nested object", `{"in":{"city":"a","CITY":"b"}}`, `at /in: the key "CITY" is read as "city"`},
		{"behind a pointer", `{"ptr":{"City":"b"}}`, `at /ptr: the key "City"`},
		{"in a list", `{"list":[{"city":"a"},{"cITY":"b"}]}`, `at /list/1: the key "cITY"`},
		{"in a map", `{"map":{"k/1":{"CITY":"b"}}}`, `at /map/k~11: the key "CITY"`},
		{"an embedded field", `{"DEEP":"x"}`, `the key "DEEP" is read as "deep"`},
		{"a field json skips", `{"skipped":"x","Skipped":"y"}`, ""},
		{"under any", `{"any":{"a":1,"A":2}}`, ""},
		{"a RawMessage", `{"raw":{"a":1,"A":2}}`, ""},
		{"a type that decodes itself", `{"when":"2026-01-01T00:00:00Z"}`, ""},
		{"not JSON", `{"task":`, "not valid JSON"},
		{"not JSON after a refusal", `{"TASK":"b",}`, "not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.in, typ)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check = %v, want an error holding %q", err, c.want)
			}
			if c.want != "" && c.want != "not valid JSON" && !Problem(err) {
				t.Errorf("Problem(%v) = false", err)
			}
		})
	}
}

// TestCheckMattersToEncodingJSON: what Check refuses is what encoding/json
// would read into a field the text did not name.
func TestCheckMattersToEncodingJSON(t *testing.T) {
	var a args
	if err := json.Unmarshal([]byte(`{"task":"a","TASK":"b","tas\u212a":"c"}`), &a); err != nil || a.Task != "c" {
		t.Fatalf("encoding/json read task %q (%v): the premise of the package no longer holds", a.Task, err)
	}
	var got args
	err := Unmarshal(`{"task":"a","TASK":"b"}`, &got)
	if err == nil || got.Task != "" {
		t.Fatalf("Unmarshal = %v, task %q: want a refusal and nothing decoded", err, got.Task)
	}
	var we *jsonvalue.WalkError
	if !errors.As(err, &we) || we.Pointer != "" {
		t.Fatalf("Unmarshal = %#v, want a *jsonvalue.WalkError at the top", err)
	}
}

func TestTwoFieldsAlikeButForCase(t *testing.T) {
	typ := reflect.TypeFor[twoCases]()
	if err := Check(`{"a":"1","A":"2"}`, typ); err != nil {
		t.Fatalf("each key is a field's exactly: %v", err)
	}
	if err := Check(`{"a":"1","a":"2"}`, typ); err == nil {
		t.Fatal("a repeated key passed")
	}
}

func TestRecursiveType(t *testing.T) {
	typ := reflect.TypeFor[tree]()
	if err := Check(`{"name":"r","kids":[{"name":"a","kids":[{"name":"b"}]}]}`, typ); err != nil {
		t.Fatal(err)
	}
	err := Check(`{"name":"r","kids":[{"name":"a","kids":[{"NAME":"b"}]}]}`, typ)
	if err == nil || !strings.HasPrefix(err.Error(), `at /kids/0/kids/0: the key "NAME"`) {
		t.Fatalf("Check = %v", err)
	}
}

// TestNothingAllocated: checking keys that are right costs no allocation,
// once the type is known.
func TestNothingAllocated(t *testing.T) {
	typ := reflect.TypeFor[args]()
	in := `{"task":"a","in":{"city":"c"},"list":[{"city":"x"},{"city":"y"}],"map":{"k":{"city":"y"}}}`
	if n := testing.AllocsPerRun(100, func() {
		if Check(in, typ) != nil {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Fatalf("%v allocations a check, want 0", n)
	}
}

// TestHostileInputIsLinear: text nested as deep as encoding/json allows,
// into a recursive type, and an object of many keys, each read once.
func TestHostileInputIsLinear(t *testing.T) {
	typ := reflect.TypeFor[tree]()
	deep := strings.Repeat(`{"kids":[`, 4900) + strings.Repeat(`]}`, 4900)
	wide := "{" + strings.Repeat(`"x":1,`, 200000) + `"name":"n"}`
	for _, in := range []string{deep, wide} {
		start := time.Now()
		if err := Check(in, typ); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%d bytes took %v", len(in), d)
		}
	}
}

type (
	nameA struct {
		Name string
		X    string `json:"x"`
	}
	nameB struct {
		Name string
	}
	// sameDepth embeds two structs whose fields share names at one depth:
	// encoding/json decodes neither.
	sameDepth struct {
		nameA
		nameB
		Top string `json:"top"`
	}
	// shallower has a Name of its own, which hides its embedded struct's.
	shallower struct {
		nameA
		Name city
	}
	taggedName struct {
		In city `json:"Name"`
	}
	// taggedWins embeds, at one depth, an untagged Name and one tagged
	// "Name": the tagged one is decoded.
	taggedWins struct {
		nameA
		taggedName
	}
	viaA struct{ nameA }
	viaB struct{ nameA }
	// twiceDeep embeds one struct twice at one depth: its fields hide
	// each other.
	twiceDeep struct {
		viaA
		viaB
	}
)

// badTag's tag is no name encoding/json takes (a quote in it): the
// field's own is.
var badTag = reflect.StructOf([]reflect.StructField{{Name: "Quoted", Type: reflect.TypeFor[string](), Tag: `json:"a\"b"`}})

// wide is a struct of n string fields keyed f0 to f<n-1>.
func wide(n int) reflect.Type {
	fs := make([]reflect.StructField, n)
	for i := range fs {
		fs[i] = reflect.StructField{Name: "F" + strconv.Itoa(i), Type: reflect.TypeFor[string](), Tag: reflect.StructTag(`json:"f` + strconv.Itoa(i) + `"`)}
	}
	return reflect.StructOf(fs)
}

// TestFieldsAsEncodingJSONReadsThem: the keys Check holds to are those
// encoding/json decodes into a field, past a struct's 64th field and
// where embedded structs give one name to fields at one depth or at
// several; each case's premise is checked against encoding/json.
func TestFieldsAsEncodingJSONReadsThem(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  reflect.Type
		in   string
		want string // a part of the error; "" for none
		// decoded, when set, reports whether encoding/json decoded in
		// into v (a pointer to a new value of typ) as the case says.
		decoded func(v any) bool
	}{
		{"the 65th field repeated", wide(70), `{"f0":"a","f64":"b","f64":"c"}`, `the key "f64" appears more than once`, nil},
		{"the 300th field repeated", wide(300), `{"f299":"a","f0":"b","f299":"c"}`, `the key "f299" appears more than once`, nil},
		{"the 70th field in another case", wide(70), `{"F69":"a"}`, `the key "F69" is read as "f69"`, nil},
		{"wide fields each once", wide(300), `{"f0":"a","f64":"b","f128":"c","f256":"d","f299":"e"}`, "", nil},
		{"same depth: neither is decoded, so a repeat", reflect.TypeFor[sameDepth](), `{"Name":"a","Name":"b"}`, "",
			func(v any) bool { s := v.(*sameDepth); return s.nameA.Name == "" && s.nameB.Name == "" }},
		{"same depth: neither is decoded, so another case", reflect.TypeFor[sameDepth](), `{"NAME":"a"}`, "",
			func(v any) bool { s := v.(*sameDepth); return s.nameA.Name == "" && s.nameB.Name == "" }},
		{"same depth: the other fields still count", reflect.TypeFor[sameDepth](), `{"top":"a","TOP":"b"}`, `the key "TOP" is read as "top"`, nil},
		{"same depth: a field alone at its name still counts", reflect.TypeFor[sameDepth](), `{"x":"a","x":"b"}`, `the key "x" appears more than once`, nil},
		{"the shallower field wins", reflect.TypeFor[shallower](), `{"Name":{"city":"a","CITY":"b"}}`, `at /Name: the key "CITY" is read as "city"`,
			nil},
		{"the shallower field is decoded", reflect.TypeFor[shallower](), `{"Name":{"city":"a"},"x":"1"}`, "",
			func(v any) bool { s := v.(*shallower); return s.Name.City == "a" && s.nameA.Name == "" && s.X == "1" }},
		{"a tagged field wins at its depth", reflect.TypeFor[taggedWins](), `{"Name":{"City":"a"}}`, `at /Name: the key "City" is read as "city"`, nil},
		{"a tagged field is decoded", reflect.TypeFor[taggedWins](), `{"Name":{"city":"a"}}`, "",
			func(v any) bool { s := v.(*taggedWins); return s.In.City == "a" && s.nameA.Name == "" }},
		{"one struct embedded twice at one depth", reflect.TypeFor[twiceDeep](), `{"Name":"a","Name":"b","name":"c"}`, "",
			func(v any) bool { s := v.(*twiceDeep); return s.viaA.Name == "" && s.viaB.Name == "" }},
		{"a tag that is no name", badTag, `{"Quoted":"a","quoted":"b"}`, `the key "quoted" is read as "Quoted"`,
			func(v any) bool { return reflect.ValueOf(v).Elem().Field(0).String() == "b" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.in, c.typ)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check = %v, want an error holding %q", err, c.want)
			}
			if c.decoded != nil {
				v := reflect.New(c.typ).Interface()
				if err := json.Unmarshal([]byte(c.in), v); err != nil || !c.decoded(v) {
					t.Fatalf("encoding/json decoded %+v (%v): the case's premise no longer holds", v, err)
				}
			}
		})
	}
}
