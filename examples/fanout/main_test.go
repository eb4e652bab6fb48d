package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fan-out runs to its answer on the scripted fake, whatever the
// process's environment holds (its wall times vary, so the output is
// checked piece by piece).
func TestFanout(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, func(string) string { return "" }, nil); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"provider: fake (scripted replies;",
		"usage is requests, tokens in, tokens out",
		"├─ historian succeeded fake", "├─ economist succeeded fake", "└─ planner", "side by side they took", "  $0.000", "cost $0.00", "waited for admission: 0; sub-agents refused by a limit: 0",
		"answer: Yes, on balance:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
