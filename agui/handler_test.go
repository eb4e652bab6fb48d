package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
)

const okBody = `{"threadId":"t1","runId":"r1","messages":[{"id":"u1","role":"user","content":"hello"}]}`

func echo() agent.Agent {
	return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: "you said " + in.Text}, nil
	})
}

func must(t testing.TB) func(*agui.Handler, error) *agui.Handler {
	return func(h *agui.Handler, err error) *agui.Handler {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}

func TestBadRequests(t *testing.T) {
	shared := must(t)(agui.New(echo(), agui.WithMaxBodyBytes(200)))
	perRequest := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		switch string(in.ForwardedProps) {
		case `{"fail":"input"}`:
			return nil, errors.New("wrapped: " + agui.ErrBadInput.Error())
		case `{"fail":"bad"}`:
			return nil, errorsJoin(agui.ErrBadInput, errors.New("no such scenario"))
		}
		return echo(), nil
	}))
	msgs := func(m string) string { return `{"threadId":"t","runId":"r","messages":` + m + `}` }
	tests := []struct {
		name   string
		h      http.Handler
		method string
		ctype  string
		body   string
		status int
		want   string
	}{
		{"GET", shared, "GET", "", "", 405, "send a POST"},
		{"text body", shared, "POST", "text/plain", okBody, 415, "send application/json"},
		{"empty", shared, "POST", "", "", 400, "the body is empty"},
		{"not JSON", shared, "POST", "", "hello", 400, "the body is not JSON"},
		{"truncated JSON", shared, "POST", "", `{"threadId":"t",`, 400, "the body is not JSON"},
		{"trailing data", shared, "POST", "", okBody + ` {}`, 400, "not JSON"},
		{"array", shared, "POST", "", `[1,2]`, 400, "not a JSON object"},
		{"no threadId", shared, "POST", "", `{"runId":"r","messages":[]}`, 400, "threadId is missing"},
		{"no runId", shared, "POST", "", `{"threadId":"t","messages":[]}`, 400, "runId is missing"},
		{"no messages", shared, "POST", "", `{"threadId":"t","runId":"r"}`, 400, "messages is missing"},
		{"empty threadId", shared, "POST", "", `{"threadId":"","runId":"r","messages":[]}`, 400, "threadId is empty"},
		{"threadId a number", shared, "POST", "", `{"threadId":7,"runId":"r","messages":[]}`, 400, "threadId: want a string, got number"},
		{"messages an object", shared, "POST", "", msgs(`{}`), 400, "messages: want a list, got object"},
		{"message not an object", shared, "POST", "", msgs(`["hi"]`), 400, "messages[0]: want an object"},
		{"message without role", shared, "POST", "", msgs(`[{"content":"hi"}]`), 400, "messages[0]: role is missing"},
		{"unknown role", shared, "POST", "", msgs(`[{"role":"robot","content":"hi"}]`), 400, `messages[0]: role "robot"`},
		{"content a number", shared, "POST", "", msgs(`[{"role":"user","content":5}]`), 400, "messages[0]: content: want a string or a list of content parts"},
		{"user without content", shared, "POST", "", msgs(`[{"role":"user"}]`), 400, "messages[0]: content is missing"},
		{"tool without call id", shared, "POST", "", msgs(`[{"role":"tool","content":"x"}]`), 400, "messages[0]: toolCallId is missing"},
		{"tool calls not a list", shared, "POST", "", msgs(`[{"role":"assistant","toolCalls":1}]`), 400, "messages[0]: toolCalls: want a list, got number"},
		{"forwardedProps a list", shared, "POST", "", `{"threadId":"t","runId":"r","messages":[],"forwardedProps":[]}`, 400, "forwardedProps: want an object"},
		{"tool without name", shared, "POST", "", `{"threadId":"t","runId":"r","messages":[],"tools":[{}]}`, 400, "tools[0]: name is missing"},
		{"too large", shared, "POST", "", msgs(`[{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]`), 413, "larger than 200 bytes"},
		{"no user message", shared, "POST", "", msgs(`[{"role":"system","content":"be brief"}]`), 400, "no user message"},
		{"dangling tool call", perRequest, "POST", "", msgs(`[{"role":"user","content":"hi"},{"role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"x","arguments":"{}"}}]}]`), 400, "have no result"},
		{"nothing to answer", perRequest, "POST", "", msgs(`[]`), 400, "no user, assistant or tool message"},
		{"builder: bad input", perRequest, "POST", "", `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"x"}],"forwardedProps":{"fail":"bad"}}`, 400, "no such scenario"},
		{"builder: failure", perRequest, "POST", "", `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"x"}],"forwardedProps":{"fail":"input"}}`, 500, "wrapped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "/agui", strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var body struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("the error body is not JSON: %q", rec.Body)
			}
			if !strings.Contains(body.Error, tt.want) {
				t.Errorf("error %q, want it to contain %q", body.Error, tt.want)
			}
		})
	}
}

