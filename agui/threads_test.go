package agui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/store/sqlite"
)

func sqliteStore(t testing.TB, path string, opts ...store.Option) *store.Store {
	t.Helper()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// model answers "A:" and the last user message, and keeps what it was
// sent.
type model struct {
	mu   sync.Mutex
	seen [][]provider.Message
	gate chan struct{} // when set, each answer waits for it
}

func (m *model) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req.Messages)
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
	}
	last := req.Messages[len(req.Messages)-1].Content
	if strings.HasPrefix(last, "fail") {
		return provider.Response{}, &provider.Error{StatusCode: 400, Message: "refused"}
	}
	return provider.Response{Message: provider.AssistantMessage("A:" + last)}, nil
}

func (m *model) last() []provider.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[len(m.seen)-1]
}

func threadHandler(t *testing.T, st *store.Store, m *model) *agui.Handler {
	t.Helper()
	return must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("assistant"))
	}, agui.WithThreads(st)))
}

func body(thread string, msgs ...string) string {
	type msg struct {
		ID      string `json:"id"`
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []msg
	for i, c := range msgs {
		role := "user"
		if strings.HasPrefix(c, "A:") {
			role = "assistant"
		}
		ms = append(ms, msg{ID: fmt.Sprint("m", i), Role: role, Content: c})
	}
	b, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "r", "messages": ms})
	return string(b)
}

// turn posts one run and returns its last event.
func turn(t *testing.T, url, thread string, msgs ...string) event.Event {
	t.Helper()
	resp := post(t, url, body(thread, msgs...))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	fs := readFrames(t, resp.Body)
	return fs[len(fs)-1].e
}

func stored(t *testing.T, st *store.Store, thread string) []provider.Message {
	t.Helper()
	c, err := storeHandler(t, st).ReadThread(context.Background(), "", thread)
	if errors.Is(err, agui.ErrNoThread) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.Messages
}

// storeHandler is a handler over st's threads, for what tests do to them
// beside the handler that serves the runs.
func storeHandler(t *testing.T, st *store.Store) *agui.Handler {
	t.Helper()
	return must(t)(agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) {
		return nil, errors.New("this handler serves no runs")
	}, agui.WithThreads(st)))
}

func deleteThread(t *testing.T, st *store.Store, thread string) {
	t.Helper()
	if err := storeHandler(t, st).DeleteThread(context.Background(), "", thread); err != nil {
		t.Fatal(err)
	}
}

func TestThreadKeptOnTheServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	m := &model{}
	srv := serve(t, threadHandler(t, sqliteStore(t, path), m))
	if e := turn(t, srv.URL, "t1", "one"); e.Type != event.RunFinished {
		t.Fatalf("first turn ended with %+v", e)
	}
	// The client sends only its new message.
	turn(t, srv.URL, "t1", "two")
	want := fmt.Sprint([]provider.Message{provider.UserMessage("one"), provider.AssistantMessage("A:one"), provider.UserMessage("two")})
	if got := fmt.Sprint(m.last()); got != want {
		t.Fatalf("the model saw\n%s\nwant\n%s", got, want)
	}
	// A client that sends the whole conversation is served the same way.
	turn(t, srv.URL, "t1", "one", "A:one", "two", "A:two", "three")
	if got := len(m.last()); got != 5 {
		t.Fatalf("the model saw %d messages for the third turn, want 5: %v", got, m.last())
	}
	// Another thread is apart.
	turn(t, srv.URL, "t2", "other")
	if got := len(m.last()); got != 1 {
		t.Fatalf("a new thread's model saw %d messages", got)
	}

	// A restarted server, on the same file, continues the thread.
	srv.Close()
	m2 := &model{}
	srv2 := serve(t, threadHandler(t, sqliteStore(t, path), m2))
	turn(t, srv2.URL, "t1", "four")
	if got := m2.last(); len(got) != 7 || got[5].Content != "A:three" {
		t.Fatalf("after a restart the model saw %v", got)
	}
}

func TestThreadFailedRunStoresNothingAndDeleteForgets(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	m := &model{}
	srv := serve(t, threadHandler(t, st, m))
	turn(t, srv.URL, "t", "one")
	if e := turn(t, srv.URL, "t", "fail now"); e.Type != event.RunError {
		t.Fatalf("a failing run ended with %+v", e)
	}
	if got := stored(t, st, "t"); len(got) != 2 {
		t.Fatalf("after a failed run the thread holds %v", got)
	}
	deleteThread(t, st, "t")
	turn(t, srv.URL, "t", "again")
	if got := len(m.last()); got != 1 {
		t.Fatalf("after DeleteThread the model saw %d messages", got)
	}
}

