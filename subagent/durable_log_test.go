package subagent

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// metered is a backend that counts what is written and which parts are
// read, and can fail the next write of the expert's head.
type metered struct {
	store.Backend
	mu         sync.Mutex
	written    int
	partReads  int
	failHeadAt int // fail the write of the head when written passes this (0: never)
}

func (m *metered) Put(ctx context.Context, writes ...store.Write) error {
	m.mu.Lock()
	for _, w := range writes {
		if m.failHeadAt > 0 && m.written > m.failHeadAt && strings.HasSuffix(w.Key, "expert") {
			m.failHeadAt = 0
			m.mu.Unlock()
			return errors.New("disk full")
		}
		m.written += len(w.Value)
	}
	m.mu.Unlock()
	return m.Backend.Put(ctx, writes...)
}

// isPart reports whether key is one of a record's parts, beside its head.
func isPart(key string) bool { return strings.HasPrefix(key, "p/") }

func (m *metered) Get(ctx context.Context, key string) (store.Item, error) {
	if isPart(key) {
		m.mu.Lock()
		m.partReads++
		m.mu.Unlock()
	}
	return m.Backend.Get(ctx, key)
}

func (m *metered) List(ctx context.Context, prefix string) ([]store.Item, error) {
	items, err := m.Backend.List(ctx, prefix)
	if isPart(prefix) {
		m.mu.Lock()
		m.partReads += len(items)
		m.mu.Unlock()
	}
	return items, err
}

func (m *metered) counts() (written, partReads int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.written, m.partReads
}

func meteredStore(t testing.TB) (*store.Store, *metered) {
	t.Helper()
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := &metered{Backend: b}
	st := must(store.New(m))(t)
	t.Cleanup(func() { st.Close() })
	return st, m
}

// A stored expert writes what each call added, not the whole
// conversation: the bytes written per call stay flat while the
// conversation grows tenfold, and a process that takes its turn after
// another reads only the parts it has not seen.
func TestStoredExpertWritesWhatEachCallAdded(t *testing.T) {
	st, m := meteredStore(t)
	e := &echo{}
	expert := func() *SubAgentTool {
		r := newReact(t, e.provider(), agent.WithName("expert"), agent.WithoutCompaction())
		return must(FromAgent("expert", "Knows things.", r, WithInputFromArgs(argsTask), WithStore(st, "expert")))(t)
	}
	one, two := expert(), expert()
	ctx := context.Background()
	perCall := make([]int, 0, 1000)
	for i := range 1000 {
		tl := one
		if i >= 900 && i%2 == 1 {
			tl = two // the last hundred calls alternate between two processes
		}
		before, readsBefore := m.counts()
		if _, err := callTool(ctx, tl, "c"+strconv.Itoa(i), `{"task":"note `+strconv.Itoa(i)+`: all quiet on deck"}`); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		after, readsAfter := m.counts()
		perCall = append(perCall, after-before)
		if i > 901 && readsAfter-readsBefore > 2 {
			t.Fatalf("call %d read %d parts to catch up with one call of the other process", i, readsAfter-readsBefore)
		}
	}
	sum := func(from, to int) (n int) {
		for _, w := range perCall[from:to] {
			n += w
		}
		return n
	}
	early, late := sum(100, 200), sum(800, 900)
	if late > 2*early {
		t.Errorf("calls 800–900 wrote %d bytes, calls 100–200 %d: what a call writes grows with the conversation", late, early)
	}
	// Whole rewrites included, a call writes at most about twice what it
	// added, and a head.
	whole := len(must(one.resident.(*agent.React).Snapshot())(t))
	if total := sum(0, 1000); total > 4*whole+1000*200 {
		t.Errorf("1,000 calls wrote %d bytes in all, for a conversation of %d bytes", total, whole)
	}
	msgs, _ := storedMessages(t, st)
	if len(msgs) != 2000 || !strings.HasSuffix(msgs[1999].Content, "note 999: all quiet on deck") {
		t.Fatalf("stored %d messages, want all 2000 in order", len(msgs))
	}
	t.Logf("bytes written: calls 100–200 %d, calls 800–900 %d, all %d; the whole conversation of 2,000 messages is %d bytes", early, late, sum(0, 1000), whole)
}

