package devui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// page is one page of a thread's recorded runs.
type page struct {
	Runs []struct {
		RunID string `json:"runId"`
	} `json:"runs"`
	Older int64  `json:"older"`
	Error string `json:"error"`
}

func getPage(t *testing.T, url string) page {
	t.Helper()
	status, text := send(t, "GET", url, "", "")
	var p page
	if status != http.StatusOK || json.Unmarshal([]byte(text), &p) != nil || p.Error != "" {
		t.Fatalf("GET %s: %d %.300s", url, status, text)
	}
	return p
}

func runOn(thread, run string) string {
	b, _ := json.Marshal(map[string]any{"threadId": thread, "runId": run, "messages": []map[string]string{{"id": "m-" + run, "role": "user", "content": "hi"}}})
	return string(b)
}

// Deleting a thread deletes the runs the viewer recorded of it, whether it
// is deleted through the viewer or by the AG-UI handler itself: a new
// thread of the same id shows none of them, nor can one be re-run.
func TestDeletedThreadLeavesNoRuns(t *testing.T) {
	for _, how := range []string{"the viewer", "the handler"} {
		t.Run(how, func(t *testing.T) {
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
				return agent.NewReact(fake.NewProvider(fake.Text("hello")))
			}, agui.WithThreads(st))
			if err != nil {
				t.Fatal(err)
			}
			v, err := devui.New(h, devui.WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(v)
			defer srv.Close()
			for _, r := range []string{"old1", "old2"} {
				if status, _ := post(t, srv.URL+"/run", runOn("t1", r)); status != http.StatusOK {
					t.Fatalf("run %s: %d", r, status)
				}
			}
			if p := getPage(t, srv.URL+"/runs/t1"); len(p.Runs) != 2 {
				t.Fatalf("before the deletion: %+v", p)
			}
			if how == "the viewer" {
				if status, text := send(t, "DELETE", srv.URL+"/threads/t1", "", "", "Content-Type", "application/json"); status != http.StatusNoContent {
					t.Fatalf("DELETE: %d %s", status, text)
				}
			} else if err := h.DeleteThread(context.Background(), "", "t1"); err != nil {
				t.Fatal(err)
			}
			if p := getPage(t, srv.URL+"/runs/t1"); len(p.Runs) != 0 {
				t.Fatalf("the deleted thread's runs: %+v, want none", p.Runs)
			}
			if status, _ := post(t, srv.URL+"/run", runOn("t1", "new")); status != http.StatusOK {
				t.Fatalf("the new run: %d", status)
			}
			if p := getPage(t, srv.URL+"/runs/t1"); len(p.Runs) != 1 || p.Runs[0].RunID != "new" {
				t.Errorf("the new thread of the same id shows %+v, want its one run", p.Runs)
			}
			keys, err := st.Keys(context.Background(), "", "", store.MaxPage)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if strings.Contains(k, "old") {
					t.Errorf("the store still holds %q", k)
				}
			}
		})
	}
}

// A thread of more runs than a page has its newest first: the page
// without before ends with the newest run, each older page leads to the
// next, and every run is on exactly one page, in order; the newest can be
// re-run.
func TestRunsArePaged(t *testing.T) {
	srv, _, _ := rerunSetup(t, "restart", nil)
	const n = 101
	var newest []json.RawMessage
	for i := 1; i <= n; i++ {
		status, events := post(t, srv.URL+"/run", runOn("t1", fmt.Sprintf("r%d", i)))
		if status != http.StatusOK {
			t.Fatalf("run %d: %d", i, status)
		}
		newest = events
	}
	var got []string
	next := srv.URL + "/runs/t1"
	for pages := 0; next != ""; pages++ {
		if pages > n {
			t.Fatal("the pages do not end")
		}
		p := getPage(t, next)
		var ids []string
		for _, r := range p.Runs {
			ids = append(ids, r.RunID)
		}
		if pages == 0 && (len(ids) == 0 || ids[len(ids)-1] != fmt.Sprintf("r%d", n)) {
			t.Fatalf("the first page %q does not end with the newest run", ids)
		}
		got = append(ids, got...)
		next = ""
		if p.Older > 0 {
			next = fmt.Sprintf("%s/runs/t1?before=%d&limit=7", srv.URL, p.Older)
		}
	}
	for i, id := range got {
		if id != fmt.Sprintf("r%d", i+1) {
			t.Fatalf("the pages hold %q, want r1 to r%d once each, in order", got, n)
		}
	}
	if len(got) != n {
		t.Fatalf("%d runs on the pages, want %d", len(got), n)
	}
	if p := getPage(t, srv.URL+"/runs/t1?limit=100"); len(p.Runs) != 100 || p.Older != 2 {
		t.Errorf("a page of 100: %d runs, older %d; want 100 and 2", len(p.Runs), p.Older)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "before=0", "before=-3"} {
		if status, _ := send(t, "GET", srv.URL+"/runs/t1?"+q, "", ""); status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, status)
		}
	}
	// The newest run is re-run from its own turn.
	status, events := post(t, srv.URL+"/rerun", fmt.Sprintf(`{"threadId":"t1","runId":"x","fromRunId":"r%d","step":1,"toolCallId":%q,"answer":"by hand"}`, n, leadCalls(newest)[0]))
	if status != http.StatusOK || !strings.HasPrefix(finalAnswer(events), "final: ") || !strings.Contains(finalAnswer(events), "by hand + did two") {
		t.Errorf("re-running the newest run: %d, answer %q", status, finalAnswer(events))
	}
}

