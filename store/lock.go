package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lock is a lease on a key, held in the database so that it excludes other
// processes too. It is renewed while held; a holder that dies stops renewing
// it and the lock is free again after the store's lease TTL.
type Lock struct {
	s     *Store
	key   string
	owner string

	stop chan struct{}
	done chan struct{}
	lost chan struct{} // closed when a renewal finds the lease gone

	// renewed is when the lease was last taken or renewed: the time its
	// Lease call began, since the database may have written it at once and
	// answered late. Written by lock, then by renew; read by Unlock once
	// renew has returned.
	renewed time.Time

	once sync.Once
	err  error
}

// Lock takes the lock named key, waiting while another holder has it; it
// gives up when ctx ends. Unlock it when done.
func (s *Store) Lock(ctx context.Context, key string) (*Lock, error) {
	return s.lock(ctx, key, true)
}

// TryLock takes the lock named key, or fails at once with ErrBusy when
// another holder has it.
func (s *Store) TryLock(ctx context.Context, key string) (*Lock, error) {
	return s.lock(ctx, key, false)
}

func (s *Store) lock(ctx context.Context, key string, wait bool) (*Lock, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	owner := s.owner + "-" + strconv.FormatUint(s.locks.Add(1), 10)
	delay := s.poll
	var at time.Time
	for {
		at = time.Now()
		ok, err := s.b.Lease(ctx, key, owner, s.ttl)
		if err != nil {
			// The lease may have been written even so (a context that
			// ended as the write committed): give it back rather than
			// leave it to block others until its TTL.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.b.Release(rctx, key, owner)
			cancel()
			return nil, fmt.Errorf("store: lock %q: %w", key, err)
		}
		if ok {
			break
		}
		if !wait {
			return nil, fmt.Errorf("%w: %q is held by another caller: try again when it is done", ErrBusy, key)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("store: waiting for lock %q: %w", key, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
	l := &Lock{s: s, key: key, owner: owner, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{}), renewed: at}
	go l.renew()
	return l, nil
}

// renew extends the lease every third of its TTL until Unlock.
func (l *Lock) renew() {
	defer close(l.done)
	t := time.NewTicker(l.s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.s.ttl/3)
		at := time.Now()
		ok, err := l.s.b.Lease(ctx, l.key, l.owner, l.s.ttl)
		cancel()
		switch {
		case err == nil && ok:
			l.renewed = at
		case err == nil, time.Since(l.renewed) >= l.s.ttl:
			// Taken by another holder, or not renewed for a whole TTL
			// (a slow database): another may hold it now.
			close(l.lost)
			return
		}
		// A failed renewal is tried again at the next tick; the lease
		// holds until its TTL.
	}
}

// Lost is closed when the lock's lease was found taken by another holder,
// after this process stalled longer than the lease TTL, or when its
// renewals failed for a whole TTL (another process may have taken it). Writes made under a
// lost lock must not be trusted; versioned writes (SaveConversation) fail
// with ErrConflict rather than overwrite.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Unlock releases the lock. It returns ErrLockLost when the lease had been
// lost before, or had gone unrenewed for a whole TTL. Calling it again returns the same result.
func (l *Lock) Unlock() error {
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		// Lost, or not renewed for a whole TTL (the renewal that would
		// have found it lost had not run yet): another may hold it now.
		lost := time.Since(l.renewed) >= l.s.ttl
		select {
		case <-l.lost:
			lost = true
		default:
		}
		// Give the lease back even so: Release leaves another owner's
		// lease alone, and a renewal the database committed but did not
		// confirm in time may have kept this one alive.
		err := l.release()
		switch {
		case lost:
			l.err = fmt.Errorf("%w: %q: this holder stalled, or could not renew its lease, for longer than the lease TTL (store.WithLeaseTTL)", ErrLockLost, l.key)
		case err != nil && !errors.Is(err, ErrClosed):
			l.err = fmt.Errorf("store: unlock %q: %w (the lease ends by itself after the TTL)", l.key, err)
		}
	})
	return l.err
}

// release gives the lease back. A busy database is waited for, and a
// release it refused (SQLite's, when its busy timeout ran out) is tried
// again, for as long as the lease would block others anyway.
func (l *Lock) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), max(l.s.ttl, 5*time.Second))
	defer cancel()
	delay := l.s.poll
	for {
		err := l.s.b.Release(ctx, l.key, l.owner)
		if err == nil || errors.Is(err, ErrClosed) || l.s.open() != nil {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(delay*2, time.Second)
	}
}

// Put stores value under key as Store.Put does, fenced by the lock: the
// write lands only if this holder still holds the lease when it commits,
// checked by the database in the same transaction. A holder that stalled
// past the lease TTL, whose lock another holder has taken since, gets an
// error wrapping ErrLockLost and writes nothing.
func (l *Lock) Put(ctx context.Context, key string, value []byte, version int64) error {
	s := l.s
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	rec, err := s.seal(nsValue+key, value)
	if err != nil {
		return err
	}
	err = s.b.Put(ctx, Write{Key: nsValue + key, Value: rec, Version: version, Fence: &Fence{Key: l.key, Owner: l.owner}})
	if errors.Is(err, ErrLockLost) {
		return fmt.Errorf("store: writing %q under lock %q: %w", key, l.key, err)
	}
	return err
}
