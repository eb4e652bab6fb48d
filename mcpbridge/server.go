package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

// OutputSchemer is the optional capability of a tool whose results have a
// declared shape, such as a *subagent.SubAgentTool built with WithReport,
// WithOutputSchema or OutputOf. A served tool that has one declares the
// schema as its MCP output schema, and each successful call returns the
// Result's Value as structured content. OutputSchema returns nil when the
// tool's results have no declared shape.
type OutputSchemer interface {
	OutputSchema() json.RawMessage
}

// Server serves deputy tools — sub-agents of each form, the spawn tool, any
// tool.Tool — to MCP clients. A whole agent is served by wrapping it in a
// tool first (subagent.FromAgent keeps one conversation across the
// client's calls, and across restarts of the server with
// subagent.WithStore; subagent.FromFactory starts afresh each call).
//
// Each MCP call runs the tool as a model's call would run (panics
// recovered, arguments checked against the tool's schema and size limit),
// under the MCP request's context: an MCP cancellation cancels the tool and
// everything under it. Every failure is an MCP tool error result the client
// can read, never a protocol error. When the client asks for progress (a
// progress token), the lifecycle events of the run — steps, tool calls,
// sub-agents starting and finishing — reach it as progress notifications.
//
// Each call runs as part of its MCP session's thread (agent.WithThread),
// so that a resident expert scoped with subagent.PerThread keeps one
// conversation per client session; WithCallContext gives a call the
// context a scope of the application's reads (the user behind a token).
//
// A Server is safe for concurrent use and may serve many sessions at once.
type Server struct {
	srv      *mcp.Server
	reg      *tool.Registry
	calls    atomic.Uint64
	callCtx  func(ctx context.Context, req *mcp.CallToolRequest) (context.Context, error)
	logs     bool
	sessions sessionNames

	// Calls waiting for their clients' answers, by the state the client
	// echoes; their journals are kept in st.
	st      *store.Store
	mu      sync.Mutex
	waiting map[string]*waiting
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithCallContext has fn derive each call's context from the MCP request,
// before the tool runs: to put there what the application's scopes and
// tools read (the user of req.Extra.TokenInfo, a tenant from a header of
// req.Extra.Header), or to refuse the call with an error, which the
// client reads as the call's error result.
func WithCallContext(fn func(ctx context.Context, req *mcp.CallToolRequest) (context.Context, error)) ServerOption {
	return func(s *Server) { s.callCtx = fn }
}

// WithLogNotifications has each call's lifecycle events — steps, tool
// calls, sub-agents starting, finishing or failing — also sent to the
// client as MCP log notifications (notifications/message) at level info,
// the tool's name as the logger, whether or not the client asked for
// progress. The server declares MCP's logging capability; as MCP says, a
// client receives log notifications once it has set a level. They are
// queued and dropped as progress notifications are. (MCP deprecates log
// notifications from its protocol version 2026-07-28 on, and keeps them
// working meanwhile.)
func WithLogNotifications() ServerOption {
	return func(s *Server) { s.logs = true }
}

// NewServer returns a server that introduces itself to clients as name at
// version, with no tools yet.
func NewServer(name, version string, opts ...ServerOption) *Server {
	if name == "" {
		name = "deputy"
	}
	reg, _ := tool.NewRegistry()
	st, _ := store.New(memory.New()) // cannot fail on a memory backend
	s := &Server{reg: reg, st: st, waiting: map[string]*waiting{}}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
	if s.logs {
		//lint:ignore SA1019 log notifications are asked for; MCP deprecates them from 2026-07-28 on, and they still work
		caps.Logging = &mcp.LoggingCapabilities{}
	}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: name, Version: version}, &mcp.ServerOptions{Capabilities: caps})
	return s
}

// AddTool serves t. Its name, description and parameter schema are given
// to clients as they are; the schema must describe a JSON object, as MCP
// requires. A second tool with the same name is an error.
func (s *Server) AddTool(t tool.Tool) error {
	if t == nil {
		return errors.New("mcpbridge: AddTool(nil): pass a tool.Tool")
	}
	def := t.Definition()
	input := def.Parameters
	if len(input) == 0 {
		input = json.RawMessage(`{"type":"object"}`)
	}
	if err := objectSchema(input); err != nil {
		return fmt.Errorf("mcpbridge: tool %q: parameters: %w: MCP tools take a JSON object, so give the tool an object schema", def.Name, err)
	}
	mt := &mcp.Tool{Name: def.Name, Description: def.Description, InputSchema: input}
	structured := false
	if o, ok := t.(OutputSchemer); ok {
		if out := o.OutputSchema(); len(out) > 0 {
			mt.OutputSchema = out
			structured = true
		}
	}
	if err := s.reg.Register(t); err != nil {
		return fmt.Errorf("mcpbridge: %w", err)
	}
	s.srv.AddTool(mt, s.handler(def.Name, structured))
	return nil
}