func errorsJoin(a, b error) error { return errorsJoined{a, b} }

type errorsJoined [2]error

func (e errorsJoined) Error() string   { return e[0].Error() + ": " + e[1].Error() }
func (e errorsJoined) Unwrap() []error { return e[:] }

// A run's stream: the request's ids on RUN_STARTED and RUN_FINISHED, the
// agent's own run-level events left out, everything else as emitted and
// stamped with the time.
func TestStreamOfARun(t *testing.T) {
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		event.From(ctx).Emit(event.Event{Type: event.RunStarted, RunID: "inner"}) // the handler's stands for it
		event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "s1"})
		event.From(ctx).Emit(event.Event{Type: event.TextMessageStart, MessageID: "m1"})
		event.From(ctx).Emit(event.Event{Type: event.TextMessageContent, MessageID: "m1", Delta: "line one\nline \"two\""})
		event.From(ctx).Emit(event.Event{Type: event.TextMessageContent, MessageID: "m1", Delta: ""}) // dropped
		event.From(ctx).Emit(event.Event{Type: event.TextMessageEnd, MessageID: "m1"})
		event.From(ctx).Emit(event.Event{Type: event.StepFinished, StepName: "s1"})
		event.From(ctx).Emit(event.Event{Type: event.RunFinished, RunID: "inner"})
		return agent.Output{Answer: "done\n"}, nil
	})
	srv := serve(t, must(t)(agui.New(a)))
	resp := post(t, srv.URL, `{"threadId":"thread-9","runId":"run-9","parentRunId":"run-8","messages":[{"id":"u","role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	frames := readFrames(t, resp.Body)
	var lines []string
	for _, f := range frames {
		if f.e.Timestamp == 0 {
			t.Errorf("frame without a timestamp: %s", f.raw)
		}
		f.e.Timestamp = 0
		b, _ := json.Marshal(f.e)
		lines = append(lines, string(b))
	}
	want := []string{
		`{"type":"RUN_STARTED","threadId":"thread-9","runId":"run-9","parentRunId":"run-8"}`,
		`{"type":"STEP_STARTED","stepName":"s1"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"line one\nline \"two\""}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		`{"type":"STEP_FINISHED","stepName":"s1"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-9","runId":"run-9","result":"done\n"}`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stream:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if problems := eventcheck.Check(events(frames), eventcheck.Options{}); len(problems) > 0 {
		t.Error(strings.Join(problems, "\n"))
	}
}

func TestStreamOfAFailedRun(t *testing.T) {
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{}, agent.ErrMaxSteps
	})
	srv := serve(t, must(t)(agui.New(a)))
	resp := post(t, srv.URL, okBody)
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body)
	last := frames[len(frames)-1]
	if last.e.Type != event.RunError || last.e.Code != "max_steps" || !strings.Contains(last.raw, `"message":"agent: max steps exceeded"`) ||
		strings.Contains(last.raw, "threadId") {
		t.Errorf("last frame %s", last.raw)
	}
}

