package agui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// approvalServer serves the approval tree on threads kept in st.
func approvalServer(t *testing.T, st *store.Store, c *approvaltree.Counts) string {
	t.Helper()
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return approvaltree.Build(c)
	}, agui.WithThreads(st))
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h).URL
}

func runBody(thread, runID string, resume []tool.Answer) string {
	m := map[string]any{"threadId": thread, "runId": runID,
		"messages": []map[string]string{{"id": "u1", "role": "user", "content": "tidy up"}}}
	if resume != nil {
		m["resume"] = resume
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// aguiRun posts a run and returns its events, or fails unless the status is
// want (then it returns the error body as the message of one event).
func aguiRun(t *testing.T, url, body string, want int) []event.Event {
	t.Helper()
	// A resume does not announce again what the client has from the run
	// it resumes.
	return aguiRunChecked(t, url, body, want, eventcheck.Options{Resumed: strings.Contains(body, `"resume":[{`)})
}

// aguiRunChecked is aguiRun with the stream checked under opts.
func aguiRunChecked(t *testing.T, url, body string, want int, opts eventcheck.Options) []event.Event {
	t.Helper()
	resp := post(t, url, body)
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, b)
	}
	if want != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return []event.Event{{Message: string(b)}}
	}
	evs := events(readFrames(t, resp.Body))
	if problems := eventcheck.Check(evs, opts); len(problems) > 0 {
		t.Fatalf("the stream breaks the rules:\n%s", strings.Join(problems, "\n"))
	}
	return evs
}

type runOutcome struct {
	Type       string           `json:"type"`
	Interrupts []tool.Interrupt `json:"interrupts"`
}

func finished(t *testing.T, evs []event.Event) (event.Event, runOutcome) {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != event.RunFinished {
		t.Fatalf("the run ended with %s %s", last.Type, last.Message)
	}
	var o runOutcome
	if len(last.Outcome) > 0 {
		if err := json.Unmarshal(last.Outcome, &o); err != nil {
			t.Fatal(err)
		}
	}
	return last, o
}

func TestAGUIInterruptAndResume(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      tool.Status
		payload     string
		wantDeletes int64
		wantText    string
		restart     bool
	}{
		{"approved", tool.Resolved, `{"approved":true}`, 1, "deleted /tmp/old.log", false},
		{"cancelled", tool.Cancelled, "", 0, "cancelled", false},
		{"approved after a restart", tool.Resolved, `{"approved":true}`, 1, "deleted /tmp/old.log", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := t.TempDir() + "/s.db"
			st := sqliteStore(t, path)
			var c approvaltree.Counts
			url := approvalServer(t, st, &c)
			evs := aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK)
			fin, o := finished(t, evs)
			if o.Type != "interrupt" || len(o.Interrupts) != 1 {
				t.Fatalf("outcome %s, want one interrupt", fin.Outcome)
			}
			it := o.Interrupts[0]
			cleaner := eventcheck.StartedRun(evs, "cleaner")
			// The call that asked, as the stream names it (event.CallID).
			if it.SubagentRunID != cleaner || cleaner == "" || !strings.HasPrefix(it.ToolCallID, event.CallID(cleaner, "g1-")) || it.Reason != "tool_approval" {
				t.Fatalf("interrupt %+v, want the cleaner's (%s) call g1", it, cleaner)
			}
			if len(fin.Usage) == 0 {
				t.Error("RUN_FINISHED has no usage")
			}
			if diff := cmp.Diff(approvalUsage, usageOf(t, fin.Usage), byModel); diff != "" {
				t.Errorf("usage of the interrupted run (-want +got):\n%s", diff)
			}
			calls := c.ModelCalls.Load()
			if tc.restart {
				st.Close()
				st = sqliteStore(t, path)
				c = approvaltree.Counts{}
				calls = 0
				url = approvalServer(t, st, &c)
			}
			ans := tool.Answer{InterruptID: it.ID, Status: tc.status}
			if tc.payload != "" {
				ans.Payload = json.RawMessage(tc.payload)
			}
			evs2 := aguiRun(t, url, runBody("th", "run-2", []tool.Answer{ans}), http.StatusOK)
			fin2, o2 := finished(t, evs2)
			if o2.Type != "" && o2.Type != "success" {
				t.Fatalf("resumed outcome %s", fin2.Outcome)
			}
			// Its usage is the whole turn's: the calls of the run that
			// asked, replayed and not paid again, and its own.
			if diff := cmp.Diff(wholeApprovalUsage, usageOf(t, fin2.Usage), byModel); diff != "" {
				t.Errorf("usage of the resumed run (-want +got):\n%s", diff)
			}
			if got := eventcheck.StartedRun(evs2, "cleaner"); got != cleaner {
				t.Errorf("the resumed run announced cleaner %q, want the same run %q", got, cleaner)
			}
			if !strings.Contains(string(fin2.Result), tc.wantText) {
				t.Errorf("result %s, want it to mention %q", fin2.Result, tc.wantText)
			}
			if c.Deletes.Load() != tc.wantDeletes {
				t.Errorf("deletes %d, want %d", c.Deletes.Load(), tc.wantDeletes)
			}
			// The resumed run asks the models only what they had not answered:
			// the cleaner, the janitor and the lead once each.
			if got := c.ModelCalls.Load() - calls; got != 3 {
				t.Errorf("the resumed run made %d model calls, want 3", got)
			}
			// The thread goes on: answering again finds nothing suspended.
			msg := aguiRun(t, url, runBody("th", "run-3", []tool.Answer{ans}), http.StatusConflict)[0].Message
			if !strings.Contains(msg, "nothing is waiting") {
				t.Errorf("a second answer: %s", msg)
			}
		})
	}
}

