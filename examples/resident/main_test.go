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
	// answer: Babbage designed it; Ada Lovelace wrote its first program.
	// the historian remembers 4 messages
	// usage: lead 3 req, 264 in, 42 out | historian 2 req, 60 in, 16 out
}
