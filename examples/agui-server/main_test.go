package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// The demo says on its first line which provider it runs on, runs on the
// scripted fake whatever the process's environment holds, and prints every
// event of the run: each line is checked, and the order of those that
// follow each other (the researcher and the reviewer run side by side, so
// their lines may interleave).
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := run("", true, &out, func(string) string { return "" }); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkDemo(t, `provider: fake (scripted replies; docs/providers.md tells how to use a real one)`, out.String())
}

// checkDemo checks the lines the demo printed after its first, about:
// each line, and the order of those that follow each other (the
// researcher and the reviewer run side by side, so their lines may
// interleave).
func checkDemo(t *testing.T, about, out string) {
	t.Helper()
	want := []string{
		about,
		`RUN_STARTED demo-thread demo-run`,
		`says "Let me ask our expert first."`,
		`TOOL_CALL_START expert`,
		`calls {"task":"Should we use Go for the new service?"}`,
		`  SUBAGENT_STARTED expert`,
		`    [expert] says "Yes, if the team can own it. (That is question 1 I have been asked here.)"`,
		`  SUBAGENT_FINISHED expert`,
		`TOOL_CALL_RESULT "Yes, if the team can own it. (That is question 1 I have been asked here.)"`,
		`says "Now a researcher and a reviewer, side by side."`,
		`TOOL_CALL_START researcher`,
		`calls {"task":"Collect the facts behind: Should we use Go for the new service?"}`,
		`TOOL_CALL_START reviewer`,
		`calls {"system_prompt":"You review advice for hidden costs.","task":"Review the expert's advice on: Should we use Go for the new service?"}`,
		`  SUBAGENT_STARTED researcher`,
		`    [researcher] says "Three sources support it; one warns about migration cost."`,
		`  SUBAGENT_FINISHED researcher`,
		`  SUBAGENT_STARTED reviewer`,
		`    [reviewer] says "Sound advice. Hidden cost: retraining the team."`,
		`  SUBAGENT_FINISHED reviewer`,
		`TOOL_CALL_RESULT "Three sources support it; one warns about migration cost."`,
		`TOOL_CALL_RESULT "Sound advice. Hidden cost: retraining the team."`,
		`says "The expert, the researcher and the reviewer agree: yes, with the costs noted."`,
		`RUN_FINISHED demo-thread demo-run "The expert, the researcher and the reviewer agree: yes, with the costs noted."`,
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	sortedWant, sortedGot := slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(got))
	if diff := cmp.Diff(sortedWant, sortedGot); diff != "" {
		t.Fatalf("the demo's lines, sorted (-want +got):\n%s\noutput:\n%s", diff, out)
	}
	// Lines 0 to 13 come in order, as do the last 4; each child's lines
	// keep their order and come after both calls started.
	at := func(line string) int { return slices.Index(got, line) }
	if diff := cmp.Diff(want[:14], got[:14]); diff != "" {
		t.Errorf("the run up to the two calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[20:], got[20:]); diff != "" {
		t.Errorf("the run after its children (-want +got):\n%s", diff)
	}
	for _, child := range [][]string{want[14:17], want[17:20]} {
		if a, b, c := at(child[0]), at(child[1]), at(child[2]); !(13 < a && a < b && b < c && c < 20) {
			t.Errorf("the child's lines %q are out of order:\n%s", child, out)
		}
	}
}
