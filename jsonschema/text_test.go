package jsonschema

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// textSchemas are the flat schemas ValidateText is held to the validator
// on: the sub-agents' (a task; a system prompt and a task; a Report), the
// plain types and lists of them, enums and property names written with
// escapes, required names that are no property, no properties at all, and
// the most properties the text is read for (64) and one more.
var textSchemas = func() []string {
	names := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
		}
		return b.String()
	}
	return []string{
		`{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}`,
		`{"type":"object","properties":{"system_prompt":{"type":"string"},"task":{"type":"string"}},"required":["task"]}`,
		`{"type":"object","properties":{"status":{"type":"string","enum":["success","partial","failed"]},"summary":{"type":"string"},"findings":{"type":["object","null"]}},"required":["status","summary"],"additionalProperties":false}`,
		`{"type":"object","properties":{"task":{"type":"string"},"bg":{"type":"boolean"},"o":{"type":"object"},"a":{"type":"array"},"z":{"type":"null"},"any":{}},"required":["task","bg"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":true},"required":["a","b"],"additionalProperties":true}`,
		`{"type":"object","properties":{"task":{"type":"string","enum":["s","u"]},"o":{"type":["object","null"]},"a":{"enum":["s"]},"z":{"type":["array","boolean"],"enum":["s"]}},"required":["task"],"additionalProperties":false}`,
		`{"type":"object","properties":{"e":{"enum":["\u00e9","a\"b","\ud83d\ude00","\ufffd","","a\\u0062"]},"n":{"type":["string","null"]},"b":{"type":["boolean","null"]}},"required":["e"]}`,
		`{"type":"object","properties":{"t\u0061sk":{"type":"string"},"\u00e9":{"type":"boolean"},"\ufffd":{"type":"null"},"":{"type":"string"},"a/b~c":{}},"required":["task",""],"additionalProperties":false}`,
		`{"type":"object"}`,
		`{"type":"object","additionalProperties":false}`,
		`{"type":"object","properties":{"k":{"type":"string"}},"required":["k"],"additionalProperties":true}`,
		`{"type":"object","properties":{` + names(64) + `},"required":["p0","p63"],"additionalProperties":false}`,
		`{"type":"object","properties":{` + names(65) + `},"required":["p0","p64"],"additionalProperties":false}`,
	}
}()

// textCases are values a model might send that a reading of the text could
// get wrong.
var textCases = []string{
	`{"task":"s"}`, ` {"task" : "s"} `, "\t{\r\n\"task\":\"s\"\n}\r\n", `{"task":"s","task":"s"}`, `{"task":"s","task":"u"}`,
	`{"task":"s","t\u0061sk":"s"}`, `{"t\u0061sk":"s"}`, `{"task":"\u0073"}`, `{"task":"\ud800"}`, `{"task":"\udc00\ud800"}`,
	"{\"task\":\"\xff\"}", "{\"t\xffsk\":\"s\",\"t\xfesk\":\"s\"}", "{\"\xff\":null,\"\\ufffd\":null}", "{\"\\ud800\":null,\"\\ufffd\":null}",
	`{"task":{"task":"s"}}`, `{"task":["s"]}`, `{"task":1}`, `{"task":-0}`, `{"task":1e400}`, `{"task":01}`, `{"task":.5}`,
	`{"task":"s"} x`, `{"task":"s"}}`, `{"task":"s"},`, `{"task":"s",}`, `{"task" "s"}`, `{"task":"s"`, `{"task":"s}`,
	`{"task":tru}`, `{"task":truex}`, `{"task":nul}`, `{"task":"s","bg":true}`, `{"task":"s","bg":null}`, `{"bg":true}`,
	`{}`, `{ }`, `[]`, `"task"`, `null`, `true`, `1`, ``, ` `, `{`, `}`, "\ufeff{\"task\":\"s\"}", "{\"task\":\"s\"}\x00",
	`{"task":"s","extra":1}`, `{"task":"s","extra":{"x":1,"x":2}}`, `{"task":"s","o":{"x":1,"x":2}}`, `{"task":"s","a":[{"x":1,"x":2}]}`,
	`{"status":"success","summary":"ok"}`, `{"status":"success","summary":"ok","findings":null}`, `{"status":"succes\u0073","summary":"ok"}`,
	`{"status":"success","summary":"ok","findings":{"n":1e999}}`, `{"status":"success","summary":"ok","Status":"failed"}`,
	`{"status":"success","summary":"ok","status":"failed"}`, `{"status":"success"}`, `{"status":null,"summary":"ok"}`,
	`{"e":"\u00e9"}`, `{"e":"é"}`, `{"e":"e\u0301"}`, `{"e":"a\"b"}`, `{"e":"a\u0022b"}`, `{"e":"\ud83d\ude00"}`, `{"e":"😀"}`,
	`{"e":"\ud83d"}`, `{"e":"\ufffd"}`, "{\"e\":\"\xed\xa0\x80\"}", `{"e":""}`, `{"e":"a\\u0062"}`, `{"e":"ab"}`, `{"e":null}`,
	`{"":"s","task":"s"}`, `{"task":"s","\u00e9":true,"":""}`, `{"task":"s","é":true,"\u00e9":false,"":""}`, `{"a/b~c":[],"task":"s","":""}`,
	`{"k":"v"}`, `{"k":"v","K":1}`, `{"k":"v","k":"v"}`, `{"task":[[[[[[[[[[]]]]]]]]]]}`, `{"p0":"a","p63":"b"}`, `{"p0":"a","p64":"b"}`,
	`{"p0":"a","p63":"b","p0":"a"}`, `{"p0":"a","p64":"b","p64":"b"}`, `{"task":"s"}` + strings.Repeat(" ", 100),
}

