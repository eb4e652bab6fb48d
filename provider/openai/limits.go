package openai

import (
	"fmt"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// WithMaxResponseBytes bounds the bytes read from one HTTP response body,
// streamed or not (default provider.DefaultMaxResponseBytes). A longer body
// ends the call with a *provider.Error of KindResponseTooLarge. n must be
// positive.
func WithMaxResponseBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxResponseBytes(%d): the limit must be positive; pass a byte count such as %d", n, int64(provider.DefaultMaxResponseBytes))
		}
		c.limits.MaxResponseBytes = n
		return nil
	}
}

// WithMaxTextBytes bounds the text of one reply (default
// provider.DefaultMaxTextBytes). A longer text ends the call with a
// *provider.Error of KindResponseTooLarge; a stream delivers no delta past
// the limit. n must be positive.
func WithMaxTextBytes(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxTextBytes(%d): the limit must be positive; pass a byte count such as %d", n, provider.DefaultMaxTextBytes)
		}
		c.limits.MaxTextBytes = n
		return nil
	}
}

// WithMaxArgumentBytes bounds the arguments of one tool call (default
// provider.DefaultMaxArgumentBytes). Longer arguments end the call with a
// *provider.Error of KindResponseTooLarge. n must be positive.
func WithMaxArgumentBytes(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxArgumentBytes(%d): the limit must be positive; pass a byte count such as %d", n, provider.DefaultMaxArgumentBytes)
		}
		c.limits.MaxArgumentBytes = n
		return nil
	}
}

// WithIdleTimeout ends a streamed reply during which the server sent nothing
// of it for d (default provider.DefaultIdleTimeout): a server that only sends
// keep-alives, or nothing, cannot hold a call open for ever. The call ends
// with a *provider.Error of KindTransient. d must be positive.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithIdleTimeout(%v): the timeout must be positive; pass a duration such as %v", d, provider.DefaultIdleTimeout)
		}
		c.limits.IdleTimeout = d
		return nil
	}
}

// limitBody returns the SDK option that caps response bodies at max bytes.
func limitBody(max int64) option.RequestOption {
	return option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return adapter.LimitBody(max, "WithMaxResponseBytes", req, next)
	})
}
