package id

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	const n = 1000
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i] = New("run_") })
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, s := range ids {
		if !strings.HasPrefix(s, "run_") || len(s) != len("run_")+13 || strings.Trim(s[4:], "0123456789abcdefghijklmnopqrstuv") != "" {
			t.Errorf("id %q: want run_ and 13 base-32 digits", s)
		}
		if seen[s] {
			t.Errorf("id %q made twice", s)
		}
		seen[s] = true
	}
}
