package devui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// served is an AG-UI handler over a fresh store, whose agent answers text,
// and the viewer of it, both served.
func served(t *testing.T, text string, opts ...func(st *store.Store) devui.Option) (*httptest.Server, *store.Store) {
	t.Helper()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text(text)))
	}, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	var dopts []devui.Option
	for _, o := range opts {
		dopts = append(dopts, o(st))
	}
	v, err := devui.New(h, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/devui/", http.StripPrefix("/devui", v))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, st
}

func withStore(st *store.Store) devui.Option { return devui.WithStore(st) }

// post runs a request and returns its events.
func post(t *testing.T, url, body string, header ...string) (int, []json.RawMessage) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, json.RawMessage(data))
		}
	}
	return resp.StatusCode, events
}

type runs struct {
	Runs []struct {
		RunID     string            `json:"runId"`
		Events    []json.RawMessage `json:"events"`
		Truncated bool              `json:"truncated"`
	} `json:"runs"`
}

func getRuns(t *testing.T, url string, header ...string) (int, runs) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r runs
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("runs %s: %v", b, err)
		}
	}
	return resp.StatusCode, r
}

const runBody = `{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"hi"}]}`

// A run started from the viewer streams as it would from the AG-UI
// endpoint, and, with a store, its events are kept under its thread.
func TestRunIsRecorded(t *testing.T) {
	srv, _ := served(t, "hello there", withStore)
	status, events := post(t, srv.URL+"/devui/run", runBody)
	if status != http.StatusOK || len(events) < 3 {
		t.Fatalf("status %d, %d events", status, len(events))
	}
	status, got := getRuns(t, srv.URL+"/devui/runs/t1")
	if status != http.StatusOK || len(got.Runs) != 1 || got.Runs[0].RunID != "r1" || got.Runs[0].Truncated {
		t.Fatalf("status %d, runs %+v; want the one run", status, got)
	}
	if len(got.Runs[0].Events) != len(events) {
		t.Fatalf("recorded %d events, the client read %d", len(got.Runs[0].Events), len(events))
	}
	for i := range events {
		if string(events[i]) != string(got.Runs[0].Events[i]) {
			t.Errorf("event %d recorded as %s, sent as %s", i, got.Runs[0].Events[i], events[i])
		}
	}
	// Another thread has none; a run refused by the AG-UI handler is not
	// recorded.
	if _, other := getRuns(t, srv.URL+"/devui/runs/t2"); len(other.Runs) != 0 {
		t.Errorf("thread t2 has runs %+v", other.Runs)
	}
	if status, _ := post(t, srv.URL+"/devui/run", `{"threadId":"t3","runId":"r1","messages":"no"}`); status != http.StatusBadRequest {
		t.Errorf("a bad run got %d, want the AG-UI handler's 400", status)
	}
	if _, bad := getRuns(t, srv.URL+"/devui/runs/t3"); len(bad.Runs) != 0 {
		t.Errorf("a refused run was recorded: %+v", bad.Runs)
	}
}

// Without a store the viewer passes runs on and keeps nothing.
func TestNothingRecordedWithoutAStore(t *testing.T) {
	srv, st := served(t, "hello")
	if status, events := post(t, srv.URL+"/devui/run", runBody); status != http.StatusOK || len(events) == 0 {
		t.Fatalf("status %d, %d events", status, len(events))
	}
	if _, got := getRuns(t, srv.URL+"/devui/runs/t1"); len(got.Runs) != 0 {
		t.Errorf("runs %+v, want none", got.Runs)
	}
	keys, err := st.Keys(context.Background(), "devui/", "", 10)
	if err != nil || len(keys) != 0 {
		t.Errorf("the store holds %q (%v), want nothing of the viewer's", keys, err)
	}
}

// A run whose events pass MaxRunLogBytes is recorded up to the bound and
// marked truncated; the client still gets all of it.
func TestRunLogIsBounded(t *testing.T) {
	big := strings.Repeat("x", devui.MaxRunLogBytes)
	srv, _ := served(t, big, withStore)
	_, events := post(t, srv.URL+"/devui/run", runBody)
	var sent int
	for _, e := range events {
		sent += len(e)
	}
	_, got := getRuns(t, srv.URL+"/devui/runs/t1")
	if len(got.Runs) != 1 || !got.Runs[0].Truncated {
		t.Fatalf("runs %+v, want one, truncated", got.Runs)
	}
	var kept int
	for _, e := range got.Runs[0].Events {
		kept += len(e)
	}
	if kept > devui.MaxRunLogBytes || sent <= devui.MaxRunLogBytes {
		t.Errorf("kept %d bytes of %d sent, want at most %d kept of more", kept, sent, devui.MaxRunLogBytes)
	}
}

