// Package store keeps what deputy knows beyond one process: a resident
// expert's conversation, an AG-UI thread, and the journal of a delegation
// tree's turn.
//
// # Backends
//
// Users hold a *Store; a database backend implements the small Backend
// interface (Items, Writes, Fences), the way database/sql drivers
// implement driver.Conn. Three backends ship in sub-packages: store/sqlite,
// an embedded single file that needs nothing installed (the default),
// store/postgres, for several processes or machines sharing state, and
// store/memory, for a process whose state need not outlive it. A backend
// of one's own proves itself with store/storetest.
//
//	b, err := sqlite.Open("deputy.db")
//	st, err := store.New(b)
//	defer st.Close()
//
// # What a store holds
//
// Conversation and SaveConversation read and write a conversation under a
// key, with a version so that a write over another process's fails with
// ErrConflict; AppendConversation adds to one, writing only what it adds.
// Any value that grows at its end is kept the same way with AppendPart
// (fenced: Lock.AppendPart) and read back with ReadParts, which reads only
// the parts added since a reader's Parts; ScopeKey names one scope's record, and DeleteScope deletes
// them all. Journal opens the journal of a turn (agent.WithJournal), whose
// entries Keys lists by prefix, which
// a turn that ends deletes (DeleteJournal) and SweepJournals clears when a
// crash left it, after DefaultJournalTTL. Lock and TryLock take a key's
// lease (WithLeaseTTL), renewed while it is held and lost (ErrLockLost)
// when the holder stalls past it. Get, Put, Delete and Keys reach the
// records themselves; listings are paged, at most MaxPage keys at a time.
//
// # Records
//
// Every record carries a format byte and a CRC-32 of its bytes, so that a
// damaged row is reported as ErrCorrupt rather than read as something else,
// and a record of a newer format as ErrSchemaTooNew. A record is written
// whole or not at all, and each is bounded in size (WithMaxRecordBytes,
// DefaultMaxRecordBytes; ErrTooLarge) and its key too (MaxKeyBytes,
// MaxScopeBytes; ErrBadKey).
//
// Store is safe for concurrent use, by goroutines and, through its backend,
// by processes.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Errors a store operation can fail with; test for them with errors.Is.
// Each is wrapped with the key involved and what to do.
var (
	// ErrNotFound: no record under the key.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: the record changed since it was read (another process
	// wrote it): read it again and redo the change.
	ErrConflict = errors.New("store: conflict")
	// ErrTooLarge: a record is bigger than WithMaxRecordBytes allows.
	ErrTooLarge = errors.New("store: record too large")
	// ErrCorrupt: a record or the database itself is damaged.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrSchemaTooNew: the database or a record was written by a newer
	// deputy than this one: upgrade this program, never the other way.
	ErrSchemaTooNew = errors.New("store: schema too new")
	// ErrBusy: another holder has the key's lock (TryLock).
	ErrBusy = errors.New("store: busy")
	// ErrUnavailable: the database cannot be reached.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrBadKey: a key is empty, too long, or not plain text.
	ErrBadKey = errors.New("store: bad key")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrLockLost: a lock's lease expired before it was released (the
	// process stalled longer than the lease), so another holder may have
	// taken it.
	ErrLockLost = errors.New("store: lock lost")
)

// AnyVersion, as a Write's Version, writes whatever the record's version.
const AnyVersion int64 = -1

// Item is a record as a Backend holds it.
type Item struct {
	Key     string
	Value   []byte
	Version int64 // 1 for a new record, one more at each write
}

// Write is one record to write. Version is the version the record must have
// now for the write to happen: 0 means it must not exist, AnyVersion means
// whatever it is. A written record's version is one more than before (1 for
// a new one).
type Write struct {
	Key     string
	Value   []byte
	Version int64
	// Fence, when set, names a lease the transaction must find held by
	// its owner, unexpired, when it commits; otherwise the backend writes
	// nothing and fails with an error wrapping ErrLockLost. It is how a
	// holder that stalled past its lease cannot overwrite what the next
	// holder wrote (Lock.Put).
	Fence *Fence
}

// Fence names the lease a fenced Write needs: its key and its owner.
type Fence struct {
	Key, Owner string
}

// Backend is what a database implements for a Store. Its methods must be
// safe for concurrent use, by goroutines and by processes sharing the
// database. Values are opaque bytes: the Store checks and encodes them.
type Backend interface {
	// Get returns the record under key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) (Item, error)
	// List returns every record whose key starts with prefix, in key order.
	List(ctx context.Context, prefix string) ([]Item, error)
	// Keys returns, in key order, at most limit keys that start with
	// prefix and sort after after ("": from the first), without reading
	// their values: one page of a listing.
	Keys(ctx context.Context, prefix, after string, limit int) ([]string, error)
	// Put makes all the writes in one transaction, or none of them: when a
	// record's version is not the one a Write names, it returns an error
	// wrapping ErrConflict and writes nothing; when a Write has a Fence
	// whose lease is not its owner's and unexpired as the transaction
	// commits, one wrapping ErrLockLost.
	Put(ctx context.Context, writes ...Write) error
	// Delete removes the records; a missing key is not an error.
	Delete(ctx context.Context, keys ...string) error
	// Lease takes or renews the lease on key for owner, lasting ttl from
	// now. It reports false when another owner holds an unexpired lease.
	Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Release gives up owner's lease on key; a lease owner does not hold
	// is left alone.
	Release(ctx context.Context, key, owner string) error
	// Close releases the backend's resources.
	Close() error
}

