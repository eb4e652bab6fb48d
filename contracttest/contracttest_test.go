package contracttest_test

import (
	"testing"

	"github.com/deputy-go/deputy/contracttest"
)

func TestInProcess(t *testing.T) { contracttest.Run(t, contracttest.InProcess{}) }