// With WithAuthorize, runs are kept per owner: the same thread id of two
// owners is two threads, and a refused caller learns nothing.
func TestRunsArePerOwner(t *testing.T) {
	auth := func(r *http.Request, thread string) (string, error) {
		u := r.Header.Get("X-User")
		if u == "" {
			return "", &agui.Refusal{Status: http.StatusUnauthorized}
		}
		return u, nil
	}
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text("for " + in.Owner)))
	}, agui.WithThreads(st), agui.WithAuthorize(auth))
	if err != nil {
		t.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st), devui.WithAuthorize(auth))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v)
	defer srv.Close()
	if status, _ := post(t, srv.URL+"/run", runBody, "X-User", "ann"); status != http.StatusOK {
		t.Fatalf("ann's run: %d", status)
	}
	if status, _ := getRuns(t, srv.URL+"/runs/t1"); status != http.StatusUnauthorized {
		t.Errorf("no user: %d, want 401", status)
	}
	if _, got := getRuns(t, srv.URL+"/runs/t1", "X-User", "bob"); len(got.Runs) != 0 {
		t.Errorf("bob sees %d runs of ann's thread", len(got.Runs))
	}
	if _, got := getRuns(t, srv.URL+"/runs/t1", "X-User", "ann"); len(got.Runs) != 1 {
		t.Errorf("ann sees %d runs, want her one", len(got.Runs))
	}
}

// The page works offline: nothing it loads comes from another origin.
func TestPageFetchesNothingElsewhere(t *testing.T) {
	srv, _ := served(t, "hi")
	resp, err := http.Get(srv.URL + "/devui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `<script src="app.js"`) {
		t.Fatalf("status %d, page %.200s", resp.StatusCode, page)
	}
	remote := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import|fetch\(\s*["'](https?:)?//`)
	err = fs.WalkDir(os.DirFS("assets"), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("assets", path))
		if err != nil {
			return err
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("%s loads from elsewhere: %s", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	if _, err := devui.New(nil); err == nil || !strings.Contains(err.Error(), "pass the AG-UI handler") {
		t.Errorf("New(nil): %v", err)
	}
	h, err := agui.New(agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]devui.Option{"store": devui.WithStore(nil), "authorize": devui.WithAuthorize(nil), "logger": devui.WithLogger(nil)} {
		if _, err := devui.New(h, o); err == nil || !strings.Contains(err.Error(), "(nil)") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A re-run from one of the lead's calls keeps the model's answer that made
// it and the other calls' results: with the call's answer edited nothing
// but the lead's next step runs; with its task edited, the child too. The
// lead's model names its calls as a real one does (afresh each time), as
// some servers do (not at all), and as others (call_0 again each time);
// the helper's runs are counted.
func TestRerun(t *testing.T) {
	for _, ids := range []string{"fixed", "fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) { testRerun(t, ids) })
	}
}

func testRerun(t *testing.T, ids string) {
	srv, helped, p := rerunSetup(t, ids, nil)
	status, first := post(t, srv.URL+"/run", runBody)
	if status != http.StatusOK {
		t.Fatalf("the run: %d", status)
	}
	// The calls' ids, as the client saw them.
	var callIDs []string
	for _, e := range first {
		var ev struct{ Type, ToolCallID, SubagentRunID string }
		if json.Unmarshal(e, &ev) == nil && ev.Type == "TOOL_CALL_START" && ev.SubagentRunID == "" {
			callIDs = append(callIDs, ev.ToolCallID)
		}
	}
	if len(callIDs) != 2 {
		t.Fatalf("the lead's calls: %q", callIDs)
	}
	if helped.Load() != 2 {
		t.Fatalf("the helper ran %d times, want 2", helped.Load())
	}
	answer := func(events []json.RawMessage) string {
		for _, e := range events {
			var ev struct {
				Type   string
				Result string
			}
			if json.Unmarshal(e, &ev) == nil && ev.Type == "RUN_FINISHED" {
				return ev.Result
			}
		}
		return ""
	}
	calls := p.Calls()
	status, events := post(t, srv.URL+"/rerun", `{"threadId":"t1","runId":"r2","toolCallId":"`+callIDs[0]+`","answer":"did ONE, by hand"}`)
	if status != http.StatusOK || answer(events) != "final: did ONE, by hand + did two" {
		t.Fatalf("re-run with an answer: %d, answer %q", status, answer(events))
	}
	if helped.Load() != 2 || p.Calls() != calls+1 {
		t.Errorf("the helper ran %d times and the models %d more; want no helper run and the lead's one step", helped.Load(), p.Calls()-calls)
	}
	status, events = post(t, srv.URL+"/rerun", `{"threadId":"t1","runId":"r3","toolCallId":"`+callIDs[1]+`","task":"three"}`)
	if status != http.StatusOK || answer(events) != "final: did one + did three" {
		t.Fatalf("re-run with a task: %d, answer %q", status, answer(events))
	}
	if helped.Load() != 3 {
		t.Errorf("the helper ran %d times, want once more, for the edited task", helped.Load())
	}
	if _, got := getRuns(t, srv.URL+"/runs/t1"); len(got.Runs) != 3 {
		t.Errorf("the thread has %d recorded runs, want the run and its two re-runs", len(got.Runs))
	}
	for body, want := range map[string]int{
		`{"threadId":"t1","runId":"r4","toolCallId":"nope","task":"x"}`:            http.StatusBadRequest,
		`{"threadId":"t1","runId":"r4","toolCallId":"c1","task":"x","answer":"y"}`: http.StatusBadRequest,
		`{"threadId":"t1","runId":"r4","toolCallId":"c1"}`:                         http.StatusBadRequest,
		`{"threadId":"nothing","runId":"r4","toolCallId":"c1","task":"x"}`:         http.StatusNotFound,
		`not json`: http.StatusBadRequest,
	} {
		if status, _ := post(t, srv.URL+"/rerun", body); status != want {
			t.Errorf("%s: %d, want %d", body, status, want)
		}
	}
}

// rerunSetup serves a lead that calls a helper twice, then sums up what
// it returned, under a viewer WithStore and WithRerun. ids says how the
// lead's model names its two calls: "fixed" (c1, c2), "fresh" (new ids on
// every reply), "none" (no ids) or "restart" (call_0, call_1 in every
// reply). wrap, when set, wraps the lead the builder returns. It returns
// the server, the count of the helper's runs, and the provider.
func rerunSetup(t *testing.T, ids string, wrap func(agent.Agent) agent.Agent) (*httptest.Server, *atomic.Int64, *fake.Provider) {
	t.Helper()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var helped, fresh atomic.Int64
	id := func(i int) string {
		switch ids {
		case "fresh":
			return fmt.Sprintf("call_%d_%d", fresh.Add(1), i)
		case "none":
			return ""
		case "restart":
			return fmt.Sprintf("call_%d", i)
		}
		return fmt.Sprintf("c%d", i+1)
	}
	lead := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			var parts []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleTool {
					parts = append(parts, m.Content)
				}
			}
			return provider.Response{Message: provider.AssistantMessage("final: " + strings.Join(parts, " + "))}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("",
			provider.ToolCall{ID: id(0), Name: "helper", Arguments: json.RawMessage(`{"task":"one"}`)},
			provider.ToolCall{ID: id(1), Name: "helper", Arguments: json.RawMessage(`{"task":"two"}`)})}, nil
	})
	p := fake.NewProvider(lead.For("lead"), fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		helped.Add(1)
		task := req.Messages[0].Content
		var a struct{ Task string }
		if json.Unmarshal([]byte(task), &a) == nil && a.Task != "" {
			task = a.Task
		}
		return provider.Response{Message: provider.AssistantMessage("did " + task)}, nil
	}).For("helper")).Loop()
	build := func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		helper, err := subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("helper"))
		})
		if err != nil {
			return nil, err
		}
		a, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(helper))
		if err != nil || wrap == nil {
			return a, err
		}
		return wrap(a), nil
	}
	return rerunViewer(t, st, build), &helped, p
}

