package adapter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// Limits bound what a provider reads of one reply.
type Limits struct {
	// MaxResponseBytes bounds one HTTP response body.
	MaxResponseBytes int64
	// MaxTextBytes bounds the text of one reply.
	MaxTextBytes int
	// MaxArgumentBytes bounds the arguments of one tool call.
	MaxArgumentBytes int
	// IdleTimeout ends a stream that makes no progress for this long.
	IdleTimeout time.Duration
}

// DefaultLimits returns the limits documented in package provider.
func DefaultLimits() Limits {
	return Limits{
		MaxResponseBytes: provider.DefaultMaxResponseBytes,
		MaxTextBytes:     provider.DefaultMaxTextBytes,
		MaxArgumentBytes: provider.DefaultMaxArgumentBytes,
		IdleTimeout:      provider.DefaultIdleTimeout,
	}
}

// The setters below are the checks behind both providers' limit options:
// each takes the option's value and refuses one that is not positive, with
// the option's name and a value that works.

// SetMaxResponseBytes is WithMaxResponseBytes.
func (l *Limits) SetMaxResponseBytes(n int64) error {
	if n <= 0 {
		return fmt.Errorf("WithMaxResponseBytes(%d): the limit must be positive; pass a byte count such as %d", n, int64(provider.DefaultMaxResponseBytes))
	}
	l.MaxResponseBytes = n
	return nil
}

// SetMaxTextBytes is WithMaxTextBytes.
func (l *Limits) SetMaxTextBytes(n int) error {
	if n <= 0 {
		return fmt.Errorf("WithMaxTextBytes(%d): the limit must be positive; pass a byte count such as %d", n, provider.DefaultMaxTextBytes)
	}
	l.MaxTextBytes = n
	return nil
}

// SetMaxArgumentBytes is WithMaxArgumentBytes.
func (l *Limits) SetMaxArgumentBytes(n int) error {
	if n <= 0 {
		return fmt.Errorf("WithMaxArgumentBytes(%d): the limit must be positive; pass a byte count such as %d", n, provider.DefaultMaxArgumentBytes)
	}
	l.MaxArgumentBytes = n
	return nil
}

// SetIdleTimeout is WithIdleTimeout.
func (l *Limits) SetIdleTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("WithIdleTimeout(%v): the timeout must be positive; pass a duration such as %v", d, provider.DefaultIdleTimeout)
	}
	l.IdleTimeout = d
	return nil
}

// LimitError is the cause of a *provider.Error of KindResponseTooLarge.
type LimitError struct {
	// What went over the limit, e.g. "the response body".
	What string
	// Limit is the limit in bytes.
	Limit int64
	// Option names the option that sets the limit.
	Option string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is over the limit of %s; the reply was not read further (the limit is set with %s)", e.What, Bytes(e.Limit), e.Option)
}

// Bytes formats n for a reader: "64 MiB", "1500 bytes".
func Bytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// TooLarge reports a reply that went over a limit.
func TooLarge(name string, status int, le *LimitError) *provider.Error {
	return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindResponseTooLarge, Message: le.Error(), Err: le}
}

// TextLimit returns the error for reply text over max bytes.
func TextLimit(name string, status, max int, option string) *provider.Error {
	return TooLarge(name, status, &LimitError{What: "the reply's text", Limit: int64(max), Option: option})
}

// ArgumentLimit returns the error for a tool call's arguments over max bytes.
func ArgumentLimit(name string, status int, tool string, max int, option string) *provider.Error {
	return TooLarge(name, status, &LimitError{What: fmt.Sprintf("the arguments of the call to tool %q", tool), Limit: int64(max), Option: option})
}

// LimitBody is the body of an SDK middleware: it sends req through next and
// caps the response body at max bytes. Reading past the cap fails with a
// *LimitError naming option.
func LimitBody(max int64, option string, req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &limitedBody{rc: resp.Body, left: max, resp: resp, err: &LimitError{What: "the response body", Limit: max, Option: option}}
	}
	return resp, err
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	resp *http.Response
	err  *LimitError
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.left <= 0 {
		// At the cap: the body is too large only if it goes on.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			// The same request would get a body over the limit again: say
			// so in the header the SDKs read before retrying a body they
			// could not read.
			b.resp.Header.Set("X-Should-Retry", "false")
			return 0, b.err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// errIdle is the cause of a stream's context ended by its idle timeout.
var errIdle = errors.New("idle timeout")

// Idle ends a stream whose reply makes no progress for a while.
type Idle struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	timeout time.Duration
}

// WatchIdle returns a context for one streamed call that ends when Progress
// is not called for timeout, and the Idle that watches it. Stop must be
// called when the call returns.
func WatchIdle(ctx context.Context, timeout time.Duration) (context.Context, *Idle) {
	sctx, cancel := context.WithCancelCause(ctx)
	i := &Idle{ctx: sctx, cancel: cancel, timeout: timeout}
	i.timer = time.AfterFunc(timeout, func() { cancel(errIdle) })
	return sctx, i
}

