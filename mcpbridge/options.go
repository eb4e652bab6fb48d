package mcpbridge

import (
	"errors"
	"fmt"
	"time"

	"github.com/deputy-go/deputy/internal/toolcall"
)

// Defaults of a Client.
const (
	DefaultCallTimeout    = 2 * time.Minute
	DefaultConnectTimeout = 30 * time.Second
	DefaultMaxResultBytes = 64 << 10
	DefaultMaxTools       = 256
)

// Option configures a Client. Connect reports an option's bad value as
// an error; a nil Option is ignored.
type Option func(*config) error

type config struct {
	prefix         string
	callTimeout    time.Duration
	connectTimeout time.Duration
	maxResult      int
	maxTools       int
	filter         func(name string) bool
}

// WithPrefix puts prefix before the name of each of the server's tools, so
// that two servers' tools of the same name can live in one registry. The
// server is still called with its own names.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix != "" {
			if err := toolcall.CheckName(prefix); err != nil {
				return fmt.Errorf("prefix: %w", err)
			}
		}
		c.prefix = prefix
		return nil
	}
}

// WithCallTimeout bounds one tool call (default DefaultCallTimeout). A call
// the server has not answered by then ends as an error result the model
// reads, and the run goes on.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("call timeout %v: use a positive duration", d)
		}
		c.callTimeout = d
		return nil
	}
}

// WithConnectTimeout bounds starting the session and reading the tool list
// (default DefaultConnectTimeout).
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("connect timeout %v: use a positive duration", d)
		}
		c.connectTimeout = d
		return nil
	}
}

// WithMaxResultBytes caps the text of one result that reaches the model
// (default DefaultMaxResultBytes); a longer one is cut on a UTF-8 boundary
// and marked as truncated.
func WithMaxResultBytes(n int) Option {
	return func(c *config) error {
		if n < 256 {
			return fmt.Errorf("max result size %d: use at least 256 bytes", n)
		}
		c.maxResult = n
		return nil
	}
}

// WithMaxTools bounds how many tools the server may offer (default
// DefaultMaxTools); a server that lists more is refused.
func WithMaxTools(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("max tools %d: use 1 or more", n)
		}
		c.maxTools = n
		return nil
	}
}

// WithToolFilter keeps only the server's tools for which keep reports true
// (called with the server's own name, before any prefix). Tools left out
// are neither checked nor offered.
func WithToolFilter(keep func(name string) bool) Option {
	return func(c *config) error {
		if keep == nil {
			return errors.New("nil tool filter: pass a function, or leave the option out")
		}
		c.filter = keep
		return nil
	}
}