// FuzzValidateTextAgreesWithValidator holds ValidateText (whose flat
// schemas read the text without decoding it) to the validator: the text is
// valid JSON with no key repeated anywhere (encoding/json's decoder, read
// token by token) and numbers in range, whose value, decoded as
// encoding/json does, the validator passes. When the text is read without
// decoding, what it read is what encoding/json decodes; and whatever the
// verdict, it is the one, in the same words, of the check without the
// reading of the text.
func FuzzValidateTextAgreesWithValidator(f *testing.F) {
	// Each value with one schema in turn and with the one of every plain
	// type (TestValidateTextAgreesWithValidator tries every pair).
	for i, c := range textCases {
		f.Add(uint8(i%len(textSchemas)), c)
		f.Add(uint8(3), c)
	}
	schemas := make([]*Schema, len(textSchemas))
	for i, raw := range textSchemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil || s.flat == nil {
			f.Fatalf("%.120s: not compiled flat (%v)", raw, err)
		}
		schemas[i] = s
	}
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		checkText(t, schemas[int(which)%len(schemas)], text)
	})
}

func TestValidateTextAgreesWithValidator(t *testing.T) {
	n := 0
	for _, raw := range textSchemas {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range textCases {
			if checkText(t, s, c) {
				n++
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d values passed by their text", n)
	}
}

// checkText checks ValidateText of text against s as described at
// FuzzValidateTextAgreesWithValidator, and reports whether the text was
// passed without decoding it.
func checkText(t *testing.T, s *Schema, text string) (byText bool) {
	t.Helper()
	ctx := context.Background()
	err := s.ValidateText(ctx, text)
	if err2 := s.ValidateContext(ctx, []byte(text)); !sameVerdict(err, err2) {
		t.Errorf("%.120s: ValidateText(%.200q) = %v, ValidateContext %v", s.raw, text, err, err2)
	}
	want, v := referenceCheck(s, text)
	if (err == nil) != want {
		t.Errorf("%.120s: ValidateText(%.200q) = %v; the validator passes it: %v", s.raw, text, err, want)
	}
	// The same check without the reading of the text says the same.
	slow := *s
	slow.flat = nil
	if err2 := slow.ValidateText(ctx, text); !sameVerdict(err, err2) {
		t.Errorf("%.120s: ValidateText(%.200q) = %v, without the flat check %v", s.raw, text, err, err2)
	}
	if !s.flat.passesText(text) {
		return false
	}
	// What the text reading saw is what encoding/json decodes.
	seen := map[string]any{}
	jsonvalue.Members(text, func(key, value string) bool {
		switch value {
		case "true", "false", "null":
			seen[key] = map[string]any{"true": true, "false": false, "null": nil}[value]
		default:
			seen[key], _ = jsonvalue.String(value)
		}
		return true
	})
	var decoded any
	if err := json.Unmarshal([]byte(text), &decoded); err != nil || !reflect.DeepEqual(seen, decoded) {
		t.Errorf("%.120s: the text %.200q was read as %#v, and encoding/json decodes %#v (%v)", s.raw, text, seen, decoded, err)
	}
	if !reflect.DeepEqual(v, decoded) {
		t.Errorf("%.120s: the text %.200q decodes to %#v for the validator, %#v for encoding/json", s.raw, text, v, decoded)
	}
	return true
}

// sameVerdict reports whether a and b are both nil, or errors of the
// same type and words.
func sameVerdict(a, b error) bool {
	return (a == nil) == (b == nil) && fmt.Sprintf("%T %[1]v", a) == fmt.Sprintf("%T %[1]v", b)
}

// referenceCheck decides text as the validator does, without
// internal/jsonvalue: it must be valid JSON, repeat no key in any object,
// hold numbers in range (checkNumbers), and pass the compiled schema.
func referenceCheck(s *Schema, text string) (bool, any) {
	if !json.Valid([]byte(text)) || repeatsKey(text) {
		return false, nil
	}
	v, err := validator.UnmarshalJSON(strings.NewReader(text))
	if err != nil || checkNumbers(v) != nil {
		return false, nil
	}
	return s.compiled.Validate(v) == nil, v
}

// repeatsKey reports whether an object in text, valid JSON, holds a key
// twice, reading it token by token with encoding/json.
func repeatsKey(text string) bool {
	type object struct {
		keys    map[string]bool
		wantKey bool
	}
	var stack []*object // nil for an array
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			panic(fmt.Sprintf("reading valid JSON %q: %v", text, err))
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.wantKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
			} else {
				key := tok.(string)
				if top.keys[key] {
					return true
				}
				top.keys[key], top.wantKey = true, false
				continue
			}
		} else {
			switch tok {
			case json.Delim('{'):
				stack = append(stack, &object{keys: map[string]bool{}, wantKey: true})
				continue
			case json.Delim('['):
				stack = append(stack, nil)
				continue
			case json.Delim(']'):
				stack = stack[:len(stack)-1]
			}
		}
		// A value ended: the object around it wants its next key.
		if len(stack) > 0 && stack[len(stack)-1] != nil {
			stack[len(stack)-1].wantKey = true
		}
	}
}