// AddRegistry serves every tool of r, in registration order. It stops at
// the first tool that cannot be served and says which.
func (s *Server) AddRegistry(r *tool.Registry) error {
	for _, t := range r.Tools() {
		if err := s.AddTool(t); err != nil {
			return err
		}
	}
	return nil
}

// MCP returns the SDK server underneath, for what this package does not
// cover (prompts, resources, middleware, other transports).
func (s *Server) MCP() *mcp.Server { return s.srv }

// Run serves one session over t until the client ends it or ctx is done.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.srv.Run(ctx, t)
}

// ServeStdio serves one session over the process's standard input and
// output, the way MCP hosts start local servers, until the client closes
// its end or ctx is done. Nothing else may write to standard output
// meanwhile.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.srv.Run(ctx, &mcp.StdioTransport{})
}

// Handler returns an http.Handler that serves MCP's streamable HTTP
// transport, one session per client. opts may be nil.
func (s *Server) Handler(opts *mcp.StreamableHTTPOptions) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, opts)
}

func (s *Server) handler(name string, structured bool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Session != nil {
			ctx = agent.WithThread(ctx, "mcp/"+s.sessions.name(req.Session))
		}
		if s.callCtx != nil {
			var err error
			if ctx, err = s.callCtx(ctx, req); err != nil {
				return errorResult(err.Error()), nil
			}
		}
		var sinks []event.Sink
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			p := startProgress(ctx, req.Session, tok)
			defer p.finish()
			sinks = append(sinks, p)
		}
		if s.logs && req.Session != nil {
			l := startLogs(ctx, req.Session, name)
			defer l.finish()
			sinks = append(sinks, l)
		}
		switch len(sinks) {
		case 1:
			ctx = event.WithSink(ctx, sinks[0])
		case 2:
			ctx = event.WithSink(ctx, event.SinkFunc(func(e event.Event) {
				sinks[0].Emit(e)
				sinks[1].Emit(e)
			}))
		}
		call := tool.Call{
			ID:        "mcp-" + strconv.FormatUint(s.calls.Add(1), 10),
			Name:      name,
			Arguments: req.Params.Arguments,
		}
		var w *waiting
		var answers []tool.Answer
		if token := req.Params.RequestState; token != "" {
			var err error
			if w, err = s.resume(token, req.Session, call); err != nil {
				return errorResult(err.Error()), nil
			}
			call.ID = w.callID
			answers = answersOf(w.asked, req.Params.InputResponses)
		}
		res, asking, err := s.run(ctx, req.Session, call, w, answers)
		if asking != nil {
			return asking, nil
		}
		out := s.result(name, structured, res, err)
		if !res.Usage.IsZero() {
			// What the call spent, a failed child's work included, for a
			// client that accounts for it.
			out.Meta = mcp.Meta{UsageMetaKey: newUsageMeta(res.Usage)}
		}
		return out, nil
	}
}

// UsageMetaKey is the key in a served call's result _meta under which the
// model work the call did is reported, when it did any, its sub-agents'
// included. The counts have the names of AG-UI's TokenUsage, as deputy's
// AG-UI endpoint reports them:
//
//	{"requests":2,"inputTokens":1200,"outputTokens":80,"totalTokens":1280,
//	 "cachedInputTokens":1000,"cacheWriteInputTokens":150}
//
// where input tokens include the cached ones, and cachedInputTokens
// (read from a prompt cache) and cacheWriteInputTokens (written to one)
// are left out when zero.
const UsageMetaKey = "deputy/usage"

// usageMeta is the JSON reported under UsageMetaKey.
type usageMeta struct {
	Requests    int64 `json:"requests"`
	Input       int64 `json:"inputTokens"`
	Output      int64 `json:"outputTokens"`
	Total       int64 `json:"totalTokens"`
	CachedInput int64 `json:"cachedInputTokens,omitempty"`
	CacheWrite  int64 `json:"cacheWriteInputTokens,omitempty"`
}

func newUsageMeta(u provider.Usage) usageMeta {
	return usageMeta{Requests: u.Requests, Input: u.InputTokens, Output: u.OutputTokens,
		Total: u.Tokens(), CachedInput: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens}
}

func (s *Server) result(name string, structured bool, res tool.Result, err error) *mcp.CallToolResult {
	if err != nil {
		// What ends a model's run (a child that failed, a cancelled call)
		// is still the tool's failure to the MCP client: a tool error
		// result it can read, never a protocol error.
		return errorResult(err.Error())
	}
	if res.IsError {
		return errorResult(res.Content)
	}
	out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Content}}}
	if structured {
		if res.Value == nil {
			// The answer did not fit the declared schema even after the
			// corrective retry; Content says why.
			out.IsError = true
			return out
		}
		b, err := json.Marshal(res.Value)
		if err != nil {
			return errorResult(fmt.Sprintf("tool %s: encoding its structured result: %v", name, err))
		}
		out.StructuredContent = json.RawMessage(b)
	}
	return out
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

