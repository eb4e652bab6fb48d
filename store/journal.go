package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
	// Models is what the model calls made inside the invocation cost, per
	// provider and model, priced, when they were counted (the part of
	// Usage they do not cover was reported by a tool itself). A run of the
	// turn that replays the entry counts them again in its ledger and
	// cost, as spent before it.
	Models []provider.ModelUsage `json:"models,omitempty"`
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
	// under indexes the entries' keys by each prefix of theirs that ends
	// in "/", for Keys.
	under   map[string][]string
	stamped bool // the journal's start is stored (SweepJournals)
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
	j := &Journal{s: s, turn: turn, prefix: nsJournal + turn + journalSep, entries: map[string]Entry{}, under: map[string][]string{}}
	// A journal opened with entries was stamped when its first was
	// written.
	items, err := s.b.List(ctx, j.prefix)
	if err != nil {
		return nil, fmt.Errorf("store: reading journal %q: %w", turn, err)
	}
	for _, it := range items {
		payload, err := open(it.Key, it.Value)
		if err != nil {
			return nil, fmt.Errorf("store: journal %q: %w (DeleteJournal forgets the turn; its children then run again)", turn, err)
		}
		var e Entry
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("%w: journal entry %q: %v: delete the journal with DeleteJournal (its children run again)", ErrCorrupt, it.Key, err)
		}
		key := strings.TrimPrefix(it.Key, j.prefix)
		j.entries[key] = e
		j.index(key)
	}
	j.stamped = len(j.entries) > 0
	return j, nil
}

// Turn returns the name the journal was opened with.
func (j *Journal) Turn() string { return j.turn }

// Store returns the store the journal is kept in.
func (j *Journal) Store() *Store { return j.s }

// JournalEntry returns the entry recorded under key in the journal of the
// turn named turn, as the database holds it now (not as a Journal opened
// earlier read it): an error wrapping ErrNotFound when there is none, never
// recorded or forgotten with DeleteJournal. It reads one record, so a
// process can ask whether another's turn still holds an entry without
// opening the whole journal.
func (s *Store) JournalEntry(ctx context.Context, turn, key string) (Entry, error) {
	if err := s.open(); err != nil {
		return Entry{}, err
	}
	if err := checkKey(turn); err != nil {
		return Entry{}, err
	}
	if err := checkKey(key); err != nil {
		return Entry{}, fmt.Errorf("store: journal %q: entry key: %w", turn, err)
	}
	payload, _, err := s.get(ctx, nsJournal+turn+journalSep+key)
	if err != nil {
		return Entry{}, fmt.Errorf("store: journal %q, entry %q: %w", turn, key, err)
	}
	var e Entry
	if err := json.Unmarshal(payload, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: journal %q, entry %q: %v: delete the journal with DeleteJournal (its children run again)", ErrCorrupt, turn, key, err)
	}
	return e, nil
}

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

