// Package agui serves a deputy agent over AG-UI, the protocol the AG-UI
// clients (such as @ag-ui/client's HttpAgent) speak: the client POSTs a
// RunAgentInput, and the server answers with the run's events as
// server-sent events.
//
//	h, err := agui.New(myAgent)
//	http.Handle("/agui", h)
//
// Each request is one run. The response is text/event-stream, one frame per
// event ("data: <json>\n\n"), flushed as each event happens: RUN_STARTED
// with the request's threadId and runId, the agent's steps, messages and
// tool calls, its sub-agents' SUBAGENT_* events and their own events
// (attributed with subagentRunId), and RUN_FINISHED (its result the answer,
// as a JSON string, and its usage per provider and model) or RUN_ERROR. A
// client that disconnects cancels the run; Handler.Stop stops it from the
// server's side, and the client reads RUN_FINISHED with the outcome
// "cancelled".
//
// The agent is handed the conversation as the InputFunc says: by default
// LastUserMessage for a shared agent (New), which keeps its own
// conversation, and Conversation for an agent built per request
// (NewPerRequest). A body that is not a RunAgentInput is answered with a
// 4xx status and a JSON body {"error": "..."}, never with a stream.
//
// Clients older than AG-UI's sub-agent support (@ag-ui/client 0.0.58 and
// before) fail on the SUBAGENT_* event types. WithSubagentEventsHidden, or the
// request header "Deputy-Subagent-Events: hide", leaves those three types
// out; every other event, its subagentRunId included, is sent as it is.
//
// # Serving many users
//
// Without WithAuthorize a threadId is a bearer secret: whoever knows it
// continues the thread, reads it through the agent and answers its
// interrupts. WithAuthorize runs the application's Authorize on each
// request before any state of the thread is locked, read or mentioned:
// it names the thread's owner (threads are kept per owner, so the same
// threadId of two users is two threads) or refuses the request with the
// application's own status and body (a *Refusal). The Builder sees the
// owner in RunInput.Owner.
//
// A resident expert shared by every request keeps one conversation for all
// users: build it with subagent.FromScoped and subagent.PerThread, and each
// thread has its own, deleted with the thread (WithScopedResidents for those
// kept in memory); the handler marks each run with its thread
// (agent.WithThread).
//
// A server lists, reads and deletes its users' threads with ListThreads,
// ReadThread and DeleteThread, over HTTP with Threads; it stops a run with
// Stop, and every run with Shutdown, which refuses new ones and waits for
// those in progress to end cancelled. A client that stops reading is
// dropped after DefaultWriteTimeout (WithWriteTimeout), its run cancelled
// and its thread freed. Sweep, run now and then, forgets what crashed
// runs left in the store.
//
// # Serving a browser
//
// A request that would change something, sent by a page of another origin
// (the Origin and Sec-Fetch-Site headers), is refused with 403; WithOrigins
// trusts origins that call through CORS. On a loopback address a Host other
// than a loopback name or the address is refused with 421 (DNS rebinding);
// WithHosts names more hosts, WithAnyHost turns the check off
// (docs/serving.md).
//
// # Interrupts: asking a person and resuming
//
// On a stored thread (WithThreads), a tool at any depth may ask a person
// (tool.Ask, tool.RequireApproval). The run then ends with RUN_FINISHED
// whose outcome is {"type":"interrupt","interrupts":[...]}: each interrupt
// has its id, reason ("tool_approval" for RequireApproval), message, the
// asking tool call's id, the response schema its answer must meet, its
// expiry and the asking sub-agent's subagentRunId; each suspended sub-agent
// ends its segment with SUBAGENT_FINISHED outcome
// {"type":"suspended","interruptIds":[...]}. The call that waits sends no
// TOOL_CALL_RESULT until it has its answer. The thread keeps the suspended
// run, and the next request on it must answer in RunAgentInput.resume:
//
//	{"threadId":"t1","runId":"r2","messages":[],
//	 "resume":[{"interruptId":"int_…","status":"resolved","payload":{"approved":true}}]}
//
// ("status":"cancelled" declines; the call then fails with an error its
// model reads). The resumed run replays the turn from its journal: the
// models' answers are not asked for again (nor paid for again: its
// RUN_FINISHED reports the whole turn, the part before the answers marked
// "earlier" in each usage entry), the tool calls
// that finished are not run again, the suspended sub-agents continue under
// the same subagentRunId, and the calls that asked get their answers —
// whatever ids the provider gives tool calls, and without wrapping any
// provider. It does not send again what the client has from the run that
// asked: its stream carries what happens after the answers. A refused
// resume is answered before any stream, with {"error": "..."}: 409 when
// nothing waits (or a new message is sent while something does), 410 when
// an answer came after its interrupt expired, 400 for an unknown id, a
// second answer to one interrupt, a bad status or a payload that fails the
// response schema; the suspended run stays as it was. A resume whose
// answers cannot reach their calls fails loudly, never with a new
// question: when the suspended run's journal is gone (the resumed run
// would do again what was done) it is refused with 409 and a body naming
// the interrupts (tool.ErrUnusedAnswer); a resumed
// run that ends without reaching a call it was given an answer for (the
// agent changed, say), which is known only once it has streamed, ends with
// RUN_ERROR code "unused_answer" and the same text, and keeps the
// suspended run.
package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/outcome"
	"github.com/deputy-go/deputy/internal/sameorigin"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// SubagentEventsHeader is the request header with which a client asks for
