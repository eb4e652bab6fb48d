package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// byUser names the owner from the identity middleware's user.
func byUser(r *http.Request, _ string) (string, error) {
	u, _ := r.Context().Value(userKey{}).(string)
	if u == "" {
		return "", errors.New("sign in first")
	}
	return u, nil
}

func TestThreadsOverHTTP(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	m := &model{}
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(m)
	}, agui.WithThreads(st), agui.WithAuthorize(byUser)))
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	url := serve(t, identify(mux)).URL
	for _, id := range []string{"b", "a/1", "c"} {
		mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, url+"/agui", body(id, "hello "+id)))
	}
	mustStatus(t, http.StatusOK)(as(t, "bob", http.MethodPost, url+"/agui", body("bobs", "hi")))

	type page struct {
		Threads []string `json:"threads"`
		Next    string   `json:"next"`
	}
	list := func(query string) page {
		t.Helper()
		var p page
		if err := json.Unmarshal([]byte(mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodGet, url+"/threads/"+query, ""))), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := list("?limit=2"); fmt.Sprint(p.Threads) != "[a/1 b]" || p.Next != "b" {
		t.Fatalf("first page %+v, want [a/1 b] and next b", p)
	}
	if p := list("?limit=2&after=b"); fmt.Sprint(p.Threads) != "[c]" || p.Next != "" {
		t.Fatalf("second page %+v, want [c] and no next", p)
	}

	var th struct {
		ThreadID string `json:"threadId"`
		Messages []struct {
			ID, Role, Content string
		} `json:"messages"`
		Interrupts []json.RawMessage `json:"interrupts"`
	}
	if err := json.Unmarshal([]byte(mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodGet, url+"/threads/a%2F1", ""))), &th); err != nil {
		t.Fatal(err)
	}
	if th.ThreadID != "a/1" || len(th.Messages) != 2 || th.Messages[0].Role != "user" || th.Messages[0].Content != "hello a/1" ||
		th.Messages[1].Role != "assistant" || th.Messages[1].Content != "A:hello a/1" || th.Messages[1].ID == th.Messages[0].ID || th.Interrupts == nil {
		t.Fatalf("read a/1: %+v", th)
	}

	if status, _ := as(t, "alice", http.MethodDelete, url+"/threads/b", ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	mustStatus(t, http.StatusNotFound)(as(t, "alice", http.MethodGet, url+"/threads/b", ""))
	if p := list(""); fmt.Sprint(p.Threads) != "[a/1 c]" {
		t.Fatalf("after deleting b: %v", p.Threads)
	}
	if p, err := h.ListThreads(context.Background(), "bob", "", 0); err != nil || fmt.Sprint(p.Threads) != "[bobs]" {
		t.Fatalf("bob's threads: %v, %v", p, err)
	}
	for _, bad := range []string{"?limit=0", "?limit=x", fmt.Sprintf("?limit=%d", store.MaxPage+1)} {
		if status, body := as(t, "alice", http.MethodGet, url+"/threads/"+bad, ""); status != http.StatusBadRequest || !strings.Contains(body, "send a number from 1 to") {
			t.Errorf("list %s: %d %s, want 400 saying what to send", bad, status, body)
		}
	}
	if status, body := as(t, "", http.MethodGet, url+"/threads/", ""); status != http.StatusForbidden || !strings.Contains(body, "sign in first") {
		t.Errorf("an anonymous listing: %d %s, want 403 with Authorize's error", status, body)
	}
}

