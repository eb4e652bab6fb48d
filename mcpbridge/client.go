package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/tool"
)

// Bounds on what one of a server's tools costs every model request that
// offers it: its description is cut, a larger schema refused.
const (
	maxDescription = 4 << 10
	maxSchema      = jsonschema.MaxUntrustedBytes
)

// Client is a connection to one MCP server whose tools deputy agents can
// call. Its tools are tool.Tool values (Tools), usually put in a registry
// with Register. When the server announces that its tool list changed, the
// list is read again: tools that went away stop being offered, new ones
// join the registries the Client registered into.
//
// Close ends the session, the server's process (for Command) and every
// goroutine the Client started. A Client is safe for concurrent use.
type Client struct {
	name   string
	cfg    config
	cs     *mcp.ClientSession
	stderr *tail
	// refusal is the last refusal of authorization by an HTTP server.
	refusal *authRefusal

	mu    sync.Mutex
	tools []*remoteTool
	regs  []*tool.Registry
	err   error // the last refresh's failure

	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	closed  sync.Once
	cerr    error
}

// Connect starts a session with the MCP server t reaches and reads its
// tools. Every error names the server and says what to do; on an error
// nothing is left running.
func Connect(ctx context.Context, t Transport, opts ...Option) (*Client, error) {
	if t.t == nil && t.url == "" {
		return nil, errors.New("mcpbridge: no transport: use Command, Cmd, HTTP or SDKTransport")
	}
	cfg := config{callTimeout: DefaultCallTimeout, connectTimeout: DefaultConnectTimeout, maxResult: DefaultMaxResultBytes, maxTools: DefaultMaxTools}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("mcpbridge: server %s: %w", t.name, err)
		}
	}
	c := &Client{name: t.name, cfg: cfg, changed: make(chan struct{}, 1), done: make(chan struct{})}
	mt := t.t
	if t.url != "" {
		if cfg.oauth != nil && cfg.header.Get("Authorization") != "" {
			return nil, fmt.Errorf("mcpbridge: server %s: WithHeader(\"Authorization\", …) and WithOAuth both authorize: pass one of them", t.name)
		}
		c.refusal = &authRefusal{}
		mt = httpTransport(t.url, &cfg, c.refusal)
	} else if names := cfg.forHTTP(); names != nil {
		return nil, fmt.Errorf("mcpbridge: server %s: %s only apply to an HTTP server (mcpbridge.HTTP); a command's credentials go in its environment (mcpbridge.Cmd)", t.name, strings.Join(names, ", "))
	}
	if t.cmd != nil {
		if t.cmd.Stderr == nil {
			c.stderr = &tail{max: 2 << 10}
			t.cmd.Stderr = c.stderr
		}
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "deputy", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case c.changed <- struct{}{}:
			default: // a refresh is already due
			}
		},
	})
	cctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	cs, err := mc.Connect(cctx, mt, nil)
	if err != nil {
		reap(t.cmd)
		return nil, c.connectError(cctx, ctx, err)
	}
	c.cs = cs
	tools, err := c.list(cctx)
	if err != nil {
		_ = cs.Close()
		reap(t.cmd)
		if h := c.authHint(); h != "" {
			err = fmt.Errorf("%s (%w)", h, err)
		} else if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("it did not list its tools within %v: %w", cfg.connectTimeout, err)
		}
		return nil, fmt.Errorf("mcpbridge: server %s: %w", c.name, err)
	}
	c.tools = tools
	rctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.refresher(rctx)
	return c, nil
}

func (c *Client) connectError(cctx, ctx context.Context, err error) error {
	var hint string
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("mcpbridge: server %s: connecting: %w", c.name, context.Cause(ctx))
	case c.authHint() != "":
		return fmt.Errorf("mcpbridge: server %s: connecting failed: %s (%w)", c.name, c.authHint(), err)
	case cctx.Err() != nil:
		hint = fmt.Sprintf("it did not complete the MCP handshake within %v: check that it is an MCP server and that it starts, or raise WithConnectTimeout", c.cfg.connectTimeout)
	default:
		hint = "check that it is an MCP server (a command speaking MCP on stdin/stdout, or a URL of a streamable HTTP endpoint) and that it starts"
	}
	if c.stderr != nil {
		if s := c.stderr.String(); s != "" {
			hint += "; its error output ends: " + s
		}
	}
	return fmt.Errorf("mcpbridge: server %s: connecting failed: %w: %s", c.name, err, hint)
}