// the sub-agent lifecycle events to be left out: "Deputy-Subagent-Events:
// hide".
const SubagentEventsHeader = "Deputy-Subagent-Events"

// DefaultMaxBodyBytes bounds a request body unless WithMaxBodyBytes says
// otherwise.
const DefaultMaxBodyBytes = 4 << 20

// ErrBadInput marks a request the client must change: an InputFunc or a
// Builder that returns an error wrapping it gets a 400 response with the
// error's message. Any other Builder error is a 500.
var ErrBadInput = errors.New("agui: bad input")

// Builder builds the agent for one request, from its input. It runs before
// the response starts, so an error still becomes an HTTP error status (see
// ErrBadInput). An agent that implements io.Closer is closed after its run.
type Builder func(ctx context.Context, in *RunInput) (agent.Agent, error)

// Handler is an http.Handler that runs an agent for each AG-UI request. It
// is safe for concurrent use; whether runs of a shared agent overlap is up
// to the agent (a *agent.React takes them in turn).
type Handler struct {
	agent  agent.Agent
	build  Builder
	cfg    config
	active activeRuns // for Stop
}

type config struct {
	maxBody      int64
	hide         bool
	input        InputFunc
	log          *slog.Logger
	writeTimeout time.Duration
	threads      *store.Store // WithThreads
	authorize    Authorize    // WithAuthorize
	residents    []ScopeForgetter
	inputSet     bool // WithInput was given
	guard        sameorigin.Guard
	hostsSet     bool // WithHosts or WithAnyHost was given
}

// Option configures a Handler. New and NewPerRequest report an option's
// bad value, or an option the handler would not honour, as an error; a nil
// Option is ignored.
type Option func(*config) error

// WithMaxBodyBytes bounds the request body (default DefaultMaxBodyBytes); a
// larger one is answered with 413.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) error {
		if n < 64 {
			return fmt.Errorf("max body %d bytes: use at least 64", n)
		}
		c.maxBody = n
		return nil
	}
}

// WithSubagentEventsHidden leaves SUBAGENT_STARTED, SUBAGENT_FINISHED and
// SUBAGENT_ERROR out of every response, for clients that predate AG-UI's
// sub-agent support; other events keep their subagentRunId, which such
// clients pass through. Without it a request can ask for the same with the
// header SubagentEventsHeader set to "hide".
func WithSubagentEventsHidden() Option {
	return func(c *config) error { c.hide = true; return nil }
}

// WithInput sets how a request becomes the agent's input, instead of the
// default (LastUserMessage for New, Conversation for NewPerRequest).
func WithInput(fn InputFunc) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithInput(nil): pass a function, such as agui.Conversation")
		}
		c.input, c.inputSet = fn, true
		return nil
	}
}

// WithLogger sets where the handler reports what it cannot tell the client:
// a run that panicked, an event it could not encode. The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { c.log = l; return nil }
}

// DefaultWriteTimeout bounds each write of an event to a client unless
// WithWriteTimeout says otherwise.
const DefaultWriteTimeout = 10 * time.Second

// WithWriteTimeout bounds each write of an event to the client (default
// DefaultWriteTimeout). Events are written as they happen and the run
// waits for each write, so a client that stops reading would hold its run,
// its goroutines and its thread's lock for as long as its connection
// lasts: a client that does not take an event within d is treated as
// gone instead. Its run is cancelled as if it had disconnected, and the
// thread is free for its next run. Raise d for clients on slow links; the
// time a run spends between events (a model thinking) does not count.
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("write timeout %v: use a positive duration", d)
		}
		c.writeTimeout = d
		return nil
	}
}

