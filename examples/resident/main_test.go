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
	// answer: Babbage designed it; Ada Lovelace wrote its first program.
	// the historian remembers 4 messages
	// usage (requests, tokens in, tokens out): lead 3 req, 264 in, 42 out | historian 2 req, 57 in, 16 out
}

// With -consult, the expert is consulted thousands of times inside a small
// window: compactions keep every request inside it, and between them the
// prompt cache serves most of each request.
func Example_longHaul() {
	if err := longHaul(context.Background(), os.Stdout, func(string) string { return "" }, 3000, 8000); err != nil {
		panic(err)
	}
	// Output:
	// provider: fake (scripted replies; docs/providers.md tells how to use a real one)
	// consultations: 3000, model calls: 3037 (summaries included)
	// compactions: 37
	// largest request: 6111 tokens (window 8000)
	// input tokens read from cache: 92.9%
	// kept now: 154 messages
}
