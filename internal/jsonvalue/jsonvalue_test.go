package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

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
	`{"task":"count the files"}`, `{"a":1,"a":2}`, `[[[[]]]]`,
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

func check(t *testing.T, s string) {
	t.Helper()
	want, wantOK := reference(s)
	if got := Valid(s); got != wantOK {
		t.Errorf("Valid(%.80q) = %v, want %v", s, got, wantOK)
	}
	got, ok := Decode(s)
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

var fieldCases = []string{
	`{"task":"a"}`, ` { "system_prompt" : "s", "task" : "t" } `, `{"TASK":"upper"}`, `{"Task":"a","task":"b"}`,
	`{"task":"a","task":5}`, `{"task":5}`, `{"task":null}`, `{"task":["a"]}`, `{"task":{"task":"inner"}}`,
	`{"tasks":"no"}`, `{}`, `[]`, `"task"`, `{"task":"\u00e9\n"}`, "{\"task\":\"bad \xff\"}", `{"t\u0061sk":"escaped key"}`,
	`{"task":"a"`, `{"task":"a"} x`, `{"task":"a",}`, `{"task" "a"}`, `{"K":"kelvin"}`,
}

// StringField agrees with json.Unmarshal into a struct with a "task" field.
func TestStringField(t *testing.T) {
	for _, s := range fieldCases {
		checkField(t, s)
	}
}

func checkField(t *testing.T, s string) {
	t.Helper()
	var want struct {
		Task string `json:"task"`
	}
	wantErr := json.Unmarshal([]byte(s), &want)
	got, ok := StringField(s, "task")
	if !json.Valid([]byte(s)) {
		if ok {
			t.Errorf("StringField(%.80q) = %q on invalid JSON", s, got)
		}
		return
	}
	var syntax *json.SyntaxError
	if errors.As(wantErr, &syntax) {
		t.Fatalf("json.Unmarshal(%q): %v on valid JSON", s, wantErr)
	}
	if got != want.Task {
		t.Errorf("StringField(%.80q) = %q, want %q as json.Unmarshal", s, got, want.Task)
	}
}

// FuzzStringField holds StringField to json.Unmarshal.
func FuzzStringField(f *testing.F) {
	for _, s := range fieldCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkField(t, s) })
}
