package mcpbridge

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Transport says how to reach an MCP server and what to call it in errors.
// Make one with Command, Cmd, HTTP or SDKTransport.
type Transport struct {
	name string
	t    mcp.Transport
	cmd  *exec.Cmd
	url  string // for HTTP: the transport is made by Connect, with its options
}

// Command runs name with args and speaks MCP over its standard input and
// output, the way MCP hosts start local servers. The process is ended when
// the Client is closed.
func Command(name string, args ...string) Transport {
	return Cmd(exec.Command(name, args...))
}

// Cmd is Command with a prepared command, for its environment or working
// directory. cmd must not have been started, nor have Stdin or Stdout set.
func Cmd(cmd *exec.Cmd) Transport {
	if cmd == nil {
		return Transport{}
	}
	return Transport{name: strings.Join(cmd.Args, " "), t: &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, cmd: cmd}
}

// HTTP speaks MCP's streamable HTTP transport to the endpoint at url.
// A reply is bounded as over stdio: at most 16 MiB. A server that wants
// credentials gets them through Connect's options: WithHeader (an API key,
// a bearer token), WithHTTPClient (a client of the caller's, with its own
// TLS or proxy settings) or WithOAuth (MCP's OAuth 2.1 authorization).
func HTTP(url string) Transport {
	return Transport{name: url, url: url}
}

// httpTransport makes the SDK transport of an HTTP server, with what cfg
// gives it: the caller's client (its transport wrapped, the client
// itself left as it was), headers, an OAuth handler. A reply is bounded,
// and the last refusal of authorization is kept in seen.
func httpTransport(url string, cfg *config, seen *authRefusal) mcp.Transport {
	hc := &http.Client{}
	if cfg.httpClient != nil {
		c := *cfg.httpClient
		hc = &c
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &roundTripper{base: base, max: maxReply, header: cfg.header, seen: seen}
	return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: 1, OAuthHandler: cfg.oauth}
}

// maxReply bounds one message from a server, as the SDK bounds a line over
// stdio and an event of a server-sent stream.
const maxReply = mcp.DefaultMaxLineLength

// roundTripper adds the caller's headers to each request to an HTTP
// server, bounds its JSON replies, which the SDK reads whole (it bounds
// the events of a stream itself), and notes a refusal of authorization.
type roundTripper struct {
	base   http.RoundTripper
	max    int64
	header http.Header
	seen   *authRefusal
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(rt.header) > 0 {
		// A RoundTripper must not change the request it is given.
		req = req.Clone(req.Context())
		for k, vs := range rt.header {
			req.Header[k] = vs
		}
	}
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	rt.seen.note(resp)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		resp.Body = &limitedBody{rc: resp.Body, left: rt.max, max: rt.max}
	}
	return resp, err
}

// authRefusal is the last answer of 401 or 403 from an HTTP server, until
// a later answer succeeds: what Connect's error explains.
type authRefusal struct {
	mu        sync.Mutex
	status    int
	challenge string // its WWW-Authenticate, cut short
}

// maxChallenge bounds the WWW-Authenticate header an error quotes.
const maxChallenge = 512

func (a *authRefusal) note(resp *http.Response) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		a.status = resp.StatusCode
		a.challenge = capText(strings.ToValidUTF8(resp.Header.Get("WWW-Authenticate"), ""), maxChallenge, "the WWW-Authenticate header")
	case resp.StatusCode < 300:
		a.status, a.challenge = 0, ""
	}
}

func (a *authRefusal) last() (status int, challenge string) {
	if a == nil {
		return 0, ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status, a.challenge
}

// limitedBody fails a read past max bytes.
type limitedBody struct {
	rc        io.ReadCloser
	left, max int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var probe [1]byte
		if n, err := b.rc.Read(probe[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("the server's reply is larger than %d bytes", b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// SDKTransport uses any transport of the MCP SDK (an in-memory pair in
// tests, say); name is what errors call the server.
func SDKTransport(name string, t mcp.Transport) Transport {
	return Transport{name: name, t: t}
}

// reap ends a server process that a failed connection left behind.
func reap(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // an error when the SDK already waited: nothing to do
}

// tail keeps the last bytes written to it: the end of a server's error
// output, for the error that says why it did not start.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(t.buf), ""))
}
