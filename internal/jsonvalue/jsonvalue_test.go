package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// reference decodes s the way encoding/json does with UseNumber.
func reference(s string) (any, bool) {
	if !json.Valid([]byte(s)) {
		return nil, false
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false
	}
	return v, true
}

var cases = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `-12.0E-7`, `true`, `false`, `null`,
	` {"a": [1, "two", {"three": null}], "b": true} `,
	`{"task":"count the files"}`, `{"a":1,"a":2}`, `[[[[]]]]`, `{"Task":1,"task":2}`,
	`[0,{"x":[{"a/b~":{"k":1,"k":2}}]}]`, `{"a":{"b":1},"a":{"b":2}}`, `{"t\u0061sk":1,"task":2}`,
	`"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"`, `"lone \ud800 surrogate"`,
	"\"caf\xc3\xa9\"", "\"bad \xff utf8\"", "\"ctl \x01\"", "{\"k\xff\":1}",
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `tru`, `truex`, `nul`,
	`{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{a:1}`, `{"a":1}}`, `[`, `{`, `"open`,
	`"\x"`, `"\u12"`, `"\u12G4"`, `1 2`, "\ufeff{}", `{"a":1} x`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestMatchesEncodingJSON(t *testing.T) {
	for _, s := range cases {
		check(t, s)
	}
}

// repeatedKey reports, by reading s with encoding/json's tokenizer, the
// first object of the valid JSON text s that holds a key twice, as a JSON
// pointer and the key.
func repeatedKey(s string) (pointer, key string, found bool) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var walk func(path string) bool
	walk = func(path string) bool {
		tok, _ := d.Token()
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, _ := d.Token()
				ks := k.(string)
				if seen[ks] {
					pointer, key = path, ks
					return true
				}
				seen[ks] = true
				esc := strings.ReplaceAll(strings.ReplaceAll(ks, "~", "~0"), "/", "~1")
				if walk(path + "/" + esc) {
					return true
				}
			}
			d.Token()
		case json.Delim('['):
			for i := 0; d.More(); i++ {
				if walk(path + "/" + strconv.Itoa(i)) {
					return true
				}
			}
			d.Token()
		}
		return false
	}
	found = walk("")
	return pointer, key, found
}

func check(t *testing.T, s string) {
	t.Helper()
	want, wantOK := reference(s)
	if got := Valid(s); got != wantOK {
		t.Errorf("Valid(%.80q) = %v, want %v", s, got, wantOK)
	}
	got, err := DecodeOnce(s)
	ok := err == nil
	if wantOK {
		var rk *RepeatedKeyError
		pointer, key, repeated := repeatedKey(s)
		switch {
		case repeated && !errors.As(err, &rk):
			t.Fatalf("DecodeOnce(%.80q) = %v, want the repeated key %q at %q refused", s, err, key, pointer)
		case repeated && (rk.Pointer != pointer || rk.Key != key):
			t.Fatalf("DecodeOnce(%.80q) refused key %q at %q, want %q at %q", s, rk.Key, rk.Pointer, key, pointer)
		case repeated:
			if _, ok := Decode(s); ok {
				t.Fatalf("Decode(%.80q) accepts a repeated key", s)
			}
			return
		}
	} else if err != nil && !errors.Is(err, ErrSyntax) {
		t.Fatalf("DecodeOnce(%.80q) = %v on invalid JSON, want ErrSyntax", s, err)
	}
	if _, dok := Decode(s); dok != ok {
		t.Fatalf("Decode(%.80q) ok = %v, DecodeOnce err = %v", s, dok, err)
	}
	if ok != wantOK {
		t.Fatalf("Decode(%.80q) ok = %v, want %v", s, ok, wantOK)
	}
	if reflect.DeepEqual(want, got) {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decode(%.80q) (-encoding/json +jsonvalue):\n%s", s, diff)
	}
}

