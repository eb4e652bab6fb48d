package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program runs as the README describes it.
func Example() {
	main()
	// Output:
	// provider: fake (set DEPUTY_PROVIDER=openai|anthropic to use a real model)
	// typed result: {Task:add a login page Hours:6}
	// answer: The login page needs about 6 hours.
	// the estimator answered: {"task":"add a login page","hours":6}
	// usage: planner 2 req, 136 in, 18 out | estimator (both tries) 2 req, 185 in, 16 out
}
