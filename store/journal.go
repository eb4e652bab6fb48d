package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// Entry is a finished child invocation as the journal keeps it.
type Entry struct {
	// Content is what the invocation returned to its parent.
	Content string `json:"content,omitempty"`
	// Error, when not empty, is the message of the error the invocation
	// failed with (one the parent's model read and could act on).
	Error string `json:"error,omitempty"`
	// Value is the validated answer as JSON, when the invocation validated.
	Value json.RawMessage `json:"value,omitempty"`
	// Usage is what the invocation cost when it ran.
	Usage provider.Usage `json:"usage"`
}

// Journal is the record of one parent turn's finished child invocations,
// read from the store once when it is opened. Record writes an entry before
// it returns; concurrent Records share transactions (group commit), so a
// wide fan-out does not pay one commit per child.
//
// A Journal is safe for concurrent use.
type Journal struct {
	s      *Store
	turn   string
	prefix string

	mu      sync.Mutex
	entries map[string]Entry
}

// journal keys are "j/" + turn + U+001F + entry key: a turn that is a prefix
// of another turn's name never lists the other's entries, since keys cannot
// hold U+001F.
const journalSep = "\x1f"

// Journal opens the journal of the parent turn named turn, with every entry
// recorded so far. A turn's name must be the same when the turn is run
// again after a crash (a request id, a job id), so that the re-run finds
// what finished.
func (s *Store) Journal(ctx context.Context, turn string) (*Journal, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if err := checkKey(turn); err != nil {
		return nil, err
	}
	j := &Journal{s: s, turn: turn, prefix: nsJournal + turn + journalSep, entries: map[string]Entry{}}
	items, err := s.b.List(ctx, j.prefix)
	if err != nil {
		return nil, fmt.Errorf("store: reading journal %q: %w", turn, err)
	}
	for _, it := range items {
		payload, err := open(it.Key, it.Value)
		if err != nil {
			return nil, err
		}
		var e Entry
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("%w: journal entry %q: %v: delete the journal with DeleteJournal (its children run again)", ErrCorrupt, it.Key, err)
		}
		j.entries[strings.TrimPrefix(it.Key, j.prefix)] = e
	}
	return j, nil
}

// Turn returns the name the journal was opened with.
func (j *Journal) Turn() string { return j.turn }

// Len returns the number of entries.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// Lookup returns the entry recorded under key.
func (j *Journal) Lookup(key string) (Entry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[key]
	return e, ok
}

// Record writes e under key, replacing an entry there, and returns once it
// is stored (or could not be).
func (j *Journal) Record(ctx context.Context, key string, e Entry) error {
	if err := j.s.open(); err != nil {
		return err
	}
	if key == "" || strings.Contains(key, journalSep) {
		return fmt.Errorf("store: journal %q: entry key %q: use a non-empty key without U+001F", j.turn, key)
	}
	payload, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: journal %q: %w", j.turn, err)
	}
	full := j.prefix + key
	rec, err := j.s.seal(full, payload)
	if err != nil {
		return err
	}
	if err := j.s.batch.write(ctx, Write{Key: full, Value: rec, Version: AnyVersion}); err != nil {
		return fmt.Errorf("store: journal %q: recording %q: %w", j.turn, key, err)
	}
	j.mu.Lock()
	j.entries[key] = e
	j.mu.Unlock()
	return nil
}

// DeleteJournal forgets every entry of the turn.
func (s *Store) DeleteJournal(ctx context.Context, turn string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(turn); err != nil {
		return err
	}
	items, err := s.b.List(ctx, nsJournal+turn+journalSep)
	if err != nil {
		return err
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	if len(keys) == 0 {
		return nil
	}
	return s.b.Delete(ctx, keys...)
}

// batcher commits concurrent writes together. The first writer to find no
// commit in progress becomes the leader and commits, in its own goroutine,
// everything that is pending, batch after batch, until nothing is; the
// others wait for the batch that holds their write. No goroutine outlives a
// write.
type batcher struct {
	s       *Store
	mu      sync.Mutex
	running bool
	pending []Write
	waiters []chan error
}

// maxBatch bounds one transaction's writes.
const maxBatch = 256

func (b *batcher) write(ctx context.Context, w Write) error {
	ch := make(chan error, 1)
	b.mu.Lock()
	b.pending = append(b.pending, w)
	b.waiters = append(b.waiters, ch)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if lead {
		b.commit(ctx)
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		// The write may still land; the caller treats it as not recorded,
		// and a re-run records it again.
		return context.Cause(ctx)
	}
}

func (b *batcher) commit(ctx context.Context) {
	// The leader's own cancellation must not fail the others' writes.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for {
		b.mu.Lock()
		n := min(len(b.pending), maxBatch)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		ws := b.pending[:n:n]
		chs := b.waiters[:n:n]
		b.pending = b.pending[n:]
		b.waiters = b.waiters[n:]
		b.mu.Unlock()
		err := b.s.b.Put(ctx, ws...)
		for _, ch := range chs {
			ch <- err
		}
	}
}