// A conversation stored whole, before parts existed, is read as it was and
// replaced by the parts form at the first call that succeeds.
func TestStoredExpertReadsTheOldFormat(t *testing.T) {
	st, _ := meteredStore(t)
	e := &echo{}
	old := newReact(t, e.provider(), agent.WithName("expert"))
	for _, q := range []string{"first", "second"} {
		if _, err := old.Run(context.Background(), agent.Input{Text: q}); err != nil {
			t.Fatal(err)
		}
	}
	snap := must(old.Snapshot())(t)
	if err := st.Put(context.Background(), "expert", snap, 0); err != nil {
		t.Fatal(err)
	}
	ex := storedExpert(t, e.provider(), st)
	if _, err := callTool(context.Background(), ex, "c", `{"task":"third"}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Get(context.Background(), "expert"); err == nil || !strings.Contains(err.Error(), "kept in parts") {
		t.Fatalf("after the first call, Get says %v: want the conversation kept in parts", err)
	}
	msgs, _ := storedMessages(t, st)
	var got []string
	for _, m := range msgs {
		got = append(got, m.Content)
	}
	if want := []string{"first", "A:first", "second", "A:second", "third", "A:third"}; !cmp.Equal(want, got) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// A process that writes its part and dies before the head (here: the head
// write fails) leaves the stored conversation as it was; the next call
// writes over the stray part, and another process reads what the first
// one holds.
func TestStoredExpertPartWithoutItsHeadIsNeverRead(t *testing.T) {
	st, m := meteredStore(t)
	e := &echo{}
	ex := storedExpert(t, e.provider(), st)
	ctx := context.Background()
	for i := range 3 {
		if _, err := callTool(ctx, ex, "c"+strconv.Itoa(i), `{"task":"q`+strconv.Itoa(i)+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	before, version := storedMessages(t, st)
	m.mu.Lock()
	m.failHeadAt = m.written
	m.mu.Unlock()
	if _, err := callTool(ctx, ex, "lost", `{"task":"lost"}`); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("the call whose head was not written: %v, want the write's error", err)
	}
	after, v := storedMessages(t, st)
	if diff := cmp.Diff(before, after); diff != "" || v != version {
		t.Fatalf("the stored conversation changed without its head (-before +after):\n%s", diff)
	}
	if _, err := callTool(ctx, ex, "next", `{"task":"next"}`); err != nil {
		t.Fatal(err)
	}
	other := storedExpert(t, e.provider(), st)
	if _, err := callTool(ctx, other, "other", `{"task":"other"}`); err != nil {
		t.Fatal(err)
	}
	msgs, _ := storedMessages(t, st)
	var got []string
	for _, m := range msgs {
		got = append(got, m.Content)
	}
	want := []string{"q0", "A:q0", "q1", "A:q1", "q2", "A:q2", "next", "A:next", "other", "A:other"}
	if !cmp.Equal(want, got) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// An expert run outside the tool between two calls keeps what that run
// added: the next call finds the store as it left it, keeps the agent's
// conversation, and stores it whole rather than appending to a past the
// store does not have.
func TestStoredExpertRunOutsideTheToolIsStoredWhole(t *testing.T) {
	st, _ := meteredStore(t)
	e := &echo{}
	r := newReact(t, e.provider(), agent.WithName("expert"))
	ex := must(FromAgent("expert", "Knows things.", r, WithInputFromArgs(argsTask), WithStore(st, "expert")))(t)
	ctx := context.Background()
	if _, err := callTool(ctx, ex, "c1", `{"task":"first"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, agent.Input{Text: "aside"}); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(ctx, ex, "c2", `{"task":"second"}`); err != nil {
		t.Fatal(err)
	}
	stored, _ := storedMessages(t, st)
	if diff := cmp.Diff(r.History(), stored); diff != "" {
		t.Fatalf("the stored conversation is not the agent's (-agent +stored):\n%s", diff)
	}
	r.Reset()
	if _, err := callTool(ctx, ex, "c3", `{"task":"third"}`); err != nil {
		t.Fatal(err)
	}
	stored, _ = storedMessages(t, st)
	if diff := cmp.Diff(r.History(), stored); diff != "" || len(stored) != 2 {
		t.Fatalf("after a Reset outside the tool (-agent +stored):\n%s", diff)
	}
}