// fromRunId names a run by its whole id: a run whose id ends with it is
// another run.
func TestFromRunIDMatchesExactly(t *testing.T) {
	srv, _, _ := rerunSetup(t, "restart", nil)
	if status, _ := post(t, srv.URL+"/run", runOn("t1", "a-r1")); status != http.StatusOK {
		t.Fatal(status)
	}
	rerun := `{"threadId":"t1","runId":"x","fromRunId":"r1","step":1,"toolCallId":"call_0","answer":"by hand"}`
	if status, events := post(t, srv.URL+"/rerun", rerun); status != http.StatusBadRequest {
		t.Fatalf("fromRunId r1 with only a-r1 recorded: %d %q, want 400: no such run", status, finalAnswer(events))
	}
	// With both, each names its own turn: r1's holds the answers of the
	// turn before it too.
	status, r1 := post(t, srv.URL+"/run", runOn("t1", "r1"))
	if status != http.StatusOK {
		t.Fatal(status)
	}
	// r1's lead named its first call afresh: call_0 was a-r1's.
	rerun = strings.Replace(rerun, "call_0", leadCalls(r1)[0], 1)
	status, events := post(t, srv.URL+"/rerun", rerun)
	if want := "final: did one + did two + by hand + did two"; status != http.StatusOK || finalAnswer(events) != want {
		t.Errorf("re-running r1: %d %q, want %q", status, finalAnswer(events), want)
	}
}

// Any thread id the AG-UI handler takes is recorded and listed, however
// long it is escaped, up to the longest it takes, and so is a long run id,
// which can be re-run from.
func TestLongIDsAreRecorded(t *testing.T) {
	srv, _, _ := rerunSetup(t, "fixed", nil)
	// The longest threadId a stored thread of no owner may have: 495
	// bytes, 1,480 escaped.
	longest := strings.Repeat("é", 247) + "x"
	if status, _ := post(t, srv.URL+"/run", runOn(longest+"y", "r")); status != http.StatusBadRequest {
		t.Fatalf("a threadId of %d bytes: %d, want the handler to refuse it (400), as the longest it takes is %d", len(longest)+1, status, len(longest))
	}
	for _, thread := range []string{
		strings.Repeat("é", 200), // 400 bytes, 1,200 escaped
		longest,
	} {
		run := strings.Repeat("ü/", 150)
		if status, events := post(t, srv.URL+"/run", runOn(thread, run)); status != http.StatusOK || finalAnswer(events) == "" {
			t.Fatalf("the run on a threadId of %d bytes: %d", len(thread), status)
		}
		p := getPage(t, srv.URL+"/runs/"+url.PathEscape(thread))
		if len(p.Runs) != 1 || p.Runs[0].RunID != run {
			t.Fatalf("the runs of a threadId of %d bytes: %+v", len(thread), p.Runs)
		}
		b, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "x", "fromRunId": run, "toolCallId": "c1", "answer": "by hand"})
		if status, events := post(t, srv.URL+"/rerun", string(b)); status != http.StatusOK || finalAnswer(events) != "final: by hand + did two" {
			t.Errorf("re-running the long run of a threadId of %d bytes: %d %q", len(thread), status, finalAnswer(events))
		}
	}
}

// peak is a ResponseWriter that measures the live heap at each write.
type peak struct {
	header http.Header
	base   uint64
	max    uint64
	n      int
}

func (p *peak) Header() http.Header { return p.header }
func (p *peak) WriteHeader(int)     {}
func (p *peak) Write(b []byte) (int, error) {
	p.n += len(b)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > p.base {
		p.max = max(p.max, m.HeapAlloc-p.base)
	}
	return len(b), nil
}

// A page of runs is written one run at a time: answering it holds about
// one run in memory, not the page.
func TestRunsPageIsBoundedInMemory(t *testing.T) {
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const size = 256 << 10
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text(strings.Repeat("x", size))))
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v)
	defer srv.Close()
	const runs = 12
	for i := range runs {
		if status, _ := post(t, srv.URL+"/run", runOn("t1", fmt.Sprint(i))); status != http.StatusOK {
			t.Fatal(status)
		}
	}
	req := httptest.NewRequest("GET", "http://localhost/runs/t1", nil)
	w := &peak{header: http.Header{}}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.base = m.HeapAlloc
	v.ServeHTTP(w, req)
	if w.n < runs*size {
		t.Fatalf("the page is %d bytes, want the %d runs of at least %d", w.n, runs, size)
	}
	// A run's record holds its answer about twice (streamed, then as the
	// result).
	if limit := uint64(3 * 2 * size); w.max > limit {
		t.Errorf("answering a page of %d runs of ~%d KiB held %d KiB live, want at most %d KiB", runs, 2*size>>10, w.max>>10, limit>>10)
	}
	t.Logf("a page of %d bytes held at most %d KiB live", w.n, w.max>>10)
}
