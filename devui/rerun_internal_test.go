package devui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// Events emitted from other goroutines while a re-run's terminal event
// is written, as a job that outlives the run emits from its own, never
// follow the terminal event: not on the wire, not in what is recorded;
// and once the re-run is recorded nothing more is written, since the
// handler is about to return and its ResponseWriter with it.
func TestNothingFollowsTheReRunsTerminalEvent(t *testing.T) {
	for _, terminal := range []event.Event{
		{Type: event.RunFinished, RunID: "r"},
		{Type: event.RunError, Message: "failed"},
	} {
		for range 200 {
			rec := httptest.NewRecorder()
			f := &frames{w: rec, rc: http.NewResponseController(rec)}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							f.Emit(event.Event{Type: event.StepStarted, StepName: "job"})
						}
					}
				})
			}
			f.Emit(terminal)
			events, _ := f.end()
			close(stop)
			wg.Wait()
			frames := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n\n"), "\n\n")
			if last := frames[len(frames)-1]; !strings.Contains(last, `"`+string(terminal.Type)+`"`) {
				t.Fatalf("the stream ends with %q, after its %s", last, terminal.Type)
			}
			var e event.Event
			if err := json.Unmarshal(events[len(events)-1], &e); err != nil || e.Type != terminal.Type {
				t.Fatalf("the recorded events end with %s (%v), after the %s", events[len(events)-1], err, terminal.Type)
			}
		}
	}
	// Ended before any terminal event (a re-run that failed before its
	// lead ran): what comes after is neither written nor recorded.
	rec := httptest.NewRecorder()
	f := &frames{w: rec, rc: http.NewResponseController(rec)}
	f.Emit(event.Event{Type: event.StepStarted, StepName: "lead"})
	f.end()
	f.Emit(event.Event{Type: event.StepStarted, StepName: "job"})
	if events, _ := f.end(); len(events) != 1 || strings.Contains(rec.Body.String(), `"job"`) {
		t.Errorf("after the re-run ended the stream reads %q and %d events are recorded, want only the one before", rec.Body.String(), len(events))
	}
}

// A thread kept by a version that let a model's ids repeat across turns
// (ids restarting at call_0) has one id on several of the lead's calls: a
// re-run that names only the id is refused with what to add, and the run
// (its turn) or the step picks the one meant; the conversation is cut
// after that call, its own result replaced by the edited answer.
func TestCutRefusesAnAmbiguousCallAndTheTurnOrStepPicksIt(t *testing.T) {
	call := func(args string) provider.ToolCall {
		return provider.ToolCall{ID: "call_0", Name: "search", Arguments: json.RawMessage(args)}
	}
	msgs := []provider.Message{
		provider.UserMessage("first"), // turn 0
		provider.AssistantMessage("", call(`{"task":"a"}`)),
		provider.ToolMessage("call_0", "found a", false),
		provider.AssistantMessage("", call(`{"task":"b"}`)),
		provider.ToolMessage("call_0", "found b", false),
		provider.AssistantMessage("done"),
		provider.UserMessage("second"), // turn 6
		provider.AssistantMessage("", call(`{"task":"c"}`)),
		provider.ToolMessage("call_0", "found c", false),
		provider.AssistantMessage("done again"),
	}
	answer := "edited"
	for _, c := range []struct {
		name       string
		req        rerunRequest
		turn       int
		refused    string // in the error, when refused
		wantLast   string // the arguments of the call the cut ends at
		wantResult string // its result, if kept
	}{
		{name: "id only", req: rerunRequest{ToolCallID: "call_0"}, turn: -1, refused: "the lead made 3 calls with the id \"call_0\": name the run (fromRunId) and the step (step)"},
		{name: "first turn, id only", req: rerunRequest{ToolCallID: "call_0"}, turn: 0, refused: "2 calls"},
		{name: "second turn", req: rerunRequest{ToolCallID: "call_0"}, turn: 6, wantLast: `{"task":"c"}`},
		{name: "first turn, step 2", req: rerunRequest{ToolCallID: "call_0", Step: 2, Answer: &answer}, turn: 0, wantLast: `{"task":"b"}`, wantResult: "edited"},
		{name: "first turn, step 1", req: rerunRequest{ToolCallID: "call_0", Step: 1}, turn: 0, wantLast: `{"task":"a"}`},
		{name: "no such step", req: rerunRequest{ToolCallID: "call_0", Step: 3}, turn: 0, refused: "no call \"call_0\" of the lead in that turn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := cut(msgs, c.req, c.turn)
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("cut: %v, want an error saying %q", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var last provider.Message
			var result string
			for _, m := range out {
				if m.Role == provider.RoleAssistant {
					last, result = m, ""
				} else if m.Role == provider.RoleTool {
					result = m.Content
				}
			}
			if len(last.ToolCalls) != 1 || string(last.ToolCalls[0].Arguments) != c.wantLast || result != c.wantResult {
				t.Errorf("the cut ends at %v with result %q, want the call %s with %q", last.ToolCalls, result, c.wantLast, c.wantResult)
			}
		})
	}
}