// Hostile values of some megabytes, read as text and then decoded, take
// time in proportion to their length, and the verdict is the validator's.
func TestValidateTextHostileInputIsLinear(t *testing.T) {
	s, err := Compile(json.RawMessage(textSchemas[3]))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4 << 20
	for _, c := range []struct {
		name, text string
		pass       bool
	}{
		{"a long string", `{"bg":true,"task":"` + strings.Repeat("x", n) + `"}`, true},
		{"a string of escapes", `{"bg":true,"task":"` + strings.Repeat(`\u0061`, n/6) + `"}`, true},
		{"a key of escapes", `{"bg":true,"task":"s","` + strings.Repeat(`\u0061`, n/6) + `":1}`, false},
		{"a key repeated", `{"bg":true,"task":"s"` + strings.Repeat(`,"task":"s"`, n/11) + `}`, false},
		{"many unknown keys", `{"bg":true,"task":"s"` + strings.Repeat(`,"\u0078":"s"`, n/13) + `}`, false},
		{"deep arrays", `{"bg":true,"task":"s","any":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}`, true},
		{"too deep", `{"bg":true,"task":"s","any":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, false},
		{"deep objects", `{"bg":true,"task":"s","o":` + strings.Repeat(`{"a":`, 9990) + "1" + strings.Repeat("}", 9990) + `}`, true},
		{"unclosed", `{"bg":true,"task":"` + strings.Repeat("x", n), false},
		{"many members", `{"bg":true,"task":"s","o":{` + strings.Repeat(`"a":1,`, n/6) + `"b":1}}`, false},
	} {
		start := time.Now()
		err := s.ValidateText(context.Background(), c.text)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%.120s: checking %d bytes took %v", c.name, len(c.text), took)
		}
		if (err == nil) != c.pass {
			t.Errorf("%.120s: ValidateText = %.200v, want passing %v", c.name, err, c.pass)
		}
	}
}
