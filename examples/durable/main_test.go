package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain is also the first run's process: the example starts its own
// executable, which under test is this binary, to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// The example crashes its first run and resumes it (it exits with an error
// if the first run is not killed or the second fails).
func TestDurable(t *testing.T) {
	main()
}
