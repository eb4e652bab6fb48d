// Package storetest is a conformance suite for store.Backend
// implementations, in the manner of testing/slogtest: a backend's tests call
// Run with a function that opens a fresh, empty backend.
package storetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
)

// Run checks that backends made by open keep the Backend contract, alone and
// under a Store. open must return an empty backend each time it is called;
// Run closes it.
func Run(t *testing.T, open func(t *testing.T) store.Backend) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			defer b.Close()
			c.fn(t, b)
		})
	}
}

var cases = []struct {
	name string
	fn   func(t *testing.T, b store.Backend)
}{
	{"GetMissing", testGetMissing},
	{"CreateUpdateConflict", testVersions},
	{"AnyVersion", testAnyVersion},
	{"AtomicBatch", testAtomicBatch},
	{"Bytes", testBytes},
	{"List", testList},
	{"Keys", testKeys},
	{"StoreConversationPages", testStoreConversationPages},
	{"StoreDeleteScope", testStoreDeleteScope},
	{"StoreSweepJournals", testStoreSweepJournals},
	{"Delete", testDelete},
	{"Lease", testLease},
	{"LeaseExpires", testLeaseExpires},
	{"ConcurrentIncrements", testConcurrentIncrements},
	{"CancelledContext", testCancelled},
	{"StoreConversation", testStoreConversation},
	{"StoreConversationAppends", testStoreConversationAppends},
	{"StoreParts", testStoreParts},
	{"StoreJournal", testStoreJournal},
	{"StoreJournalKeys", testStoreJournalKeys},
	{"StoreJournalPrefix", testStoreJournalPrefix},
	{"StoreLockRenewalsFail", testStoreLockRenewalsFail},
	{"StoreLockFencing", testStoreLockFencing},
	{"StoreCorruptRecord", testStoreCorrupt},
	{"StoreLock", testStoreLock},
	{"StoreLockFailedLease", testStoreLockFailedLease},
}

func ctx() context.Context { return context.Background() }

func mustGet(t *testing.T, b store.Backend, key string) store.Item {
	t.Helper()
	it, err := b.Get(ctx(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return it
}

func mustPut(t *testing.T, b store.Backend, ws ...store.Write) {
	t.Helper()
	if err := b.Put(ctx(), ws...); err != nil {
		t.Fatalf("Put(%v): %v", ws, err)
	}
}

func testGetMissing(t *testing.T, b store.Backend) {
	_, err := b.Get(ctx(), "missing")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key: got %v, want ErrNotFound", err)
	}
}

func testVersions(t *testing.T, b store.Backend) {
	mustPut(t, b, store.Write{Key: "k", Value: []byte("one"), Version: 0})
	if it := mustGet(t, b, "k"); string(it.Value) != "one" || it.Version != 1 || it.Key != "k" {
		t.Fatalf("after create: %+v, want one at version 1", it)
	}
	if err := b.Put(ctx(), store.Write{Key: "k", Value: []byte("again"), Version: 0}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("creating an existing key: got %v, want ErrConflict", err)
	}
	mustPut(t, b, store.Write{Key: "k", Value: []byte("two"), Version: 1})
	if err := b.Put(ctx(), store.Write{Key: "k", Value: []byte("stale"), Version: 1}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale version: got %v, want ErrConflict", err)
	}
	if err := b.Put(ctx(), store.Write{Key: "nope", Value: []byte("x"), Version: 3}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("updating a missing key: got %v, want ErrConflict", err)
	}
	if it := mustGet(t, b, "k"); string(it.Value) != "two" || it.Version != 2 {
		t.Fatalf("after the refused writes: %+v, want two at version 2", it)
	}
	if _, err := b.Get(ctx(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused update created the key: %v", err)
	}
}

func testAnyVersion(t *testing.T, b store.Backend) {
	mustPut(t, b, store.Write{Key: "k", Value: []byte("a"), Version: store.AnyVersion})
	mustPut(t, b, store.Write{Key: "k", Value: []byte("b"), Version: store.AnyVersion})
	if it := mustGet(t, b, "k"); string(it.Value) != "b" || it.Version != 2 {
		t.Fatalf("got %+v, want b at version 2", it)
	}
}

func testAtomicBatch(t *testing.T, b store.Backend) {
	mustPut(t, b, store.Write{Key: "x", Value: []byte("x1"), Version: 0})
	err := b.Put(ctx(),
		store.Write{Key: "a", Value: []byte("a1"), Version: 0},
		store.Write{Key: "b", Value: []byte("b1"), Version: store.AnyVersion},
		store.Write{Key: "x", Value: []byte("x2"), Version: 7}, // conflicts
	)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a batch with one conflict: got %v, want ErrConflict", err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := b.Get(ctx(), k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s was written by a refused batch (Get: %v)", k, err)
		}
	}
	mustPut(t, b,
		store.Write{Key: "a", Value: []byte("a1"), Version: 0},
		store.Write{Key: "x", Value: []byte("x2"), Version: 1},
	)
	if it := mustGet(t, b, "x"); string(it.Value) != "x2" {
		t.Fatalf("x = %q after the batch, want x2", it.Value)
	}
}

