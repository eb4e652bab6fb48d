package openai_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/wiretest"
	"github.com/deputy-go/deputy/provider/openai"
)

func chunk(delta string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-5.4-mini","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

// serve starts h and returns a provider for it that would retry twice.
func serve(t *testing.T, h http.Handler, opts ...openai.Option) *openai.Provider {
	t.Helper()
	clearEnv(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return newTestProvider(t, srv, append([]openai.Option{openai.WithMaxRetries(2)}, opts...)...)
}

func TestStreamTextLimit(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/event-stream", Unit: chunk(`{"content":"` + strings.Repeat("abcd", 256) + `"}`), Limit: 1 << 30}
	wiretest.StreamTextLimit(t, serve(t, h), h, weatherRequest())
}

func TestStreamArgumentLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "text/event-stream",
		Head:        chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"spawn","arguments":""}}]}`),
		Unit:        chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"` + strings.Repeat("[", 256) + `"}}]}`),
		Limit:       1 << 30,
	}
	wiretest.StreamArgumentLimit(t, serve(t, h, openai.WithMaxArgumentBytes(wiretest.ArgumentLimit)), weatherRequest())
}

// TestStreamBodyLimit: keep-alives carry nothing of the reply, so only the
// body limit stops a server that sends them for ever.
func TestStreamBodyLimit(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/event-stream", Unit: ": keep-alive\n\n", Limit: 1 << 30}
	wiretest.StreamBodyLimit(t, serve(t, h, openai.WithMaxResponseBytes(wiretest.BodyLimit)), h, weatherRequest())
}

func TestCompleteBodyLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "application/json",
		Head:        `{"id":"c","object":"chat.completion","model":"gpt-5.4-mini","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`,
		Unit:        "abcd",
		Limit:       1 << 30,
	}
	wiretest.CompleteBodyLimit(t, serve(t, h), h, weatherRequest())
}

func TestCompleteTextAndArgumentLimits(t *testing.T) {
	for _, tc := range []struct {
		file, option, limit string
		opt                 openai.Option
	}{
		{"text.json", "WithMaxTextBytes", "10 bytes", openai.WithMaxTextBytes(10)},
		{"tool_call.json", "WithMaxArgumentBytes", "5 bytes", openai.WithMaxArgumentBytes(5)},
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
	for name, opt := range map[string]openai.Option{
		"WithMaxResponseBytes": openai.WithMaxResponseBytes(0),
		"WithMaxTextBytes":     openai.WithMaxTextBytes(-1),
		"WithMaxArgumentBytes": openai.WithMaxArgumentBytes(0),
		"WithIdleTimeout":      openai.WithIdleTimeout(0),
	} {
		_, err := openai.New(openai.WithAPIKey("k"), opt)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "positive") {
			t.Errorf("%s: got %v; want an error that names the option and says it must be positive", name, err)
		}
	}
}

// TestStreamBrokenLine: a stream line that is not JSON is malformed, as
// the same breakage is without streaming.
func TestStreamBrokenLine(t *testing.T) {
	body := chunk(`{"content":"Par"}`) + "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"is\n\n"
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
		return newTestProvider(t, srv, openai.WithMaxRetries(2))
	}, weatherRequest())
}
