package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// slowLeases is a backend whose leases are taken at once but reported late
// (a database slow to answer a commit), and whose renewals fail once
// failing is set.
type slowLeases struct {
	store.Backend
	reply   time.Duration
	failing atomic.Bool
}

func (s *slowLeases) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if s.failing.Load() {
		return false, errors.New("injected: the database did not answer")
	}
	ok, err := s.Backend.Lease(ctx, key, owner, ttl)
	time.Sleep(s.reply)
	return ok, err
}

// TestLockLostAfterSlowLease: a lease runs from when the database took it,
// not from when its holder heard back. A holder told of its lease late,
// whose renewals then fail, is told it lost the lock by the time another
// holder has taken it: Unlock returns ErrLockLost rather than report that
// the lock was held throughout.
func TestLockLostAfterSlowLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		const ttl = 150 * time.Millisecond
		slow := &slowLeases{Backend: b, reply: 100 * time.Millisecond}
		first, err := store.New(slow, store.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		second, err := store.New(b, store.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		old, err := first.Lock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		slow.failing.Store(true)
		next, err := second.Lock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Unlock(); !errors.Is(err, store.ErrLockLost) {
			t.Errorf("Unlock of a lock another holder took: %v, want ErrLockLost", err)
		}
		if err := next.Unlock(); err != nil {
			t.Error(err)
		}
	})
}