// objectSchema checks that raw is a JSON Schema object whose type, if
// given, is "object".
func objectSchema(raw json.RawMessage) error {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if typ, ok := s["type"]; ok && typ != "object" {
		return fmt.Errorf("type is %v, not \"object\"", typ)
	}
	return nil
}

// progress turns the lifecycle events of a served call into MCP progress
// notifications on the call's progress token. Events are queued and sent
// by a goroutine of the call's own, so that a client that reads slowly, or
// not at all, never holds the call (and a resident expert it is
// consulting) back: past progressQueue waiting messages, new ones are
// dropped. The call's result waits for the queue to be sent.
type progress struct {
	mu     sync.Mutex
	queue  chan string
	closed bool // finish was called: events after it are the call's no more
	done   chan struct{}
	last   time.Time // when the last notification was sent; the sender's, until done
}

// progressQueue bounds the notifications waiting to be sent for one call.
const progressQueue = 64

// progressGap is the least time between a call's last notification and
// its result. The TypeScript client handles a notification a tick later
// than a response, and forgets a call's progress handler at its response:
// notifications read in the same chunk as the response are dropped, which
// over stdio, where they share one pipe, they usually are.
const progressGap = 15 * time.Millisecond

func startProgress(ctx context.Context, session *mcp.ServerSession, token any) *progress {
	return startNotes(ctx, func(ctx context.Context, n float64, msg string) error {
		return session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
	})
}

// startLogs sends the events of a call of the tool name as MCP log
// notifications (notifications/message) at level info, the tool's name
// as the logger. The SDK sends none until the client sets a level.
func startLogs(ctx context.Context, session *mcp.ServerSession, name string) *progress {
	return startNotes(ctx, func(ctx context.Context, _ float64, msg string) error {
		//lint:ignore SA1019 log notifications are asked for; MCP deprecates them from 2026-07-28 on, and they still work
		return session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: name, Data: msg})
	})
}

// startNotes starts the goroutine that sends a call's notifications with
// send, numbered from 1; finish ends it.
func startNotes(ctx context.Context, send func(ctx context.Context, n float64, msg string) error) *progress {
	p := &progress{queue: make(chan string, progressQueue), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		n := 0.0
		for msg := range p.queue {
			n++
			// A failure to send (the client went away) does not disturb
			// the call.
			_ = send(ctx, n, msg)
			p.last = time.Now()
		}
	}()
	return p
}

// Emit queues one notification per event worth telling a person about,
// without waiting.
func (p *progress) Emit(e event.Event) {
	msg := progressMessage(e)
	if msg == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- msg:
	default: // the client is not keeping up: drop it
	}
}

// finish sends what is queued, then lets the result follow after
// progressGap.
func (p *progress) finish() {
	p.mu.Lock()
	p.closed = true
	close(p.queue)
	p.mu.Unlock()
	<-p.done
	if !p.last.IsZero() {
		time.Sleep(progressGap - time.Since(p.last))
	}
}

// sessionNames names the sessions a server serves, for their threads: a
// session's own id when it has one (streamable HTTP), else one given here
// (stdio, in-memory), forgotten when the session is.
type sessionNames struct {
	mu    sync.Mutex
	names map[weak.Pointer[mcp.ServerSession]]string
	n     uint64
}

func (s *sessionNames) name(ss *mcp.ServerSession) string {
	if id := ss.ID(); id != "" {
		return id
	}
	wp := weak.Make(ss)
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.names[wp]; ok {
		return name
	}
	if s.names == nil {
		s.names = map[weak.Pointer[mcp.ServerSession]]string{}
	}
	s.n++
	name := "session-" + strconv.FormatUint(s.n, 10)
	s.names[wp] = name
	runtime.AddCleanup(ss, func(wp weak.Pointer[mcp.ServerSession]) {
		s.mu.Lock()
		delete(s.names, wp)
		s.mu.Unlock()
	}, wp)
	return name
}

func progressMessage(e event.Event) string {
	switch e.Type {
	case event.SubagentStarted:
		return "sub-agent " + e.Name + " started"
	case event.SubagentFinished:
		return "sub-agent finished"
	case event.SubagentError:
		return "sub-agent failed: " + e.Message
	case event.StepStarted:
		return "step " + e.StepName
	case event.ToolCallStart:
		return "calling " + e.ToolCallName
	}
	return ""
}
