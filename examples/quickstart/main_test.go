package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// The tour is the README's first command: it must run, and show the tree.
func TestTour(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := run(context.Background())
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if runErr != nil {
		t.Fatalf("run: %v\n%s", runErr, out)
	}
	for _, want := range []string{
		"provider: fake",
		"├─ expert", "Building on my last answer (1: the top-level agent",
		"├─ reviewer", "status=success",
		"└─ delegate",
		"answer: Release note:",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
