package jsonextract

import (
	"strconv"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// lastFencedReference is the plain reading of lastFenced, quadratic on
// fences without newlines; the fuzz target holds the linear one to it.
func lastFencedReference(s string) (string, bool) {
	found, ok := "", false
	for {
		open := strings.Index(s, "```")
		if open < 0 {
			break
		}
		rest := s[open+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 && !strings.ContainsAny(rest[:nl], "{[\"") {
			rest = rest[nl+1:]
		}
		end := strings.Index(rest, "```")
		if end < 0 {
			break
		}
		if body := strings.TrimSpace(rest[:end]); body != "" && jsonvalue.Valid(body) {
			found, ok = body, true
		}
		s = rest[end+3:]
	}
	return found, ok
}

// fencesWithoutNewlines is the answer that made extraction quadratic.
func fencesWithoutNewlines(n int) string {
	return strings.Repeat("```x```", n/7) + "\n"
}

// Extraction is linear in the answer: 10 MB of fences without newlines,
// which took the old scan 13 minutes, is read in milliseconds
// (BenchmarkExtractFences has the figures), and finds what the plain
// reading finds.
func TestExtractIsLinearOnFences(t *testing.T) {
	answer := fencesWithoutNewlines(10<<20) + "```json\n{\"a\":1}\n```"
	got, ok := Find(answer)
	if !ok || got != `{"a":1}` {
		t.Fatalf("extract = %q, %v", got, ok)
	}
	for _, s := range []string{"```x```", "```json```\n{}```", "```{\"a\":1}``` ```\n[1]\n```", "``` x\n\"s\"```"} {
		got, ok := lastFenced(s)
		want, wantOK := lastFencedReference(s)
		if got != want || ok != wantOK {
			t.Errorf("lastFenced(%q) = %q, %v; the plain reading gives %q, %v", s, got, ok, want, wantOK)
		}
	}
}

// FuzzFencesMatchReference holds the linear fence scan to the plain one.
func FuzzFencesMatchReference(f *testing.F) {
	for _, s := range []string{"```x```", "```json\n{\"a\":1}\n```", "``` {\n```[1]```\n", "```\n```"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := lastFenced(s)
		want, wantOK := lastFencedReference(s)
		if got != want || ok != wantOK {
			t.Errorf("lastFenced(%q) = %q, %v; the plain reading gives %q, %v", s, got, ok, want, wantOK)
		}
	})
}

// BenchmarkExtractFences reads answers of "```x```" repeated, without a
// newline: the input that made the old scan quadratic.
func BenchmarkExtractFences(b *testing.B) {
	for _, mb := range []int{1, 10} {
		answer := fencesWithoutNewlines(mb << 20)
		b.Run(strconv.Itoa(mb)+"MB", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(answer)))
			for b.Loop() {
				Find(answer)
			}
		})
	}
}
