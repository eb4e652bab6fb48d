package mcpbridge_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the package's tests, or, when the test binary is started
// by a test as an MCP server over stdio (MCPBRIDGE_TEST_SERVER names the
// kind), serves instead.
func TestMain(m *testing.M) {
	if mode := os.Getenv("MCPBRIDGE_TEST_SERVER"); mode != "" {
		os.Exit(serveForTest(mode))
	}
	goleak.VerifyTestMain(m)
}