// Keys returns, in order, the keys of the entries whose keys start with
// prefix: what one piece of work recorded under its own part of the
// journal ("run.lead.0/m1/c0/"), the entries the journal was opened with
// and those recorded since. It reads no database, and takes time in
// proportion to the entries under prefix up to its last "/".
func (j *Journal) Keys(prefix string) []string {
	var keys []string
	j.mu.Lock()
	if dir := prefix[:strings.LastIndexByte(prefix, '/')+1]; dir != "" {
		for _, k := range j.under[dir] {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
	} else {
		for k := range j.entries {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
	}
	j.mu.Unlock()
	slices.Sort(keys)
	return keys
}

// index adds key, new in entries, under each of its prefixes that end in
// "/"; unindex takes it out again. The caller holds mu.
func (j *Journal) index(key string) {
	for i := range len(key) {
		if key[i] == '/' {
			j.under[key[:i+1]] = append(j.under[key[:i+1]], key)
		}
	}
}

func (j *Journal) unindex(key string) {
	for i := range len(key) {
		if key[i] == '/' {
			dir := key[:i+1]
			if ks := slices.DeleteFunc(j.under[dir], func(k string) bool { return k == key }); len(ks) > 0 {
				j.under[dir] = ks
			} else {
				delete(j.under, dir)
			}
		}
	}
}

// Record writes e under key, replacing an entry there, and returns once it
// is stored (or could not be).
func (j *Journal) Record(ctx context.Context, key string, e Entry) error {
	return j.start(key, e, true)(ctx)
}

// Start begins writing e under key, as Record does, and returns at once; the
// returned function waits until the entry is stored (or could not be) and
// reports how it went. A caller that has other work to do (the next
// child) starts the write, does that work, then waits. Writes started by
// concurrent callers share transactions.
func (j *Journal) Start(key string, e Entry) (wait func(context.Context) error) {
	return j.start(key, e, false)
}

// start is Start; with now, a write that finds no commit in progress is
// committed by the caller itself, before start returns: one goroutine
// fewer started and woken per record, which was most of what a lone
// record cost beside the insert itself (BenchmarkJournalRecord).
func (j *Journal) start(key string, e Entry, now bool) (wait func(context.Context) error) {
	fail := func(err error) func(context.Context) error {
		return func(context.Context) error { return err }
	}
	if err := j.s.open(); err != nil {
		return fail(err)
	}
	// Entry keys follow the rule of every other key, so that whatever is
	// recorded can be listed and deleted again on every backend.
	if err := checkKey(key); err != nil {
		return fail(fmt.Errorf("store: journal %q: entry key: %w", j.turn, err))
	}
	payload, err := json.Marshal(e)
	if err != nil {
		return fail(fmt.Errorf("store: journal %q: %w", j.turn, err))
	}
	full := j.prefix + key
	rec, err := j.s.seal(full, payload)
	if err != nil {
		return fail(err)
	}
	w := Write{Key: full, Value: rec, Version: AnyVersion}
	j.mu.Lock()
	if _, had := j.entries[key]; !had {
		j.index(key)
	}
	j.entries[key] = e
	stamp := !j.stamped
	j.stamped = true
	j.mu.Unlock()
	var also []Write
	if stamp {
		// When the journal began, for SweepJournals: once per journal, in
		// the transaction of its first entry.
		if at, err := j.s.seal(nsStarted+j.turn, strconv.AppendInt(nil, time.Now().UnixNano(), 10)); err == nil {
			also = append(also, Write{Key: nsStarted + j.turn, Value: at, Version: AnyVersion})
		}
	}
	var done <-chan error
	if now {
		done = j.s.batch.now(w, also...)
	} else {
		for _, x := range also {
			j.s.batch.enqueue(x)
		}
		done = j.s.batch.enqueue(w)
	}
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			if err != nil {
				j.mu.Lock()
				if _, had := j.entries[key]; had {
					delete(j.entries, key)
					j.unindex(key)
				}
				j.mu.Unlock()
				return fmt.Errorf("store: journal %q: recording %q: %w", j.turn, key, err)
			}
			return nil
		case <-ctx.Done():
			// The write may still land; the caller treats it as not
			// recorded, and a re-run records it again.
			return context.Cause(ctx)
		}
	}
}

// DeleteJournal forgets every entry of the turn.
func (s *Store) DeleteJournal(ctx context.Context, turn string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(turn); err != nil {
		return err
	}
	if err := s.deleteAll(ctx, nsJournal+turn+journalSep); err != nil {
		return err
	}
	return s.b.Delete(ctx, nsStarted+turn)
}

// DeleteJournals forgets every entry of every turn whose name starts with
// prefix, such as all the turns of one thread when their names share a
// prefix. An empty prefix is refused: it would name every journal.
func (s *Store) DeleteJournals(ctx context.Context, prefix string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(prefix); err != nil {
		return err
	}
	if err := s.deleteAll(ctx, nsJournal+prefix); err != nil {
		return err
	}
	return s.deleteAll(ctx, nsStarted+prefix)
}

