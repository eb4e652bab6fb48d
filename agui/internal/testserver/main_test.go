package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func request(scenario string) string {
	props := ""
	if scenario != "" {
		props = `,"forwardedProps":{"scenario":"` + scenario + `"}`
	}
	return `{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"research two topics"}]` + props + `}`
}

// server serves the agents b builds; their stop is the handler's Stop.
func server(t *testing.T, b func(context.Context, *agui.RunInput, func(owner, threadID string) bool) (agent.Agent, error)) *httptest.Server {
	t.Helper()
	var h *agui.Handler
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) { return b(ctx, in, h.Stop) })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func runScenario(t *testing.T, url, body string) (int, []event.Event) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []event.Event
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e event.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return resp.StatusCode, out
}

// The scenarios keep the harness's contract, checked here with the same
// rules so that a Go test fails first.
func TestScenarios(t *testing.T) {
	srv := server(t, build)
	quick := server(t, func(context.Context, *agui.RunInput, func(string, string) bool) (agent.Agent, error) {
		return tree("research topic B", time.Millisecond, fake.Text("Done.")) // "slow", but quick
	})
	for _, tt := range []struct {
		name, url, scenario string
		errors              int
	}{
		{"default", srv.URL, "", 0},
		{"two-children", srv.URL, "two-children", 0},
		{"child-error", srv.URL, "child-error", 1},
		{"conversation", srv.URL, "conversation", 0},
		{"slow, left to finish", quick.URL, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, events := runScenario(t, tt.url, request(tt.scenario))
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			if problems := eventcheck.Check(events, eventcheck.Options{}); len(problems) > 0 {
				t.Fatal(strings.Join(problems, "\n"))
			}
			text := map[string]string{}
			errors := 0
			for _, e := range events {
				if e.Type == event.TextMessageContent && e.SubagentRunID != "" {
					text[e.SubagentRunID] += e.Delta
				}
				if e.Type == event.SubagentError {
					errors++
				}
			}
			if len(text) != 2 || errors != tt.errors {
				t.Errorf("children with text: %d, errors: %d", len(text), errors)
			}
		})
	}
	if status, _ := runScenario(t, srv.URL, request("nonsense")); status != 400 {
		t.Errorf("unknown scenario: status %d, want 400", status)
	}
}

// The slow scenario, abandoned by its client, is cancelled; the server
// serves the next request.
func TestSlowScenarioAbandoned(t *testing.T) {
	srv := server(t, build)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(request("slow")))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"TEXT_MESSAGE_CONTENT"`) && strings.Contains(sc.Text(), `"subagentRunId"`) {
			break
		}
	}
	resp.Body.Close()
	start := time.Now()
	status, events := runScenario(t, srv.URL, request(""))
	if status != 200 || len(eventcheck.Check(events, eventcheck.Options{})) != 0 {
		t.Fatalf("the next request: status %d, %d events", status, len(events))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the next request took %v", d)
	}
	// srv.Close (cleanup) waits for the abandoned handler; goleak checks
	// that its run ended.
}

// The stopped scenario ends with RUN_FINISHED outcome cancelled, every
// message, call and sub-agent closed before it.
func TestStoppedScenario(t *testing.T) {
	status, events := runScenario(t, server(t, build).URL, request("stopped"))
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if problems := eventcheck.Check(events, eventcheck.Options{}); len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
	if last := events[len(events)-1]; last.Type != event.RunFinished || string(last.Outcome) != `{"type":"cancelled"}` || len(last.Usage) == 0 {
		t.Fatalf("the run ended with %s outcome %s usage %s, want RUN_FINISHED cancelled with usage", last.Type, last.Outcome, last.Usage)
	}
}
