package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// TestMain is also the first run's process: the example starts its own
// executable, which under test is this binary, to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// The first run is killed once k workers have finished; the second runs
// only the other workers, whatever ids the lead's model gives its calls,
// and the lead sums up all 20. Which k workers finish first depends on
// timing, so the test reads them from the first run's report and checks
// every other figure against them: the workers replayed are exactly those,
// the workers that ran are exactly the others, each once, and the usage is
// theirs alone.
func TestDurable(t *testing.T) {
	for _, tt := range []struct {
		ids string
		k   int
	}{{"fresh", 8}, {"none", 8}, {"restart", 8}, {"fresh", 19}} {
		t.Run(fmt.Sprintf("%s ids, killed after %d", tt.ids, tt.k), func(t *testing.T) {
			var out strings.Builder
			if err := run(&out, filepath.Join(t.TempDir(), "deputy.db"), tt.k, tt.ids); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			m := regexp.MustCompile(`run 1: workers of chapters \[([0-9 ]*)\] finished`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("the first run did not say which workers finished:\n%s", out.String())
			}
			var finished, rest []int
			for _, f := range strings.Fields(m[1]) {
				n, _ := strconv.Atoi(f)
				finished = append(finished, n)
			}
			for i := 1; i <= chapters; i++ {
				if !slices.Contains(finished, i) {
					rest = append(rest, i)
				}
			}
			if len(finished) != tt.k || len(finished)+len(rest) != chapters {
				t.Fatalf("the first run finished chapters %v, want %d distinct chapters of 1 to %d", finished, tt.k, chapters)
			}
			n := chapters - tt.k
			want := strings.Join([]string{
				fmt.Sprintf("run 1: the lead asks 20 workers at once; the process kills itself once %d have finished", tt.k),
				fmt.Sprintf("run 1: workers of chapters %v finished; the other %d were still waiting for their model", finished, n),
				"run 1 was killed: signal: killed",
				"run 2: the same turn again, under the same journal",
				fmt.Sprintf("replayed from the journal (no model call): %d workers, chapters %v", tt.k, finished),
				fmt.Sprintf("ran: %d workers, chapters %v", n, rest),
				fmt.Sprintf("model calls in run 2: lead 1 (its plan came from the journal), workers %d", n),
				// The lead's plan is 240 tokens, its answer 840, a worker 430.
				"usage of the whole turn: lead 2 requests, workers 20 requests, 9680 tokens",
				fmt.Sprintf("of which run 1 spent (counted from the journal, not paid again): %d requests, %d tokens", tt.k+1, 240+tt.k*430),
				fmt.Sprintf("paid in run 2: %d requests, %d tokens", n+1, 840+n*430),
				"answer: The report in 20 chapter summaries: revenue grew, costs fell.",
				"the turn ended and its journal was deleted: it holds 0 entries",
			}, "\n") + "\n"
			if diff := cmp.Diff(want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// Bad settings are refused before anything runs.
func TestDurableRefusesBadSettings(t *testing.T) {
	for _, tt := range []struct {
		k    int
		ids  string
		want string
	}{
		{0, "fresh", "-crash-after 0: want 1 to 19"},
		{20, "fresh", "-crash-after 20: want 1 to 19"},
		{8, "random", `-ids "random": want fresh, none or restart`},
	} {
		var out strings.Builder
		err := run(&out, filepath.Join(t.TempDir(), "deputy.db"), tt.k, tt.ids)
		if err == nil || !strings.Contains(err.Error(), tt.want) || out.Len() != 0 {
			t.Errorf("run(%d, %q) = %v, printing %q; want an error saying %q and nothing printed", tt.k, tt.ids, err, out.String(), tt.want)
		}
	}
}
