package openai

import (
	"fmt"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"

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

// resolve checks the limit options and returns the limits and the SDK
// option that caps response bodies.
func (o limitOptions) resolve() (adapter.Limits, option.RequestOption, error) {
	l := adapter.DefaultLimits()
	if o.maxResponse != nil {
		if *o.maxResponse <= 0 {
			return l, nil, fmt.Errorf("%s: WithMaxResponseBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxResponse, l.MaxResponseBytes)
		}
		l.MaxResponseBytes = *o.maxResponse
	}
	if o.maxText != nil {
		if *o.maxText <= 0 {
			return l, nil, fmt.Errorf("%s: WithMaxTextBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxText, l.MaxTextBytes)
		}
		l.MaxTextBytes = *o.maxText
	}
	if o.maxArgs != nil {
		if *o.maxArgs <= 0 {
			return l, nil, fmt.Errorf("%s: WithMaxArgumentBytes(%d): the limit must be positive; pass a byte count such as %d", Name, *o.maxArgs, l.MaxArgumentBytes)
		}
		l.MaxArgumentBytes = *o.maxArgs
	}
	if o.idle != nil {
		if *o.idle <= 0 {
			return l, nil, fmt.Errorf("%s: WithIdleTimeout(%v): the timeout must be positive; pass a duration such as %v", Name, *o.idle, l.IdleTimeout)
		}
		l.IdleTimeout = *o.idle
	}
	max := l.MaxResponseBytes
	mw := option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return adapter.LimitBody(max, "WithMaxResponseBytes", req, next)
	})
	return l, mw, nil
}
