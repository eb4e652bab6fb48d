package wiretest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// Endless is an HTTP handler that answers with Head and then repeats Unit
// until the client goes away or Limit bytes were sent, so that a body far
// larger than any limit is served without being held in memory. It counts
// the requests it saw in Requests.
type Endless struct {
	ContentType, Head, Unit string
	Limit                   int64
	Requests                atomic.Int32
}

func (e *Endless) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	e.Requests.Add(1)
	w.Header().Set("Content-Type", e.ContentType)
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, e.Head); err != nil {
		return
	}
	if e.Unit == "" {
		return
	}
	unit := []byte(strings.Repeat(e.Unit, 1+4096/len(e.Unit)))
	for sent := int64(0); sent < e.Limit; sent += int64(len(unit)) {
		if _, err := w.Write(unit); err != nil {
			return // the client stopped reading
		}
	}
}

// TooLarge checks that err is a KindResponseTooLarge error that names the
// option to change and the limit, and that it does not invite a retry.
func TooLarge(t *testing.T, err error, option, limit string) {
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

// Limits the checks below expect a provider to be given.
const (
	// ArgumentLimit is the argument limit (WithMaxArgumentBytes) of the
	// provider StreamArgumentLimit checks: 64 KiB.
	ArgumentLimit = 64 << 10
	// BodyLimit is the body limit (WithMaxResponseBytes) of the provider
	// StreamBodyLimit checks: 1 MiB.
	BodyLimit = 1 << 20
)

// StreamTextLimit checks that p, streaming an endless text reply from h,
// delivers all the text up to the default text limit and none past it,
// fails with an error that names WithMaxTextBytes, and does not retry.
func StreamTextLimit(t *testing.T, p provider.Streamer, h *Endless, req provider.Request) {
	t.Helper()
	var delivered int
	_, err := p.Stream(t.Context(), req, func(d provider.Delta) error {
		delivered += len(d.Text)
		return nil
	})
	TooLarge(t, err, "WithMaxTextBytes", "4 MiB")
	if delivered > provider.DefaultMaxTextBytes || delivered < provider.DefaultMaxTextBytes-1024 {
		t.Errorf("%d bytes of text were delivered; want all %d up to the limit and none past it", delivered, provider.DefaultMaxTextBytes)
	}
	OneRequest(t, h)
}

// StreamArgumentLimit checks that p, with ArgumentLimit, streaming a call
// to the tool "spawn" with endless arguments, delivers none past the limit
// and fails with an error that names the option and the tool.
func StreamArgumentLimit(t *testing.T, p provider.Streamer, req provider.Request) {
	t.Helper()
	var delivered int
	_, err := p.Stream(t.Context(), req, func(d provider.Delta) error {
		delivered += len(d.ToolCall.Arguments)
		return nil
	})
	TooLarge(t, err, "WithMaxArgumentBytes", "64 KiB")
	if !strings.Contains(err.Error(), `"spawn"`) {
		t.Errorf("error %q does not name the tool", err)
	}
	if delivered > ArgumentLimit {
		t.Errorf("%d bytes of arguments were delivered; want none past the limit", delivered)
	}
}

// StreamBodyLimit checks that p, with BodyLimit, streaming from h
// keep-alives for ever, fails with an error that names
// WithMaxResponseBytes, and does not retry: keep-alives carry nothing of
// the reply, so only the body limit stops them.
func StreamBodyLimit(t *testing.T, p provider.Streamer, h *Endless, req provider.Request) {
	t.Helper()
	_, err := p.Stream(t.Context(), req, nil)
	TooLarge(t, err, "WithMaxResponseBytes", "1 MiB")
	OneRequest(t, h)
}

// CompleteBodyLimit checks that p, reading from h an endless JSON reply,
// fails at the default body limit with an error that names
// WithMaxResponseBytes, and does not retry.
func CompleteBodyLimit(t *testing.T, p provider.Provider, h *Endless, req provider.Request) {
	t.Helper()
	_, err := p.Complete(t.Context(), req)
	TooLarge(t, err, "WithMaxResponseBytes", "64 MiB")
	OneRequest(t, h)
}

// SignInPage is a server that answers 200 with a web page where a stream
// should be, as a proxy or a wrong base URL does.
func SignInPage() *Endless {
	return &Endless{ContentType: "text/html; charset=utf-8", Head: "<!doctype html>\n<html><body><h1>Sign in</h1></body></html>\n"}
}

// StreamHTML streams from p, served by SignInPage h, and checks that the
// error names the content type and the base URL, does not suggest a retry,
// and that no retry was made. It returns the error, for the caller to
// check that it is malformed.
func StreamHTML(t *testing.T, p provider.Streamer, h *Endless, req provider.Request) error {
	t.Helper()
	_, err := p.Stream(t.Context(), req, nil)
	if err == nil {
		t.Fatal("a web page was read as a stream")
	}
	if msg := err.Error(); !strings.Contains(msg, "text/html") || !strings.Contains(msg, "base URL") || strings.Contains(msg, "retry") {
		t.Errorf("error %q should name the content type and the base URL, and not suggest a retry", msg)
	}
	OneRequest(t, h)
	return err
}

// OneRequest checks that h saw one request: the failure was not retried.
func OneRequest(t *testing.T, h *Endless) {
	t.Helper()
	if n := h.Requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1 (no retry)", n)
	}
}

// Both is a provider that answers with and without streaming.
type Both interface {
	provider.Provider
	provider.Streamer
}

// RedirectToOtherOrigin checks that a provider that would retry, built by
// newProvider for a server that redirects every request to another origin,
// fails both Complete and Stream with a bad request that speaks of the
// redirect and the base URL, without a retry and without reaching the
// other origin.
func RedirectToOtherOrigin(t *testing.T, newProvider func(srv *httptest.Server) Both, req provider.Request) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	p := newProvider(srv)
	for name, call := range map[string]func() error{
		"Complete": func() error { _, err := p.Complete(t.Context(), req); return err },
		"Stream":   func() error { _, err := p.Stream(t.Context(), req, nil); return err },
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