func TestStreamOfAPanickingRun(t *testing.T) {
	var logs bytes.Buffer
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) { panic("bug") })
	srv := serve(t, must(t)(agui.New(a, agui.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))))
	resp := post(t, srv.URL, okBody)
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body)
	if last := frames[len(frames)-1]; last.e.Type != event.RunError {
		t.Errorf("last frame %s", last.raw)
	}
	if !strings.Contains(logs.String(), "bug") {
		t.Errorf("the panic is not in the log: %q", logs.String())
	}
}

// lifecycle emits a sub-agent's whole life, attributed.
var lifecycle = agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
	event.From(ctx).Emit(event.Event{Type: event.ToolCallStart, ToolCallID: "c1", ToolCallName: "helper"})
	event.From(ctx).Emit(event.Event{Type: event.ToolCallEnd, ToolCallID: "c1"})
	event.From(ctx).Emit(event.Event{Type: event.SubagentStarted, SubagentRunID: "sub1", Name: "helper", ParentToolCallID: "c1"})
	sub := event.WithSubagent(ctx, "sub1")
	event.From(sub).Emit(event.Event{Type: event.TextMessageStart, MessageID: "m1"})
	event.From(sub).Emit(event.Event{Type: event.TextMessageContent, MessageID: "m1", Delta: "hi"})
	event.From(sub).Emit(event.Event{Type: event.TextMessageEnd, MessageID: "m1"})
	event.From(ctx).Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: "sub1"})
	event.From(ctx).Emit(event.Event{Type: event.ToolCallResult, MessageID: "r1", ToolCallID: "c1", Content: "hi"})
	return agent.Output{Answer: "ok"}, nil
})

func TestSubagentEventsHidden(t *testing.T) {
	types := func(h http.Handler, headers ...string) (out []string, attributed int) {
		srv := serve(t, h)
		resp := post(t, srv.URL, okBody, headers...)
		defer resp.Body.Close()
		frames := readFrames(t, resp.Body)
		hidden := len(headers) > 0 || h != shown(t)
		if problems := eventcheck.Check(events(frames), eventcheck.Options{HiddenLifecycle: hidden}); len(problems) > 0 {
			t.Error(strings.Join(problems, "\n"))
		}
		for _, f := range frames {
			out = append(out, string(f.e.Type))
			if f.e.SubagentRunID == "sub1" && !strings.HasPrefix(string(f.e.Type), "SUBAGENT_") {
				attributed++
			}
		}
		return out, attributed
	}
	all, n := types(shown(t))
	if !strings.Contains(strings.Join(all, " "), "SUBAGENT_STARTED") || n != 3 {
		t.Fatalf("without hiding: %v (%d attributed)", all, n)
	}
	for name, got := range map[string]func() ([]string, int){
		"option": func() ([]string, int) { return types(must(t)(agui.New(lifecycle, agui.WithSubagentEventsHidden()))) },
		"header": func() ([]string, int) { return types(shown(t), agui.SubagentEventsHeader, "hide") },
		"header, any case": func() ([]string, int) {
			return types(shown(t), strings.ToLower(agui.SubagentEventsHeader), " Hide ")
		},
	} {
		ts, n := got()
		if strings.Contains(strings.Join(ts, " "), "SUBAGENT_") || n != 3 || len(ts) != len(all)-2 {
			t.Errorf("%s: %v (%d attributed), want the SUBAGENT_* events gone and attribution kept", name, ts, n)
		}
	}
}

var shownOnce struct {
	sync.Once
	h *agui.Handler
}

func shown(t *testing.T) *agui.Handler {
	shownOnce.Do(func() { shownOnce.h = must(t)(agui.New(lifecycle)) })
	return shownOnce.h
}

// A client that goes away cancels the run, and the server goes on serving.
func TestDisconnectCancelsTheRun(t *testing.T) {
	cancelled := make(chan error, 1)
	a := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		event.From(ctx).Emit(event.Event{Type: event.StepStarted, StepName: "waiting"})
		select {
		case <-ctx.Done():
			cancelled <- ctx.Err()
			return agent.Output{}, ctx.Err()
		case <-time.After(30 * time.Second):
			cancelled <- nil
			return agent.Output{}, nil
		}
	})
	srv := serve(t, must(t)(agui.New(a)))
	resp := post(t, srv.URL, okBody)
	next := scanFrames(resp.Body)
	for range 2 { // RUN_STARTED, STEP_STARTED
		if _, ok := next(); !ok {
			t.Fatal("the stream ended early")
		}
	}
	resp.Body.Close()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the run ended with %v, want it cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled after the client left")
	}
}

