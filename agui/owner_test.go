package agui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/tool"
)

// userKey is where the test's identity middleware puts the caller.
type userKey struct{}

// identify is identity middleware as an application has it: the user
// comes from a header here, from a session or a token in a real one.
func identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		}
		next.ServeHTTP(w, r)
	})
}

// claims is the application's record of who started which thread; two
// replicas share it as they would share the application's database.
type claims struct {
	mu     sync.Mutex
	owners map[string]string
}

// notFound is the application's own refusal: it says nothing of the
// thread, not even whether it exists.
const notFound = `{"message":"no such conversation"}`

func (c *claims) authorize(r *http.Request, threadID string) (string, error) {
	user, _ := r.Context().Value(userKey{}).(string)
	if user == "" {
		return "", &agui.Refusal{Status: http.StatusUnauthorized, Header: http.Header{"Www-Authenticate": {"Bearer"}, "Content-Type": {"application/json"}}, Body: []byte(`{"message":"sign in"}`)}
	}
	if threadID == "" {
		return user, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owners == nil {
		c.owners = map[string]string{}
	}
	if o, ok := c.owners[threadID]; ok && o != user {
		return "", &agui.Refusal{Status: http.StatusNotFound, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(notFound)}
	}
	c.owners[threadID] = user
	return user, nil
}

// replica serves the approval tree on st, its runs and its threads, behind
// the identity middleware.
func replica(t *testing.T, st *store.Store, c *approvaltree.Counts, auth agui.Authorize) string {
	t.Helper()
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return approvaltree.Build(c)
	}, agui.WithThreads(st), agui.WithAuthorize(auth)))
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads()))
	return serve(t, identify(mux)).URL
}

// as sends a request as user and returns its status and body.
func as(t *testing.T, user, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// strangerIsRefused has bob try everything on alice's suspended thread
// through the replicas, and checks that each attempt gets the
// application's refusal and nothing else, and that alice then resumes as
// if bob had never been there.
func strangerIsRefused(t *testing.T, urls []string, c *approvaltree.Counts) {
	aliceURL := urls[0]
	evs := decodeSSE(t, mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, aliceURL+"/agui", runBody("alice-thread", "run-1", nil))))
	_, o := finished(t, evs)
	if o.Type != "interrupt" || len(o.Interrupts) != 1 {
		t.Fatalf("alice's run: outcome %q, want one interrupt", o.Type)
	}
	id := o.Interrupts[0].ID
	yes := []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}
	for i, url := range urls {
		for _, try := range []struct{ what, method, path, body string }{
			{"continue", http.MethodPost, "/agui", runBody("alice-thread", "run-b1", nil)},
			{"approve", http.MethodPost, "/agui", runBody("alice-thread", "run-b2", yes)},
			{"read", http.MethodGet, "/threads/alice-thread", ""},
			{"stop", http.MethodPost, "/threads/alice-thread/stop", ""},
			{"delete", http.MethodDelete, "/threads/alice-thread", ""},
		} {
			status, body := as(t, "bob", try.method, url+try.path, try.body)
			if status != http.StatusNotFound || body != notFound {
				t.Errorf("replica %d: bob's %s: %d %s, want the application's 404 %s", i, try.what, status, body, notFound)
			}
			status, body = as(t, "", try.method, url+try.path, try.body)
			if status != http.StatusUnauthorized || body != `{"message":"sign in"}` {
				t.Errorf("replica %d: an anonymous %s: %d %s, want the application's 401", i, try.what, status, body)
			}
		}
		// Bob's own listing holds nothing of alice's.
		status, body := as(t, "bob", http.MethodGet, url+"/threads/", "")
		if status != http.StatusOK || strings.Contains(body, "alice") {
			t.Errorf("replica %d: bob's listing: %d %s", i, status, body)
		}
	}
	if n := c.Deletes.Load(); n != 0 {
		t.Fatalf("the approved tool ran %d times before alice answered", n)
	}
	// Alice's thread is as she left it, on either replica.
	status, body := as(t, "alice", http.MethodGet, urls[len(urls)-1]+"/threads/alice-thread", "")
	if status != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("alice reads her thread: %d %s, want its pending interrupt %s", status, body, id)
	}
	evs = decodeSSE(t, mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, urls[len(urls)-1]+"/agui", runBody("alice-thread", "run-2", yes))))
	if _, o := finished(t, evs); o.Type != "" && o.Type != "success" || c.Deletes.Load() != 1 {
		t.Fatalf("alice's resume: outcome %q, the approved tool ran %d times (want 1)", o.Type, c.Deletes.Load())
	}
}

func TestStrangerIsRefusedBeforeAnyState(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	var c approvaltree.Counts
	var cl claims
	strangerIsRefused(t, []string{replica(t, st, &c, cl.authorize)}, &c)
}

