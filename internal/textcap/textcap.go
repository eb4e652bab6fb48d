// Package textcap cuts text to a number of bytes on a rune boundary, saying
// so in a marker: the one form of truncation whatever deputy hands a model
// (a child's answer to its parent, a conversation's summary).
package textcap

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cap makes s valid UTF-8 and at most max bytes, cutting on a rune
// boundary and saying so.
func Cap(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	marker := "\n[output truncated: " + strconv.Itoa(len(s)) + " bytes, the first " // + kept + " shown]"
	// The count of bytes kept has no more digits than max.
	cut := max - len(marker) - len(" shown]") - len(strconv.Itoa(max))
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker + strconv.Itoa(cut) + " shown]"
}