// A run stopped over HTTP ends cancelled.
func TestStopOverHTTP(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	started := make(chan struct{}, 1)
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return slowLead(t, started, false), nil
	}, agui.WithThreads(st), agui.WithAuthorize(byUser)))
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	url := serve(t, identify(mux)).URL
	done := make(chan string, 1)
	go func() { _, b := as(t, "alice", http.MethodPost, url+"/agui", body("th", "go")); done <- b }()
	<-started
	if b := mustStatus(t, http.StatusOK)(as(t, "bob", http.MethodPost, url+"/threads/th/stop", "")); b != "{\"stopped\":false}\n" {
		t.Fatalf("bob stops his th: %s, want nothing stopped", b)
	}
	if b := mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, url+"/threads/th/stop", "")); b != "{\"stopped\":true}\n" {
		t.Fatalf("alice stops th: %s", b)
	}
	evs := decodeSSE(t, <-done)
	if last := evs[len(evs)-1]; last.Type != event.RunFinished || string(last.Outcome) != `{"type":"cancelled"}` {
		t.Fatalf("the stopped run ended with %s %s", last.Type, last.Outcome)
	}
}

// Shutdown with 20 runs in flight: each ends cancelled with its usage,
// nothing of them is stored, every request has ended when Shutdown
// returns, and a run sent after it is refused.
func TestShutdownEndsEveryRun(t *testing.T) {
	const runs = 20
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	started := make(chan struct{}, runs)
	first := true
	var mu sync.Mutex
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		mu.Lock()
		defer mu.Unlock()
		if first || strings.HasPrefix(in.Messages[len(in.Messages)-1].Content, "warm") {
			return agent.NewReact(&model{})
		}
		return slowLead(t, started, false), nil
	}, agui.WithThreads(st)))
	srv := httptest.NewUnstartedServer(h)
	srv.Start()
	defer srv.Close()
	for i := range runs {
		turn(t, srv.URL, fmt.Sprint("t", i), "warm up")
	}
	mu.Lock()
	first = false
	mu.Unlock()

	bodies := make(chan string, runs)
	for i := range runs {
		go func() {
			resp := post(t, srv.URL, body(fmt.Sprint("t", i), "work"))
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			bodies <- b.String()
		}()
	}
	for range runs {
		<-started
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var shut sync.WaitGroup
	srv.Config.RegisterOnShutdown(func() {
		shut.Go(func() {
			if err := h.Shutdown(ctx); err != nil {
				t.Errorf("Handler.Shutdown: %v", err)
			}
		})
	})
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("http.Server.Shutdown: %v", err)
	}
	shut.Wait()
	for range runs {
		evs := decodeSSE(t, <-bodies)
		last := evs[len(evs)-1]
		if last.Type != event.RunFinished || string(last.Outcome) != `{"type":"cancelled"}` || len(last.Usage) == 0 {
			t.Fatalf("a run ended with %s %s usage %s, want cancelled with its usage", last.Type, last.Outcome, last.Usage)
		}
	}
	for i := range runs {
		id := fmt.Sprint("t", i)
		if got := stored(t, st, id); len(got) != 2 || got[1].Content != "A:warm up" {
			t.Fatalf("thread %s after shutdown holds %v, want its one finished turn", id, got)
		}
		if n := entries(t, st, id, "r"); n != 0 {
			t.Fatalf("thread %s: the stopped run left %d journal entries", id, n)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body("t0", "more"))))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "shutting down") {
		t.Fatalf("a run after Shutdown: %d %s", rec.Code, rec.Body)
	}
}

// flood streams large deltas until its context ends, once it has said so
// on started.
type flood struct{ started chan<- struct{} }

func (flood) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return provider.Response{}, errors.New("flood streams only")
}

func (f flood) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	f.started <- struct{}{}
	chunk := strings.Repeat("x", 32<<10)
	for ctx.Err() == nil {
		if err := onDelta(provider.Delta{Text: chunk}); err != nil {
			return provider.Response{}, err
		}
	}
	return provider.Response{}, ctx.Err()
}