func testBytes(t *testing.T, b store.Backend) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for i, v := range [][]byte{all, {}, big} {
		k := "bytes" + strconv.Itoa(i)
		mustPut(t, b, store.Write{Key: k, Value: v, Version: 0})
		if got := mustGet(t, b, k).Value; !bytes.Equal(got, v) {
			t.Errorf("value %d (%d bytes) came back as %d bytes, different", i, len(v), len(got))
		}
	}
	key := "ключ/日本/ 'quote\" %_\\"
	mustPut(t, b, store.Write{Key: key, Value: []byte("v"), Version: 0})
	mustGet(t, b, key)
}

func testList(t *testing.T, b store.Backend) {
	for _, k := range []string{"p/b", "p/a", "p/a/deeper", "q/a", "p", "p%", "p_x", "pa"} {
		mustPut(t, b, store.Write{Key: k, Value: []byte(k), Version: 0})
	}
	items, err := b.List(ctx(), "p/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		if string(it.Value) != it.Key || it.Version != 1 {
			t.Errorf("listed %+v, want its own key as value at version 1", it)
		}
		got = append(got, it.Key)
	}
	if want := "[p/a p/a/deeper p/b]"; fmt.Sprint(got) != want {
		t.Fatalf("List(p/) = %v, want %s", got, want)
	}
	items, err = b.List(ctx(), "p%")
	if err != nil || len(items) != 1 {
		t.Fatalf("List(p%%) = %v, %v: want the one key p%% (no pattern matching)", items, err)
	}
	items, err = b.List(ctx(), "none/")
	if err != nil || len(items) != 0 {
		t.Fatalf("List(none/) = %v, %v, want nothing", items, err)
	}
}

func testKeys(t *testing.T, b store.Backend) {
	for _, k := range []string{"p/b", "p/a", "p/a/deeper", "q/a", "p", "p%", "p_x", "pa", "p/\u00e9", "p/c"} {
		mustPut(t, b, store.Write{Key: k, Value: []byte(k), Version: 0})
	}
	var pages []string
	after := ""
	for {
		keys, err := b.Keys(ctx(), "p/", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, fmt.Sprint(keys))
		if len(keys) < 2 {
			break
		}
		after = keys[len(keys)-1]
	}
	if want := "[[p/a p/a/deeper] [p/b p/c] [p/\u00e9]]"; fmt.Sprint(pages) != want {
		t.Fatalf("Keys(p/) in pages of 2 = %v, want %s", pages, want)
	}
	// after before the prefix starts at the prefix's first key.
	if keys, err := b.Keys(ctx(), "p/", "a", 1); err != nil || fmt.Sprint(keys) != "[p/a]" {
		t.Fatalf("Keys(p/, after a) = %v, %v, want [p/a]", keys, err)
	}
	if keys, err := b.Keys(ctx(), "p%", "", 10); err != nil || fmt.Sprint(keys) != "[p%]" {
		t.Fatalf("Keys(p%%) = %v, %v, want [p%%] (no pattern matching)", keys, err)
	}
}

