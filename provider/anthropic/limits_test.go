package anthropic_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/anthropic"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
)

// Events of a Messages stream.
const (
	messageStart = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-5-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}` + "\n\n"
	messageEnd = "event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	ping = "event: ping\n" + `data: {"type":"ping"}` + "\n\n"
)

func event(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func textStart(i int) string {
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i))
}

func textDelta(i int, s string) string {
	return event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, jsonString(s)))
}

func toolStart(i int, id, name string) string {
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, i, id, name))
}

func argsDelta(i int, s string) string {
	return event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, jsonString(s)))
}

func blockStop(i int) string {
	return event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

// serve starts h and returns a provider for it that would retry twice.
func serve(t *testing.T, h http.Handler, opts ...anthropic.Option) *anthropic.Provider {
	t.Helper()
	clearEnv(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return newTestProvider(t, srv, append([]anthropic.Option{anthropic.WithMaxRetries(2)}, opts...)...)
}

func TestStreamTextLimit(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/event-stream", Head: messageStart + textStart(0), Unit: textDelta(0, strings.Repeat("abcd", 256)), Limit: 1 << 30}
	wiretest.StreamTextLimit(t, serve(t, h), h, weatherRequest())
}

func TestStreamArgumentLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "text/event-stream",
		Head:        messageStart + toolStart(0, "toolu_1", "spawn"),
		Unit:        argsDelta(0, strings.Repeat("[", 256)),
		Limit:       1 << 30,
	}
	wiretest.StreamArgumentLimit(t, serve(t, h, anthropic.WithMaxArgumentBytes(wiretest.ArgumentLimit)), weatherRequest())
}

// TestStreamBodyLimit: keep-alives carry nothing of the reply, so only the
// body limit stops a server that sends them for ever.
func TestStreamBodyLimit(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/event-stream", Head: messageStart, Unit: ping, Limit: 1 << 30}
	wiretest.StreamBodyLimit(t, serve(t, h, anthropic.WithMaxResponseBytes(wiretest.BodyLimit)), h, weatherRequest())
}

func TestCompleteBodyLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "application/json",
		Head:        `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-5","content":[{"type":"text","text":"`,
		Unit:        "abcd",
		Limit:       1 << 30,
	}
	wiretest.CompleteBodyLimit(t, serve(t, h), h, weatherRequest())
}

func TestCompleteTextAndArgumentLimits(t *testing.T) {
	for _, tc := range []struct {
		file, option, limit string
		opt                 anthropic.Option
	}{
		{"text.json", "WithMaxTextBytes", "10 bytes", anthropic.WithMaxTextBytes(10)},
		{"tool_call.json", "WithMaxArgumentBytes", "5 bytes", anthropic.WithMaxArgumentBytes(5)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			clearEnv(t)
			srv := httptest.NewServer(&server{t: t, answers: []canned{{status: 200, file: tc.file}}})
			defer srv.Close()
			_, err := newTestProvider(t, srv, tc.opt).Complete(t.Context(), weatherRequest())
			wiretest.TooLarge(t, err, tc.option, tc.limit)
		})
	}
}

func TestNewRejectsBadLimits(t *testing.T) {
	clearEnv(t)
	for name, opt := range map[string]anthropic.Option{
		"WithMaxResponseBytes": anthropic.WithMaxResponseBytes(0),
		"WithMaxTextBytes":     anthropic.WithMaxTextBytes(-1),
		"WithMaxArgumentBytes": anthropic.WithMaxArgumentBytes(0),
		"WithIdleTimeout":      anthropic.WithIdleTimeout(0),
	} {
		_, err := anthropic.New(anthropic.WithAPIKey("k"), opt)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "positive") {
			t.Errorf("%s: got %v; want an error that names the option and says it must be positive", name, err)
		}
	}
}

// TestStreamBrokenLine: a stream line that is not JSON is malformed, as
// the same breakage is without streaming.
func TestStreamBrokenLine(t *testing.T) {
	body := messageStart + textStart(0) + textDelta(0, "Par") + "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_de` + "\n\n"
	h := &wiretest.Endless{ContentType: "text/event-stream", Head: body}
	p := serve(t, h)
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	checkErr(t, err, &wantErr{kind: provider.KindMalformed, status: 200})
	wiretest.OneRequest(t, h)
}

// TestStreamHTML: a 200 with a web page where the stream should be is
// malformed, not a transient failure to retry.
func TestStreamHTML(t *testing.T) {
	h := wiretest.SignInPage()
	err := wiretest.StreamHTML(t, serve(t, h), h, weatherRequest())
	checkErr(t, err, &wantErr{kind: provider.KindMalformed, status: 200})
}

// TestRedirectToOtherOrigin: the SDK refuses to follow a redirect to
// another origin; that is the base URL's fault, not a transient failure.
func TestRedirectToOtherOrigin(t *testing.T) {
	clearEnv(t)
	wiretest.RedirectToOtherOrigin(t, func(srv *httptest.Server) wiretest.Both {
		return newTestProvider(t, srv, anthropic.WithMaxRetries(2))
	}, weatherRequest())
}

// TestStreamArgumentsNotJSON: arguments that are not valid JSON reach the
// tool as the model wrote them, so that the model is told they are not
// JSON, instead of becoming {} and failing for a missing property.
func TestStreamArgumentsNotJSON(t *testing.T) {
	body := messageStart + toolStart(0, "toolu_1", "spawn") + argsDelta(0, `{"task": "find`) + argsDelta(0, ` it`) + blockStop(0) +
		strings.Replace(messageEnd, "end_turn", "tool_use", 1)
	p := serve(t, &wiretest.Endless{ContentType: "text/event-stream", Head: body})
	resp, err := p.Stream(t.Context(), weatherRequest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 1 {
		t.Fatalf("got %d tool calls; want 1", len(resp.Message.ToolCalls))
	}
	if got, want := string(resp.Message.ToolCalls[0].Arguments), `{"task": "find it`; got != want {
		t.Errorf("arguments %q; want them as the model wrote them, %q", got, want)
	}
	if resp.StopReason != provider.StopToolUse {
		t.Errorf("stop reason %q; want %q", resp.StopReason, provider.StopToolUse)
	}
}
