package devui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
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