// rerunViewer serves, over st, the AG-UI handler of build's agents in a
// viewer that re-runs with build too.
func rerunViewer(t *testing.T, st *store.Store, build agui.Builder) *httptest.Server {
	t.Helper()
	h, err := agui.NewPerRequest(build, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st), devui.WithRerun(build))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	return srv
}

func finalAnswer(events []json.RawMessage) string {
	for _, e := range events {
		var ev struct{ Type, Result string }
		if json.Unmarshal(e, &ev) == nil && ev.Type == "RUN_FINISHED" {
			return ev.Result
		}
	}
	return ""
}

// A model that numbers its calls from call_0 in each reply gives call_0
// in each of its turns; the lead names its calls apart (a call_0 already
// in its conversation gets a fresh id), so a re-run that names only the id
// finds the turn it is in, and one that names the recorded run and the
// step finds the same.
func TestRerunFindsTheTurnOfARepeatedID(t *testing.T) {
	srv, _, _ := rerunSetup(t, "restart", nil)
	status, first := post(t, srv.URL+"/run", runBody)
	if status != 200 {
		t.Fatal(status)
	}
	firstCall := leadCalls(first)[0]
	// A second turn on the same thread.
	status, second := post(t, srv.URL+"/run", `{"threadId":"t1","runId":"r2","messages":[{"id":"m2","role":"user","content":"again"}]}`)
	if status != 200 {
		t.Fatal(status)
	}
	if calls := leadCalls(second); len(calls) != 2 || slices.Contains(calls, firstCall) {
		t.Fatalf("the second turn's calls are %q, want two calls none of which is the first turn's %s", calls, firstCall)
	}
	// Re-run the first turn's first call with its answer edited, naming
	// the run and the step, then naming only the call.
	for _, body := range []string{
		`{"threadId":"t1","runId":"r3","fromRunId":"r1","step":1,"toolCallId":"` + firstCall + `","answer":"X"}`,
		`{"threadId":"t1","runId":"r4","toolCallId":"` + firstCall + `","answer":"X"}`,
	} {
		status, events := post(t, srv.URL+"/rerun", body)
		if got, want := finalAnswer(events), "final: X + did two"; status != http.StatusOK || got != want {
			t.Errorf("re-run %s: %d, answered %q, want %q (turn 1 re-run)", body, status, got, want)
		}
	}
}

