package event_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deputy-go/deputy/event"
)

// The JSON each type is sent as: exactly the fields @ag-ui/core 1.0.0 names
// for the type, required ones present even when empty, nothing null.
func TestMarshalJSONPerType(t *testing.T) {
	full := event.Event{ // every field set: each type must pick its own
		Timestamp: 1767225600000, ThreadID: "t1", RunID: "r1", ParentRunID: "r0", StepName: "s1",
		MessageID: "m1", Role: "assistant", Delta: "d", ToolCallID: "c1", ToolCallName: "search",
		ParentMessageID: "m0", Content: "x", SubagentRunID: "sub1", Name: "researcher",
		Description: "Researches.", ParentSubagentRunID: "sub0", ParentToolCallID: "c0",
		Result: json.RawMessage(`{"ok":true}`), Message: "boom", Code: "error",
	}
	with := func(typ event.Type) event.Event { e := full; e.Type = typ; return e }
	tests := []struct {
		name string
		e    event.Event
		want string
	}{
		{"run started", with(event.RunStarted),
			`{"type":"RUN_STARTED","timestamp":1767225600000,"threadId":"t1","runId":"r1","parentRunId":"r0"}`},
		{"run started, empty ids stay", event.Event{Type: event.RunStarted},
			`{"type":"RUN_STARTED","threadId":"","runId":""}`},
		{"run finished", with(event.RunFinished),
			`{"type":"RUN_FINISHED","timestamp":1767225600000,"threadId":"t1","runId":"r1","result":{"ok":true}}`},
		{"run finished, null result left out", event.Event{Type: event.RunFinished, ThreadID: "t", RunID: "r", Result: json.RawMessage("null")},
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`},
		{"run finished, result compacted to one line", event.Event{Type: event.RunFinished, ThreadID: "t", RunID: "r", Result: json.RawMessage("{\n  \"a\": [1, 2]\n}")},
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"a":[1,2]}}`},
		{"run finished, text result as a JSON string", event.Event{Type: event.RunFinished, ThreadID: "t", RunID: "r", Result: event.JSONString("Say \"hi\"\n\tok")},
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":"Say \"hi\"\n\tok"}`},
		{"subagent finished, text result", event.Event{Type: event.SubagentFinished, SubagentRunID: "s", Result: event.JSONString("done")},
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","result":"done"}`},
		{"run error: no thread, no run", with(event.RunError),
			`{"type":"RUN_ERROR","timestamp":1767225600000,"message":"boom","code":"error"}`},
		{"run error, empty message stays", event.Event{Type: event.RunError},
			`{"type":"RUN_ERROR","message":""}`},
		{"step started", with(event.StepStarted),
			`{"type":"STEP_STARTED","timestamp":1767225600000,"stepName":"s1","subagentRunId":"sub1"}`},
		{"step finished, parent's", event.Event{Type: event.StepFinished, StepName: "s1"},
			`{"type":"STEP_FINISHED","stepName":"s1"}`},
		{"text start", with(event.TextMessageStart),
			`{"type":"TEXT_MESSAGE_START","timestamp":1767225600000,"messageId":"m1","role":"assistant","subagentRunId":"sub1"}`},
		{"text start, role defaults to assistant", event.Event{Type: event.TextMessageStart, MessageID: "m1"},
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`},
		{"text start, a role AG-UI streams is kept", event.Event{Type: event.TextMessageStart, MessageID: "m1", Role: "user"},
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"user"}`},
		{"text start, tool is not a text role", event.Event{Type: event.TextMessageStart, MessageID: "m1", Role: "tool"},
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`},
		{"text content", with(event.TextMessageContent),
			`{"type":"TEXT_MESSAGE_CONTENT","timestamp":1767225600000,"messageId":"m1","delta":"d","subagentRunId":"sub1"}`},
		{"text end", with(event.TextMessageEnd),
			`{"type":"TEXT_MESSAGE_END","timestamp":1767225600000,"messageId":"m1","subagentRunId":"sub1"}`},
		{"tool call start", with(event.ToolCallStart),
			`{"type":"TOOL_CALL_START","timestamp":1767225600000,"toolCallId":"c1","toolCallName":"search","parentMessageId":"m0","subagentRunId":"sub1"}`},
		{"tool call start, no parent message", event.Event{Type: event.ToolCallStart, ToolCallID: "c1", ToolCallName: "search"},
			`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"search"}`},
		{"tool call args", with(event.ToolCallArgs),
			`{"type":"TOOL_CALL_ARGS","timestamp":1767225600000,"toolCallId":"c1","delta":"d","subagentRunId":"sub1"}`},
		{"tool call end", with(event.ToolCallEnd),
			`{"type":"TOOL_CALL_END","timestamp":1767225600000,"toolCallId":"c1","subagentRunId":"sub1"}`},
		{"tool call result", with(event.ToolCallResult),
			`{"type":"TOOL_CALL_RESULT","timestamp":1767225600000,"messageId":"m1","toolCallId":"c1","content":"x","role":"tool","subagentRunId":"sub1"}`},
		{"tool call result, empty content stays", event.Event{Type: event.ToolCallResult, MessageID: "m1", ToolCallID: "c1"},
			`{"type":"TOOL_CALL_RESULT","messageId":"m1","toolCallId":"c1","content":"","role":"tool"}`},
		{"subagent started", with(event.SubagentStarted),
			`{"type":"SUBAGENT_STARTED","timestamp":1767225600000,"subagentRunId":"sub1","name":"researcher","description":"Researches.","parentSubagentRunId":"sub0","parentToolCallId":"c0","parentMessageId":"m0"}`},
		{"subagent started, top level", event.Event{Type: event.SubagentStarted, SubagentRunID: "sub1", Name: "researcher", ParentToolCallID: "c0"},
			`{"type":"SUBAGENT_STARTED","subagentRunId":"sub1","name":"researcher","parentToolCallId":"c0"}`},
		{"subagent finished", with(event.SubagentFinished),
			`{"type":"SUBAGENT_FINISHED","timestamp":1767225600000,"subagentRunId":"sub1","result":{"ok":true}}`},
		{"subagent finished, no result", event.Event{Type: event.SubagentFinished, SubagentRunID: "sub1"},
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"sub1"}`},
		{"subagent error", with(event.SubagentError),
			`{"type":"SUBAGENT_ERROR","timestamp":1767225600000,"subagentRunId":"sub1","message":"boom","code":"error"}`},
		{"subagent finished, usage and model in metadata", event.Event{Type: event.SubagentFinished, SubagentRunID: "sub1",
			Usage: json.RawMessage(`[{"model":"m","inputTokens":3,"outputTokens":1,"totalTokens":4}]`), Model: "m"},
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"sub1","metadata":{"usage":[{"model":"m","inputTokens":3,"outputTokens":1,"totalTokens":4}],"model":"m"}}`},
		{"subagent finished, model only", event.Event{Type: event.SubagentFinished, SubagentRunID: "sub1", Model: "m"},
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"sub1","metadata":{"model":"m"}}`},
		{"subagent error, usage only", event.Event{Type: event.SubagentError, SubagentRunID: "sub1", Message: "boom",
			Usage: json.RawMessage(`[ {"inputTokens":3} ]`)},
			`{"type":"SUBAGENT_ERROR","subagentRunId":"sub1","message":"boom","metadata":{"usage":[{"inputTokens":3}]}}`},
		{"subagent error, null usage left out", event.Event{Type: event.SubagentError, SubagentRunID: "sub1", Message: "boom", Usage: json.RawMessage("null")},
			`{"type":"SUBAGENT_ERROR","subagentRunId":"sub1","message":"boom"}`},
		{"unknown type: every field set", event.Event{Type: "CUSTOM_THING", Name: "n", Content: "c", SubagentRunID: "s"},
			`{"type":"CUSTOM_THING","content":"c","name":"n","subagentRunId":"s"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("json.Marshal:\n got %s\nwant %s", got, tt.want)
			}
			app, err := tt.e.AppendJSON([]byte("prefix:"))
			if err != nil {
				t.Fatal(err)
			}
			if string(app) != "prefix:"+tt.want {
				t.Errorf("AppendJSON:\n got %s\nwant prefix:%s", app, tt.want)
			}
			// Decoding gives every field sent back, a sub-agent's
			// usage and model from its metadata included.
			var back event.Event
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			again, err := json.Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != tt.want {
				t.Errorf("json.Unmarshal, then json.Marshal:\n got %s\nwant %s", again, tt.want)
			}
		})
	}
}

// A client decoding a stream with json.Unmarshal reads a sub-agent's
// usage and model in Usage and Model, and an event from another sender
// whose metadata is not deputy's still decodes.
func TestUnmarshalJSONReadsMetadata(t *testing.T) {
	for _, tt := range []struct {
		name, in     string
		usage, model string
	}{
		{"usage and model", `{"type":"SUBAGENT_FINISHED","subagentRunId":"s","metadata":{"usage":[{"inputTokens":3}],"model":"m"}}`, `[{"inputTokens":3}]`, "m"},
		{"model only", `{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n","metadata":{"model":"m"}}`, "", "m"},
		{"null usage", `{"type":"SUBAGENT_ERROR","subagentRunId":"s","message":"x","metadata":{"usage":null}}`, "", ""},
		{"top-level usage wins", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","usage":[{"inputTokens":1}],"metadata":{"usage":[{"inputTokens":9}]}}`, `[{"inputTokens":1}]`, ""},
		{"metadata not an object", `{"type":"SUBAGENT_FINISHED","subagentRunId":"s","metadata":"from elsewhere"}`, "", ""},
		{"metadata of other shape", `{"type":"SUBAGENT_FINISHED","subagentRunId":"s","metadata":{"usage":"lots","model":7}}`, "", ""},
		{"usage not a list", `{"type":"SUBAGENT_FINISHED","subagentRunId":"s","metadata":{"usage":"lots"}}`, "", ""},
		{"usage an object", `{"type":"SUBAGENT_ERROR","subagentRunId":"s","message":"x","metadata":{"usage":{"inputTokens":3},"model":"m"}}`, "", "m"},
		{"metadata of another type", `{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant","metadata":{"usage":[{"inputTokens":3}],"model":"m"}}`, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var e event.Event
			if err := json.Unmarshal([]byte(tt.in), &e); err != nil {
				t.Fatal(err)
			}
			if string(e.Usage) != tt.usage || e.Model != tt.model {
				t.Errorf("Usage %s, Model %q; want %s, %q", e.Usage, e.Model, tt.usage, tt.model)
			}
		})
	}
	var e event.Event
	if err := json.Unmarshal([]byte(`{"type":"SUBAGENT_FINISHED",`), &e); err == nil {
		t.Error("a cut event decoded without an error")
	}
}

