package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fan-out runs to its answer (its wall times vary, so the output is not
// compared).
func TestFanout(t *testing.T) {
	t.Setenv("DEPUTY_PROVIDER", "fake")
	main()
}