// A client that stops reading is dropped by the default write timeout:
// its run is cancelled and its thread is free for the next run.
func TestSlowReaderIsDroppedByTheDefaultWriteTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the default write timeout")
	}
	t.Parallel()
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	started := make(chan struct{}, 1)
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		if in.Messages[len(in.Messages)-1].Content == "flood me" {
			return agent.NewReact(flood{started})
		}
		return agent.NewReact(&model{})
	}, agui.WithThreads(st)))
	srv := serve(t, h)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := body("th", "flood me")
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	// The client reads nothing. Until the timeout drops it, the thread is
	// busy; after it, the next run is served.
	<-started
	start := time.Now()
	for {
		resp := post(t, srv.URL, body("th", "my turn"))
		status := resp.StatusCode
		if status == http.StatusOK {
			fs := readFrames(t, resp.Body)
			resp.Body.Close()
			if last := fs[len(fs)-1].e; last.Type != event.RunFinished {
				t.Fatalf("the next run ended with %s %s", last.Type, last.Message)
			}
			break
		}
		resp.Body.Close()
		if status != http.StatusConflict {
			t.Fatalf("status %d while the slow reader holds the thread", status)
		}
		if time.Since(start) > agui.DefaultWriteTimeout+20*time.Second {
			t.Fatalf("the slow reader still holds the thread after %v", time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if waited := time.Since(start); waited < agui.DefaultWriteTimeout/2 {
		t.Fatalf("the thread was free after %v: was the slow reader's run ever held?", waited)
	}
	if got := stored(t, st, "th"); len(got) != 2 || got[0].Content != "my turn" {
		t.Fatalf("the thread holds %v, want only the next run's turn", got)
	}
}

// Sweep forgets what crashes left: a run's journal that no suspended run
// needs, and a suspended run whose interrupts have all expired; a live
// suspended run stays resumable, and journals outside the handler's are
// not touched.
func TestSweepForgetsWhatCrashesLeft(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	var live, dying approvaltree.Counts
	dying.TTL = 30 * time.Millisecond
	liveURL, dyingURL := approvalServer(t, st, &live), approvalServer(t, st, &dying)
	_, o := finished(t, aguiRun(t, liveURL, runBody("live", "run-1", nil), http.StatusOK))
	if o.Type != "interrupt" {
		t.Fatalf("outcome %q", o.Type)
	}
	if _, od := finished(t, aguiRun(t, dyingURL, runBody("dying", "run-1", nil), http.StatusOK)); od.Type != "interrupt" {
		t.Fatalf("outcome %q", od.Type)
	}
	// A killed process leaves its run's journal, and a user's own turn has
	// one of its own.
	for _, turn := range []string{agui.JournalName("", "crashed", "run-1"), "my-own-turn"} {
		j, err := st.Journal(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Record(context.Background(), "run.lead.1/m0", store.Entry{Content: "half a run"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * dying.TTL)
	h := storeHandler(t, st)
	if n, err := h.Sweep(context.Background(), time.Hour); err != nil || n != 1 {
		t.Fatalf("Sweep(an hour): %d, %v, want only the expired suspended run", n, err)
	}
	if n, err := h.Sweep(context.Background(), 0); err != nil || n != 1 {
		t.Fatalf("Sweep(0): %d, %v, want the crashed run's journal", n, err)
	}
	if n := entries(t, st, "crashed", "run-1"); n != 0 {
		t.Fatalf("the crashed run's journal holds %d entries", n)
	}
	if j, _ := st.Journal(context.Background(), "my-own-turn"); j.Len() != 1 {
		t.Fatal("the sweep touched a journal outside the handler's")
	}
	yes := []tool.Answer{{InterruptID: o.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}
	if _, o2 := finished(t, aguiRun(t, liveURL, runBody("live", "run-2", yes), http.StatusOK)); o2.Type != "" && o2.Type != "success" || live.Deletes.Load() != 1 {
		t.Fatalf("the live run after the sweep: outcome %q, %d deletes", o2.Type, live.Deletes.Load())
	}
	aguiRun(t, dyingURL, runBody("dying", "run-2", []tool.Answer{{InterruptID: "int_x", Status: tool.Cancelled}}), http.StatusConflict)
}
