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
	// typed result: {Task:add a login page Hours:6}
	// answer: The login page needs about 6 hours.
	// the estimator answered: {"task":"add a login page","hours":6}
	// usage (requests, tokens in, tokens out): planner 2 req, 136 in, 18 out | estimator (both tries) 2 req, 180 in, 16 out
}