// leadCalls returns the ids of the lead's own tool calls in a run's
// events, in order.
func leadCalls(events []json.RawMessage) []string {
	var ids []string
	for _, e := range events {
		var ev struct{ Type, ToolCallID, SubagentRunID string }
		if json.Unmarshal(e, &ev) == nil && ev.Type == "TOOL_CALL_START" && ev.SubagentRunID == "" {
			ids = append(ids, ev.ToolCallID)
		}
	}
	return ids
}

type closer struct {
	agent.Agent
	closed *atomic.Int64
}

func (c closer) Close() error { c.closed.Add(1); return nil }

// A re-run closes the agent it builds when it is an io.Closer, as the
// AG-UI handler does.
func TestRerunClosesItsAgent(t *testing.T) {
	var closed atomic.Int64
	srv, _, _ := rerunSetup(t, "restart", func(a agent.Agent) agent.Agent { return closer{a, &closed} })
	if status, _ := post(t, srv.URL+"/run", runBody); status != 200 {
		t.Fatal(status)
	}
	if closed.Load() != 1 {
		t.Fatalf("after the run: %d closes", closed.Load())
	}
	if status, _ := post(t, srv.URL+"/rerun", `{"threadId":"t1","runId":"r3","fromRunId":"r1","step":1,"toolCallId":"call_0","answer":"X"}`); status != 200 {
		t.Fatal(status)
	}
	if closed.Load() != 2 {
		t.Errorf("after the re-run: %d closes, want 2: the re-run's agent was never closed", closed.Load())
	}
}

// A Builder that returns no agent and no error is a clear 500, not a
// panic.
func TestRerunWithNoAgent(t *testing.T) {
	st, _ := store.New(memory.New())
	defer st.Close()
	real := func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage("done")}, nil
			}
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "c1", Name: "x", Arguments: json.RawMessage(`{"task":"t"}`)})}, nil
		})).Loop())
	}
	h, _ := agui.NewPerRequest(real, agui.WithThreads(st))
	v, _ := devui.New(h, devui.WithStore(st), devui.WithRerun(func(context.Context, *agui.RunInput) (agent.Agent, error) { return nil, nil }))
	rec := httptest.NewRecorder()
	v.ServeHTTP(rec, jsonRequest("/run", runBody))
	if rec.Code != 200 {
		t.Fatal(rec.Code, rec.Body.String())
	}
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("POST /rerun with a Builder returning (nil, nil) panicked: %v", p)
		}
	}()
	rec = httptest.NewRecorder()
	v.ServeHTTP(rec, jsonRequest("/rerun", `{"threadId":"t1","runId":"r2","toolCallId":"c1","answer":"a"}`))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "no agent") {
		t.Errorf("got %d %s, want 500 saying the builder returned no agent", rec.Code, rec.Body.String())
	}
}

// jsonRequest is a POST of body to the viewer at localhost, as its page
// sends it.
func jsonRequest(path, body string) *http.Request {
	r := httptest.NewRequest("POST", "http://localhost"+path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// A run body larger than the viewer reads to learn its thread goes to the
// AG-UI handler whole, which takes it within its own bound (here raised),
// unrecorded.
func TestRunBodyLargerThanTheViewerReads(t *testing.T) {
	st, _ := store.New(memory.New())
	defer st.Close()
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text("ok")))
	}, agui.WithThreads(st), agui.WithMaxBodyBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := devui.New(h, devui.WithStore(st))
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/devui/", http.StripPrefix("/devui", v))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	big := strings.Repeat("a", 5<<20)
	body := func(th string) string {
		return fmt.Sprintf(`{"threadId":%q,"runId":"r1","messages":[{"id":"m1","role":"user","content":%q}]}`, th, big)
	}
	if status, _ := post(t, srv.URL+"/agui", body("direct")); status != 200 {
		t.Fatalf("direct: %d", status)
	}
	if status, _ := post(t, srv.URL+"/devui/run", body("viewer")); status != 200 {
		t.Errorf("through the viewer: %d, want 200 as at the AG-UI endpoint", status)
	}
}