func TestThreadSizeBound(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "deputy.db"), store.WithMaxRecordBytes(2048))
	srv := serve(t, threadHandler(t, st, &model{}))
	turn(t, srv.URL, "t", "short")
	e := turn(t, srv.URL, "t", strings.Repeat("long ", 500))
	if e.Type != event.RunError || !strings.Contains(e.Message, "WithMaxRecordBytes") {
		t.Fatalf("a turn past the bound ended with %+v, want RUN_ERROR saying what to do", e)
	}
	if got := stored(t, st, "t"); len(got) != 2 {
		t.Fatalf("the thread holds %d messages, want the first turn's 2", len(got))
	}
}

func TestThreadConcurrentRunIsRefused(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	m := &model{gate: make(chan struct{})}
	srv := serve(t, threadHandler(t, st, m))
	first := make(chan event.Event, 1)
	go func() {
		resp := post(t, srv.URL, body("t", "slow"))
		defer resp.Body.Close()
		fs := readFrames(t, resp.Body)
		first <- fs[len(fs)-1].e
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n := len(m.seen)
		m.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run never reached its model")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp := post(t, srv.URL, body("t", "meanwhile"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "in progress") {
		t.Fatalf("a second run on a busy thread: %d %s, want 409 saying why", resp.StatusCode, b)
	}
	close(m.gate)
	if e := <-first; e.Type != event.RunFinished {
		t.Fatalf("the first run ended with %+v", e)
	}
	if got := stored(t, st, "t"); len(got) != 2 || got[0].Content != "slow" {
		t.Fatalf("the thread holds %v, want only the first run's turn", got)
	}
}

func TestThreadOptionsAreChecked(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "deputy.db"))
	if _, err := agui.New(echo(), agui.WithThreads(st)); err == nil || !strings.Contains(err.Error(), "NewPerRequest") {
		t.Errorf("New with WithThreads: %v", err)
	}
	build := func(context.Context, *agui.RunInput) (agent.Agent, error) { return echo(), nil }
	if _, err := agui.NewPerRequest(build, agui.WithThreads(st), agui.WithInput(agui.Conversation)); err == nil {
		t.Error("WithInput with WithThreads accepted")
	}
	if _, err := agui.NewPerRequest(build, agui.WithThreads(nil)); err == nil {
		t.Error("WithThreads(nil) accepted")
	}
	srv := serve(t, must(t)(agui.NewPerRequest(build, agui.WithThreads(st))))
	for _, c := range []struct{ body, want string }{
		{body("t", "A:only an answer"), "no user message"},
		{body(strings.Repeat("x", 600), "hi"), "threadId"},
	} {
		resp := post(t, srv.URL, c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.body, resp.StatusCode, b, c.want)
		}
	}
}

func TestThreadReplicasOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t, "deputy_test_agui")
	ctx := context.Background()
	var urls []string
	var first *store.Store
	for range 2 {
		b, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if first == nil {
			first = st
		}
		urls = append(urls, serve(t, threadHandler(t, st, &model{})).URL)
	}
	// Alternate turns of one thread on the two replicas.
	for i := range 6 {
		if e := turn(t, urls[i%2], "alt", fmt.Sprint("q", i)); e.Type != event.RunFinished {
			t.Fatalf("turn %d: %+v", i, e)
		}
	}
	if got := stored(t, first, "alt"); len(got) != 12 || got[11].Content != "A:q5" {
		t.Fatalf("after alternate turns the thread holds %v", got)
	}
	// Both replicas hammer one thread: each run is served whole or refused.
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 5 {
				resp := post(t, urls[w%2], body("hammer", fmt.Sprintf("w%d-%d", w, i)))
				switch resp.StatusCode {
				case http.StatusOK:
					fs := readFrames(t, resp.Body)
					if fs[len(fs)-1].e.Type == event.RunFinished {
						ok.Add(1)
					}
				case http.StatusConflict:
					refused.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	got := stored(t, first, "hammer")
	if int64(len(got)) != 2*ok.Load() || ok.Load() == 0 {
		t.Fatalf("%d runs finished (%d refused) but the thread holds %d messages", ok.Load(), refused.Load(), len(got))
	}
	for i := 0; i < len(got); i += 2 {
		if got[i+1].Content != "A:"+got[i].Content {
			t.Fatalf("turn %d: %q answered by %q: turns were merged", i/2, got[i].Content, got[i+1].Content)
		}
	}
}
