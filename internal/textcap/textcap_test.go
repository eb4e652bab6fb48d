package textcap_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deputy-go/deputy/internal/textcap"
)

// Text is capped, cut on a UTF-8 boundary with a visible marker.
func TestCap(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
	}{
		{"short", "hello", 64},
		{"exactly the cap", strings.Repeat("a", 64), 64},
		{"one over", strings.Repeat("a", 65), 64},
		{"two-byte runes", strings.Repeat("é", 1000), 101},
		{"three-byte runes", strings.Repeat("日本", 1000), 100},
		{"four-byte runes", strings.Repeat("🙂", 1000), 103},
		{"invalid UTF-8", "ok \xff\xfe end", 64},
		{"invalid UTF-8, long", strings.Repeat("\xff", 1000), 200},
		{"a megabyte", strings.Repeat("é", 512<<10), 48 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := textcap.Cap(tt.in, tt.max)
			if !utf8.ValidString(got) {
				t.Errorf("not valid UTF-8: %q", got)
			}
			if len(got) > tt.max {
				t.Errorf("%d bytes, more than the cap %d", len(got), tt.max)
			}
			valid := strings.ToValidUTF8(tt.in, "\uFFFD")
			if len(valid) <= tt.max {
				if got != valid {
					t.Errorf("got %q, want %q unchanged", got, valid)
				}
				return
			}
			i := strings.Index(got, "\n[output truncated: ")
			if i < 0 || !strings.HasSuffix(got, " shown]") {
				t.Fatalf("no truncation marker in %q", got)
			}
			if !strings.HasPrefix(valid, got[:i]) {
				t.Errorf("kept %q, not a prefix of the answer", got[:i])
			}
			// Only a rune cut in two and the digits of the count are lost.
			if slack := 3 + len(strconv.Itoa(tt.max)); len(got) < tt.max-slack {
				t.Errorf("%d bytes, want at least %d: the cap is not used", len(got), tt.max-slack)
			}
		})
	}
}