// FuzzDecode checks that Valid and Decode agree with encoding/json on any
// text.
func FuzzDecode(f *testing.F) {
	for _, s := range cases {
		if len(s) < 1000 {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}

func BenchmarkDecode(b *testing.B) {
	data := []byte(`{"task":"count the files in the repository","depth":2,"paths":["a","b"]}`)
	b.Run("jsonvalue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := Decode(string(data)); !ok {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := json.NewDecoder(bytes.NewReader(data))
			d.UseNumber()
			var v any
			if err := d.Decode(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// hostile is a JSON text of about n bytes built to make a parser slow.
type hostile struct {
	name, text string
	check      func(v any, err error) bool // whether DecodeOnce's result is right
}

// hostileInputs returns texts of about n bytes: nesting to the depth bound
// under long keys with a repeated key at the bottom, one object of many
// keys, and one string of many escapes.
func hostileInputs(n int) []hostile {
	const depth = maxDepth - 1
	key := strings.Repeat("k", n/depth)
	deep := strings.Repeat(`{"`+key+`":`, depth) + `{"a":1,"a":2}` + strings.Repeat("}", depth)
	wantPointer := strings.Repeat("/"+key, depth)

	var wide strings.Builder
	wide.WriteString(`{"k0":0`)
	keys := 1
	for ; wide.Len() < n; keys++ {
		wide.WriteString(`,"k` + strconv.Itoa(keys) + `":` + strconv.Itoa(keys))
	}
	wide.WriteString("}")

	escapes := `"` + strings.Repeat(`\u00e9\n`, n/8) + `"`
	unescaped := strings.Repeat("é\n", n/8)
	return []hostile{
		{"deep", deep, func(_ any, err error) bool {
			var rk *RepeatedKeyError
			return errors.As(err, &rk) && rk.Key == "a" && rk.Pointer == wantPointer
		}},
		{"wide", wide.String(), func(v any, err error) bool {
			m, _ := v.(map[string]any)
			return err == nil && len(m) == keys
		}},
		{"escapes", escapes, func(v any, err error) bool {
			s, _ := v.(string)
			return err == nil && s == unescaped
		}},
	}
}

// Reading is linear in the text: 10 MB built to be slow is read in well
// under a second (BenchmarkDecodeHostile has the figures). Nesting to the
// depth bound under 1,000-byte keys, with a repeated key at the bottom,
// took 23 seconds when the error's JSON pointer was rebuilt at each level
// on the way out.
func TestHostileInputIsLinear(t *testing.T) {
	for _, h := range hostileInputs(10 << 20) {
		start := time.Now()
		v, err := DecodeOnce(h.text)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: reading %d bytes took %v", h.name, len(h.text), took)
		}
		if !h.check(v, err) {
			t.Errorf("%s: DecodeOnce = %.80v, %v", h.name, v, err)
		}
	}
}

func BenchmarkDecodeHostile(b *testing.B) {
	for _, mb := range []int{1, 10} {
		for _, h := range hostileInputs(mb << 20) {
			b.Run(h.name+"/"+strconv.Itoa(mb)+"MB", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(h.text)))
				for b.Loop() {
					if !h.check(DecodeOnce(h.text)) {
						b.Fatal("wrong result")
					}
				}
			})
		}
	}
}

// The error says where the repeated key is, and what to do.
func TestRepeatedKeyMessage(t *testing.T) {
	_, err := DecodeOnce(`{"a":[{"x":1},{"task":"short","task":"long"}]}`)
	want := `at /a/1: the key "task" appears more than once: write each key once`
	if err == nil || err.Error() != want {
		t.Fatalf("DecodeOnce: %v, want %q", err, want)
	}
}

var memberCases = []string{
	`{"task":"a"}`, ` { "system_prompt" : "s", "task" : "t" } `, `{"TASK":"upper"}`, `{"Task":"a","task":"b"}`,
	`{"task":"a","task":"b"}`, `{"task":"a","task":5}`, `{"task":5}`, `{"task":null}`, `{"task":["a"]}`,
	`{"task":{"task":"inner"}}`, `{"tasks":"no"}`, `{}`, `[]`, `"task"`, `{"task":"\u00e9\n"}`, "{\"task\":\"bad \xff\"}",
	`{"t\u0061sk":"escaped key"}`, `{"task":"a"`, `{"task":"a"} x`, `{"task":"a",}`, `{"task" "a"}`, `{"K":"kelvin"}`,
}

// Member agrees with DecodeOnce: the exact member's string value, and
// nothing for a repeated key.
func TestMember(t *testing.T) {
	for _, s := range memberCases {
		checkMember(t, s)
	}
}

func checkMember(t *testing.T, s string) {
	t.Helper()
	got, ok := Member(s, "task")
	v, err := DecodeOnce(s)
	m, _ := v.(map[string]any)
	want, wantOK := m["task"].(string)
	var rk *RepeatedKeyError
	switch {
	case errors.As(err, &rk) && (rk.Pointer != "" || rk.Key != "task"):
		return // a repeated key elsewhere: Member need not see it
	case err != nil:
		want, wantOK = "", false
	}
	if got != want || ok != wantOK {
		t.Errorf("Member(%.80q) = %q, %v; want %q, %v as DecodeOnce", s, got, ok, want, wantOK)
	}
}

// FuzzMember holds Member to DecodeOnce.
func FuzzMember(f *testing.F) {
	for _, s := range memberCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkMember(t, s) })
}

