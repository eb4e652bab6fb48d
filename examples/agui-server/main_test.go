package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Two questions: each run's stream conforms, and the resident expert
// remembers the first question when it answers the second.
func TestServer(t *testing.T) {
	h, err := handler(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i, want := range []string{"question 1 ", "question 2 "} {
		body := `{"threadId":"t","runId":"r` + string(rune('1'+i)) + `","messages":[{"id":"m","role":"user","content":"Go?"}]}`
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var events []event.Event
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var e event.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					t.Fatal(err)
				}
				events = append(events, e)
			}
		}
		resp.Body.Close()
		if problems := eventcheck.Check(events, eventcheck.Options{}); len(problems) > 0 {
			t.Fatal(strings.Join(problems, "\n"))
		}
		var starts int
		var expert string
		for _, e := range events {
			if e.Type == event.SubagentStarted {
				starts++
			}
			if e.Type == event.SubagentFinished && strings.Contains(string(e.Result), "question") {
				expert = string(e.Result)
			}
		}
		if starts != 3 || !strings.Contains(expert, want) {
			t.Errorf("request %d: %d sub-agents, expert said %s", i+1, starts, expert)
		}
	}
}

// The demo says on its first line which provider it runs on, and runs on
// the scripted fake whatever the process's environment holds.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := run("", true, &out, func(string) string { return "" }); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	first, rest, _ := strings.Cut(out.String(), "\n")
	if !strings.HasPrefix(first, "provider: fake (scripted replies;") {
		t.Errorf("first line %q does not name the provider", first)
	}
	for _, want := range []string{"SUBAGENT_STARTED expert", "SUBAGENT_STARTED researcher", "SUBAGENT_STARTED reviewer", "RUN_FINISHED demo-thread"} {
		if !strings.Contains(rest, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