// DefaultJournalTTL is how long a journal may live before SweepJournals,
// given no other age, deletes it: far longer than a turn runs, shorter
// than a crash's leftovers should be kept.
const DefaultJournalTTL = 24 * time.Hour

// SweepJournals deletes the journals whose turn names start with prefix
// ("" for all) and that began more than age ago (their first entry was
// written then), except those keep reports true for (the journals of runs
// suspended for a person's answer, which may wait for days), and returns
// how many it deleted. A turn that ends deletes its own journal; what
// this finds is what a crash left behind, or a turn run without deleting
// it. A long-running server runs it now and then (hourly, with
// DefaultJournalTTL); a turn must end, or be suspended, within age.
// keep may be nil.
func (s *Store) SweepJournals(ctx context.Context, prefix string, age time.Duration, keep func(turn string) bool) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return 0, err
		}
	}
	items, err := s.b.List(ctx, nsStarted+prefix)
	if err != nil {
		return 0, fmt.Errorf("store: listing journals to sweep: %w", err)
	}
	cutoff := time.Now().Add(-age).UnixNano()
	n := 0
	for _, it := range items {
		turn := it.Key[len(nsStarted):]
		payload, err := open(it.Key, it.Value)
		var at int64
		if err == nil {
			at, err = strconv.ParseInt(string(payload), 10, 64)
		}
		if err == nil && at > cutoff || keep != nil && keep(turn) {
			continue // young, or kept; an unreadable start is swept
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if err := s.DeleteJournal(ctx, turn); err != nil {
			return n, fmt.Errorf("store: sweeping journal %q: %w", turn, err)
		}
		n++
	}
	return n, nil
}

// deleteAll deletes every record whose backend key starts with prefix.
func (s *Store) deleteAll(ctx context.Context, prefix string) error {
	// By keys, a page at a time: the values are not read.
	for {
		keys, err := s.b.Keys(ctx, prefix, "", MaxPage)
		if err != nil || len(keys) == 0 {
			return err
		}
		if err := s.b.Delete(ctx, keys...); err != nil {
			return err
		}
		if len(keys) < MaxPage {
			return nil
		}
	}
}

// batcher commits concurrent writes together. The first write to find no
// commit in progress starts a goroutine that commits everything pending,
// batch after batch, until nothing is, and ends; the writes that arrive
// meanwhile wait for the next batch. Store.Close waits for it.
type batcher struct {
	s       *Store
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	running bool
	pending []Write
	waiters []chan error
}

// maxBatch bounds one transaction's writes.
const maxBatch = 256

// enqueue adds w to the next batch; the channel receives the outcome.
func (b *batcher) enqueue(w Write) <-chan error {
	ch := make(chan error, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		ch <- fmt.Errorf("%w: open a new one", ErrClosed)
		return ch
	}
	b.pending = append(b.pending, w)
	b.waiters = append(b.waiters, ch)
	if !b.running {
		b.running = true
		b.wg.Add(1)
		go b.commit()
	}
	return ch
}

// now commits ws, the last of them w, at once in the caller's goroutine
// when no commit is in progress (else they join the next batch, as
// enqueue does), and hands what arrived meanwhile to a committing
// goroutine. The channel receives w's outcome.
func (b *batcher) now(w Write, ws ...Write) <-chan error {
	b.mu.Lock()
	if b.closed || b.running {
		b.mu.Unlock()
		for _, x := range ws {
			b.enqueue(x)
		}
		return b.enqueue(w)
	}
	b.running = true
	b.wg.Add(1)
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := b.s.b.Put(ctx, append(ws, w)...)
	cancel()
	b.mu.Lock()
	if len(b.pending) > 0 {
		go b.commit() // it owns the running slot now, and its wg count
	} else {
		b.running = false
		b.wg.Done()
	}
	b.mu.Unlock()
	ch := make(chan error, 1)
	ch <- err
	return ch
}

// close makes further writes fail and waits for the committing goroutine.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *batcher) commit() {
	defer b.wg.Done()
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.s.b.Put(ctx, ws...)
		cancel()
		for _, ch := range chs {
			ch <- err
		}
	}
}
