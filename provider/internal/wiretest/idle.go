// Package wiretest holds the tests that every vendor adapter of provider
// runs the same way, over the vendor's own wire format: each adapter's test
// file describes its format in a Wire and calls the checks.
package wiretest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// Wire describes a vendor's streamed reply and builds its provider.
type Wire struct {
	// New returns the provider under test, sending its requests through
	// client, with the idle timeout idle, or the default when idle is 0.
	New func(t *testing.T, client *http.Client, idle time.Duration) provider.Streamer
	// Request is a request the provider accepts.
	Request provider.Request
	// Start opens a text reply, before its first piece ("" when the first
	// piece opens it).
	Start string
	// Text is one piece of a text reply.
	Text func(s string) string
	// KeepAlive is what the vendor's server sends to keep a stream open.
	KeepAlive string
	// End closes a text reply opened by Start and Text.
	End string
}

// IdleTimeout checks the stream's idle timeout: a server that sends only
// keep-alives is cut off after the default timeout with an error that says
// so; a slow reply whose pieces come within the timeout completes; a server
// silent after its headers is cut off after the configured timeout.
func IdleTimeout(t *testing.T, w Wire) {
	t.Run("ends a keep-alive stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := w.New(t, pipeClient(func(ctx context.Context, out io.Writer) {
				io.WriteString(out, w.Start+w.Text("Thinking"))
				for {
					if !pause(ctx, 15*time.Second) {
						return
					}
					if _, err := io.WriteString(out, w.KeepAlive); err != nil {
						return
					}
				}
			}), 0)
			start := time.Now()
			_, err := p.Stream(t.Context(), w.Request, nil)
			if took := time.Since(start); took != provider.DefaultIdleTimeout {
				t.Errorf("the stream ended after %v; want the default idle timeout, %v", took, provider.DefaultIdleTimeout)
			}
			var perr *provider.Error
			if !errors.As(err, &perr) || perr.Kind != provider.KindTransient || perr.StatusCode != 200 {
				t.Fatalf("got %v; want a transient error with status 200", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "10m0s") || !strings.Contains(msg, "WithIdleTimeout") {
				t.Errorf("error %q should give the timeout and the option that sets it", msg)
			}
		})
	})
	t.Run("counts progress", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := w.New(t, pipeClient(func(ctx context.Context, out io.Writer) {
				io.WriteString(out, w.Start)
				for range 5 {
					if !pause(ctx, 50*time.Second) {
						return
					}
					if _, err := io.WriteString(out, w.Text(".")); err != nil {
						return
					}
				}
				io.WriteString(out, w.End)
			}), time.Minute)
			resp, err := p.Stream(t.Context(), w.Request, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "....." {
				t.Errorf("content %q; want five dots", resp.Message.Content)
			}
		})
	})
	t.Run("silent server", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := w.New(t, pipeClient(func(ctx context.Context, out io.Writer) {
				pause(ctx, time.Hour) // nothing, until the client gives up
			}), 2*time.Minute)
			start := time.Now()
			_, err := p.Stream(t.Context(), w.Request, nil)
			if took := time.Since(start); took != 2*time.Minute {
				t.Errorf("the stream ended after %v; want 2m0s", took)
			}
			var perr *provider.Error
			if !errors.As(err, &perr) || perr.Kind != provider.KindTransient || !strings.Contains(err.Error(), "2m0s") {
				t.Errorf("got %v; want the idle timeout's error", err)
			}
		})
	})
}

// pipeClient is an HTTP client whose every response body is written, with
// pauses, by write in a goroutine of the test's bubble: a server on the fake
// clock. write's writes fail once the client ends the request.
func pipeClient(write func(ctx context.Context, w io.Writer)) *http.Client {
	return &http.Client{Transport: pipeServer{write: write}}
}

type pipeServer struct {
	write func(ctx context.Context, w io.Writer)
}

func (s pipeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	pr, pw := io.Pipe()
	go func() {
		s.write(req.Context(), pw)
		pw.Close()
	}()
	go func() {
		<-req.Context().Done()
		pr.CloseWithError(req.Context().Err())
	}()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       pr,
		Request:    req,
	}, nil
}

// pause waits for d, or until ctx ends; it reports whether d passed.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}
