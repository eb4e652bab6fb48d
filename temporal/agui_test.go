package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
)

// The AG-UI handler serves a tree that runs on Temporal as it serves one
// in process: the client reads the run's start, each fork started and
// finished under the lead with its answer, every call's result, and the
// run's end with the answer and its usage.
func TestAGUIServesATreeOnTemporal(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := fmt.Sprintf("deputy-agui-%d", time.Now().UnixNano())
	hub := NewHub()
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": eventsScript()}, Tools: addTool(t), Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

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
