// Package memory is a store.Backend that keeps everything in the process's
// memory: for tests, examples and programs whose journals, threads and
// experts need not outlive the process (an approval answered in the same
// process, a served agent that may forget its threads on restart). It keeps
// the Backend contract as the database backends do, leases and fencing
// included, and passes the same conformance suite (store/storetest); what
// it holds is lost when the process ends.
//
//	st, err := store.New(memory.New())
package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/store"
)

// Backend is an in-memory store.Backend. Build it with New; it is safe for
// concurrent use.
type Backend struct {
	mu      sync.Mutex
	records map[string]store.Item
	keys    []string // the records' keys, sorted
	leases  map[string]lease
	closed  bool
}

type lease struct {
	owner   string
	expires time.Time
}

// New returns an empty backend.
func New() *Backend {
	return &Backend{records: map[string]store.Item{}, leases: map[string]lease{}}
}

// check reports a closed backend or an ended context.
func (b *Backend) check(ctx context.Context) error {
	if b.closed {
		return fmt.Errorf("%w: the in-memory backend was closed", store.ErrClosed)
	}
	return ctx.Err()
}

// Get implements store.Backend.
func (b *Backend) Get(ctx context.Context, key string) (store.Item, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return store.Item{}, err
	}
	it, ok := b.records[key]
	if !ok {
		return store.Item{}, fmt.Errorf("%w: %q", store.ErrNotFound, key)
	}
	it.Value = slices.Clone(it.Value)
	return it, nil
}

// from is the index of the first key at or after lo.
func (b *Backend) from(lo string) int {
	i, _ := slices.BinarySearch(b.keys, lo)
	return i
}

// List implements store.Backend.
func (b *Backend) List(ctx context.Context, prefix string) ([]store.Item, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	var items []store.Item
	for _, k := range b.keys[b.from(prefix):] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		it := b.records[k]
		it.Value = slices.Clone(it.Value)
		items = append(items, it)
	}
	return items, nil
}

// Keys implements store.Backend.
func (b *Backend) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	i := b.from(prefix)
	if after >= prefix {
		i = b.from(after)
		if i < len(b.keys) && b.keys[i] == after {
			i++
		}
	}
	var keys []string
	for _, k := range b.keys[i:] {
		if len(keys) == limit || !strings.HasPrefix(k, prefix) {
			break
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Put implements store.Backend: all the writes, or none.
func (b *Backend) Put(ctx context.Context, writes ...store.Write) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return err
	}
	// Checked first, written after: one transaction.
	pending := map[string]int64{} // versions as the batch's earlier writes leave them
	version := func(key string) int64 {
		if v, ok := pending[key]; ok {
			return v
		}
		return b.records[key].Version // 0 when absent
	}
	now := time.Now()
	for _, w := range writes {
		v := version(w.Key)
		if w.Version != store.AnyVersion && w.Version != v {
			return fmt.Errorf("%w: %q is not at version %d: read it again", store.ErrConflict, w.Key, w.Version)
		}
		pending[w.Key] = v + 1
		if f := w.Fence; f != nil {
			if l, ok := b.leases[f.Key]; !ok || l.owner != f.Owner || l.expires.Before(now) {
				return fmt.Errorf("%w: the lease on %q is no longer %s's", store.ErrLockLost, f.Key, f.Owner)
			}
		}
	}
	for _, w := range writes {
		old, existed := b.records[w.Key]
		b.records[w.Key] = store.Item{Key: w.Key, Value: slices.Clone(w.Value), Version: old.Version + 1}
		if !existed {
			i := b.from(w.Key)
			b.keys = slices.Insert(b.keys, i, w.Key)
		}
	}
	return nil
}

// Delete implements store.Backend.
func (b *Backend) Delete(ctx context.Context, keys ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return err
	}
	for _, k := range keys {
		if _, ok := b.records[k]; !ok {
			continue
		}
		delete(b.records, k)
		if i, found := slices.BinarySearch(b.keys, k); found {
			b.keys = slices.Delete(b.keys, i, i+1)
		}
	}
	return nil
}

// Lease implements store.Backend.
func (b *Backend) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return false, err
	}
	now := time.Now()
	if l, ok := b.leases[key]; ok && l.owner != owner && !l.expires.Before(now) {
		return false, nil
	}
	b.leases[key] = lease{owner: owner, expires: now.Add(ttl)}
	return true, nil
}

// Release implements store.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(ctx); err != nil {
		return err
	}
	if l, ok := b.leases[key]; ok && l.owner == owner {
		delete(b.leases, key)
	}
	return nil
}

// Close forgets everything; later operations fail with store.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.records, b.keys, b.leases = nil, nil, nil
	return nil
}
