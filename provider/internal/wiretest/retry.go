package wiretest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
)

// Retrier describes how a vendor's provider is built for the checks of its
// retries.
type Retrier struct {
	// New returns the provider under test, at baseURL, sending its
	// requests through client, logging to log, and with the retry time
	// retryTime, or the default when it is 0.
	New func(t *testing.T, baseURL string, client *http.Client, log *slog.Logger, retryTime time.Duration) provider.Provider
	// EnvVar names the environment variable that sets the base URL.
	EnvVar string
	// ServerError is the body of a 500 in the vendor's wire format.
	ServerError string
	// Request is a request the provider accepts.
	Request provider.Request
}

// Retries checks how a provider tries a failing call again: a server that
// refuses the connection, or whose host name does not resolve, fails the
// first call within seconds with an error that names the URL and how to
// set it; a server that answers 500 is tried again for no longer than the
// retry time (default or set); and each retry is logged and emitted as an
// event.
func Retries(t *testing.T, r Retrier) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: a dial is refused
	for _, tc := range []struct {
		name, url, says string
		client          *http.Client
	}{
		{"closed port", "http://" + closed + "/v1", "connection was refused", &http.Client{Transport: &http.Transport{}}},
		{"unresolved host", "http://model.invalid/v1", `"model.invalid" does not resolve`, &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "model.invalid", IsNotFound: true}}
			},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var seen retries
				p := r.New(t, tc.url, tc.client, seen.logger(), 0)
				start := time.Now()
				_, err := p.Complete(seen.context(t.Context()), r.Request)
				took := time.Since(start)
				var perr *provider.Error
				if !errors.As(err, &perr) {
					t.Fatalf("got %v (%T); want a *provider.Error", err, err)
				}
				if took > 3*time.Second {
					t.Errorf("the call failed after %v; want within seconds", took)
				}
				host := strings.TrimSuffix(strings.TrimPrefix(tc.url, "http://"), "/v1")
				msg := err.Error()
				for _, want := range []string{host, tc.says, "WithBaseURL", r.EnvVar} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
				t.Logf("failed after %v: %v", took, err)
				seen.check(t, -1)
			})
		})
	}
	for _, tc := range []struct {
		name      string
		retryTime time.Duration
		bound     time.Duration
	}{
		{"server error, default retry time", 0, provider.DefaultRetryTime},
		{"server error, retry time set", 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					seen  retries
					calls atomic.Int32
				)
				client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
					calls.Add(1)
					io.Copy(io.Discard, req.Body)
					req.Body.Close()
					return &http.Response{
						StatusCode: http.StatusInternalServerError,
						Header:     http.Header{"Content-Type": {"application/json"}},
						Body:       io.NopCloser(strings.NewReader(r.ServerError)),
						Request:    req,
					}, nil
				})}
				p := r.New(t, "http://model.test/v1", client, seen.logger(), tc.retryTime)
				start := time.Now()
				_, err := p.Complete(seen.context(t.Context()), r.Request)
				took := time.Since(start)
				var perr *provider.Error
				if !errors.As(err, &perr) || perr.StatusCode != 500 {
					t.Fatalf("got %v; want the server's 500", err)
				}
				n := int(calls.Load())
				t.Logf("%d calls in %v", n, took)
				if took > tc.bound || n < 2 {
					t.Errorf("%d calls in %v; want retries for no longer than %v", n, took, tc.bound)
				}
				seen.check(t, n-1)
			})
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// retries records the retries a provider logs and emits.
type retries struct {
	mu     sync.Mutex
	logged []slog.Record
	events []map[string]any
}

func (s *retries) logger() *slog.Logger { return slog.New(recorder{s}) }

func (s *retries) context(ctx context.Context) context.Context {
	return event.WithSink(ctx, event.SinkFunc(func(e event.Event) {
		if e.Type != event.Custom || e.Name != provider.AdmissionEvent {
			return
		}
		var v map[string]any
		if json.Unmarshal(e.Value, &v) != nil || v["state"] != "retry" {
			return
		}
		s.mu.Lock()
		s.events = append(s.events, v)
		s.mu.Unlock()
	}))
}

// check checks that each of n retries (n < 0: as many as were logged) was
// logged at Warn and emitted, numbered from 1, with the failure it follows.
func (s *retries) check(t *testing.T, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		n = len(s.logged)
	}
	if len(s.logged) != n || len(s.events) != n {
		t.Fatalf("%d retries logged and %d emitted; want %d of each", len(s.logged), len(s.events), n)
	}
	for i, r := range s.logged {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if r.Level != slog.LevelWarn || attrs["retry"] != strconv.Itoa(i+1) || attrs["error"] == "" || attrs["model"] == "" {
			t.Errorf("retry %d logged as %v %q %v; want at Warn with the model, its number and the error", i+1, r.Level, r.Message, attrs)
		}
		if e := s.events[i]; e["retry"] != float64(i+1) || e["error"] == "" || e["model"] == "" {
			t.Errorf("retry %d emitted as %v; want its number, the model and the error", i+1, e)
		}
	}
}

// recorder is a slog.Handler that keeps what is logged.
type recorder struct{ s *retries }

func (h recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h recorder) Handle(_ context.Context, r slog.Record) error {
	h.s.mu.Lock()
	h.s.logged = append(h.s.logged, r.Clone())
	h.s.mu.Unlock()
	return nil
}
func (h recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recorder) WithGroup(string) slog.Handler      { return h }