// Defaults of a Store.
const (
	// DefaultMaxRecordBytes bounds one record: a conversation, a thread, a
	// journal entry.
	DefaultMaxRecordBytes = 8 << 20
	// DefaultLeaseTTL is how long a lock outlives a process that stopped
	// renewing it (one that was killed).
	DefaultLeaseTTL = 15 * time.Second
)

// Store is durable state over a Backend. Build it with New.
type Store struct {
	b        Backend
	maxBytes int
	ttl      time.Duration
	poll     time.Duration
	owner    string        // this Store's part of a lease owner
	locks    atomic.Uint64 // numbers the Store's locks
	closed   atomic.Bool
	batch    batcher
}

// Option configures a Store. New reports an option's bad value as an
// error; a nil Option is ignored.
type Option func(*Store) error

// WithMaxRecordBytes bounds one record (default DefaultMaxRecordBytes). A
// write of a bigger one fails with ErrTooLarge and writes nothing.
func WithMaxRecordBytes(n int) Option {
	return func(s *Store) error {
		if n < 1024 {
			return fmt.Errorf("max record %d bytes: use at least 1024", n)
		}
		s.maxBytes = n
		return nil
	}
}

// WithLeaseTTL sets how long a lock lasts without renewal (default
// DefaultLeaseTTL). A held lock is renewed every third of it; a lock whose
// holder was killed is free again after it.
func WithLeaseTTL(d time.Duration) Option {
	return func(s *Store) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("lease TTL %v: use at least 100ms", d)
		}
		s.ttl = d
		return nil
	}
}

// New returns a Store over b. The Store owns b: Close closes it.
func New(b Backend, opts ...Option) (*Store, error) {
	if b == nil {
		return nil, errors.New("store: nil backend: pass one, such as sqlite.Open(path)")
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	s := &Store{b: b, maxBytes: DefaultMaxRecordBytes, ttl: DefaultLeaseTTL, poll: 20 * time.Millisecond, owner: hex.EncodeToString(rnd[:])}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	s.batch.s = s
	return s, nil
}

// Close closes the backend. Operations after Close fail with ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.batch.close() // the journal writes in flight land first
	return s.b.Close()
}

func (s *Store) open() error {
	if s.closed.Load() {
		return fmt.Errorf("%w: open a new one", ErrClosed)
	}
	return nil
}

// Key namespaces. Every key a user gives lives under one of them, so that a
// conversation key never names a journal entry.
const (
	nsValue   = "v/"
	nsConv    = "c/"
	nsJournal = "j/"
	nsStarted = "t/" // when each journal was first written to, for SweepJournals
	nsPart    = "p/" // the parts of records kept in parts, before their namespace (partPrefix)
)

// MaxKeyBytes bounds a key a user gives.
const MaxKeyBytes = 512

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty: name the conversation, thread or turn", ErrBadKey)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: %d bytes: use at most %d (hash a longer name)", ErrBadKey, len(key), MaxKeyBytes)
	case !utf8.ValidString(key) || strings.ContainsAny(key, "\x00\x1f"):
		return fmt.Errorf("%w: %q is not valid UTF-8 text without NUL or U+001F: use printable text", ErrBadKey, key)
	}
	return nil
}

// Records are a format byte, the CRC-32 (IEEE) of the payload, and the
// payload. The format of the head of a value kept in parts (AppendPart) is
// its own, so that no value can be taken for one.
const (
	recordFormat = 1
	headFormat   = 2
	headerBytes  = 5
)

var crcTable = crc32.MakeTable(crc32.IEEE)

func (s *Store) seal(key string, payload []byte) ([]byte, error) {
	return s.sealAs(recordFormat, key, payload)
}

func (s *Store) sealAs(format byte, key string, payload []byte) ([]byte, error) {
	if len(payload) > s.maxBytes {
		return nil, fmt.Errorf("%w: %q would hold %d bytes, the limit is %d: keep less (agent.WithHistoryLimit, a smaller answer) or raise store.WithMaxRecordBytes",
			ErrTooLarge, key, len(payload), s.maxBytes)
	}
	rec := make([]byte, headerBytes+len(payload))
	rec[0] = format
	binary.BigEndian.PutUint32(rec[1:], crc32.Checksum(payload, crcTable))
	copy(rec[headerBytes:], payload)
	return rec, nil
}

