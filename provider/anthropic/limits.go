package anthropic

import (
	"fmt"
	"net/http"
	"time"

	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// WithMaxResponseBytes bounds the bytes read from one HTTP response body,
// streamed or not (default provider.DefaultMaxResponseBytes). A longer body
// ends the call with a *provider.Error of KindResponseTooLarge.
func WithMaxResponseBytes(n int64) Option { return func(c *config) { c.limits.maxResponse = &n } }

// WithMaxTextBytes bounds the text of one reply (default
// provider.DefaultMaxTextBytes). A longer text ends the call with a
// *provider.Error of KindResponseTooLarge; a stream delivers no delta past
// the limit.
func WithMaxTextBytes(n int) Option { return func(c *config) { c.limits.maxText = &n } }

// WithMaxArgumentBytes bounds the arguments of one tool call (default
// provider.DefaultMaxArgumentBytes). Longer arguments end the call with a
// *provider.Error of KindResponseTooLarge.
func WithMaxArgumentBytes(n int) Option { return func(c *config) { c.limits.maxArgs = &n } }

// WithIdleTimeout ends a streamed reply during which the server sent nothing
// of it for d (default provider.DefaultIdleTimeout): a server that only sends
// keep-alives, or nothing, cannot hold a call open for ever. The call ends
// with a *provider.Error of KindTransient.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.limits.idle = &d } }

type limitOptions struct {
	maxResponse      *int64
	maxText, maxArgs *int
	idle             *time.Duration
}

// resolve checks the limit options and returns the limits.
func (o limitOptions) resolve() (adapter.Limits, error) {
	l := adapter.DefaultLimits()
	if o.maxResponse != nil {
		if *o.maxResponse <= 0 {
			return l, fmt.Errorf("%s: WithMaxResponseBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxResponse, l.MaxResponseBytes)
		}
		l.MaxResponseBytes = *o.maxResponse
	}
	if o.maxText != nil {
		if *o.maxText <= 0 {
			return l, fmt.Errorf("%s: WithMaxTextBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxText, l.MaxTextBytes)
		}
		l.MaxTextBytes = *o.maxText
	}
	if o.maxArgs != nil {
		if *o.maxArgs <= 0 {
			return l, fmt.Errorf("%s: WithMaxArgumentBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxArgs, l.MaxArgumentBytes)
		}
		l.MaxArgumentBytes = *o.maxArgs
	}
	if o.idle != nil {
		if *o.idle <= 0 {
			return l, fmt.Errorf("%s: WithIdleTimeout(%v): the timeout must be positive; pass a duration such as %v", Name, *o.idle, l.IdleTimeout)
		}
		l.IdleTimeout = *o.idle
	}
	return l, nil
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
