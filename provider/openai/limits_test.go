package openai_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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
	p := serve(t, h)
	var delivered int
	_, err := p.Stream(t.Context(), weatherRequest(), func(d provider.Delta) error {
		delivered += len(d.Text)
		return nil
	})
	wiretest.TooLarge(t, err, "WithMaxTextBytes", "4 MiB")
	if delivered > provider.DefaultMaxTextBytes || delivered < provider.DefaultMaxTextBytes-1024 {
		t.Errorf("%d bytes of text were delivered; want all %d up to the limit and none past it", delivered, provider.DefaultMaxTextBytes)
	}
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

func TestStreamArgumentLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "text/event-stream",
		Head:        chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"spawn","arguments":""}}]}`),
		Unit:        chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"` + strings.Repeat("[", 256) + `"}}]}`),
		Limit:       1 << 30,
	}
	p := serve(t, h, openai.WithMaxArgumentBytes(64<<10))
	var delivered int
	_, err := p.Stream(t.Context(), weatherRequest(), func(d provider.Delta) error {
		delivered += len(d.ToolCall.Arguments)
		return nil
	})
	wiretest.TooLarge(t, err, "WithMaxArgumentBytes", "64 KiB")
	if !strings.Contains(err.Error(), `"spawn"`) {
		t.Errorf("error %q does not name the tool", err)
	}
	if delivered > 64<<10 {
		t.Errorf("%d bytes of arguments were delivered; want none past the limit", delivered)
	}
}

// TestStreamBodyLimit: keep-alives carry nothing of the reply, so only the
// body limit stops a server that sends them for ever.
func TestStreamBodyLimit(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/event-stream", Unit: ": keep-alive\n\n", Limit: 1 << 30}
	p := serve(t, h, openai.WithMaxResponseBytes(1<<20))
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	wiretest.TooLarge(t, err, "WithMaxResponseBytes", "1 MiB")
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

func TestCompleteBodyLimit(t *testing.T) {
	h := &wiretest.Endless{
		ContentType: "application/json",
		Head:        `{"id":"c","object":"chat.completion","model":"gpt-5.4-mini","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`,
		Unit:        "abcd",
		Limit:       1 << 30,
	}
	p := serve(t, h)
	_, err := p.Complete(t.Context(), weatherRequest())
	wiretest.TooLarge(t, err, "WithMaxResponseBytes", "64 MiB")
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
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
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

// TestStreamHTML: a 200 with a web page where the stream should be is
// malformed, not a transient failure to retry.
func TestStreamHTML(t *testing.T) {
	h := &wiretest.Endless{ContentType: "text/html; charset=utf-8", Head: "<!doctype html>\n<html><body><h1>Sign in</h1></body></html>\n"}
	p := serve(t, h)
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	checkErr(t, err, &wantErr{kind: provider.KindMalformed, status: 200})
	if msg := err.Error(); !strings.Contains(msg, "text/html") || !strings.Contains(msg, "base URL") || strings.Contains(msg, "retry") {
		t.Errorf("error %q should name the content type and the base URL, and not suggest a retry", msg)
	}
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

// TestRedirectToOtherOrigin: the SDK refuses to follow a redirect to
// another origin; that is the base URL's fault, not a transient failure.
func TestRedirectToOtherOrigin(t *testing.T) {
	clearEnv(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	p := newTestProvider(t, srv, openai.WithMaxRetries(2))
	for name, call := range map[string]func() error{
		"Complete": func() error { _, err := p.Complete(t.Context(), weatherRequest()); return err },
		"Stream":   func() error { _, err := p.Stream(t.Context(), weatherRequest(), nil); return err },
	} {
		asked.Store(0)
		err := call()
		var perr *provider.Error
		if !errors.As(err, &perr) || perr.Kind != provider.KindBadRequest || perr.Retryable() {
			t.Errorf("%s: got %v; want a bad request that is not retryable", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "redirect") || !strings.Contains(msg, "base URL") || strings.Contains(msg, "retry") {
			t.Errorf("%s: error %q should speak of the redirect and the base URL, not of a retry", name, msg)
		}
		if n := asked.Load(); n != 1 {
			t.Errorf("%s: %d requests; want 1 (no retry)", name, n)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other origin received %d requests; want none", n)
	}
}

var _ = fmt.Sprint