// open checks a record of any format and returns its payload.
func open(key string, rec []byte) ([]byte, error) {
	if len(rec) < headerBytes {
		return nil, fmt.Errorf("%w: record %q is %d bytes, shorter than its header: delete it (its content is lost) or restore the database from a backup", ErrCorrupt, key, len(rec))
	}
	if rec[0] > headFormat {
		return nil, fmt.Errorf("%w: record %q has format %d, this program reads up to %d: run a newer deputy", ErrSchemaTooNew, key, rec[0], headFormat)
	}
	payload := rec[headerBytes:]
	if rec[0] < recordFormat || crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(rec[1:]) {
		return nil, fmt.Errorf("%w: record %q fails its checksum: delete it (its content is lost) or restore the database from a backup", ErrCorrupt, key)
	}
	return payload, nil
}

// Get returns the value stored under key by Put, and its version. A missing
// key is an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if err := s.open(); err != nil {
		return nil, 0, err
	}
	if err := checkKey(key); err != nil {
		return nil, 0, err
	}
	v, version, head, err := s.getRecord(ctx, nsValue+key)
	if err == nil && head {
		return nil, 0, fmt.Errorf("store: %q is kept in parts (AppendPart): read it with ReadParts", key)
	}
	return v, version, err
}

func (s *Store) get(ctx context.Context, key string) ([]byte, int64, error) {
	v, version, _, err := s.getRecord(ctx, key)
	return v, version, err
}

// getRecord reads the record under key, and whether it is the head of a
// value kept in parts.
func (s *Store) getRecord(ctx context.Context, key string) (payload []byte, version int64, head bool, err error) {
	it, err := s.b.Get(ctx, key)
	if err != nil {
		return nil, 0, false, err
	}
	v, err := open(key, it.Value)
	return v, it.Version, err == nil && it.Value[0] == headFormat, err
}

// Put stores value under key if the record's version is version (0: it must
// not exist yet; AnyVersion: whatever it is). Otherwise it fails with
// ErrConflict and writes nothing.
func (s *Store) Put(ctx context.Context, key string, value []byte, version int64) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	return s.put(ctx, nsValue+key, value, version)
}

func (s *Store) put(ctx context.Context, key string, payload []byte, version int64) error {
	rec, err := s.seal(key, payload)
	if err != nil {
		return err
	}
	return s.b.Put(ctx, Write{Key: key, Value: rec, Version: version})
}

// Keys returns one page of the keys of what Put stored under keys that
// start with prefix, as Conversations does for conversations: at most
// limit (1 to MaxPage) after the key after ("": from the first).
func (s *Store) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxPage {
		return nil, fmt.Errorf("store: a page of %d keys: ask for 1 to %d", limit, MaxPage)
	}
	for _, k := range []string{prefix, after} {
		if k == "" {
			continue
		}
		if err := checkKey(k); err != nil {
			return nil, err
		}
	}
	from := ""
	if after != "" {
		from = nsValue + after
	}
	keys, err := s.b.Keys(ctx, nsValue+prefix, from, limit)
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		keys[i] = k[len(nsValue):]
	}
	return keys, nil
}

// Delete removes what Put stored under key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.deleteAll(ctx, partPrefix(nsValue, key, "")); err != nil {
		return err
	}
	return s.b.Delete(ctx, nsValue+key)
}

// ScopeKey returns the key under which something named name is kept for
// scope (a thread, a user, a tenant: whatever a resident's memory is
// scoped to). Every record kept under a scope's keys, by Put, by
// SaveConversation or as a journal, is deleted with DeleteScope; no other
// scope's key starts the same way. A key that would be longer than
// MaxKeyBytes is made of a hash of scope.
func ScopeKey(scope, name string) string {
	return scopePrefix(scope) + name
}

// MaxScopeBytes bounds a scope's name in a key; a longer one is hashed.
const MaxScopeBytes = 200

func scopePrefix(scope string) string {
	if len(scope) > MaxScopeBytes {
		sum := sha256.Sum256([]byte(scope))
		return "scope/sha256:" + hex.EncodeToString(sum[:]) + "/"
	}
	return "scope/" + strconv.Itoa(len(scope)) + ":" + scope + "/"
}

// DeleteScope deletes every record kept under the keys of scope (see
// ScopeKey): values, conversations and journals alike.
func (s *Store) DeleteScope(ctx context.Context, scope string) error {
	if err := s.open(); err != nil {
		return err
	}
	p := scopePrefix(scope)
	if err := checkKey(p); err != nil {
		return err
	}
	for _, ns := range []string{nsValue, nsConv, nsPart + nsValue, nsPart + nsConv, nsJournal, nsStarted} {
		if err := s.deleteAll(ctx, ns+p); err != nil {
			return err
		}
	}
	return nil
}