// authHint says what to do about the server's last refusal of
// authorization, or is empty.
func (c *Client) authHint() string {
	status, challenge := c.refusal.last()
	if status == 0 {
		return ""
	}
	var b strings.Builder
	if status == http.StatusUnauthorized {
		b.WriteString("it answered 401 Unauthorized: it wants credentials")
		if c.cfg.oauth != nil {
			b.WriteString(", and the OAuth handler given with WithOAuth did not obtain ones it accepts: check the client's registration, its scopes and the authorization server's answers")
		} else if c.cfg.header.Get("Authorization") != "" {
			b.WriteString(", and refused the Authorization header given with WithHeader: check the token (it may have expired)")
		} else {
			b.WriteString(": pass them with WithHeader (an API key, or a bearer token), or let deputy obtain a token with WithOAuth (an OAuth handler of the MCP SDK's auth package)")
		}
	} else {
		b.WriteString("it answered 403 Forbidden: the credentials given do not allow this; ask the server's operator for access, or, with WithOAuth, for a token with the scopes it wants")
	}
	if challenge != "" {
		b.WriteString("; it asks: WWW-Authenticate: ")
		b.WriteString(challenge)
	}
	return b.String()
}

// Name returns what errors call the server: its command line or URL.
func (c *Client) Name() string { return c.name }

// Tools returns the server's tools as currently listed.
func (c *Client) Tools() []tool.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]tool.Tool, len(c.tools))
	for i, t := range c.tools {
		out[i] = t
	}
	return out
}

// Register adds the server's tools to reg, all or none: if one of them
// cannot be registered (a name already taken, say), reg is left as it was
// and the error names the tool and the server. Tools the server adds later
// join reg too.
func (c *Client) Register(reg *tool.Registry) error {
	if reg == nil {
		return errors.New("mcpbridge: Register(nil): pass a *tool.Registry")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.tools {
		if _, taken := reg.Lookup(t.def.Name); taken {
			return fmt.Errorf("mcpbridge: server %s: its tool %q has the name of a tool already registered: connect with WithPrefix to give its tools a prefix, or leave it out with WithToolFilter", c.name, t.def.Name)
		}
	}
	for i, t := range c.tools {
		if err := reg.Register(t); err != nil {
			for _, done := range c.tools[:i] {
				reg.Remove(done.def.Name)
			}
			return fmt.Errorf("mcpbridge: server %s: %w", c.name, err)
		}
	}
	c.regs = append(c.regs, reg)
	return nil
}

// Err returns why the last re-reading of the tool list failed, or nil.
// While it is not nil, the tools read before stay offered.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the session and, for a Command, the server's process (closing
// its input, then signalling it if it does not exit). It waits for every
// goroutine the Client started. Calls still running fail. Close is safe to
// call more than once.
func (c *Client) Close() error {
	c.closed.Do(func() {
		c.stop()
		<-c.done
		c.cerr = c.cs.Close()
		c.mu.Lock()
		for _, t := range c.tools {
			t.gone.Store(true)
		}
		c.mu.Unlock()
	})
	return c.cerr
}

// list reads the server's tools and checks each one.
func (c *Client) list(ctx context.Context) ([]*remoteTool, error) {
	var out []*remoteTool
	seen := map[string]bool{}
	for mt, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing its tools: %w", err)
		}
		if c.cfg.filter != nil && !c.cfg.filter(mt.Name) {
			continue
		}
		if len(out) == c.cfg.maxTools {
			return nil, fmt.Errorf("it offers more than %d tools: pick the ones to use with WithToolFilter, or raise WithMaxTools", c.cfg.maxTools)
		}
		t, err := c.remote(mt)
		if err != nil {
			return nil, err
		}
		if seen[t.def.Name] {
			return nil, fmt.Errorf("it lists two tools named %q: fix the server, or leave the tool out with WithToolFilter", t.def.Name)
		}
		seen[t.def.Name] = true
		out = append(out, t)
	}
	return out, nil
}

// remote checks one of the server's tools and wraps it.
func (c *Client) remote(mt *mcp.Tool) (*remoteTool, error) {
	name := c.cfg.prefix + mt.Name
	if err := toolcall.CheckName(name); err != nil {
		return nil, fmt.Errorf("its tool %q: %w; leave it out with WithToolFilter", mt.Name, err)
	}
	params, err := json.Marshal(mt.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("its tool %q: input schema: %w; fix the server, or leave the tool out with WithToolFilter", mt.Name, err)
	}
	if mt.InputSchema == nil {
		params = json.RawMessage(`{"type":"object"}`)
	}
	if len(params) > maxSchema {
		return nil, fmt.Errorf("its tool %q has an input schema of %d bytes, more than the %d a model is sent: fix the server, or leave the tool out with WithToolFilter", mt.Name, len(params), maxSchema)
	}
	if err := objectSchema(params); err != nil {
		return nil, fmt.Errorf("its tool %q has a malformed input schema (%v): fix the server, or leave the tool out with WithToolFilter", mt.Name, err)
	}
	// A server is as untrusted as a model: its schema is compiled within
	// the bounds of one a model writes (size, depth, weight, references
	// only inside it).
	if _, err := jsonschema.CompileUntrusted(params); err != nil {
		return nil, fmt.Errorf("its tool %q has an input schema deputy will not use (%v): fix the server, or leave the tool out with WithToolFilter", mt.Name, err)
	}
	// A server's description is untrusted text that every model request
	// carries: bounded like a result.
	desc := capText(mt.Description, maxDescription, "the description from MCP server "+c.name)
	return &remoteTool{c: c, remote: mt.Name, def: tool.Definition{Name: name, Description: desc, Parameters: params}}, nil
}

