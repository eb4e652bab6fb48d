package openai

import (
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"

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

// limitBody returns the SDK option that caps response bodies at max bytes.
func limitBody(max int64) option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return adapter.LimitBody(max, "WithMaxResponseBytes", req, next)
	})
}
