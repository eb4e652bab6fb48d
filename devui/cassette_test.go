package devui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
)

// The viewer serves a cassette as the events of one run, which its page
// draws as it draws a stored run; without one, the route says how to get
// it.
func TestTheViewerServesACassettesTree(t *testing.T) {
	// A lead that asks a checker, then an editor.
	c, err := cassette.Load("testdata/review.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text("Hello.")))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devui.New(h, devui.WithCassette(nil)); err == nil {
		t.Error("WithCassette(nil) was accepted")
	}
	v, err := devui.New(h, devui.WithCassette(c))
	if err != nil {
		t.Fatal(err)
	}
	get := func(v http.Handler, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		v.ServeHTTP(w, httptest.NewRequest("GET", "http://localhost"+path, nil))
		return w
	}
	w := get(v, "/cassette")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /cassette: %d %s", w.Code, w.Body)
	}
	var got struct {
		Runs []struct {
			RunID  string `json:"runId"`
			Events []struct {
				Type             string          `json:"type"`
				Name             string          `json:"name"`
				SubagentRunID    string          `json:"subagentRunId"`
				ParentToolCallID string          `json:"parentToolCallId"`
				ToolCallID       string          `json:"toolCallId"`
				Result           json.RawMessage `json:"result"`
			} `json:"events"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Runs) != 1 {
		t.Fatalf("GET /cassette: %v %s", err, w.Body)
	}
	var started, finished []string
	calls := map[string]bool{}
	for _, e := range got.Runs[0].Events {
		switch e.Type {
		case "TOOL_CALL_START":
			calls[e.ToolCallID] = true
		case "SUBAGENT_STARTED":
			started = append(started, e.Name)
			if !calls[e.ParentToolCallID] {
				t.Errorf("%s started under a call %q the run did not make", e.Name, e.ParentToolCallID)
			}
		case "SUBAGENT_FINISHED":
			finished = append(finished, e.SubagentRunID+" "+string(e.Result))
		}
	}
	if strings.Join(started, ",") != "checker,editor" {
		t.Errorf("sub-agents started %v, want checker, editor", started)
	}
	want := `lead/checker@1.0 "The numbers hold.",lead/editor@2.0 "The prose is clear."`
	if s := strings.Join(finished, ","); s != want {
		t.Errorf("finished %s, want %s", s, want)
	}
	if w := get(v, "/config"); !strings.Contains(w.Body.String(), `"cassette":true`) {
		t.Errorf("GET /config: %s", w.Body)
	}

	plain, err := devui.New(h)
	if err != nil {
		t.Fatal(err)
	}
	if w := get(plain, "/cassette"); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "WithCassette") {
		t.Errorf("GET /cassette without one: %d %s", w.Code, w.Body)
	}
}
