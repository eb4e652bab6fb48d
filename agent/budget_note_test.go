package agent

import (
	"math"
	"testing"
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