// Progress restarts the idle clock: the reply moved on.
func (i *Idle) Progress() { i.timer.Reset(i.timeout) }

// Stop releases the timer and the context.
func (i *Idle) Stop() {
	i.timer.Stop()
	i.cancel(nil)
}

// Err returns the error to report when the idle timeout ended the stream,
// else nil.
func (i *Idle) Err(name string, status int, option string) error {
	if !errors.Is(context.Cause(i.ctx), errIdle) {
		return nil
	}
	msg := fmt.Sprintf("the server sent nothing of the reply for %v and the stream was ended; if the model may think longer than that in silence, raise the limit with %s", i.timeout, option)
	return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindTransient, Message: msg, Err: ErrIdleTimeout}
}

// StreamEnd says how a stream whose events ran out ended, the same way for
// every vendor: err is the stream's own error (nil when the body ended
// cleanly), events how many events it gave, complete whether the reply's
// last event came, and failure turns err into the vendor's error. An idle
// timeout, an ended ctx, a body with no event and one cut before its last
// event are told apart; a reply that came whole gives nil.
func StreamEnd(ctx context.Context, name string, resp *http.Response, idle *Idle, err error, events int, complete bool, failure func(error) error) error {
	if err != nil || !complete {
		// The idle timeout may end the body with an error or cleanly.
		if ierr := idle.Err(name, Status(resp), "WithIdleTimeout"); ierr != nil && ctx.Err() == nil {
			return ierr
		}
	}
	if err != nil {
		return failure(err)
	}
	if err := Canceled(name, ctx); err != nil {
		return err
	}
	if events == 0 {
		// A 200 whose body held no event at all: an HTML page, most often.
		return NotAStream(name, resp)
	}
	if !complete {
		// The body ended before the reply's last event: the connection was cut.
		return Incomplete(name, Status(resp))
	}
	return nil
}

// ErrIdleTimeout is the cause of a stream ended by its idle timeout.
var ErrIdleTimeout = errors.New("the stream made no progress within its idle timeout")

// NotAStream reports a successful HTTP status whose body held no event of a
// stream: an HTML page from a proxy or a wrong base URL, most often.
func NotAStream(name string, resp *http.Response) *provider.Error {
	status, ct := 0, ""
	if resp != nil {
		status, ct = resp.StatusCode, resp.Header.Get("Content-Type")
	}
	if ct == "" {
		ct = "none"
	}
	msg := fmt.Sprintf("the server answered a streaming request without any stream event (Content-Type %s); check that the base URL points at the API, not a web page or a proxy's login", ct)
	err := errors.New("the body is not an event stream")
	return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindMalformed, Message: msg, Err: err}
}

// classify returns the *provider.Error for the causes that Transport must
// not take for network trouble, or nil.
func classify(name string, status int, err error) *provider.Error {
	var le *LimitError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var uerr *url.Error
	switch {
	case errors.As(err, &le):
		return TooLarge(name, status, le)
	case errors.As(err, &syn), errors.As(err, &typ):
		return Malformed(name, status, err)
	case errors.Is(err, bufio.ErrTooLong):
		return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindMalformed,
			Message: "could not read the response: a line of the stream is longer than the SDK reads", Err: err}
	case errors.As(err, &uerr) && (errors.Is(err, ErrCrossOriginRedirect) || strings.Contains(uerr.Err.Error(), "origin must match")):
		msg := fmt.Sprintf("the server redirected the request to %s, another origin than the base URL, and the redirect was refused: requests go only to the base URL's origin; set the base URL to where the API is served", uerr.URL)
		return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindBadRequest, Message: msg, Err: err}
	}
	return nil
}

// LimitTransport returns a RoundTripper that sends requests through next
// (http.DefaultTransport when nil) and caps each response body at max
// bytes, as LimitBody does.
func LimitTransport(max int64, option string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return limitTransport{max: max, option: option, next: next}
}

type limitTransport struct {
	max    int64
	option string
	next   http.RoundTripper
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return LimitBody(t.max, t.option, req, t.next.RoundTrip)
}

// ErrCrossOriginRedirect is the cause of a redirect to another origin that
// SameOriginRedirects refused.
var ErrCrossOriginRedirect = errors.New("refused a redirect to another origin")

// SameOriginRedirects is an http.Client CheckRedirect policy that follows
// up to 10 redirects within the first request's origin and refuses any to
// another: the request carries the conversation, and the reply would come
// from a server the user never named.
func SameOriginRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	first := via[0].URL
	if !strings.EqualFold(req.URL.Scheme, first.Scheme) || !strings.EqualFold(req.URL.Host, first.Host) {
		return ErrCrossOriginRedirect
	}
	return nil
}