func TestMarshalJSONRejectsInvalidResult(t *testing.T) {
	bad := json.RawMessage(`{"unclosed"`)
	for _, tt := range []struct {
		e     event.Event
		field string
	}{
		{event.Event{Type: event.SubagentFinished, SubagentRunID: "s", Result: bad}, "Result"},
		{event.Event{Type: event.SubagentFinished, SubagentRunID: "s", Usage: bad}, "Usage"},
		{event.Event{Type: event.SubagentError, SubagentRunID: "s", Message: "m", Usage: bad, Model: "m"}, "Usage"},
		{event.Event{Type: event.RunFinished, Outcome: bad}, "Outcome"},
	} {
		if _, err := json.Marshal(tt.e); err == nil || !strings.Contains(err.Error(), tt.field+" is not valid JSON") {
			t.Errorf("%s with a bad %s: error %v, want one naming %s", tt.e.Type, tt.field, err, tt.field)
		}
		dst := []byte("keep")
		got, err := tt.e.AppendJSON(dst)
		if err == nil || string(got) != "keep" {
			t.Errorf("AppendJSON = %q, %v; want dst unchanged and an error", got, err)
		}
	}
}

func TestStringEscaping(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`say "hi"\now`, `"say \"hi\"\\now"`},
		{"a\nb\r\tc\b\f", `"a\nb\r\tc\b\f"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"<a&b>", `"<a&b>"`},
		{"café ✓", `"café ✓"`},
		{"line\u2028para\u2029", `"line\u2028para\u2029"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
	}
	for _, tt := range tests {
		if got := string(event.JSONString(tt.in)); got != tt.want {
			t.Errorf("JSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestJSONStringAllocatesOnce(t *testing.T) {
	for _, s := range []string{`{"status":"success","summary":"ok"}`, "plain", "a\nb\tc", "é\u2028\xff", strings.Repeat("\"", 40)} {
		if n := testing.AllocsPerRun(10, func() { event.JSONString(s) }); n != 1 {
			t.Errorf("JSONString(%q) allocates %v times", s, n)
		}
		if got := event.JSONString(s); cap(got) != len(got) {
			t.Errorf("JSONString(%q): capacity %d for %d bytes", s, cap(got), len(got))
		}
	}
}

// The hand-written string encoder reads back as encoding/json reads it.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\n\x00\x7f", "é\u2028", "\xff\xfe", "日本語"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := event.JSONString(s)
		if cap(raw) != len(raw) {
			t.Fatalf("JSONString(%q): sized %d for %d bytes", s, cap(raw), len(raw))
		}
		if !json.Valid(raw) {
			t.Fatalf("invalid JSON %q for %q", raw, s)
		}
		if bytes.ContainsAny(raw, "\n\r") {
			t.Fatalf("a raw line break in %q", raw)
		}
		var back string
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		want := s
		if !utf8.ValidString(s) {
			// As encoding/json does: each bad byte becomes U+FFFD
			// (strings.ToValidUTF8 would replace a run of them with one).
			b, _ := json.Marshal(s)
			_ = json.Unmarshal(b, &want)
		}
		if back != want {
			t.Fatalf("round trip of %q gave %q, want %q", s, back, want)
		}
	})
}