// New returns a handler that runs a for every request. By default a is
// handed the text of the last user message (LastUserMessage), since an
// agent served to every request, such as a *agent.React, keeps its own
// conversation; use NewPerRequest to serve many conversations. Such an
// agent is refused with WithAuthorize, which serves many owners.
func New(a agent.Agent, opts ...Option) (*Handler, error) {
	if a == nil {
		return nil, errors.New("agui: nil agent: pass the agent to serve, or use NewPerRequest")
	}
	h := &Handler{agent: a}
	if err := h.configure(LastUserMessage, opts); err != nil {
		return nil, err
	}
	if h.cfg.threads != nil {
		return nil, errors.New("agui: WithThreads with a shared agent: its own conversation would mix the threads: use NewPerRequest")
	}
	if _, ok := a.(interface{ History() []provider.Message }); ok && h.cfg.authorize != nil {
		return nil, fmt.Errorf("agui: WithAuthorize with a shared agent (%T) that keeps its conversation between runs: what one owner tells it would reach every other owner's runs: use NewPerRequest", a)
	}
	return h, nil
}

// NewPerRequest returns a handler that builds an agent for each request
// with build and runs it. By default the agent is handed the whole
// conversation (Conversation).
func NewPerRequest(build Builder, opts ...Option) (*Handler, error) {
	if build == nil {
		return nil, errors.New("agui: nil builder: pass a function that builds the agent")
	}
	h := &Handler{build: build}
	if err := h.configure(Conversation, opts); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *Handler) configure(input InputFunc, opts []Option) error {
	h.cfg = config{maxBody: DefaultMaxBodyBytes, input: input, writeTimeout: DefaultWriteTimeout}
	h.cfg.guard.Where = sameorigin.OnLoopback
	h.cfg.guard.HostsOption, h.cfg.guard.OriginsOption = "agui.WithHosts (or turn the check off with agui.WithAnyHost)", "agui.WithOrigins"
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&h.cfg); err != nil {
			return fmt.Errorf("agui: %w", err)
		}
	}
	if h.cfg.threads != nil {
		if h.cfg.inputSet {
			return errors.New("agui: WithInput and WithThreads: with threads the input is the stored thread and the new messages: drop WithInput")
		}
		h.cfg.input = threadInput
	}
	return nil
}

func (h *Handler) logger() *slog.Logger {
	if h.cfg.log != nil {
		return h.cfg.log
	}
	return slog.Default()
}

// ServeHTTP answers one AG-UI request: a bad request with a 4xx status and
// a JSON error, a good one with the run's event stream.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.admit(w, r) {
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpError(w, http.StatusMethodNotAllowed, "method "+r.Method+": send a POST with a RunAgentInput JSON body")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			httpError(w, http.StatusUnsupportedMediaType, "Content-Type "+strconv.Quote(ct)+": send application/json")
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpError(w, http.StatusRequestEntityTooLarge, "the body is larger than "+strconv.FormatInt(tooBig.Limit, 10)+
				" bytes: send a shorter conversation, or raise the limit with WithMaxBodyBytes")
			return
		}
		httpError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	in, err := decodeInput(body)
	if err != nil {
		msg := err.Error()
		if !strings.Contains(msg, ": send") {
			msg += ": send a RunAgentInput as AG-UI defines it (threadId, runId, messages, …)"
		}
		httpError(w, http.StatusBadRequest, msg)
		return
	}
	owner, ok := h.authorize(w, r, in.ThreadID)
	if !ok {
		return
	}
	leave, ok := h.active.enter()
	if !ok {
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "agui: the server is shutting down: send the run again (to another replica, or once it is back)")
		return
	}
	defer leave()
	in.Owner = owner
	agentIn, err := h.cfg.input(in)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrBadInput) {
			status = http.StatusBadRequest
		}
		httpError(w, status, err.Error())
		return
	}
	var turn *threadTurn
	if h.cfg.threads != nil {
		if turn, agentIn, err = h.beginThread(r.Context(), in); err != nil {
			httpError(w, threadStatus(err), err.Error())
			return
		}
		defer turn.end(h.logger())
	}
	a := h.agent
	if h.build != nil {
		if a, err = h.build(r.Context(), in); err != nil || a == nil {
			status := http.StatusInternalServerError
			if errors.Is(err, ErrBadInput) {
				status = http.StatusBadRequest
			} else if err == nil {
				err = errors.New("the builder returned no agent")
			} else {
				h.logger().Error("agui: building the agent", "err", err, "threadId", in.ThreadID, "runId", in.RunID)
			}
			httpError(w, status, err.Error())
			return
		}
		if c, ok := a.(io.Closer); ok {
			defer c.Close()
		}
	}
	if turn != nil {
		if err := turn.resumable(r.Context(), in, a); err != nil {
			httpError(w, threadStatus(err), err.Error())
			return
		}
	}
	hide := h.cfg.hide || strings.EqualFold(strings.TrimSpace(r.Header.Get(SubagentEventsHeader)), "hide")
	h.run(w, r, in, a, agentIn, hide, turn)
}

