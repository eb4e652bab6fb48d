package id

import (
	"crypto/sha256"
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

// A derived id has the shape of a random one, and is the same for the same
// hash.
func TestFromHash(t *testing.T) {
	sum := sha256.Sum256([]byte("turn\x1fcall_1"))
	a, b := FromHash("sub_", sum[:]), FromHash("sub_", sum[:8])
	if a != b || len(a) != len(New("sub_")) || strings.Trim(a[4:], digits) != "" {
		t.Errorf("FromHash = %q and %q, want one id of sub_ and 13 base-32 digits", a, b)
	}
	other := sha256.Sum256([]byte("turn\x1fcall_2"))
	if FromHash("sub_", other[:]) == a {
		t.Error("two hashes gave one id")
	}
	if got := FromHash("", make([]byte, 8)); got != "0000000000000" {
		t.Errorf("zero hash = %q", got)
	}
}
