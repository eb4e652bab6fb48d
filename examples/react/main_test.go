package main

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program runs as the README describes it, on the scripted fake: the
// environment it is given is empty, whatever the process's holds.
func Example() {
	if err := run(context.Background(), os.Stdout, func(string) string { return "" }); err != nil {
		panic(err)
	}
	// Output:
	// provider: fake (scripted replies; docs/providers.md tells how to use a real one)
	// child system prompt: You are a careful editor. Count before you judge.
	// answer: It is: three words.
	// usage (requests, tokens in, tokens out): lead 2 req, 210 in, 38 out | delegate 2 req, 131 in, 15 out
}
