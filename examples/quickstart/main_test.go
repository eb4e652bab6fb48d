package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tour is the README's first command: it must run, and show the tree.
func TestTour(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, func(string) string { return "" }); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"provider: fake",
		"requests  tokens in  tokens out", "lead (own calls only)",
		"├─ expert", "Building on my last answer (1: the top-level agent",
		"├─ reviewer", "status=success",
		"└─ delegate",
		"answer: Release note:",
		"total, all agents: 9 requests, ", " tokens in, ", " tokens out",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