// remoteTool is one of a server's tools.
type remoteTool struct {
	c      *Client
	remote string // the server's name for it
	def    tool.Definition
	gone   atomic.Bool // the server no longer lists it, or the Client is closed
}

func (t *remoteTool) Definition() tool.Definition { return t.def }

// Available reports whether the server still offers the tool.
func (t *remoteTool) Available(context.Context) bool { return !t.gone.Load() }

// Call calls the tool on the server. A failure of the server — an error
// result, a refusal, a crash, no answer within the call timeout — is an
// error Result the model reads; only the end of ctx is a Go error.
func (t *remoteTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	c := t.c
	args := toolcall.Arguments(call.Arguments)
	if !json.Valid(args) {
		return tool.Result{}, fmt.Errorf("%w for %s: not valid JSON: send a JSON object", tool.ErrInvalidArguments, t.def.Name)
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	res, err := c.cs.CallTool(cctx, &mcp.CallToolParams{Name: t.remote, Arguments: json.RawMessage(args)})
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, fmt.Errorf("mcpbridge: server %s: tool %s: %w", c.name, t.remote, context.Cause(ctx))
		}
		var msg string
		var werr *jsonrpc.Error
		switch {
		case cctx.Err() != nil:
			msg = fmt.Sprintf("the MCP server %s did not answer the call to %s within %v: it may be hung or the work too large; try a smaller request, or do without this tool", c.name, t.remote, c.cfg.callTimeout)
		case errors.As(err, &werr):
			msg = fmt.Sprintf("the MCP server %s refused the call to %s: %s", c.name, t.remote, werr.Message)
		case c.authHint() != "":
			// The model can do nothing about credentials: the Go error
			// says what the program's owner can do.
			msg = fmt.Sprintf("the MCP server %s refused the call to %s: not authorized; do without its tools", c.name, t.remote)
			err = fmt.Errorf("%s: %w", c.authHint(), err)
		default:
			msg = fmt.Sprintf("the call to %s on the MCP server %s failed: %v: the server may have crashed or sent something too large; do without its tools", t.remote, c.name, err)
		}
		return tool.Result{Content: msg, IsError: true, Err: fmt.Errorf("mcpbridge: %s: %w", msg, err)}, nil
	}
	return t.result(res), nil
}

// result renders what the server answered as text for the model, capped.
func (t *remoteTool) result(res *mcp.CallToolResult) tool.Result {
	var b strings.Builder
	for _, ct := range res.Content {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		switch ct := ct.(type) {
		case *mcp.TextContent:
			b.WriteString(ct.Text)
		case *mcp.ImageContent:
			fmt.Fprintf(&b, "[image: %s, %d bytes]", ct.MIMEType, len(ct.Data))
		case *mcp.AudioContent:
			fmt.Fprintf(&b, "[audio: %s, %d bytes]", ct.MIMEType, len(ct.Data))
		case *mcp.ResourceLink:
			fmt.Fprintf(&b, "[resource: %s %s]", ct.URI, ct.Name)
		case *mcp.EmbeddedResource:
			if r := ct.Resource; r != nil && r.Text != "" {
				b.WriteString(r.Text)
			} else if r != nil {
				fmt.Fprintf(&b, "[resource: %s, %s]", r.URI, r.MIMEType)
			}
		default:
			b.WriteString("[content the bridge cannot show]")
		}
		if b.Len() > t.c.cfg.maxResult {
			break
		}
	}
	out := tool.Result{IsError: res.IsError}
	if res.StructuredContent != nil {
		out.Value = res.StructuredContent
		if b.Len() == 0 {
			if j, err := json.Marshal(res.StructuredContent); err == nil {
				b.Write(j)
			}
		}
	}
	out.Content = capText(b.String(), t.c.cfg.maxResult, "the result from MCP server "+t.c.name)
	if out.Content == "" {
		out.Content = "(the tool returned nothing)"
	}
	return out
}

// capText cuts s to at most max bytes on a UTF-8 boundary, with a visible
// marker saying what was cut.
func capText(s string, max int, what string) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf("\n[truncated: %s was longer than %d bytes]", what, max)
	if len(marker) > max/2 { // a long server name
		marker = "\n[truncated]"
	}
	cut := max - len(marker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}
