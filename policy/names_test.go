package policy

import "testing"

// A tool-name pattern made ready to match (compared whole, or by its
// prefix when its only star ends it) matches the names match matches,
// and no others.
func TestReadyNamesMatchAsPatterns(t *testing.T) {
	patterns := []string{"", "*", "**", "search", "search_*", "search_**", "*_web", "s*h", "rm_*", "a*b*", "*x*", "pay_*", "write_file"}
	names := []string{"", "search", "search_", "search_web", "searc", "s", "sh", "rm", "rm_", "rm_rf", "ab", "abx", "x", "pay_now", "write_file", "write_files", "Search_web"}
	for _, p := range patterns {
		np := nameOf(p)
		for _, n := range names {
			if got, want := np.match(n), match(p, n); got != want {
				t.Errorf("pattern %q (kind %d), name %q: matched %v, want %v", p, np.kind, n, got, want)
			}
		}
	}
}
