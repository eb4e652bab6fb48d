package openai_test

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
	"github.com/deputy-go/deputy/provider/openai"
)

// pipeServer is an HTTP transport whose response body is written, with
// pauses, by a goroutine of the test's bubble: a server on the fake clock.
// write returns when its writes fail, which they do once the client ends
// the request.
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

func pipeProvider(t *testing.T, write func(context.Context, io.Writer), opts ...openai.Option) *openai.Provider {
	t.Helper()
	clearEnv(t)
	base := []openai.Option{
		openai.WithBaseURL("http://model.test/v1"),
		openai.WithAPIKey("sk-test"),
		openai.WithMaxRetries(0),
		openai.WithHTTPClient(&http.Client{Transport: pipeServer{write: write}}),
	}
	p, err := openai.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIdleTimeoutEndsKeepAliveStream: a server that only sends keep-alives
// is cut off after the default idle timeout, with an error that says so.
func TestIdleTimeoutEndsKeepAliveStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeProvider(t, func(ctx context.Context, w io.Writer) {
			io.WriteString(w, chunk(`{"content":"Thinking"}`))
			for {
				if !pause(ctx, 15*time.Second) {
					return
				}
				if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
					return
				}
			}
		})
		start := time.Now()
		_, err := p.Stream(t.Context(), weatherRequest(), nil)
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
}

// TestIdleTimeoutCountsProgress: a slow reply whose deltas come within the
// idle timeout of each other completes, however long it takes in all.
func TestIdleTimeoutCountsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeProvider(t, func(ctx context.Context, w io.Writer) {
			for range 5 {
				if !pause(ctx, 50*time.Second) {
					return
				}
				if _, err := io.WriteString(w, chunk(`{"content":"."}`)); err != nil {
					return
				}
			}
			io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
		}, openai.WithIdleTimeout(time.Minute))
		resp, err := p.Stream(t.Context(), weatherRequest(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != "....." {
			t.Errorf("content %q; want five dots", resp.Message.Content)
		}
	})
}

// TestIdleTimeoutSilentServer: a server that sends nothing at all after its
// headers is cut off after the configured timeout.
func TestIdleTimeoutSilentServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeProvider(t, func(ctx context.Context, w io.Writer) {
			// Nothing, until the client gives up.
			pause(ctx, time.Hour)
		}, openai.WithIdleTimeout(2*time.Minute))
		start := time.Now()
		_, err := p.Stream(t.Context(), weatherRequest(), nil)
		if took := time.Since(start); took != 2*time.Minute {
			t.Errorf("the stream ended after %v; want 2m0s", took)
		}
		var perr *provider.Error
		if !errors.As(err, &perr) || perr.Kind != provider.KindTransient || !strings.Contains(err.Error(), "2m0s") {
			t.Errorf("got %v; want the idle timeout's error", err)
		}
	})
}
