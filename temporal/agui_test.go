package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// The AG-UI handler serves a tree that runs on Temporal as it serves one
// in process: the client reads the run's start, each fork started and
// finished under the lead with its answer, every call's result, and the
// run's end with the answer and its usage.
func TestAGUIServesATreeOnTemporal(t *testing.T) {
	hub := NewHub()
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": eventsScript()}, Tools: addTool(t), Events: hub})

	h, err := agui.New(&Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}, Spawn: true}, Events: hub})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"go"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	var finished struct {
		Result string
		Usage  []map[string]any
	}
	forks := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Type, SubagentRunID, ParentSubagentRunID, Name string
			Result                                         json.RawMessage
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a frame that is not JSON: %q", line)
		}
		types = append(types, e.Type)
		switch e.Type {
		case "SUBAGENT_STARTED":
			if e.ParentSubagentRunID != "" || e.Name == "" {
				t.Errorf("a fork started as %q under %q, want a named fork under the lead", e.Name, e.ParentSubagentRunID)
			}
			forks[e.SubagentRunID] = "started"
		case "SUBAGENT_FINISHED":
			var r string
			_ = json.Unmarshal(e.Result, &r)
			if forks[e.SubagentRunID] != "started" || !strings.HasPrefix(r, "done: part ") {
				t.Errorf("fork %s finished with %q, state %q", e.SubagentRunID, r, forks[e.SubagentRunID])
			}
			forks[e.SubagentRunID] = "finished"
		case "RUN_FINISHED":
			_ = json.Unmarshal([]byte(line), &finished)
		}
	}
	count := func(typ string) (n int) {
		for _, x := range types {
			if x == typ {
				n++
			}
		}
		return n
	}
	if len(types) == 0 || types[0] != "RUN_STARTED" || types[len(types)-1] != "RUN_FINISHED" || count("RUN_STARTED") != 1 || count("RUN_FINISHED") != 1 {
		t.Fatalf("the stream %v does not start with one RUN_STARTED and end with one RUN_FINISHED", types)
	}
	if count("STEP_STARTED") != count("STEP_FINISHED") || count("TOOL_CALL_START") != count("TOOL_CALL_RESULT") {
		t.Errorf("the stream %v leaves steps or calls open", types)
	}
	if len(forks) != 2 || forks[firstKey(forks)] != "finished" {
		t.Errorf("forks %v, want two, both finished", forks)
	}
	if finished.Result != "all done" || len(finished.Usage) == 0 {
		t.Errorf("RUN_FINISHED with %q and usage %v, want the answer and its usage", finished.Result, finished.Usage)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// A tree on Temporal that asks a person, served by the AG-UI handler on a
// stored thread: the run ends with the tree's two questions, each where
// the tree asked it (the lead's, and its fork's under the fork); the
// client's resume answers them; the same workflow goes on — no second
// one is started — and each payment is made once.
func TestAGUIResumesATreeOnTemporal(t *testing.T) {
	hub := NewHub()
	var paid atomic.Int64
	p := payScript()
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: payTools(t, &paid), Events: hub})
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	build := func(context.Context, *agui.RunInput) (agent.Agent, error) {
		return &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true}, Events: hub}, nil
	}
	h, err := agui.NewPerRequest(build, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	frames := func(body string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%d: %s", resp.StatusCode, b)
		}
		var out []map[string]any
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var e map[string]any
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("a frame that is not JSON: %q", line)
				}
				out = append(out, e)
			}
		}
		return out
	}
	first := frames(`{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"pay"}]}`)
	last := first[len(first)-1]
	outcome, _ := last["outcome"].(map[string]any)
	if last["type"] != "RUN_FINISHED" || outcome["type"] != "interrupt" {
		t.Fatalf("the first run ended %v, want RUN_FINISHED waiting for answers", last)
	}
	its, _ := outcome["interrupts"].([]any)
	if len(its) != 2 {
		t.Fatalf("the run waits on %v, want the lead's question and its fork's", its)
	}
	var resume []string
	underFork := 0
	for _, x := range its {
		it := x.(map[string]any)
		if it["subagentRunId"] != nil && it["subagentRunId"] != "" {
			underFork++
		}
		resume = append(resume, fmt.Sprintf(`{"interruptId":%q,"status":"resolved","payload":{"approved":true}}`, it["id"]))
	}
	if underFork != 1 {
		t.Errorf("%d questions attributed to a sub-agent, want the fork's", underFork)
	}
	if paid.Load() != 0 {
		t.Fatalf("%d payments before the answers", paid.Load())
	}
	calls, _ := p.total()
	second := frames(`{"threadId":"t1","runId":"r2","messages":[],"resume":[` + strings.Join(resume, ",") + `]}`)
	end := second[len(second)-1]
	if end["type"] != "RUN_FINISHED" || !strings.Contains(fmt.Sprint(end["result"]), "paid 1") || !strings.Contains(fmt.Sprint(end["result"]), "fork: paid 2") {
		t.Fatalf("the resumed run ended %v, want both payments in its answer", end)
	}
	if paid.Load() != 2 {
		t.Errorf("%d payments, want 2", paid.Load())
	}
	if now, _ := p.total(); now-calls != 2 {
		d := now - calls
		t.Errorf("the models were asked %d times after the answers, want 2 (the fork's and the lead's last steps): a second workflow ran", d)
	}
}

