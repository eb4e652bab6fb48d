package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/small.jsonl; go test -deputy.record='*'
// records it again from the small tree's scripted models.
var record = cassette.RecordFlag()

// post sends an AG-UI run to url and returns its events, each also given
// to tree, with a sub-agent's spending read from the event's metadata.
func post(t *testing.T, url, body string, tree event.Sink) []event.Event {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	var events []event.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e event.Event // a sub-agent's usage and model included
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		tree.Emit(e)
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// The viewer's run of the small tree, on the recording of its own
// scripted run, stops at the editor's question to publish; approved, it
// resumes from the journal, publishes once and answers, with no model
// call. The tree the viewer draws from the two streams holds the two
// researchers, the editor and, under it, the fact checker.
func TestReplaysItsRecording(t *testing.T) {
	p := cassette.Open(t, "testdata/small.jsonl", scriptedModels(t), *record)
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var published atomic.Int64
	mux, h, err := handler(st, scripted{model: p}, &published)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer h.Shutdown(t.Context())
	tree := subagent.NewTree(nil)

	first := post(t, srv.URL+"/devui/run", `{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"go"}]}`, tree)
	end := first[len(first)-1]
	var asked struct {
		Type       string `json:"type"`
		Interrupts []struct {
			ID     string `json:"id"`
			Reason string `json:"reason"`
		} `json:"interrupts"`
	}
	if err := json.Unmarshal(end.Outcome, &asked); err != nil || asked.Type != "interrupt" || len(asked.Interrupts) != 1 {
		t.Fatalf("the first run ended with %s %s, want one interrupt", end.Type, end.Outcome)
	}
	if asked.Interrupts[0].Reason != "tool_approval" || published.Load() != 0 {
		t.Errorf("the question is %q, and publish ran %d times before it was answered", asked.Interrupts[0].Reason, published.Load())
	}
	second := post(t, srv.URL+"/devui/run", `{"threadId":"t1","runId":"r2","messages":[],"resume":[{"interruptId":"`+asked.Interrupts[0].ID+`","status":"resolved","payload":{"approved":true}}]}`, tree)
	end = second[len(second)-1]
	if want := `"Here is the report: the tram extension pays for itself, and the write-up is out."`; end.Type != event.RunFinished || string(end.Result) != want {
		t.Errorf("the resumed run ended with %s %s, want RUN_FINISHED %s", end.Type, end.Result, want)
	}
	if n := published.Load(); n != 1 {
		t.Errorf("publish ran %d times, want once", n)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(3)
	tr.Nodes("**").Count(4).Each(treetest.State(subagent.StateSucceeded))
	tr.Nodes("editor/fact_checker").Count(1).Each(treetest.AnswerContains("Plausible"), treetest.MaxTokens(31))
	tr.Nodes("editor").Count(1).Each(treetest.MaxTokens(426))
	const dump = `researcher#0 succeeded {"task":"How much would the extension cost?"} → "About 90 million euros, paid back in 25 years." (9+12 tokens)
researcher#1 succeeded {"task":"How many riders would it carry?"} → "About 18,000 riders a day." (8+7 tokens)
editor succeeded {"task":"Write up and publish the findings."} → "Written up and published." (358+68 tokens)
  fact_checker succeeded {"task":"Is 90 million euros plausible for 4 km of tram?"} → "Plausible: recent European lines cost 20 to 25 million euros…" (12+19 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

// scriptedModels is the small tree's scripted models, to record from.
func scriptedModels(t *testing.T) provider.Provider {
	p, err := scripted{}.provider(smallScript()...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
