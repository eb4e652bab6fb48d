// Package jsonvalue reads JSON text into the generic values encoding/json
// produces with UseNumber — map[string]any, []any, string, json.Number,
// bool and nil — in fewer allocations, for the hot paths that validate a
// model's tool arguments and answers against a JSON Schema.
//
// It accepts exactly what json.Valid accepts, and decodes to what a
// json.Decoder with UseNumber would, but that it refuses an object that
// repeats a key. Decoded strings share memory with the text read.
//
// It is hand-written for the allocations it saves on every delegation.
// Checking the text with jsontext (github.com/go-json-experiment/json, the
// syntax layer of encoding/json/v2, which refuses repeated keys) and then
// decoding it with encoding/json takes a FromFactory delegation
// (BenchmarkDelegation/factory in subagent) from 33 to 43 allocations and
// 2.8 to 3.7 KB, one with a validated answer from 59 to 80 allocations and
// 4.9 to 6.9 KB, and one through FromReact from 42 to 84: over the 40 and
// 60 allocations a delegation may cost. The reference tests and fuzz
// targets hold it to encoding/json, and TestHostileInputIsLinear to a
// linear reading.
package jsonvalue

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxDepth is encoding/json's bound on nesting.
const maxDepth = 10000

// Valid reports whether s is one JSON value, with blanks around it allowed,
// as json.Valid does.
func Valid(s string) bool {
	p := parser{s: s}
	_, ok := p.document()
	return ok
}

// Decode returns the value of the JSON text s, and false when s is not
// valid JSON or an object in it repeats a key (see DecodeOnce).
func Decode(s string) (any, bool) {
	v, err := DecodeOnce(s)
	return v, err == nil
}

// ErrSyntax reports text that is not JSON.
var ErrSyntax = errors.New("not valid JSON")

// RepeatedKeyError reports an object that holds one key twice. encoding/json
// keeps the last value of a repeated key, a JSON Schema validator may check
// another, and a reader matching names without regard to case another
// still: a value read from a model must mean one thing, so it is refused.
type RepeatedKeyError struct {
	// Pointer is the JSON pointer of the object holding the key ("" for the
	// top level).
	Pointer string
	// Key is the repeated key.
	Key string
}

// Error says where the key is repeated and what to do.
func (e *RepeatedKeyError) Error() string {
	where := "at the top level"
	if e.Pointer != "" {
		where = "at " + e.Pointer
	}
	return where + ": the key " + strconv.Quote(e.Key) + " appears more than once: write each key once"
}

// DecodeOnce returns the value of the JSON text s. It fails with ErrSyntax
// when s is not valid JSON, and with a *RepeatedKeyError when an object in
// it holds a key twice; keys are compared exactly, as a JSON Schema
// validator compares them.
func DecodeOnce(s string) (any, error) {
	p := parser{s: s, decode: true}
	v, ok := p.document()
	switch {
	case p.repeated != nil && Valid(s):
		p.repeated.Pointer = pointer(p.where)
		return nil, p.repeated
	case p.repeated != nil:
		return nil, ErrSyntax
	case !ok:
		return nil, ErrSyntax
	}
	return v, nil
}

type parser struct {
	s        string
	i        int
	depth    int
	decode   bool              // build the value, not only check the text
	repeated *RepeatedKeyError // set when decoding stops at a repeated key
	refused  *WalkError        // set when a Visitor stops Walk
	where    []string          // then: the members and elements around it, innermost first
}

// within records, on the way out of a failed value, that the failure is
// inside the member or element named seg.
func (p *parser) within(seg string) {
	if p.stopped() {
		p.where = append(p.where, seg)
	}
}

// stopped reports whether the text stopped being read at a repeated key,
// or a key a Visitor refused, not at a syntax error.
func (p *parser) stopped() bool { return p.repeated != nil || p.refused != nil }

