package anthropic

import (
	"net/http"
	"time"

	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// WithMaxResponseBytes bounds the bytes read from one HTTP response body,
// streamed or not (default provider.DefaultMaxResponseBytes). A longer body
// ends the call with a *provider.Error of KindResponseTooLarge. n must be
// positive.
func WithMaxResponseBytes(n int64) Option {
	return func(c *config) error {
		return c.Limits.SetMaxResponseBytes(n)
	}
}

// WithMaxTextBytes bounds the text of one reply (default
// provider.DefaultMaxTextBytes). A longer text ends the call with a
// *provider.Error of KindResponseTooLarge; a stream delivers no delta past
// the limit. n must be positive.
func WithMaxTextBytes(n int) Option {
	return func(c *config) error {
		return c.Limits.SetMaxTextBytes(n)
	}
}

// WithMaxArgumentBytes bounds the arguments of one tool call (default
// provider.DefaultMaxArgumentBytes). Longer arguments end the call with a
// *provider.Error of KindResponseTooLarge. n must be positive.
func WithMaxArgumentBytes(n int) Option {
	return func(c *config) error {
		return c.Limits.SetMaxArgumentBytes(n)
	}
}

// WithIdleTimeout ends a streamed reply during which the server sent nothing
// of it for d (default provider.DefaultIdleTimeout): a server that only sends
// keep-alives, or nothing, cannot hold a call open for ever. The call ends
// with a *provider.Error of KindTransient. d must be positive.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) error {
		return c.Limits.SetIdleTimeout(d)
	}
}

// limitedClient returns an HTTP client like hc, or like the SDK's default
// client when hc is nil, whose response bodies are capped at max bytes.
// Unless hc has a redirect policy of its own, it follows no redirect to
// another origin, which would receive the conversation.
func limitedClient(hc *http.Client, max int64) *http.Client {
	if hc == nil {
		// As the SDK's default: a response-header timeout, unless the
		// default transport was replaced (by tracing, say).
		hc = &http.Client{Transport: http.DefaultTransport}
		if t, ok := http.DefaultTransport.(*http.Transport); ok {
			t = t.Clone()
			t.ResponseHeaderTimeout = 10 * time.Minute
			hc.Transport = t
		}
	}
	c := *hc
	if c.CheckRedirect == nil {
		c.CheckRedirect = adapter.SameOriginRedirects
	}
	c.Transport = adapter.LimitTransport(max, "WithMaxResponseBytes", hc.Transport)
	return &c
}
