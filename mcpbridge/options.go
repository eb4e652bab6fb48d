package mcpbridge

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

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

	// Only for HTTP servers.
	header     http.Header
	httpClient *http.Client
	oauth      auth.OAuthHandler
}

// forHTTP names the options given that only an HTTP server takes.
func (c *config) forHTTP() []string {
	var names []string
	if c.header != nil {
		names = append(names, "WithHeader")
	}
	if c.httpClient != nil {
		names = append(names, "WithHTTPClient")
	}
	if c.oauth != nil {
		names = append(names, "WithOAuth")
	}
	return names
}

// Headers the MCP transport sets itself, which WithHeader may not replace.
var transportHeaders = map[string]bool{
	"Accept": true, "Content-Type": true, "Content-Length": true, "Host": true,
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
	"Connection": true, "Transfer-Encoding": true,
}

// WithHeader sends the header name: value with every request to an HTTP
// server (HTTP): an API key, or a bearer token the caller already has
// ("Authorization", "Bearer …"). Given twice for one name, both values are
// sent. It cannot replace a header of MCP's transport (Accept,
// Content-Type, Mcp-Session-Id, Mcp-Protocol-Version, …), nor be
// Authorization beside WithOAuth, which sets that one.
func WithHeader(name, value string) Option {
	return func(c *config) error {
		if !validHeaderName(name) {
			return fmt.Errorf("header name %q: use a name of letters, digits and -", name)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return fmt.Errorf("header %s: its value holds a line break or NUL: pass a single-line value", name)
		}
		key := http.CanonicalHeaderKey(name)
		if transportHeaders[key] {
			return fmt.Errorf("header %s is set by MCP's transport: leave it out", key)
		}
		if c.header == nil {
			c.header = http.Header{}
		}
		c.header.Add(key, value)
		return nil
	}
}

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
		if !ok {
			return false
		}
	}
	return true
}

// WithHTTPClient has an HTTP server (HTTP) reached through hc: its
// transport (TLS settings, a proxy, a transport that signs requests), its
// cookie jar and redirect policy. hc itself is not changed; its transport
// is wrapped so that replies stay bounded and WithHeader's headers are
// sent. hc.Timeout, if set, bounds each request, the stream on which the
// server sends notifications included: leave it zero and bound calls with
// WithCallTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return errors.New("nil HTTP client: pass one, or leave the option out")
		}
		c.httpClient = hc
		return nil
	}
}

// WithOAuth has an HTTP server (HTTP) authorized with OAuth 2.1, as MCP's
// authorization specification describes, by h, a handler of the MCP SDK's
// auth package: when the server answers 401 (or 403 for a scope it
// lacks), h discovers the server's protected resource metadata and its
// authorization server's metadata, registers the client (a client ID
// metadata document, a pre-registered client, or dynamic registration),
// obtains a token (the authorization code flow with PKCE, or, with its
// extauth package, client credentials), and the request is sent again
// with it. Build h with auth.NewAuthorizationCodeHandler or
// extauth.NewClientCredentialsHandler; its own requests (metadata,
// registration, token) go through the client its configuration names.
func WithOAuth(h auth.OAuthHandler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("nil OAuth handler: pass one made with the MCP SDK's auth package, or leave the option out")
		}
		c.oauth = h
		return nil
	}
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