type jsonRecorder struct{ got []event.Event }

func (r *jsonRecorder) Emit(e event.Event) { r.got = append(r.got, e) }

func TestEmitThreadAndEmptyDeltas(t *testing.T) {
	rec := &jsonRecorder{}
	ctx := event.WithSink(context.Background(), event.Stamped(rec))
	event.From(ctx).Emit(event.Event{Type: event.RunStarted, RunID: "r1"})
	event.From(ctx).Emit(event.Event{Type: event.TextMessageContent, MessageID: "m", Delta: ""})
	event.From(ctx).Emit(event.Event{Type: event.ToolCallArgs, ToolCallID: "c", Delta: ""})
	tctx := event.WithThread(ctx, "thread-9")
	event.From(tctx).Emit(event.Event{Type: event.RunFinished, RunID: "r1"})
	event.From(tctx).Emit(event.Event{Type: event.RunError, RunID: "r1", Message: "m"})
	sub := event.WithSubagent(tctx, "sub1")
	event.From(sub).Emit(event.Event{Type: event.RunStarted, RunID: "r2"}) // dropped under a sub-agent
	event.From(sub).Emit(event.Event{Type: event.StepStarted, StepName: "s"})

	if len(rec.got) != 4 {
		t.Fatalf("got %d events, want 4: %+v", len(rec.got), rec.got)
	}
	if got := rec.got[0].ThreadID; got != "r1" {
		t.Errorf("RUN_STARTED without a thread: threadId %q, want the run id", got)
	}
	if got := rec.got[1].ThreadID; got != "thread-9" {
		t.Errorf("RUN_FINISHED under WithThread: threadId %q", got)
	}
	if got := rec.got[2].ThreadID; got != "" {
		t.Errorf("RUN_ERROR got a thread %q", got)
	}
	if got := rec.got[3].SubagentRunID; got != "sub1" {
		t.Errorf("attribution %q", got)
	}
	if event.ThreadID(sub) != "thread-9" || event.SubagentRunID(event.WithThread(sub, "x")) != "sub1" {
		t.Error("thread and attribution must survive each other's setters")
	}
	for _, e := range rec.got {
		if e.Timestamp == 0 {
			t.Errorf("%s has no timestamp", e.Type)
		}
	}
}

func TestStampedKeepsATime(t *testing.T) {
	rec := &jsonRecorder{}
	s := event.Stamped(rec)
	s.Emit(event.Event{Type: event.StepStarted, Timestamp: 42})
	if rec.got[0].Timestamp != 42 {
		t.Errorf("Stamped replaced a time the event had: %d", rec.got[0].Timestamp)
	}
	ctx := event.WithSink(context.Background(), rec)
	event.From(ctx).Emit(event.Event{Type: event.StepStarted})
	if rec.got[1].Timestamp != 0 {
		t.Error("Emit read the clock")
	}
}

func TestEmitWithoutSinkIsFree(t *testing.T) {
	ctx := event.WithThread(context.Background(), "t")
	e := event.Event{Type: event.TextMessageContent, MessageID: "m", Delta: "d"}
	if n := testing.AllocsPerRun(100, func() { event.From(ctx).Emit(e) }); n != 0 {
		t.Errorf("Emit without a sink allocates %v times", n)
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	e := event.Event{Type: event.TextMessageContent, Timestamp: 1767225600000, MessageID: "run_abc/msg-1", Delta: "Topic A is \"settled\".\n", SubagentRunID: "sub_xyz"}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = e.AppendJSON(buf[:0])
	}
}