// Members agrees with DecodeOnce: every member of a valid object, in
// order, each value's text decoding to the member's value (a string's by
// String too), and nothing from text that is not an object.
func TestMembers(t *testing.T) {
	for _, s := range memberCases {
		checkMembers(t, s)
	}
	for _, s := range []string{` { } `, `{"a":[1,{"b":2}],"c":null,"d":true,"e":-1.5e3}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `{} {}`, `{"a":1}}`} {
		checkMembers(t, s)
	}
	n := 0
	if Members(`{"a":1,"b":2,"c":3}`, func(key, _ string) bool { n++; return key != "b" }) || n != 2 {
		t.Errorf("Members called f %d times and reported true after f said false at the second member", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		Members(`{"task":"count the files","bg":true}`, func(key, value string) bool {
			_, ok := String(value)
			return ok || key == "bg"
		})
	}); n != 0 {
		t.Errorf("Members and String allocate %v times for plain text", n)
	}
}

func checkMembers(t *testing.T, s string) {
	t.Helper()
	var keys []string
	var values []any
	ok := Members(s, func(key, value string) bool {
		v, err := DecodeOnce(value)
		if err != nil {
			var rk *RepeatedKeyError
			if !errors.As(err, &rk) {
				t.Errorf("Members(%.80q): the value of %q, %.80q, is not JSON: %v", s, key, value, err)
			}
			v = rk // a repeated key within: Members need not see it
		}
		if str, isStr := v.(string); isStr {
			if got, ok := String(value); !ok || got != str {
				t.Errorf("String(%.80q) = %q, %v; want %q, true", value, got, ok, str)
			}
		} else if got, ok := String(value); ok {
			t.Errorf("String(%.80q) = %q, true; want false", value, got)
		}
		keys, values = append(keys, key), append(values, v)
		return true
	})
	v, err := DecodeOnce(s)
	m, isObject := v.(map[string]any)
	var rk *RepeatedKeyError
	switch {
	case errors.As(err, &rk):
		if !ok {
			t.Errorf("Members(%.80q) refused valid JSON that repeats a key", s)
		}
		return
	case err != nil || !isObject:
		if ok {
			t.Errorf("Members(%.80q) = true for what is not a JSON object", s)
		}
		return
	}
	if !ok || len(keys) != len(m) {
		t.Fatalf("Members(%.80q) = %v with keys %q; want true, the keys of %v", s, ok, keys, m)
	}
	for i, k := range keys {
		if !reflect.DeepEqual(values[i], m[k]) {
			t.Errorf("Members(%.80q): %q is %#v, want %#v", s, k, values[i], m[k])
		}
	}
}

// FuzzMembers holds Members and String to DecodeOnce.
func FuzzMembers(f *testing.F) {
	for _, s := range memberCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkMembers(t, s) })
}
