package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fan-out runs to its answer on the scripted fake, whatever the
// process's environment holds. Every figure it prints is checked: the
// tokens and costs exactly (the lead's own and its children's add up to
// what the tree shows, at 2 and 8 dollars a million tokens in and out),
// the wall times, which vary, against the scripted delays (400, 300 and
// 500 ms) and each other: the children ran side by side, in less time than
// their walls add up to.
func TestFanout(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, func(string) string { return "" }, nil); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	masked, got := maskWalls(t, out.String())
	want := "provider: fake (scripted replies; the researchers answer after 300-500 ms)\n" + printed
	if diff := cmp.Diff(want, masked); diff != "" {
		t.Fatalf("output, wall times masked (-want +got):\n%s", diff)
	}
	lead, historian, economist, planner, sum, span := got[0], got[1], got[2], got[3], got[4], got[5]
	const round = 10 * time.Millisecond
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{{"historian", historian, 400 * time.Millisecond}, {"economist", economist, 300 * time.Millisecond}, {"planner", planner, 500 * time.Millisecond}} {
		if c.got < c.want-round {
			t.Errorf("the %s's wall %v is shorter than its model's scripted %v", c.name, c.got, c.want)
		}
	}
	if d := sum - (historian + economist + planner); d < -2*round || d > 2*round {
		t.Errorf("the walls add up to %v, printed as %v", historian+economist+planner, sum)
	}
	if span < max(historian, economist, planner)-round || span >= sum || lead < span-round {
		t.Errorf("side by side %v: want at least the longest child's wall, less than their sum %v, and at most the lead's %v", span, sum, lead)
	}
}

// maskWalls replaces the wall times the example printed by T, and returns
// them in the order printed: the lead's, each child's, their sum, and the
// time the children took side by side.
func maskWalls(t *testing.T, out string) (string, []time.Duration) {
	t.Helper()
	walls := regexp.MustCompile(`(wall|add up to|side by side they took) ([0-9.]+[mµn]?s)`)
	var got []time.Duration
	masked := walls.ReplaceAllStringFunc(out, func(s string) string {
		m := walls.FindStringSubmatch(s)
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		got = append(got, d)
		return m[1] + " T"
	})
	if len(got) != 6 {
		t.Fatalf("%d wall times in the output, want 6:\n%s", len(got), out)
	}
	return masked, got
}

// printed is what the example prints after the line naming its provider,
// wall times masked.
const printed = `
usage is requests, tokens in, tokens out; the lead's own calls, then its children's
lead  own 2 req, 1348 in, 466 out  children 3 req, 483 in, 130 out  cost $0.008430  wall T
      model calls that waited for admission: 0; sub-agents refused by a limit: 0
├─ historian succeeded fake  162 in, 41 out  $0.000652  wall T  "How did earlier tram extensions in Lisbon turn out?"
├─ economist succeeded fake  161 in, 49 out  $0.000714  wall T  "What would a 4 km riverside tram extension cost, and what would it return?"
└─ planner   succeeded fake  160 in, 40 out  $0.000640  wall T  "How many daily riders would an eastern riverside tram line carry?"
the children's wall times add up to T; side by side they took T

answer: Yes, on balance: The 2018 extension of line 15 ran on time and doubled its ridership within two years. About 90 million euros to build, paid back in about 25 years of fares and time saved. About 18,000 riders a day, most of them new to public transport. (mean confidence 0.70)
`
