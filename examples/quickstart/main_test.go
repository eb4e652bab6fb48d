package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tour runs as the README shows it.
func Example() {
	main()
	// Output:
	// provider: fake (scripted replies)
	// answer: It is sunny and 21°C in Lisbon.
	// usage:  2 req, 117 in, 14 out
}
