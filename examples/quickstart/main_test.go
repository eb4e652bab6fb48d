package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tour is the README's first command: it runs on the scripted fake,
// whatever the process's environment holds, and prints the tree with each
// agent's own usage; the total is the sum of the rows.
func TestTour(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, func(string) string { return "" }); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := "provider: fake (scripted replies; docs/providers.md tells how to use a real one)\n" + tourTree
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	// The total is what the rows add up to, whatever the figures.
	var sum [3]int
	for _, m := range regexp.MustCompile(`(?m)^\S.*?\s+(\d+)\s+(\d+)\s+(\d+)$`).FindAllStringSubmatch(out.String(), -1) {
		for i := range sum {
			n, _ := strconv.Atoi(m[i+1])
			sum[i] += n
		}
	}
	total := regexp.MustCompile(`total, all agents: (\d+) requests, (\d+) tokens in, (\d+) tokens out`).FindStringSubmatch(out.String())
	if total == nil {
		t.Fatalf("no total:\n%s", out.String())
	}
	for i := range sum {
		if n, _ := strconv.Atoi(total[i+1]); n != sum[i] || n == 0 {
			t.Errorf("total %s, but the rows add up to %v", total[0], sum)
		}
	}
}

// tourTree is what the tour prints after its first line.
const tourTree = `agent                          requests  tokens in  tokens out
lead (own calls only)                 5       1520          96
├─ expert                             1         26          15
│     ↳ 1: the top-level agent may delegate; its children may not.
├─ expert                             1         60          30
│     ↳ Building on my last answer (1: the top-level agent may delegate; its c…
├─ reviewer                           1        164          30
│     ↳ status=success: Wrong: nesting stops at the depth cap (default 1).
└─ delegate                           1         17          16
      ↳ Delegation depth is capped (default 1); tools vanish at the cap.

answer: Release note: Delegation depth is capped (default 1); at the cap, delegation tools vanish.
total, all agents: 9 requests, 1787 tokens in, 187 tokens out
`