// testStoreConversationPages pages through many conversations under one
// prefix, and sees none of a neighbour's.
func testStoreConversationPages(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	const n = 25
	for i := range n {
		if err := s.SaveConversation(ctx(), fmt.Sprintf("owner/alice/%03d", i), []provider.Message{provider.UserMessage("hi")}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveConversation(ctx(), "owner/alicex/000", []provider.Message{provider.UserMessage("hi")}, 0); err != nil {
		t.Fatal(err)
	}
	var all []string
	after := ""
	for {
		keys, err := s.Conversations(ctx(), "owner/alice/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys...)
		if len(keys) < 10 {
			break
		}
		after = keys[len(keys)-1]
	}
	if len(all) != n || all[0] != "owner/alice/000" || all[n-1] != fmt.Sprintf("owner/alice/%03d", n-1) {
		t.Fatalf("paged %d keys %v, want the %d of owner/alice/ in order", len(all), all, n)
	}
	for _, bad := range []int{0, -1, store.MaxPage + 1} {
		if _, err := s.Conversations(ctx(), "owner/", "", bad); err == nil || !strings.Contains(err.Error(), "ask for 1 to") {
			t.Errorf("a page of %d: %v, want an error saying what to ask for", bad, err)
		}
	}
}

// testStoreDeleteScope deletes everything kept under one scope's keys
// and nothing of a scope whose name starts the same way.
func testStoreDeleteScope(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	keep := func(scope string) {
		t.Helper()
		if err := s.Put(ctx(), store.ScopeKey(scope, "expert/x"), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveConversation(ctx(), store.ScopeKey(scope, "conv"), []provider.Message{provider.UserMessage("hi")}, 0); err != nil {
			t.Fatal(err)
		}
		j, err := s.Journal(ctx(), store.ScopeKey(scope, "turn"))
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Record(ctx(), "k", store.Entry{Content: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("s", store.MaxScopeBytes+1)
	for _, sc := range []string{"a", "a/", "ab", long} {
		keep(sc)
	}
	for _, sc := range []string{"a", long} {
		if err := s.DeleteScope(ctx(), sc); err != nil {
			t.Fatal(err)
		}
	}
	for _, sc := range []string{"a", "a/", "ab", long} {
		_, _, err := s.Get(ctx(), store.ScopeKey(sc, "expert/x"))
		c, cerr := s.Conversation(ctx(), store.ScopeKey(sc, "conv"))
		j, jerr := s.Journal(ctx(), store.ScopeKey(sc, "turn"))
		if cerr != nil || jerr != nil {
			t.Fatal(cerr, jerr)
		}
		gone := errors.Is(err, store.ErrNotFound) && c.Version == 0 && j.Len() == 0
		if want := sc == "a" || sc == long; gone != want {
			t.Errorf("scope %.10q: deleted %v, want %v (value %v, conversation v%d, journal %d)", sc, gone, want, err, c.Version, j.Len())
		}
	}
}

// testStoreSweepJournals sweeps the journals a crash left, spares the
// young and the kept, and finds nothing of a journal deleted as it ended.
func testStoreSweepJournals(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	record := func(turn string) {
		t.Helper()
		j, err := s.Journal(ctx(), turn)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"m1", "m2"} {
			if err := j.Record(ctx(), k, store.Entry{Content: k}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, turn := range []string{"srv/crashed-1", "srv/crashed-2", "srv/suspended", "srv/ended", "other/crashed"} {
		record(turn)
	}
	if err := s.DeleteJournal(ctx(), "srv/ended"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepJournals(ctx(), "srv/", time.Hour, nil); err != nil || n != 0 {
		t.Fatalf("sweeping journals younger than the age: %d, %v, want none swept", n, err)
	}
	n, err := s.SweepJournals(ctx(), "srv/", 0, func(turn string) bool { return turn == "srv/suspended" })
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v: want the 2 crashed journals", n, err)
	}
	for turn, want := range map[string]int{"srv/crashed-1": 0, "srv/crashed-2": 0, "srv/suspended": 2, "other/crashed": 2} {
		j, err := s.Journal(ctx(), turn)
		if err != nil {
			t.Fatal(err)
		}
		if j.Len() != want {
			t.Errorf("after the sweep %s holds %d entries, want %d", turn, j.Len(), want)
		}
	}
	// A swept journal that is written again is stamped again.
	record("srv/crashed-1")
	if n, err := s.SweepJournals(ctx(), "", 0, nil); err != nil || n != 3 {
		t.Fatalf("sweeping everything: %d, %v, want 3", n, err)
	}
}

func testDelete(t *testing.T, b store.Backend) {
	mustPut(t, b, store.Write{Key: "a", Value: []byte("1"), Version: 0}, store.Write{Key: "b", Value: []byte("2"), Version: 0})
	if err := b.Delete(ctx(), "a", "b", "never"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx(), "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a after Delete: %v", err)
	}
	// A deleted key is created afresh at version 1.
	mustPut(t, b, store.Write{Key: "a", Value: []byte("new"), Version: 0})
	if it := mustGet(t, b, "a"); it.Version != 1 {
		t.Fatalf("re-created key at version %d, want 1", it.Version)
	}
}

func lease(t *testing.T, b store.Backend, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := b.Lease(ctx(), key, owner, ttl)
	if err != nil {
		t.Fatalf("Lease(%s, %s): %v", key, owner, err)
	}
	return ok
}

func testLease(t *testing.T, b store.Backend) {
	if !lease(t, b, "L", "A", time.Minute) {
		t.Fatal("A could not take a free lease")
	}
	if lease(t, b, "L", "B", time.Minute) {
		t.Fatal("B took a lease A holds")
	}
	if !lease(t, b, "L", "A", time.Minute) {
		t.Fatal("A could not renew its lease")
	}
	if !lease(t, b, "other", "B", time.Minute) {
		t.Fatal("B could not take another key's lease")
	}
	if err := b.Release(ctx(), "L", "B"); err != nil {
		t.Fatal(err)
	}
	if lease(t, b, "L", "B", time.Minute) {
		t.Fatal("B's release freed A's lease")
	}
	if err := b.Release(ctx(), "L", "A"); err != nil {
		t.Fatal(err)
	}
	if !lease(t, b, "L", "B", time.Minute) {
		t.Fatal("B could not take the lease A released")
	}
}

func testLeaseExpires(t *testing.T, b store.Backend) {
	if !lease(t, b, "L", "A", 150*time.Millisecond) {
		t.Fatal("A could not take a free lease")
	}
	time.Sleep(400 * time.Millisecond)
	if !lease(t, b, "L", "B", time.Minute) {
		t.Fatal("B could not take a lease that expired")
	}
	if lease(t, b, "L", "A", time.Minute) {
		t.Fatal("A renewed a lease B took over")
	}
}

func testConcurrentIncrements(t *testing.T, b store.Backend) {
	mustPut(t, b, store.Write{Key: "n", Value: []byte("0"), Version: 0})
	const workers, each = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				it, err := b.Get(ctx(), "n")
				if err != nil {
					errs <- err
					return
				}
				n, _ := strconv.Atoi(string(it.Value))
				err = b.Put(ctx(), store.Write{Key: "n", Value: []byte(strconv.Itoa(n + 1)), Version: it.Version})
				switch {
				case errors.Is(err, store.ErrConflict):
				case err != nil:
					errs <- err
					return
				default:
					done++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if it := mustGet(t, b, "n"); string(it.Value) != strconv.Itoa(workers*each) || it.Version != workers*each+1 {
		t.Fatalf("after %d increments: %s at version %d: a write was lost", workers*each, it.Value, it.Version)
	}
}

func testCancelled(t *testing.T, b store.Backend) {
	c, cancel := context.WithCancel(ctx())
	cancel()
	if err := b.Put(c, store.Write{Key: "k", Value: []byte("v"), Version: 0}); err == nil {
		// A backend may finish a write it started; it must not report an
		// unwritten one as written.
		if _, err := b.Get(ctx(), "k"); err != nil {
			t.Fatalf("Put under a cancelled context reported success, but Get: %v", err)
		}
	}
}

func newStore(t *testing.T, b store.Backend, opts ...store.Option) *store.Store {
	t.Helper()
	s, err := store.New(nopClose{b}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nopClose leaves closing the backend to Run.
type nopClose struct{ store.Backend }

func (nopClose) Close() error { return nil }

func testStoreConversation(t *testing.T, b store.Backend) {
	s := newStore(t, b, store.WithMaxRecordBytes(4096))
	msgs := []provider.Message{
		provider.UserMessage("hello"),
		provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "look", Arguments: []byte(`{"q": "bad json`)}),
		provider.ToolMessage("c1", "found", true),
		provider.AssistantMessage("done"),
	}
	c, err := s.Conversation(ctx(), "expert")
	if err != nil || c.Version != 0 || len(c.Messages) != 0 {
		t.Fatalf("no conversation yet: %+v, %v", c, err)
	}
	if err := s.SaveConversation(ctx(), "expert", msgs, 0); err != nil {
		t.Fatal(err)
	}
	c, err = s.Conversation(ctx(), "expert")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Messages) != fmt.Sprint(msgs) || c.Version != 1 {
		t.Fatalf("stored %v\nread   %v at version %d", msgs, c.Messages, c.Version)
	}
	if err := s.SaveConversation(ctx(), "expert", msgs[:1], 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("saving over a newer version: %v, want ErrConflict", err)
	}
	huge := []provider.Message{provider.UserMessage(string(bytes.Repeat([]byte("x"), 5000)))}
	if err := s.SaveConversation(ctx(), "expert", huge, 1); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("saving over the size bound: %v, want ErrTooLarge", err)
	}
	if c, _ := s.Conversation(ctx(), "expert"); len(c.Messages) != len(msgs) {
		t.Fatalf("a refused save changed the conversation: %v", c.Messages)
	}
	if err := s.DeleteConversation(ctx(), "expert"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Conversation(ctx(), "expert"); err != nil || len(c.Messages) != 0 {
		t.Fatalf("after delete: %+v, %v", c, err)
	}
}

func testStoreJournal(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	j, err := s.Journal(ctx(), "turn")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			e := store.Entry{Content: "answer " + strconv.Itoa(i), Usage: provider.Usage{InputTokens: int64(i), Requests: 1}}
			if err := j.Record(ctx(), "child"+strconv.Itoa(i), e); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	other, _ := s.Journal(ctx(), "turn-other")
	if err := other.Record(ctx(), "child0", store.Entry{Content: "not mine"}); err != nil {
		t.Fatal(err)
	}
	again, err := s.Journal(ctx(), "turn")
	if err != nil {
		t.Fatal(err)
	}
	if again.Len() != 40 {
		t.Fatalf("reopened journal has %d entries, want 40", again.Len())
	}
	if e, ok := again.Lookup("child7"); !ok || e.Content != "answer 7" || e.Usage.InputTokens != 7 {
		t.Fatalf("child7 = %+v, %v", e, ok)
	}
	// One entry read alone, as the database holds it.
	if e, err := s.JournalEntry(ctx(), "turn", "child7"); err != nil || e.Content != "answer 7" || e.Usage.InputTokens != 7 {
		t.Fatalf("JournalEntry(turn, child7) = %+v, %v", e, err)
	}
	if _, err := s.JournalEntry(ctx(), "turn", "child99"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JournalEntry of an entry never recorded: %v, want ErrNotFound", err)
	}
	if err := s.DeleteJournal(ctx(), "turn"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JournalEntry(ctx(), "turn", "child7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JournalEntry after DeleteJournal: %v, want ErrNotFound", err)
	}
	if e, err := s.JournalEntry(ctx(), "turn-other", "child0"); err != nil || e.Content != "not mine" {
		t.Fatalf("DeleteJournal(turn) touched turn-other's entry: %+v, %v", e, err)
	}
	if j, _ := s.Journal(ctx(), "turn"); j.Len() != 0 {
		t.Fatalf("journal after DeleteJournal has %d entries", j.Len())
	}
	if j, _ := s.Journal(ctx(), "turn-other"); j.Len() != 1 {
		t.Fatalf("DeleteJournal(turn) touched turn-other: %d entries", j.Len())
	}
}

func testStoreCorrupt(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	if err := s.Put(ctx(), "k", []byte("payload"), 0); err != nil {
		t.Fatal(err)
	}
	it := mustGet(t, b, "v/k")
	bad := bytes.Clone(it.Value)
	bad[len(bad)-1] ^= 0x40
	mustPut(t, b, store.Write{Key: "v/k", Value: bad, Version: it.Version})
	if _, _, err := s.Get(ctx(), "k"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a flipped bit: %v, want ErrCorrupt", err)
	}
	mustPut(t, b, store.Write{Key: "v/k", Value: []byte{1, 2}, Version: it.Version + 1})
	if _, _, err := s.Get(ctx(), "k"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a short record: %v, want ErrCorrupt", err)
	}
	mustPut(t, b, store.Write{Key: "v/k", Value: append([]byte{9}, it.Value[1:]...), Version: it.Version + 2})
	if _, _, err := s.Get(ctx(), "k"); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("a record of a newer format: %v, want ErrSchemaTooNew", err)
	}
}

func testStoreLock(t *testing.T, b store.Backend) {
	// A TTL a loaded machine's renewals keep to: renewed every third of
	// it, the lock holds through a stall of two thirds.
	s1 := newStore(t, b, store.WithLeaseTTL(600*time.Millisecond))
	s2 := newStore(t, b, store.WithLeaseTTL(600*time.Millisecond))
	l, err := s1.Lock(ctx(), "expert")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.TryLock(ctx(), "expert"); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("TryLock of a held lock: %v, want ErrBusy", err)
	}
	// The holder renews: the lock outlives its TTL.
	time.Sleep(1300 * time.Millisecond)
	if _, err := s2.TryLock(ctx(), "expert"); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("TryLock after the TTL of a renewed lock: %v, want ErrBusy", err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := s2.Lock(ctx(), "expert")
		if err == nil {
			err = l2.Unlock()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Lock did not get the released lock")
	}
	c, cancel := context.WithTimeout(ctx(), 100*time.Millisecond)
	defer cancel()
	l, _ = s1.Lock(ctx(), "expert")
	defer l.Unlock()
	if _, err := s2.Lock(c, "expert"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock that waited past its context: %v, want DeadlineExceeded", err)
	}
}

// committedThenCancelled is a backend whose leases are written, but
// reported as failed: a context that ended just as the write committed.
type committedThenCancelled struct{ store.Backend }

func (b committedThenCancelled) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if _, err := b.Backend.Lease(context.WithoutCancel(ctx), key, owner, ttl); err != nil {
		return false, err
	}
	return false, context.DeadlineExceeded
}

// A Lock that fails after its lease was written gives the lease back: the
// next caller does not wait out the TTL.
func testStoreLockFailedLease(t *testing.T, b store.Backend) {
	s1 := newStore(t, committedThenCancelled{b}, store.WithLeaseTTL(time.Minute))
	s2 := newStore(t, b, store.WithLeaseTTL(time.Minute))
	if _, err := s1.Lock(ctx(), "expert"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose lease write failed: %v, want DeadlineExceeded", err)
	}
	l, err := s2.TryLock(ctx(), "expert")
	if err != nil {
		t.Fatalf("TryLock after a failed Lock: %v, want the lock (the failed one's lease given back)", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// testStoreJournalKeys: an entry key follows the rule of every other key
// (valid UTF-8, no NUL or U+001F, at most MaxKeyBytes), so that whatever
// Record accepts, at the longest and with multi-byte text, a turn's
// journals list again and DeleteJournals deletes; what it refuses is
// refused with ErrBadKey.
func testStoreJournalKeys(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	turn := strings.Repeat("t", store.MaxKeyBytes)
	j, err := s.Journal(ctx(), turn)
	if err != nil {
		t.Fatal(err)
	}
	longest := strings.Repeat("é", store.MaxKeyBytes/2)
	for _, key := range []string{longest, "ключ/状態/🔑"} {
		if err := j.Record(ctx(), key, store.Entry{Content: key}); err != nil {
			t.Fatalf("recording under a %d-byte key: %v", len(key), err)
		}
	}
	for _, key := range []string{"\xf5bad", "a\x00b", "a\x1fb", "", strings.Repeat("k", store.MaxKeyBytes+1), strings.Repeat("k", 1<<20)} {
		if err := j.Record(ctx(), key, store.Entry{}); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("recording under the %d-byte key %.20q: %v, want ErrBadKey", len(key), key, err)
		}
		if _, err := s.JournalEntry(ctx(), turn, key); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("reading the %d-byte key %.20q: %v, want ErrBadKey", len(key), key, err)
		}
	}
	again, err := s.Journal(ctx(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := again.Lookup(longest); again.Len() != 2 || !ok || e.Content != longest {
		t.Fatalf("reopened: %d entries, the longest key %v", again.Len(), ok)
	}
	if err := s.DeleteJournals(ctx(), turn[:10]); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Journal(ctx(), turn); j.Len() != 0 {
		t.Fatalf("%d entries left after DeleteJournals", j.Len())
	}
}

// testStoreJournalPrefix: Journal.Keys lists, in order, the entries under
// a prefix, those the journal was opened with (as the backend lists them)
// and those recorded since, and none of a prefix that only looks alike
// (a sibling whose name starts the same, another turn's).
func testStoreJournalPrefix(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	recorded := []string{"run.a.0/m0", "run.a.0/m0/c1/x.0/run.b.0/m0", "run.a.0/m0/c1/x.0/run.b.0/m1", "run.a.0/m0/c1/spent",
		"run.a.0/m0/c10/x.0/run.b.0/m0", "run.a.0/m0/c1%/y", "run.a.0/m0/c1_/y", "run.a.0/m1/ключ/🔑"}
	j, err := s.Journal(ctx(), "turn/p")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range recorded[:5] {
		if err := j.Record(ctx(), key, store.Entry{Content: key}); err != nil {
			t.Fatal(err)
		}
	}
	other, _ := s.Journal(ctx(), "turn/p2")
	if err := other.Record(ctx(), "run.a.0/m0/c1/z", store.Entry{}); err != nil {
		t.Fatal(err)
	}
	again, err := s.Journal(ctx(), "turn/p")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range recorded[5:] {
		if err := again.Record(ctx(), key, store.Entry{Content: key}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"run.a.0/m0/c1/", []string{recorded[1], recorded[2], recorded[3]}},
		{"run.a.0/m0/c1/x.0/run.b.0/m", []string{recorded[1], recorded[2]}},
		{"run.a.0/m0/c1", []string{recorded[1], recorded[2], recorded[3], recorded[5], recorded[4], recorded[6]}},
		{"run.a.0/m1/ключ/", []string{recorded[7]}},
		{"run.a.0/m2/", nil},
		{"", slices.Sorted(slices.Values(recorded))},
	} {
		slices.Sort(c.want) // in byte order
		if got := again.Keys(c.prefix); !slices.Equal(got, c.want) {
			t.Errorf("Keys(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	if got := j.Keys("run.a.0/m0/c1/"); !slices.Equal(got, []string{recorded[3], recorded[1], recorded[2]}) {
		t.Errorf("Keys of the journal that recorded them = %q", got)
	}
}

// failingRenewals is a backend whose leases cannot be renewed once failing
// is set: a database too slow to answer.
type failingRenewals struct {
	store.Backend
	failing atomic.Bool
}

func (f *failingRenewals) Lease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if f.failing.Load() {
		return false, errors.New("injected: the database did not answer")
	}
	return f.Backend.Lease(ctx, key, owner, ttl)
}

// testStoreLockRenewalsFail: a holder whose renewals fail for a whole TTL
// is told it lost the lock (Lost closed, Unlock returns ErrLockLost), and
// another holder can take it.
func testStoreLockRenewalsFail(t *testing.T, b store.Backend) {
	fb := &failingRenewals{Backend: b}
	s := newStore(t, fb, store.WithLeaseTTL(150*time.Millisecond))
	lk, err := s.Lock(ctx(), "slow")
	if err != nil {
		t.Fatal(err)
	}
	fb.failing.Store(true)
	select {
	case <-lk.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost stayed open while no renewal succeeded for many TTLs")
	}
	fb.failing.Store(false)
	if err := lk.Unlock(); !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("Unlock of a lock whose renewals failed: %v, want ErrLockLost", err)
	}
	other, err := s.Lock(ctx(), "slow")
	if err != nil {
		t.Fatalf("another holder: %v", err)
	}
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// testStoreLockFencing: a holder stalled past its TTL, whose lock another
// process took since, cannot write under it (ErrLockLost, nothing
// written), while the new holder's writes land.
func testStoreLockFencing(t *testing.T, b store.Backend) {
	stalled := &failingRenewals{Backend: b}
	// The stalled holder's lease is short, so that the next holder soon
	// takes it; the next holder's is long, so that it holds through the
	// test however slowly a loaded machine runs its renewals.
	first := newStore(t, stalled, store.WithLeaseTTL(150*time.Millisecond))
	second := newStore(t, b, store.WithLeaseTTL(time.Minute))
	old, err := first.Lock(ctx(), "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Put(ctx(), "fenced-record", []byte("first, while it holds"), store.AnyVersion); err != nil {
		t.Fatalf("a holder's fenced write: %v", err)
	}
	stalled.failing.Store(true) // it stalls: no renewal reaches the database
	lctx, cancel := context.WithTimeout(ctx(), 5*time.Second)
	defer cancel()
	next, err := second.Lock(lctx, "fenced")
	if err != nil {
		t.Fatalf("the next holder, after the TTL: %v", err)
	}
	defer next.Unlock()
	if err := next.Put(ctx(), "fenced-record", []byte("second"), store.AnyVersion); err != nil {
		t.Fatalf("the new holder's fenced write: %v", err)
	}
	stalled.failing.Store(false) // it wakes up and writes
	if err := old.Put(ctx(), "fenced-record", []byte("stale"), store.AnyVersion); !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("the stale holder's fenced write: %v, want ErrLockLost", err)
	}
	got, _, err := second.Get(ctx(), "fenced-record")
	if err != nil || string(got) != "second" {
		t.Fatalf("the record holds %q (%v), want the new holder's", got, err)
	}
	if err := old.Unlock(); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("the stale holder's Unlock: %v, want ErrLockLost", err)
	}
}

// countingPuts counts the bytes written through a backend.
type countingPuts struct {
	store.Backend
	written atomic.Int64
}

func (c *countingPuts) Put(ctx context.Context, ws ...store.Write) error {
	for _, w := range ws {
		c.written.Add(int64(len(w.Value)))
	}
	return c.Backend.Put(ctx, ws...)
}

// testStoreConversationAppends appends to a conversation a message at a
// time: what each append writes does not grow with the conversation, a
// stale append is refused, a conversation saved whole by an earlier
// version is read and replaced, and deleting it leaves no part behind.
func testStoreConversationAppends(t *testing.T, b store.Backend) {
	cb := &countingPuts{Backend: b}
	s := newStore(t, cb)
	const key = "thread"
	if err := s.SaveConversation(ctx(), key, []provider.Message{provider.UserMessage("q0"), provider.AssistantMessage("a0")}, 0); err != nil {
		t.Fatal(err)
	}
	const appends = 1100 // past the bound on parts
	var want []string
	want = append(want, "q0", "a0")
	var early, late int64
	c, err := s.Conversation(ctx(), key)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= appends; i++ {
		msg := provider.UserMessage("note " + strconv.Itoa(i) + strings.Repeat(" and so on", 5))
		before := cb.written.Load()
		version := c.Version
		if err := s.AppendConversation(ctx(), key, &c, []provider.Message{msg}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		switch w := cb.written.Load() - before; {
		case i <= 100:
			early += w
		case i > 900 && i <= 1000:
			late += w
		}
		want = append(want, msg.Content)
		if c.Version != version+1 || len(c.Messages) != len(want) {
			t.Fatalf("append %d: version %d after %d, %d messages", i, c.Version, version, len(c.Messages))
		}
		if i%97 == 0 || i == appends {
			// Read back now and then, as another process would.
			if c, err = s.Conversation(ctx(), key); err != nil {
				t.Fatal(err)
			}
			if len(c.Messages) != len(want) || c.Messages[len(c.Messages)-1].Content != msg.Content {
				t.Fatalf("after %d appends, read %d messages", i, len(c.Messages))
			}
		}
	}
	if late > 2*early+64<<10 {
		t.Errorf("appends 900–1000 wrote %d bytes, appends 1–100 %d: an append's cost grows with the conversation", late, early)
	}
	var got []string
	for _, m := range c.Messages {
		got = append(got, m.Content)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read back %d messages, not the %d appended in order", len(got), len(want))
	}
	parts, err := b.List(ctx(), "p/")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) > 1024 {
		t.Errorf("%d parts stored, more than the bound", len(parts))
	}
	stale := c
	stale.Version--
	if err := s.AppendConversation(ctx(), key, &stale, []provider.Message{provider.UserMessage("late")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an append to a conversation another writer moved on: %v, want ErrConflict", err)
	}

	// Saved whole, in the record form that came before parts.
	old := []byte(`{"messages":[{"role":"user","content":"old q"},{"role":"assistant","content":"old a"}]}`)
	rec := make([]byte, 5+len(old))
	rec[0] = 1
	binary.BigEndian.PutUint32(rec[1:], crc32.ChecksumIEEE(old))
	copy(rec[5:], old)
	mustPut(t, b, store.Write{Key: "c/old", Value: rec, Version: 0})
	oc, err := s.Conversation(ctx(), "old")
	if err != nil || len(oc.Messages) != 2 || oc.Messages[1].Content != "old a" {
		t.Fatalf("the old form read as %+v, %v", oc, err)
	}
	if err := s.AppendConversation(ctx(), "old", &oc, []provider.Message{provider.UserMessage("new q")}); err != nil {
		t.Fatal(err)
	}
	oc, err = s.Conversation(ctx(), "old")
	if err != nil || len(oc.Messages) != 3 || oc.Messages[2].Content != "new q" {
		t.Fatalf("the old form, appended to: %+v, %v", oc, err)
	}

	for _, k := range []string{key, "old"} {
		if err := s.DeleteConversation(ctx(), k); err != nil {
			t.Fatal(err)
		}
	}
	if parts, err := b.List(ctx(), "p/"); err != nil || len(parts) != 0 {
		t.Errorf("%d parts left after the conversations were deleted (%v)", len(parts), err)
	}
}

// testStoreParts keeps a value in parts: a reader that knows where it
// stood reads only what was added since, a value Put stored whole reads as
// one part, a stale append is refused, and Delete takes the parts.
func testStoreParts(t *testing.T, b store.Backend) {
	s := newStore(t, b)
	const key = "log"
	if err := s.Put(ctx(), key, []byte("whole"), 0); err != nil {
		t.Fatal(err)
	}
	parts, from, at, err := s.ReadParts(ctx(), key, store.Parts{})
	if err != nil || from != 0 || len(parts) != 1 || string(parts[0]) != "whole" {
		t.Fatalf("a value stored whole: %q from %d, %v", parts, from, err)
	}
	all := "whole"
	for i := range 5 {
		p := "+" + strconv.Itoa(i)
		all += p
		if at, err = s.AppendPart(ctx(), key, at, []byte(p), func() ([]byte, error) { return []byte(all), nil }); err != nil {
			t.Fatal(err)
		}
	}
	parts, _, _, err = s.ReadParts(ctx(), key, store.Parts{})
	if err != nil || string(bytes.Join(parts, nil)) != all {
		t.Fatalf("read whole: %q, %v; want %q", parts, err, all)
	}
	seen := at
	at, err = s.AppendPart(ctx(), key, at, []byte("+5"), func() ([]byte, error) { return []byte(all + "+5"), nil })
	if err != nil {
		t.Fatal(err)
	}
	parts, from, now, err := s.ReadParts(ctx(), key, seen)
	if err != nil || len(parts) != 1 || string(parts[0]) != "+5" || from == 0 || now != at {
		t.Fatalf("read on from where it stood: %q from %d, %v", parts, from, err)
	}
	if parts, _, _, err := s.ReadParts(ctx(), key, at); err != nil || len(parts) != 0 {
		t.Fatalf("read on from where it stands: %q, %v, want nothing", parts, err)
	}
	if _, err := s.AppendPart(ctx(), key, seen, []byte("late"), nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an append to where it stood before: %v, want ErrConflict", err)
	}
	// A writer that rewrites it whole between a reader's head and its
	// parts: the reader reads again, and gets the new whole.
	rw := &rewriteOnList{Backend: b}
	reader := newStore(t, rw)
	rw.rewrite = func() {
		if _, err := s.AppendPart(ctx(), key, at, nil, func() ([]byte, error) { return []byte("rewritten"), nil }); err != nil {
			t.Error(err)
		}
	}
	parts, _, _, err = reader.ReadParts(ctx(), key, store.Parts{})
	if err != nil || len(parts) != 1 || string(parts[0]) != "rewritten" {
		t.Fatalf("a read racing a rewrite: %q, %v", parts, err)
	}
	// A value that looks like a head is a value.
	if err := s.Put(ctx(), "lookalike", []byte(`{"parts":{"id":"x","parts":3}}`), 0); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.Get(ctx(), "lookalike"); err != nil || !strings.HasPrefix(string(v), `{"parts"`) {
		t.Fatalf("a value shaped like a head: %q, %v", v, err)
	}
	if _, _, err := s.Get(ctx(), key); err == nil || !strings.Contains(err.Error(), "ReadParts") {
		t.Fatalf("Get of a value kept in parts: %v, want a pointer to ReadParts", err)
	}
	if err := s.Delete(ctx(), key); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.ReadParts(ctx(), key, store.Parts{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after Delete: %v, want ErrNotFound", err)
	}
	if keys, err := b.Keys(ctx(), "p/", "", 10); err != nil || len(keys) != 0 {
		t.Fatalf("parts left after Delete: %q, %v", keys, err)
	}
}

// rewriteOnList runs rewrite once, as the first listing of parts begins.
type rewriteOnList struct {
	store.Backend
	rewrite func()
}

func (r *rewriteOnList) List(ctx context.Context, prefix string) ([]store.Item, error) {
	if f := r.rewrite; f != nil && strings.HasPrefix(prefix, "p/") {
		r.rewrite = nil
		f()
	}
	return r.Backend.List(ctx, prefix)
}