func TestAGUIBadResumesKeepTheSuspendedRun(t *testing.T) {
	st := sqliteStore(t, t.TempDir()+"/s.db")
	var c approvaltree.Counts
	url := approvalServer(t, st, &c)
	aguiRun(t, url, runBody("fresh", "r0", []tool.Answer{{InterruptID: "int_x", Status: tool.Resolved}}), http.StatusConflict)
	_, o := finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	id := o.Interrupts[0].ID
	for _, tc := range []struct {
		name   string
		body   string
		status int
		say    string
	}{
		{"unknown id", runBody("th", "r", []tool.Answer{{InterruptID: "int_nope", Status: tool.Resolved}}), 400, "no such pending interrupt"},
		{"answered twice", runBody("th", "r", []tool.Answer{{InterruptID: id, Status: tool.Cancelled}, {InterruptID: id, Status: tool.Cancelled}}), 400, "answered twice"},
		{"payload fails the schema", runBody("th", "r", []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":"sure"}`)}}), 400, "response schema"},
		{"bad status", runBody("th", "r", []tool.Answer{{InterruptID: id, Status: "later"}}), 400, "resolved"},
		{"missing id", `{"threadId":"th","runId":"r","messages":[],"resume":[{"status":"resolved"}]}`, 400, "interruptId is missing"},
		{"a new message instead of answers", runBody("th", "r", nil), 409, "waiting for answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := aguiRun(t, url, tc.body, tc.status)[0].Message
			if !strings.Contains(msg, tc.say) {
				t.Errorf("%s, want it to say %q", msg, tc.say)
			}
		})
	}
	// Still suspended, and answerable.
	_, o2 := finished(t, aguiRun(t, url, runBody("th", "run-2", []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}), http.StatusOK))
	if o2.Type != "" && o2.Type != "success" || c.Deletes.Load() != 1 {
		t.Fatalf("after the refused resumes: outcome %q, deletes %d", o2.Type, c.Deletes.Load())
	}
}

