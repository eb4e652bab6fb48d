package reliability

import (
	"testing"

	"go.uber.org/goleak"
)

// No run, cancelled or not, may leave a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
