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

// busyDatabase is a backend under load: its renewals commit but are
// reported failed once confirmLate is set, its releases wait release
// before they run, and the first refuse releases fail, as SQLite's do when
// its busy timeout runs out.
type busyDatabase struct {
	store.Backend
	confirmLate atomic.Bool
	release     time.Duration
	refuse      atomic.Int32
}

func (b *busyDatabase) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ok, err := b.Backend.Lease(ctx, key, owner, ttl)
	if b.confirmLate.Load() {
		return false, errors.New("injected: the commit was not confirmed in time")
	}
	return ok, err
}

func (b *busyDatabase) Release(ctx context.Context, key, owner string) error {
	select {
	case <-time.After(b.release):
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.refuse.Add(-1) >= 0 {
		return errors.New("injected: database is locked (SQLITE_BUSY)")
	}
	return b.Backend.Release(ctx, key, owner)
}

// TestUnlockFreesTheLockOnABusyDatabase: a holder that is done frees its
// lock for the next caller, even when the database is slow to answer the
// release, and even when its renewals committed but were not confirmed (so
// it counts the lock as lost). Before, both left the lease standing until
// its TTL, and a thread's next turn was refused as "in progress"; so did a
// release the database refused once.
func TestUnlockFreesTheLockOnABusyDatabase(t *testing.T) {
	for _, c := range []struct {
		name, db string
		busy     func(*memory.Backend) *busyDatabase
	}{
		{"slow release", "a database 6 s slow", func(b *memory.Backend) *busyDatabase {
			return &busyDatabase{Backend: b, release: 6 * time.Second}
		}},
		{"release refused", "a database that refused three releases", func(b *memory.Backend) *busyDatabase {
			busy := &busyDatabase{Backend: b}
			busy.refuse.Store(3)
			return busy
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				s, err := store.New(c.busy(b))
				if err != nil {
					t.Fatal(err)
				}
				l, err := s.TryLock(t.Context(), "thread")
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(); err != nil {
					t.Fatalf("Unlock on %s: %v", c.db, err)
				}
				next, err := s.TryLock(t.Context(), "thread")
				if err != nil {
					t.Fatalf("TryLock after Unlock: %v, want the lock", err)
				}
				next.Unlock()
			})
		})
	}
	t.Run("renewals unconfirmed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			const ttl = 150 * time.Millisecond
			busy := &busyDatabase{Backend: b}
			s, err := store.New(busy, store.WithLeaseTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.TryLock(t.Context(), "thread")
			if err != nil {
				t.Fatal(err)
			}
			busy.confirmLate.Store(true)
			time.Sleep(2 * ttl)
			if err := l.Unlock(); !errors.Is(err, store.ErrLockLost) {
				t.Fatalf("Unlock after a TTL of unconfirmed renewals: %v, want ErrLockLost", err)
			}
			busy.confirmLate.Store(false)
			next, err := s.TryLock(t.Context(), "thread")
			if err != nil {
				t.Fatalf("TryLock after Unlock: %v, want the lock (the holder's own lease given back)", err)
			}
			next.Unlock()
		})
	})
}
