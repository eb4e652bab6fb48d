package agent

import (
	"math"
	"testing"

	"github.com/deputy-go/deputy/internal/spans"
)

// tokenNoteLen counts the note tokenNote writes, whatever its numbers'
// lengths and signs.
func TestTokenNoteLenIsTheNotesLength(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 100, 1_000_000, 999_999_999, math.MaxInt64, -1, -10, -123, math.MinInt64} {
		for _, limit := range []int64{1, 3000, 1_000_000} {
			if got, want := tokenNoteLen(n, limit), len(tokenNote(n, limit)); got != want {
				t.Errorf("tokenNoteLen(%d, %d) = %d, want %d", n, limit, got, want)
			}
		}
	}
}

// A model call's cost and cache savings are spans.Cost and
// spans.CacheSaved on its span, which is made in internal/spans; the keys
// a user reads them by are these.
func TestCallAttributesAreTheExportedKeys(t *testing.T) {
	if AttrCost != spans.Cost || AttrCacheSaved != spans.CacheSaved {
		t.Errorf("AttrCost %q, AttrCacheSaved %q; the spans carry %q, %q", AttrCost, AttrCacheSaved, spans.Cost, spans.CacheSaved)
	}
}