// run streams one run; a turn on a stored thread is stored before the run
// is reported finished.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, in *RunInput, a agent.Agent, agentIn agent.Input, hide bool, turn *threadTurn) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer h.active.add(thread{in.Owner, in.ThreadID}, cancel)()
	st := newStream(w, hide, h.cfg.writeTimeout, func() { cancel(nil) }, h.logger())
	st.open()
	st.write(event.Event{Type: event.RunStarted, ThreadID: in.ThreadID, RunID: in.RunID, ParentRunID: in.ParentRunID})

	ctx = event.WithThread(event.WithSink(ctx, st), in.ThreadID)
	// Residents scoped per thread (subagent.PerThread) know the thread by
	// its owner's and its own name.
	ctx = agent.WithThread(ctx, thread{in.Owner, in.ThreadID}.scope())
	ctx = agent.WithOwner(ctx, in.Owner) // what a policy's checks name
	if agentIn.CacheKey == "" {
		// A thread's turns repeat its conversation: one cache key for them.
		agentIn.CacheKey = in.ThreadID
	}
	var out agent.Output
	var err error
	if turn != nil {
		ctx, err = turn.runContext(ctx, in)
	} else if len(in.Resume) > 0 {
		err = fmt.Errorf("agui: resume: %w: this endpoint keeps no suspended runs (serve it with WithThreads)", tool.ErrNothingSuspended)
	}
	ctx, spent := ledger.With(ctx)
	if err == nil {
		out, err = h.runAgent(ctx, a, agentIn)
		if _, asked := asInterrupted(err); (err == nil || asked) && len(in.Resume) > 0 {
			// An agent that is not a React does not check this itself.
			if ids := tool.UnusedAnswers(ctx); len(ids) > 0 {
				err = fmt.Errorf("agui: thread %q: %w: the resumed run ended without reaching the calls that asked %v; the run still waits for them", in.ThreadID, tool.ErrUnusedAnswer, ids)
			}
		}
	}
	if ctx.Err() != nil && r.Context().Err() != nil {
		if turn != nil {
			// Nothing was stored of it: a suspension is stored only for
			// a client that hears of it.
			turn.abandoned(ctx)
		}
		st.close() // the client is gone: nothing more to tell it
		return
	}
	if _, ok := asInterrupted(err); !ok && err != nil && stoppedBy(ctx) {
		// Stopped by the server: nothing is kept, nothing waits.
		if turn != nil {
			turn.finished(ctx)
		}
		st.finish(event.Event{Type: event.RunFinished, ThreadID: in.ThreadID, RunID: in.RunID, Outcome: outcome.Cancelled, Usage: usageJSON(spent, out.TotalUsage())})
		return
	}
	if asked, ok := asInterrupted(err); ok {
		if turn != nil {
			err = turn.suspend(ctx, asked)
		}
		if err == nil || turn == nil {
			st.finish(interruptEvent(in.ThreadID, in.RunID, asked, usageJSON(spent, out.TotalUsage())))
			return
		}
	}
	if err == nil && turn != nil {
		if err = turn.save(ctx, out); err != nil {
			err = fmt.Errorf("agui: storing thread %q (the turn is not kept: send the message again): %w", in.ThreadID, err)
		} else {
			turn.finished(ctx)
		}
	}
	if err != nil {
		if turn != nil {
			turn.abandoned(ctx)
		}
		st.finish(event.Event{Type: event.RunError, Message: err.Error(), Code: errcode.Of(err)})
		return
	}
	st.finish(event.Event{Type: event.RunFinished, ThreadID: in.ThreadID, RunID: in.RunID, Result: event.JSONString(out.Answer), Usage: usageJSON(spent, out.TotalUsage())})
}

// errPanic is what a client is told of a run that panicked; the panic
// itself goes to the log.
var errPanic = errors.New("agui: the agent failed unexpectedly (panic); the server log has the details")

func (h *Handler) runAgent(ctx context.Context, a agent.Agent, in agent.Input) (out agent.Output, err error) {
	defer func() {
		if p := recover(); p != nil {
			h.logger().Error("agui: the agent panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			out, err = agent.Output{}, errPanic
		}
	}()
	return a.Run(ctx, in)
}

func httpError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