// pointer returns the JSON pointer of the path segs, given innermost
// first. It is built once, at the end: prepending a segment on the way out
// of each level would copy the pointer once per level, which for 10,000
// levels of long keys is quadratic.
func pointer(segs []string) string {
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(segs[i], "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func (p *parser) document() (any, bool) {
	v, ok := p.value()
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(p.s) {
		return nil, false
	}
	return v, true
}

func (p *parser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value() (any, bool) {
	p.space()
	if p.i >= len(p.s) {
		return nil, false
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, ok := p.str()
		if !ok || !p.decode {
			return nil, ok
		}
		return s, true
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		start := p.i
		if !p.number() {
			return nil, false
		}
		if !p.decode {
			return nil, true
		}
		return json.Number(p.s[start:p.i]), true
	}
	return nil, false
}

func (p *parser) literal(word string) bool {
	if len(p.s)-p.i < len(word) || p.s[p.i:p.i+len(word)] != word {
		return false
	}
	p.i += len(word)
	return true
}

// open enters the object or array whose opening byte is at p.i, and
// reports whether it is empty (its closing byte read too), and false when
// it nests too deep or the text ends.
func (p *parser) open(closing byte) (empty, ok bool) {
	p.i++ // { or [
	if p.depth++; p.depth > maxDepth {
		return false, false
	}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == closing {
		p.i++
		p.depth--
		return true, true
	}
	return false, true
}

// key reads an object's key and the colon after it.
func (p *parser) key() (string, bool) {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", false
	}
	k, ok := p.str()
	p.space()
	if !ok || p.i >= len(p.s) || p.s[p.i] != ':' {
		return "", false
	}
	p.i++
	return k, true
}

// next reads what follows a member or an element: a comma (more), or the
// closing byte of its object or array (ok, and not more); anything else
// is not JSON.
func (p *parser) next(closing byte) (more, ok bool) {
	p.space()
	if p.i >= len(p.s) {
		return false, false
	}
	switch p.s[p.i] {
	case ',':
		p.i++
		return true, true
	case closing:
		p.i++
		p.depth--
		return false, true
	}
	return false, false
}

func (p *parser) object() (any, bool) {
	var m map[string]any
	if p.decode {
		m = map[string]any{}
	}
	if empty, ok := p.open('}'); empty || !ok {
		return m, ok
	}
	for {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		if p.decode {
			// Checked before the value is read, so that the first repeated
			// key in the text is the one reported, not one inside its value.
			if _, dup := m[key]; dup {
				p.repeated = &RepeatedKeyError{Key: key}
				return nil, false
			}
		}
		v, ok := p.value()
		if !ok {
			p.within(key)
			return nil, false
		}
		if p.decode {
			m[key] = v
		}
		if more, ok := p.next('}'); !more {
			return m, ok
		}
	}
}

func (p *parser) array() (any, bool) {
	var a []any
	if p.decode {
		a = []any{}
	}
	if empty, ok := p.open(']'); empty || !ok {
		return a, ok
	}
	for {
		v, ok := p.value()
		if !ok {
			if p.repeated != nil {
				p.within(strconv.Itoa(len(a)))
			}
			return nil, false
		}
		if p.decode {
			a = append(a, v)
		}
		if more, ok := p.next(']'); !more {
			return a, ok
		}
	}
}

// str reads a string token and returns its value (when decoding).
func (p *parser) str() (string, bool) {
	start := p.i
	p.i++         // "
	plain := true // no escapes, and ASCII
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			if !p.decode {
				return "", true
			}
			raw := p.s[start+1 : p.i-1]
			if plain || utf8.ValidString(raw) && !hasEscape(raw) {
				return raw, true
			}
			// Escapes, or invalid UTF-8 that encoding/json replaces:
			// let encoding/json say what the value is.
			var out string
			if err := json.Unmarshal([]byte(p.s[start:p.i]), &out); err != nil {
				return "", false
			}
			return out, true
		case c == '\\':
			plain = false
			p.i++
			if p.i >= len(p.s) {
				return "", false
			}
			switch p.s[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.s)-p.i < 5 {
					return "", false
				}
				for _, h := range []byte(p.s[p.i+1 : p.i+5]) {
					if !isHex(h) {
						return "", false
					}
				}
				p.i += 5
			default:
				return "", false
			}
		case c < 0x20:
			return "", false
		default:
			if c >= utf8.RuneSelf {
				plain = false
			}
			p.i++
		}
	}
	return "", false
}

func hasEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number reads a number token: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() bool {
	s, i := p.s, p.i
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	p.i = i
	return true
}

// Member returns the string value of the member name of the JSON object s,
// matching the name exactly. It reports false when s is not a valid JSON
// object, holds no such member, holds it twice, or holds it with a value
// that is not a string. Nothing but the value found is decoded.
func Member(s, name string) (string, bool) {
	p := parser{s: s}
	p.space()
	if p.i >= len(s) || s[p.i] != '{' {
		return "", false
	}
	p.i++
	p.depth = 1
	p.space()
	if p.i < len(s) && s[p.i] == '}' {
		return "", false
	}
	found, ok, seen := "", false, false
	for {
		p.decode = true
		key, kok := p.key()
		if !kok {
			return "", false
		}
		p.space()
		if key == name {
			if seen {
				return "", false // repeated: which one is meant is unclear
			}
			seen = true
		}
		if key == name && p.i < len(s) && s[p.i] == '"' {
			v, vok := p.str()
			if !vok {
				return "", false
			}
			found, ok = v, true
		} else {
			p.decode = false
			if _, vok := p.value(); !vok {
				return "", false
			}
		}
		more, nok := p.next('}')
		switch {
		case !nok || !more && !p.end():
			return "", false
		case !more:
			return found, ok
		}
	}
}

// end reports whether only blanks are left.
func (p *parser) end() bool {
	p.space()
	return p.i == len(p.s)
}

// Members calls f with the key and the value's text of each member of the
// JSON object s, in order, for as long as f returns true, and reports
// whether s is one valid JSON object (blanks around it allowed) that f
// took whole. Keys are decoded; a value is given as its JSON text, whose
// syntax is checked and nothing more: a key repeated, at the top or in a
// value, is not refused (f sees the top's). Nothing is allocated but the
// keys that hold escapes.
func Members(s string, f func(key, value string) bool) bool {
	p := parser{s: s}
	p.space()
	if p.i >= len(s) || s[p.i] != '{' {
		return false
	}
	p.i++
	p.depth = 1
	p.space()
	if p.i < len(s) && s[p.i] == '}' {
		p.i++
		return p.end()
	}
	for {
		p.decode = true
		key, ok := p.key()
		if !ok {
			return false
		}
		p.space()
		start := p.i
		p.decode = false
		if _, ok := p.value(); !ok || !f(key, s[start:p.i]) {
			return false
		}
		if more, ok := p.next('}'); !more {
			return ok && p.end()
		}
	}
}

// String returns the value of tok, the text of one JSON string (as
// Members gives a member's value), and false when tok is anything else.
// A string without escapes is returned as a part of tok.
func String(tok string) (string, bool) {
	if tok == "" || tok[0] != '"' {
		return "", false
	}
	p := parser{s: tok, decode: true}
	v, ok := p.str()
	return v, ok && p.i == len(tok)
}