// turnLog finds the recorded run that holds a call: the one of its turn
// that did not fail, with the runs that resumed it; and refuses when two
// runs that did not fail hold it.
func TestTurnLogFindsTheRunOfACall(t *testing.T) {
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := &Handler{store: st}
	ctx := context.Background()
	ev := func(s string) json.RawMessage { return json.RawMessage(s) }
	call := ev(`{"type":"TOOL_CALL_START","toolCallId":"x"}`)
	finished := ev(`{"type":"RUN_FINISHED"}`)
	asks := ev(`{"type":"RUN_FINISHED","outcome":{"type":"interrupt"}}`)
	failedRun := ev(`{"type":"RUN_ERROR","message":"boom"}`)
	save := func(thread, id string, turn int, events ...json.RawMessage) {
		if err := d.save(ctx, "", thread, runLog{RunID: id, Turn: turn, Events: events}); err != nil {
			t.Fatal(err)
		}
	}
	isX := func(e recordedEvent) bool {
		return e.Type == event.ToolCallStart && e.ToolCallID == "x" && e.SubagentRunID == ""
	}

	// A run that failed and the one that took its turn, which asked and was
	// resumed; a later turn and a re-run of the first.
	save("t1", "failed", 0, call, failedRun)
	save("t1", "asked", 0, call, asks)
	save("t1", "resumed", 0, ev(`{"type":"STEP_STARTED"}`), finished)
	save("t1", "later", 3, ev(`{"type":"TOOL_CALL_START","toolCallId":"y"}`), finished)
	if err := d.save(ctx, "", "t1", runLog{RunID: "again", Events: []json.RawMessage{call, finished}, Rerun: &rerunRequest{ToolCallID: "x"}}); err != nil {
		t.Fatal(err)
	}
	l, err := d.turnLog(ctx, "", "t1", isX, "the call")
	if err != nil || l == nil || l.RunID != "asked" || len(l.Events) != 4 {
		t.Fatalf("got %+v, %v; want the run that asked with the one that resumed it", l, err)
	}
	// No run holds it.
	if l, err := d.turnLog(ctx, "", "t1", func(e recordedEvent) bool { return e.ToolCallID == "z" }, "the call"); l != nil || err != nil {
		t.Errorf("a call no run holds: %+v, %v", l, err)
	}
	// Two runs that did not fail hold it.
	save("t2", "a", 0, call, finished)
	save("t2", "b", 0, call, finished)
	if _, err := d.turnLog(ctx, "", "t2", isX, "the call"); err == nil || !strings.Contains(err.Error(), "fromRunId") {
		t.Errorf("a call two runs hold: %v, want an error asking for fromRunId", err)
	}
	// One request reads at most maxScannedRuns runs: a call older than
	// them is re-run by naming its run.
	save("t3", "old", 0, call, finished)
	for i := range maxScannedRuns {
		save("t3", fmt.Sprint("r", i), i+1, ev(`{"type":"STEP_STARTED"}`), finished)
	}
	if l, err := d.turnLog(ctx, "", "t3", isX, "the call"); l != nil || err == nil || !strings.Contains(err.Error(), "last 1000 recorded runs") || !strings.Contains(err.Error(), "fromRunId") {
		t.Errorf("a call past the runs read: %+v, %v; want an error asking for fromRunId", l, err)
	}
}
