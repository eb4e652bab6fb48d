// Package jsonextract finds the JSON value in a model's answer.
package jsonextract

import (
	"strings"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// Find finds the JSON value in a model's answer, tolerantly: the whole
// answer when it is JSON, else the last ```json (or plain ```) fenced block
// holding valid JSON, else the last complete JSON object in the prose. It
// returns a part of the answer, without copying, and reports false when
// there is none. Its work is linear in the answer's length.
func Find(answer string) (string, bool) {
	trimmed := strings.TrimSpace(answer)
	if trimmed == "" {
		return "", false
	}
	if jsonvalue.Valid(trimmed) {
		return trimmed, true
	}
	if raw, ok := lastFenced(trimmed); ok {
		return raw, true
	}
	return lastObject(trimmed)
}

// lastFenced returns the content of the last fenced code block that is
// valid JSON. An opening fence's info string (json, JSON, …) runs to the
// end of its line, unless JSON starts on that line. The scan is linear: the
// next line end and the next JSON opening are looked up once and kept
// until a fence passes them, so fences without newlines ("```x```" a
// million times) cost no more than any other text.
func lastFenced(s string) (string, bool) {
	found, ok := "", false
	nl, opener := -1, -1 // the next '\n' and '{', '[' or '"' at or after some point; len(s) for none
	for pos := 0; ; {
		open := strings.Index(s[pos:], "```")
		if open < 0 {
			break
		}
		rest := pos + open + 3
		if nl < rest {
			nl = indexFrom(s, rest, "\n")
		}
		if nl < len(s) {
			if opener < rest {
				opener = indexFrom(s, rest, "{[\"")
			}
			if opener > nl { // no JSON on the fence's line: skip the info string
				rest = nl + 1
			}
		}
		end := strings.Index(s[rest:], "```")
		if end < 0 {
			break
		}
		end += rest
		if body := strings.TrimSpace(s[rest:end]); body != "" && jsonvalue.Valid(body) {
			found, ok = body, true
		}
		pos = end + 3
	}
	return found, ok
}

// indexFrom returns the index of the first of chars in s at or after from,
// or len(s).
func indexFrom(s string, from int, chars string) int {
	if i := strings.IndexAny(s[from:], chars); i >= 0 {
		return from + i
	}
	return len(s)
}

// lastObject returns the last balanced {...} span of s that is valid JSON.
// The scan is linear: it tracks strings only inside an object, so quotes in
// the surrounding prose do not confuse it. A brace in the prose that never
// closes swallows what follows it, so the scan starts again just after such
// a brace, as long as the bytes read stay within a budget linear in len(s):
// prose with many stray braces is searched whole, and a hostile answer (a
// megabyte of "{") costs a bounded number of passes.
func lastObject(s string) (string, bool) {
	found, ok := "", false
	budget := rescanBudget + 16*len(s)
	for from := 0; from < len(s) && budget > 0; {
		budget -= len(s) - from
		spans, unclosed := objectSpans(s, from)
		for i := len(spans) - 1; i >= 0; i-- {
			if span := s[spans[i][0]:spans[i][1]]; jsonvalue.Valid(span) {
				found, ok = span, true
				break
			}
		}
		if unclosed < 0 {
			break
		}
		from = unclosed + 1
	}
	return found, ok
}

// rescanBudget is the bytes lastObject may read beyond 16 passes over the
// answer: enough to rescan a typical answer after hundreds of stray braces.
const rescanBudget = 1 << 20

// objectSpans returns the balanced top-level {...} spans of s[from:], as
// offsets into s, and the start of a span left open at the end (or -1).
func objectSpans(s string, from int) (spans [][2]int, unclosed int) {
	depth, start := 0, 0
	inStr, esc := false, false
	for i := from; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			if depth > 0 {
				inStr = true
			}
		case '{':
			if depth == 0 {
				start = i
			}
			depth++
		case '}':
			if depth > 0 {
				depth--
				if depth == 0 {
					spans = append(spans, [2]int{start, i + 1})
				}
			}
		}
	}
	if depth > 0 {
		return spans, start
	}
	return spans, -1
}
