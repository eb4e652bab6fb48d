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
	// child system prompt: You are a careful editor. Count before you judge.
	// answer: It is: three words.
	// usage: lead 2 req, 210 in, 38 out | delegate 2 req, 131 in, 15 out
}