// The official AG-UI client (@ag-ui/client, from agui/clienttest) watches
// a tree on Temporal as it watches one in process: every event passes its
// schemas and deputy's sequence rules, the run ends with the tree's two
// questions, and the resume with the answers finishes the same tree.
func TestOfficialClientWatchesATreeOnTemporal(t *testing.T) {
	if os.Getenv("DEPUTY_TEST_AGUI_CLIENT") == "" {
		t.Skip("runs the official AG-UI client: set DEPUTY_TEST_AGUI_CLIENT=1 once agui/clienttest has its node_modules (npm ci there); .ci/run does")
	}
	hub := NewHub()
	var paid atomic.Int64
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": payScript()}, Tools: payTools(t, &paid), Events: hub})
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) {
		return &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true}, Events: hub}, nil
	}, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	cmd := exec.CommandContext(ctx, "node", "watch-temporal.mjs", srv.URL)
	cmd.Dir = "../agui/clienttest"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("the official client: %v\n%s\n%s", err, outb, stderr.String())
	}
	var got struct {
		Problems     []string
		Asked        []struct{ Reason, SubagentRunID string }
		FirstStarted []string
		SecondEnd    string
		Result       string
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("the client printed %q: %v", outb, err)
	}
	if len(got.Problems) > 0 {
		t.Errorf("the client's checks: %q", got.Problems)
	}
	if len(got.Asked) != 2 || len(got.FirstStarted) != 1 {
		t.Errorf("the first run asked %+v with sub-agents %q, want two approvals and the fork", got.Asked, got.FirstStarted)
	}
	if got.SecondEnd != "RUN_FINISHED" || !strings.Contains(got.Result, "fork: paid 2") || paid.Load() != 2 {
		t.Errorf("the resumed run ended %s with %q and %d payments, want both payments", got.SecondEnd, got.Result, paid.Load())
	}
}

// onServer dials the test server and starts a worker of rt on a queue of
// its own, both stopped when the test ends; it returns the client, the
// queue and a context that ends within a minute.
func onServer(t *testing.T, rt *Runtime) (context.Context, client.Client, string) {
	t.Helper()
	ctx, c := dialServer(t, time.Minute)
	queue := fmt.Sprintf("deputy-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, rt)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return ctx, c, queue
}

// dialServer dials the test server; it returns the client, closed when
// the test ends, and a context that ends within d.
func dialServer(t *testing.T, d time.Duration) (context.Context, client.Client) {
	t.Helper()
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return ctx, c
}