func TestDeleteThreadForgetsItsSuspendedRun(t *testing.T) {
	st := sqliteStore(t, t.TempDir()+"/s.db")
	var c approvaltree.Counts
	url := approvalServer(t, st, &c)
	_, o := finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	if o.Type != "interrupt" {
		t.Fatalf("outcome %q", o.Type)
	}
	deleteThread(t, st, "th")
	// A new message starts afresh, and asks again.
	_, o = finished(t, aguiRun(t, url, runBody("th", "run-2", nil), http.StatusOK))
	if o.Type != "interrupt" {
		t.Fatalf("after DeleteThread: outcome %q, want a fresh run that asks again", o.Type)
	}
}

func TestAGUIExpiredInterruptIsGone(t *testing.T) {
	st := sqliteStore(t, t.TempDir()+"/s.db")
	c := approvaltree.Counts{TTL: time.Millisecond}
	url := approvalServer(t, st, &c)
	_, o := finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	it := o.Interrupts[0]
	if it.ExpiresAt.IsZero() {
		t.Fatal("the interrupt has no expiry")
	}
	time.Sleep(time.Until(it.ExpiresAt) + time.Millisecond)
	msg := aguiRun(t, url, runBody("th", "run-2", []tool.Answer{{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}), http.StatusGone)[0].Message
	if !strings.Contains(msg, "expired") {
		t.Errorf("%s, want it to say the interrupt expired", msg)
	}
	if c.Deletes.Load() != 0 {
		t.Error("an expired approval ran the call")
	}
}

// A resume that cannot use its answers as given fails loudly: when the
// journal of the run that asked is gone (a resume would do again what was
// done) it is refused before any stream with 409 naming the interrupts,
// nothing runs, and the thread still waits for them; when the agent no
// longer reaches the call, the run ends in RUN_ERROR code unused_answer
// with the same ids. Neither asks the person again.
func TestAGUIUnusedAnswerIsRefusedNotAskedAgain(t *testing.T) {
	st := sqliteStore(t, t.TempDir()+"/s.db")
	var c approvaltree.Counts
	url := approvalServer(t, st, &c)
	_, o := finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	if o.Type != "interrupt" {
		t.Fatalf("outcome %+v, want an interrupt", o)
	}
	id := o.Interrupts[0].ID
	yes := []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}

	if err := st.DeleteJournal(context.Background(), agui.JournalName("", "th", "run-1")); err != nil {
		t.Fatal(err)
	}
	calls := c.ModelCalls.Load()
	msg := aguiRun(t, url, runBody("th", "run-2", yes), http.StatusConflict)[0].Message
	if !strings.Contains(msg, id) || !strings.Contains(msg, "journal") || !strings.Contains(msg, "without resume") {
		t.Errorf("the refusal %s: want the interrupt's id, why, and what to do", msg)
	}
	if c.ModelCalls.Load() != calls || c.Deletes.Load() != 0 {
		t.Errorf("the refused resume asked the models %d times and deleted %d files", c.ModelCalls.Load()-calls, c.Deletes.Load())
	}
	if msg := aguiRun(t, url, runBody("th", "run-3", nil), http.StatusConflict)[0].Message; !strings.Contains(msg, id) {
		t.Errorf("after the refusal the thread no longer waits for %s: %s", id, msg)
	}

	// An agent that answers at once, never reaching the call that asked.
	st2 := sqliteStore(t, t.TempDir()+"/s.db")
	url2 := approvalServer(t, st2, &c)
	_, o = finished(t, aguiRun(t, url2, runBody("th", "run-1", nil), http.StatusOK))
	id = o.Interrupts[0].ID
	changed := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage("nothing to do")}, nil
		}), agent.WithName("lead"))
	}, agui.WithThreads(st2)))
	evs := aguiRun(t, serve(t, changed).URL, runBody("th", "run-2", []tool.Answer{{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}), http.StatusOK)
	last := evs[len(evs)-1]
	if last.Type != event.RunError || last.Code != "unused_answer" || !strings.Contains(last.Message, id) {
		t.Fatalf("the run ended with %s %q %q, want RUN_ERROR unused_answer naming %s", last.Type, last.Code, last.Message, id)
	}
	for _, e := range evs {
		if e.Type == event.RunFinished {
			t.Errorf("the run also finished: %s", e.Outcome)
		}
	}
}