// The conversation reaches the agent as the InputFunc maps it.
// The conversation a client sends back holds the messages of the
// sub-agents it was streamed (tagged with subagentRunId); only the agent's
// own messages reach it.
func TestInputMapping(t *testing.T) {
	conv := `{"threadId":"t","runId":"r","messages":[
		{"id":"s","role":"system","content":"be brief"},
		{"id":"u1","role":"user","content":[{"type":"text","text":"look at"},{"type":"image","source":{"type":"url","value":"http://x/y.png"}},{"type":"text","text":"this"}]},
		{"id":"a1","role":"assistant","content":"Searching.","toolCalls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":1}"}}]},
		{"id":"sa1","role":"assistant","content":"I will look deeper.","subagentRunId":"sub_1","toolCalls":[{"id":"sc1","type":"function","function":{"name":"deep_search","arguments":"{}"}}]},
		{"id":"st1","role":"tool","toolCallId":"sc1","content":"deep results","subagentRunId":"sub_1"},
		{"id":"sa2","role":"assistant","content":"The child's private answer.","subagentRunId":"sub_1"},
		{"id":"t1","role":"tool","toolCallId":"c1","content":"","error":"no network"},
		{"id":"a2","role":"assistant","content":"It failed."},
		{"id":"u2","role":"user","content":"try again"},
		{"id":"x","role":"reasoning","content":"hmm"},
		{"id":"su","role":"user","content":"a sub-agent's task","subagentRunId":"sub_2"}
	]}`
	var got agent.Input
	record := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		got = in
		return agent.Output{Answer: "ok"}, nil
	})
	run := func(h http.Handler) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/", strings.NewReader(conv)))
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}

	run(must(t)(agui.New(record)))
	if got.Text != "try again" || got.Messages != nil || got.CacheKey != "t" {
		t.Errorf("LastUserMessage gave %+v, want the thread id as the cache key", got)
	}

	run(must(t)(agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) { return record, nil })))
	want := []provider.Message{
		provider.UserMessage("look at\nthis"),
		provider.AssistantMessage("Searching.", provider.ToolCall{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":1}`)}),
		provider.ToolMessage("c1", "no network", true),
		provider.AssistantMessage("It failed."),
		provider.UserMessage("try again"),
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(agent.Input{Messages: want, CacheKey: "t"}) // the thread id names the conversation
	if string(gb) != string(wb) {
		t.Errorf("Conversation gave\n%s\nwant\n%s", gb, wb)
	}

	run(must(t)(agui.New(record, agui.WithInput(agui.Conversation))))
	if len(got.Messages) != len(want) {
		t.Errorf("WithInput(Conversation) gave %d messages", len(got.Messages))
	}
}

func TestOptionsAreChecked(t *testing.T) {
	if _, err := agui.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := agui.NewPerRequest(nil); err == nil {
		t.Error("NewPerRequest(nil) succeeded")
	}
	for _, o := range []agui.Option{agui.WithMaxBodyBytes(1), agui.WithInput(nil), agui.WithWriteTimeout(0)} {
		if _, err := agui.New(echo(), o); err == nil {
			t.Error("a bad option was accepted")
		}
	}
}

// Whatever the body, the handler answers with a stream or a 4xx, never a
// panic or a 5xx.
func FuzzHandlerBody(f *testing.F) {
	for _, s := range []string{okBody, "", "{", "[]", `{"threadId":"t","runId":"r","messages":[{"role":"tool","content":[{"type":"text"}],"toolCallId":"c"}]}`,
		`{"threadId":"t","runId":"r","messages":[{"role":"user","content":[{"text":"x"}]}],"state":null,"forwardedProps":null}`} {
		f.Add(s)
	}
	h, err := agui.New(echo(), agui.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/", strings.NewReader(body)))
		if rec.Code != 200 && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
