package openai_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
)

// endless answers with head and then repeats unit until the client goes
// away or limit bytes were sent, so that a body far larger than any limit
// is served without being held in memory. It counts the requests it saw.
type endless struct {
	contentType, head, unit string
	limit                   int64
	requests                atomic.Int32
}

func (e *endless) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	e.requests.Add(1)
	w.Header().Set("Content-Type", e.contentType)
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, e.head); err != nil {
		return
	}
	if e.unit == "" {
		return
	}
	unit := []byte(strings.Repeat(e.unit, 1+4096/len(e.unit)))
	for sent := int64(0); sent < e.limit; sent += int64(len(unit)) {
		if _, err := w.Write(unit); err != nil {
			return // the client stopped reading
		}
	}
}

func chunk(delta string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-5.4-mini","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

// tooLarge checks that err is a KindResponseTooLarge error that names the
// option to change, and that it does not invite a retry.
func tooLarge(t *testing.T, err error, option, limit string) {
	t.Helper()
	var perr *provider.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	if perr.Kind != provider.KindResponseTooLarge || perr.Retryable() {
		t.Errorf("kind %q (retryable %v); want %q, not retryable: %v", perr.Kind, perr.Retryable(), provider.KindResponseTooLarge, err)
	}
	if msg := err.Error(); !strings.Contains(msg, option) || !strings.Contains(msg, limit) {
		t.Errorf("error %q does not name %s and %s", msg, option, limit)
	}
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
	h := &endless{contentType: "text/event-stream", unit: chunk(`{"content":"` + strings.Repeat("abcd", 256) + `"}`), limit: 1 << 30}
	p := serve(t, h)
	var delivered int
	_, err := p.Stream(t.Context(), weatherRequest(), func(d provider.Delta) error {
		delivered += len(d.Text)
		return nil
	})
	tooLarge(t, err, "WithMaxTextBytes", "4 MiB")
	if delivered > provider.DefaultMaxTextBytes || delivered < provider.DefaultMaxTextBytes-1024 {
		t.Errorf("%d bytes of text were delivered; want all %d up to the limit and none past it", delivered, provider.DefaultMaxTextBytes)
	}
	if n := h.requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

func TestStreamArgumentLimit(t *testing.T) {
	h := &endless{
		contentType: "text/event-stream",
		head:        chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"spawn","arguments":""}}]}`),
		unit:        chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"` + strings.Repeat("[", 256) + `"}}]}`),
		limit:       1 << 30,
	}
	p := serve(t, h, openai.WithMaxArgumentBytes(64<<10))
	var delivered int
	_, err := p.Stream(t.Context(), weatherRequest(), func(d provider.Delta) error {
		delivered += len(d.ToolCall.Arguments)
		return nil
	})
	tooLarge(t, err, "WithMaxArgumentBytes", "64 KiB")
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
	h := &endless{contentType: "text/event-stream", unit: ": keep-alive\n\n", limit: 1 << 30}
	p := serve(t, h, openai.WithMaxResponseBytes(1<<20))
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	tooLarge(t, err, "WithMaxResponseBytes", "1 MiB")
	if n := h.requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

func TestCompleteBodyLimit(t *testing.T) {
	h := &endless{
		contentType: "application/json",
		head:        `{"id":"c","object":"chat.completion","model":"gpt-5.4-mini","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`,
		unit:        "abcd",
		limit:       1 << 30,
	}
	p := serve(t, h)
	_, err := p.Complete(t.Context(), weatherRequest())
	tooLarge(t, err, "WithMaxResponseBytes", "64 MiB")
	if n := h.requests.Load(); n != 1 {
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
			tooLarge(t, err, tc.option, tc.limit)
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
	h := &endless{contentType: "text/event-stream", head: body}
	p := serve(t, h)
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	checkErr(t, err, &wantErr{kind: provider.KindMalformed, status: 200})
	if n := h.requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

// TestStreamHTML: a 200 with a web page where the stream should be is
// malformed, not a transient failure to retry.
func TestStreamHTML(t *testing.T) {
	h := &endless{contentType: "text/html; charset=utf-8", head: "<!doctype html>\n<html><body><h1>Sign in</h1></body></html>\n"}
	p := serve(t, h)
	_, err := p.Stream(t.Context(), weatherRequest(), nil)
	checkErr(t, err, &wantErr{kind: provider.KindMalformed, status: 200})
	if msg := err.Error(); !strings.Contains(msg, "text/html") || !strings.Contains(msg, "base URL") || strings.Contains(msg, "retry") {
		t.Errorf("error %q should name the content type and the base URL, and not suggest a retry", msg)
	}
	if n := h.requests.Load(); n != 1 {
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