func TestStrangerIsRefusedOnReplicasSharingPostgres(t *testing.T) {
	dsn := pgtest.DSN(t, "deputy_test_agui_owners")
	var c approvaltree.Counts
	var cl claims // the application's own shared record
	var urls []string
	for range 2 {
		b, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		urls = append(urls, replica(t, st, &c, cl.authorize))
	}
	strangerIsRefused(t, urls, &c)
}

// With an Authorize that only names the owner, the same threadId of two
// users is two threads: bob's run on alice's threadId is his own, and
// sees nothing of hers.
func TestSameThreadIDOfTwoOwnersIsTwoThreads(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	var c approvaltree.Counts
	byUser := func(r *http.Request, _ string) (string, error) {
		u, _ := r.Context().Value(userKey{}).(string)
		return u, nil
	}
	url := replica(t, st, &c, byUser)
	evs := decodeSSE(t, mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, url+"/agui", runBody("th", "run-1", nil))))
	_, o := finished(t, evs)
	id := o.Interrupts[0].ID
	yes := []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}

	status, body := as(t, "bob", http.MethodPost, url+"/agui", runBody("th", "run-b", yes))
	if status != http.StatusConflict || strings.Contains(body, id) {
		t.Fatalf("bob answers alice's interrupt on his own th: %d %s, want 409 without her interrupt", status, body)
	}
	if status, body := as(t, "bob", http.MethodGet, url+"/threads/th", ""); status != http.StatusNotFound || strings.Contains(body, id) {
		t.Fatalf("bob reads th: %d %s, want 404", status, body)
	}
	if status, _ := as(t, "bob", http.MethodDelete, url+"/threads/th", ""); status != http.StatusNoContent {
		t.Fatalf("bob deletes his th: %d", status)
	}
	// Bob's own run on th asks him afresh; alice's still waits.
	evs = decodeSSE(t, mustStatus(t, http.StatusOK)(as(t, "bob", http.MethodPost, url+"/agui", runBody("th", "run-b2", nil))))
	if _, ob := finished(t, evs); ob.Type != "interrupt" || ob.Interrupts[0].ID == "" {
		t.Fatalf("bob's own run: outcome %q", ob.Type)
	}
	evs = decodeSSE(t, mustStatus(t, http.StatusOK)(as(t, "alice", http.MethodPost, url+"/agui", runBody("th", "run-2", yes))))
	if _, o := finished(t, evs); o.Type != "" && o.Type != "success" || c.Deletes.Load() != 1 {
		t.Fatalf("alice's resume: outcome %q, the tool ran %d times (want 1)", o.Type, c.Deletes.Load())
	}
}

// While alice's run is in progress, a stranger's requests on her thread
// are refused without touching its lock: her run finishes, and her next
// turn is not refused as busy.
func TestStrangerDoesNotHoldTheOwnersThread(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		return provider.Response{Message: provider.AssistantMessage("done"), StopReason: provider.StopEndTurn}, nil
	})
	var cl claims
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(slow)
	}, agui.WithThreads(st), agui.WithAuthorize(cl.authorize)))
	url := serve(t, identify(h)).URL
	done := make(chan string, 1)
	go func() {
		status, body := as(t, "alice", http.MethodPost, url, body("alice-thread", "hello"))
		done <- http.StatusText(status) + " " + body
	}()
	<-started
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if status, b := as(t, "bob", http.MethodPost, url, body("alice-thread", "mine now")); status != http.StatusNotFound || b != notFound {
				t.Errorf("bob during alice's run: %d %s", status, b)
			}
		})
	}
	wg.Wait()
	close(release)
	if got := <-done; !strings.Contains(got, string(event.RunFinished)) {
		t.Fatalf("alice's run: %.300s", got)
	}
	if status, b := as(t, "alice", http.MethodPost, url, body("alice-thread", "again")); status != http.StatusOK || !strings.Contains(b, string(event.RunFinished)) {
		t.Fatalf("alice's next turn: %d %.300s", status, b)
	}
}

// An owner the application names too long is its bug, said so, not a
// thread stored under a truncated name.
func TestAuthorizeOwnerTooLong(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(provider.Func(nil))
	}, agui.WithThreads(st), agui.WithAuthorize(func(*http.Request, string) (string, error) {
		return strings.Repeat("o", agui.MaxOwnerBytes+1), nil
	})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body("t", "hi"))))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "hash it") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func mustStatus(t *testing.T, want int) func(int, string) string {
	return func(status int, body string) string {
		t.Helper()
		if status != want {
			t.Fatalf("status %d, want %d: %.500s", status, want, body)
		}
		return body
	}
}

// decodeSSE returns the events of a whole SSE body.
func decodeSSE(t *testing.T, body string) []event.Event {
	t.Helper()
	return events(readFrames(t, strings.NewReader(body)))
}
