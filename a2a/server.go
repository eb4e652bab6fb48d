package a2a

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/limiter"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

// Metadata keys a Server sets on its tasks, and a Remote reads.
const (
	// UsageKey names, in a task's metadata, the model work its run did,
	// its sub-agents' included — for a task resumed after a question, its
	// whole turn, what was spent before the question counted once — with
	// the names of AG-UI's TokenUsage:
	// {"requests":2,"inputTokens":1200,"outputTokens":80,"totalTokens":1280,"costUsd":0.0048}
	// (cachedInputTokens and cacheWriteInputTokens when not zero; costUsd,
	// what it cost in US dollars at the prices the agent was given,
	// agent.WithPrices, when priced: agent.Output.Cost), and, for a resumed
	// task, the part spent before the answer under "earlier" (an object
	// with the same names: agent.Output.Earlier and EarlierCost). It is one
	// object for the whole tree, not split per model: agent.Output, which
	// it reports, has no split.
	UsageKey = "deputy/usage"
	// InterruptsKey names, in the metadata of a task that waits for input,
	// the questions it waits on: a list of tool.Interrupt in their JSON
	// form (AG-UI's Interrupt). The status message carries them too.
	InterruptsKey = "deputy/interrupts"
	// EventKey names, in the metadata of a working status update, the
	// deputy event it reports (a sub-agent starting or finishing, a tool
	// call), in its AG-UI JSON form.
	EventKey = "deputy/event"
)

// AnswerArtifact names the artifact that holds a served run's answer.
const AnswerArtifact = "answer"

// DefaultMaxBodyBytes bounds the body of a request to a Server
// (WithMaxBodyBytes).
const DefaultMaxBodyBytes = 4 << 20

// MaxOwnerBytes bounds the owner Authorize names.
const MaxOwnerBytes = 128

// Authorize decides, before a Server reads any state for it, whether a
// request may be served, and names its owner: the tasks it creates are
// that owner's, and only that owner's requests see them. It refuses with
// an error: a *Refusal gives the status and message the client reads;
// any other error is answered 401.
type Authorize func(r *http.Request) (owner string, err error)

// Refusal is an error an Authorize returns to answer with its own status.
type Refusal struct {
	// Status is the response's status, a 4xx or 5xx code; any other, 0
	// included, is answered 403 Forbidden: a refusal never reads as a
	// success or a redirect.
	Status int
	// Message is the text of the response's body, {"error": Message}.
	Message string
}

// Error says that the request was refused, with the status and message
// its client reads.
func (r *Refusal) Error() string {
	return fmt.Sprintf("a2a: refused (%d): %s", r.status(), r.Message)
}

func (r *Refusal) status() int {
	if r.Status < 400 || r.Status > 599 {
		return http.StatusForbidden
	}
	return r.Status
}

type ownerKey struct{}

func ownerFrom(ctx context.Context) string {
	o, _ := ctx.Value(ownerKey{}).(string)
	return o
}

// Option configures a Server.
type Option func(*config) error

type config struct {
	name, description, version string
	url                        string
	skills                     []sdk.AgentSkill
	card                       func(*sdk.AgentCard)
	st                         *store.Store
	authorize                  Authorize
	maxBody                    int64
	maxRuns, maxRunsPerOwner   int
	maxSeen                    int
	seenTTL                    time.Duration
	logger                     *slog.Logger
}

// WithName sets the name on the agent card (default: the agent's Name,
// or the tool's).
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("a2a: WithName: empty name")
		}
		c.name = name
		return nil
	}
}

// WithDescription sets the description on the agent card (default: the
// tool's, or a sentence naming the agent).
func WithDescription(d string) Option {
	return func(c *config) error { c.description = d; return nil }
}

// WithVersion sets the agent's version on its card (default "1.0.0").
func WithVersion(v string) Option {
	return func(c *config) error { c.version = v; return nil }
}

// WithSkills sets the skills the card lists, in place of the ones built
// from the agent's tools.
func WithSkills(skills ...sdk.AgentSkill) Option {
	return func(c *config) error { c.skills = skills; return nil }
}

// WithCard lets fn change the card built for the server (security
// schemes, provider, documentation) before it is served. The interfaces
// are set after fn, from WithURL or each request's host.
func WithCard(fn func(*sdk.AgentCard)) Option {
	return func(c *config) error { c.card = fn; return nil }
}

// WithURL is the URL clients reach the server at, which the card gives
// as its JSON-RPC interface (and that URL followed by /rest as its
// HTTP+JSON one). Without it the card names the host each request came
// to, which is right only when the server is mounted at the root of its
// origin and not behind a proxy that changes the host.
func WithURL(u string) Option {
	return func(c *config) error {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("a2a: WithURL(%q): give an absolute http or https URL", u)
		}
		c.url = strings.TrimSuffix(u, "/")
		return nil
	}
}

// WithStore keeps tasks, the questions suspended ones wait on, and the
// journal that lets a resumed run replay what it did, in st, so that they
// survive a restart of the server (and are shared by servers on one
// database). Without it they are kept in memory for the server's life.
func WithStore(st *store.Store) Option {
	return func(c *config) error {
		if st == nil {
			return errors.New("a2a: WithStore(nil)")
		}
		c.st = st
		return nil
	}
}

// WithAuthorize runs fn on every request but the public card's, before
// any task is read, and keeps tasks per owner (see Authorize).
func WithAuthorize(fn Authorize) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("a2a: WithAuthorize(nil): pass a function that names the request's owner, or leave the option out")
		}
		c.authorize = fn
		return nil
	}
}

// WithMaxBodyBytes bounds a request's body (default DefaultMaxBodyBytes):
// a larger one is answered 413 with {"error": …} naming the bound, and
// nothing of it is served.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("a2a: WithMaxBodyBytes(%d): give a positive size", n)
		}
		c.maxBody = n
		return nil
	}
}

// DefaultMaxRuns bounds the runs a Server has in progress at once
// (WithMaxRuns).
const DefaultMaxRuns = 256

// WithMaxRuns bounds the runs in progress at once, over all owners, and,
// when perOwner is above zero, for each owner Authorize names: a message
// past a bound is refused with an error saying so, and starts nothing. A
// message sent as soon as a run ended, while that run is being put away
// and still counts, waits for it (a third of a second at most).
// A run goes on after its client disconnects, so without a bound a client
// could start runs without end. A task waiting for a person is not a run
// in progress.
func WithMaxRuns(total, perOwner int) Option {
	return func(c *config) error {
		if total <= 0 || perOwner < 0 {
			return fmt.Errorf("a2a: WithMaxRuns(%d, %d): give a positive total, and a per-owner bound of 0 (none) or more", total, perOwner)
		}
		c.maxRuns, c.maxRunsPerOwner = total, perOwner
		return nil
	}
}

// WithLogger sets where the server logs what it cannot tell a client.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { c.logger = l; return nil }
}

// Server serves one deputy agent, or one tool, over A2A: the agent card
// at /.well-known/agent-card.json, the JSON-RPC binding at the root and
// the HTTP+JSON (REST) binding under /rest. It is an http.Handler. Close
// it to stop its runs.
//
// A message that starts a task must hold text or a data part: one with
// neither (blank text, files alone) is refused as invalid params, and
// nothing runs.
//
// A message sent again, without a taskId, with the parts and messageId of
// one that started a task (its sender never learned of the task: a deputy
// Remote whose process died with its first message on the way sends it
// again on resume, under the same id) starts nothing: it is answered with
// that task, followed where it stands (a stream follows it to its end, or
// to its question; a task another server on the store runs is sent as it
// stands), and the agent's tools run once. Message ids are kept per
// owner, as tasks are: one owner's messageId, guessed or seen, never
// reaches another owner's task, and starts a task of its own. The server
// remembers the last DefaultMaxSeenMessages first messages, each for
// DefaultSeenMessageTTL (WithSeenMessages); with WithStore they are kept
// in the store too, beside the tasks, and survive a restart. Copies of a
// message sent at once start one task too: the first to arrive claims
// the message's id before its task starts, and each other copy waits for
// that task (until its request ends) and is answered with it. With
// WithStore the claim is made in the store, so that copies sent at once
// to several servers on one store start one task as well. A message sent
// again after the server forgot it starts a second task, as does one
// whose task failed or was cancelled: that is a new try, and the message
// follows the new task from then on.
type Server struct {
	cfg      config
	run      runFunc
	card     sdk.AgentCard
	ownStore bool
	bindings bindings

	mu      sync.Mutex
	running map[string]*execution // by owner and task
	closed  bool
	// wg counts the executions that started a run and whose outcome the
	// SDK has not yet stored (executor.Cleanup): Close waits for them.
	wg       sync.WaitGroup
	settling sync.Map // *a2asrv.ExecutorContext of the executions wg counts
}

// execution is a run in progress, which a cancellation stops: cancel's
// cause says who stopped it (errCancelled, errShutdown).
type execution struct {
	cancel context.CancelCauseFunc
	owner  string
}

// The causes with which a run is stopped.
var (
	errCancelled = errors.New("cancelled by the client")
	errShutdown  = errors.New("the server shut down while the task ran: send the message again")
)

// request is what one A2A message asks.
type request struct {
	text string
	data json.RawMessage // the first data part, if any
	Task                 // the task it is a turn of
}

// outcome is what a run produced.
type outcome struct {
	answer string
	value  json.RawMessage // a validated answer
	usage  provider.Usage
	// earlier is the part of usage earlier runs of the task's turn spent
	// (agent.Output.Earlier): the runs before its questions were answered.
	earlier provider.Usage
	// cost and earlierCost are what usage and earlier cost in US dollars,
	// at the prices the agent was given (agent.Output.Cost, EarlierCost).
	cost, earlierCost float64
}

type runFunc func(ctx context.Context, in request) (outcome, error)

// NewServer serves a over A2A. Each message runs a once, with the task's
// context as the run's thread (agent.WithThread; per owner), so that a
// resident sub-agent scoped with subagent.PerThread keeps one conversation
// per A2A context; a itself is shared by every request.
//
// An agent that keeps its conversation between runs, such as a
// *agent.React, is refused: every owner's and every context's messages
// would reach the others' runs. Build one per task with NewPerTask, or
// serve a resident scoped per context with NewToolServer.
func NewServer(a agent.Agent, opts ...Option) (*Server, error) {
	if a == nil {
		return nil, errors.New("a2a: NewServer: nil agent")
	}
	if _, ok := a.(interface{ History() []provider.Message }); ok {
		return nil, fmt.Errorf("a2a: NewServer: the agent (%T) keeps its conversation between runs, so what one owner or context tells it would reach every other's runs: "+
			"build an agent per task with a2a.NewPerTask, or serve a resident kept per context with a2a.NewToolServer(subagent.FromScoped(…, subagent.PerThread, …))", a)
	}
	var c config
	if n, ok := a.(interface{ Name() string }); ok {
		c.name = n.Name()
	}
	if r, ok := a.(interface{ Tools() *tool.Registry }); ok && r.Tools() != nil {
		for _, t := range r.Tools().Tools() {
			c.skills = append(c.skills, skillOf(t.Definition()))
		}
	}
	return newServer(c, func(ctx context.Context, in request) (outcome, error) { return runAgent(ctx, a, in) }, opts)
}

// Task is what a Builder is told of the task it builds an agent for.
type Task struct {
	// Owner is the owner WithAuthorize named for the request ("" without
	// it).
	Owner string
	// ContextID and TaskID are the task's A2A context and id.
	ContextID, TaskID string
	// Thread is the run's thread (agent.Thread): one per owner and
	// context, and no other's. It names the conversation of the context
	// for what keeps one, such as a resident scoped with
	// subagent.PerThread, or the application's own records.
	Thread string
	// Resumed reports that the run continues a task that waited for
	// input: the agent replays its journal up to the question, then goes
	// on with the answer. Build it as for the first run.
	Resumed bool
}

// Builder builds the agent that runs one task: it is called for each
// message that runs one (the one that starts the task, and each answer
// that resumes it), and the agent is dropped after the run (closed if it
// implements io.Closer). It may be called for several tasks at once. An
// error fails the task, its text read by the client: say what to do.
type Builder func(ctx context.Context, t Task) (agent.Agent, error)

// NewPerTask serves over A2A an agent built for each task by build, so
// that nothing one task's agent keeps, such as a *agent.React's
// conversation, reaches another task, owner or context. The card's name
// is WithName's (required). Its runs are those NewServer makes.
func NewPerTask(build Builder, opts ...Option) (*Server, error) {
	if build == nil {
		return nil, errors.New("a2a: NewPerTask: nil builder: pass a function that builds the agent of a task")
	}
	run := func(ctx context.Context, in request) (outcome, error) {
		a, err := build(ctx, in.Task)
		if err == nil && a == nil {
			err = errors.New("the builder returned no agent")
		}
		if err != nil {
			return outcome{}, fmt.Errorf("the agent for this task could not be built: %w", err)
		}
		if c, ok := a.(io.Closer); ok {
			defer c.Close()
		}
		return runAgent(ctx, a, in)
	}
	return newServer(config{}, run, opts)
}

// runAgent runs a on what the message asks.
func runAgent(ctx context.Context, a agent.Agent, in request) (outcome, error) {
	text := in.text
	if text == "" && len(in.data) > 0 {
		text = string(in.data)
	}
	out, err := a.Run(ctx, agent.Input{Text: text})
	o := outcome{answer: out.Answer, usage: out.TotalUsage(), earlier: out.Earlier, cost: out.Cost, earlierCost: out.EarlierCost}
	if out.Value != nil {
		if b, merr := json.Marshal(out.Value); merr == nil {
			o.value = b
		}
	}
	return o, err
}

// NewToolServer serves t over A2A, each message a call of t: a data part
// that is a JSON object is the call's arguments; otherwise the text is
// its task ({"task": text}, the arguments a sub-agent tool takes). A
// resident sub-agent (subagent.FromAgent) keeps one conversation for all
// clients; scope it (subagent.FromScoped with subagent.PerThread) and each
// A2A context has its own. A validated sub-agent's answer is sent as a
// data part.
func NewToolServer(t tool.Tool, opts ...Option) (*Server, error) {
	if t == nil {
		return nil, errors.New("a2a: NewToolServer: nil tool")
	}
	def := t.Definition()
	c := config{name: def.Name, description: def.Description, skills: []sdk.AgentSkill{skillOf(def)}}
	run := func(ctx context.Context, in request) (outcome, error) {
		args := in.data
		if len(args) == 0 || args[0] != '{' {
			b, _ := json.Marshal(map[string]string{"task": in.text})
			args = b
		}
		id := "a2a_" + in.TaskID
		res, err := t.Call(ctx, tool.Call{ID: id, Name: def.Name, Arguments: args})
		o := outcome{answer: res.Content, usage: res.Usage}
		if err == nil && res.IsError {
			err = errors.New(res.Content)
		}
		if err == nil && res.Value != nil {
			if raw, ok := res.Value.(json.RawMessage); ok {
				o.value = raw
			} else if b, merr := json.Marshal(res.Value); merr == nil {
				o.value = b
			}
		}
		return o, err
	}
	return newServer(c, run, opts)
}

func skillOf(d tool.Definition) sdk.AgentSkill {
	return sdk.AgentSkill{ID: d.Name, Name: d.Name, Description: d.Description, Tags: []string{"deputy"}}
}

func newServer(c config, run runFunc, opts []Option) (*Server, error) {
	c.maxBody = DefaultMaxBodyBytes
	c.maxRuns = DefaultMaxRuns
	c.maxSeen, c.seenTTL = DefaultMaxSeenMessages, DefaultSeenMessageTTL
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.name == "" {
		return nil, errors.New("a2a: the agent has no name: give one with WithName")
	}
	if c.description == "" {
		c.description = "The deputy agent " + c.name + "."
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	s := &Server{cfg: c, run: run, running: map[string]*execution{}}
	if c.st == nil {
		st, err := store.New(memory.New())
		if err != nil {
			return nil, err
		}
		s.cfg.st, s.ownStore = st, true
	}
	s.card = sdk.AgentCard{
		Name:               c.name,
		Description:        c.description,
		Version:            cmp.Or(c.version, "1.0.0"),
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Capabilities:       sdk.AgentCapabilities{Streaming: true},
		Skills:             c.skills,
	}
	if s.card.Skills == nil {
		s.card.Skills = []sdk.AgentSkill{{ID: c.name, Name: c.name, Description: c.description, Tags: []string{"deputy"}}}
	}
	if c.card != nil {
		c.card(&s.card)
	}
	var durable *store.Store
	if !s.ownStore {
		durable = s.cfg.st
	}
	tasks := taskStore{st: s.cfg.st, log: c.logger, seen: newSeenMessages(c.maxSeen, c.seenTTL, durable, c.logger)}
	h := a2asrv.NewHandler(executor{s},
		a2asrv.WithTaskStore(tasks),
		a2asrv.WithLogger(c.logger),
		a2asrv.WithCapabilityChecks(&s.card.Capabilities),
		a2asrv.WithConcurrencyConfig(limiter.ConcurrencyConfig{MaxExecutions: c.maxRuns, GetMaxExecutions: func(string) int { return c.maxRunsPerOwner }}))
	h = ownedTasks{RequestHandler: h, tasks: tasks, room: s.room}
	s.bindings = newBindings(h)
	return s, nil
}

// Card returns the agent card the server serves, with its interfaces at
// base (the URL clients reach the server at): JSON-RPC at base and
// HTTP+JSON at base/rest, for A2A 1.0 first and then for 0.3.
func (s *Server) Card(base string) *sdk.AgentCard {
	c := s.card
	base = strings.TrimSuffix(cmp.Or(s.cfg.url, base), "/")
	legacy := func(url string, binding sdk.TransportProtocol) *sdk.AgentInterface {
		i := sdk.NewAgentInterface(url, binding)
		i.ProtocolVersion = a2av0.Version
		return i
	}
	c.SupportedInterfaces = []*sdk.AgentInterface{
		sdk.NewAgentInterface(base, sdk.TransportProtocolJSONRPC),
		sdk.NewAgentInterface(base+"/rest", sdk.TransportProtocolHTTPJSON),
		legacy(base, sdk.TransportProtocolJSONRPC),
		legacy(base+"/rest", sdk.TransportProtocolHTTPJSON),
	}
	return &c
}

// ServeHTTP serves the card to anyone, and the A2A methods to the
// requests Authorize lets in.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == a2asrv.WellKnownAgentCardPath {
		s.serveCard(w, r)
		return
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		httpError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	ctx := r.Context()
	if s.cfg.authorize != nil {
		owner, err := s.cfg.authorize(r)
		if err != nil {
			var ref *Refusal
			if errors.As(err, &ref) && ref != nil {
				httpError(w, ref.status(), ref.Message)
			} else {
				httpError(w, http.StatusUnauthorized, "not authorized")
			}
			return
		}
		if len(owner) > MaxOwnerBytes {
			s.cfg.logger.Error("a2a: Authorize named an owner longer than MaxOwnerBytes", "bytes", len(owner))
			httpError(w, http.StatusInternalServerError, "the server could not tell who the request is from")
			return
		}
		ctx = limiter.AttachScope(context.WithValue(ctx, ownerKey{}, owner), owner)
	}
	r = r.WithContext(ctx)
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	s.bindings.serve(w, r, body)
}

// readBody reads r's body whole, within the server's bound, and puts it
// back for the binding to decode: a body over the bound is answered 413
// here, saying so, instead of reaching the binding cut short, which reads
// it as malformed JSON. It reports whether r is still to be served.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over this server's limit of %d bytes", s.cfg.maxBody))
		} else {
			httpError(w, http.StatusBadRequest, "the request body could not be read")
		}
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// room reports whether the runs in progress leave room, within
// WithMaxRuns's bounds, for another of owner's.
func (s *Server) room(owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.running) >= s.cfg.maxRuns {
		return false
	}
	if s.cfg.authorize == nil || s.cfg.maxRunsPerOwner == 0 {
		return true // the SDK bounds each owner only when one is named
	}
	n := 0
	for _, e := range s.running {
		if e.owner == owner {
			n++
		}
	}
	return n < s.cfg.maxRunsPerOwner
}

// Close cancels the runs in progress and waits for them to end, their
// tasks stored as canceled, then closes the store the server made for
// itself (not one given with WithStore). Requests after Close are refused.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, e := range s.running {
		e.cancel(errShutdown)
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.ownStore {
		return s.cfg.st.Close()
	}
	return nil
}

// executor runs the server's agent for the SDK's request handler.
type executor struct{ s *Server }

func runKey(owner string, task sdk.TaskID) string { return owner + "\x1f" + string(task) }

// thread is the thread a task's run belongs to: its context, per owner.
// The owner "" keeps its contexts' own names, but for one that reads as a
// name made here (which another owner's context may be kept under) and
// one that a store key cannot hold (a control character). The owner's
// length goes into the sum, so that no owner and context read as another
// pair.
func thread(owner, contextID string) string {
	if owner == "" && len(contextID) <= maxIDBytes && !strings.HasPrefix(contextID, "a2a_") && printable(contextID) {
		return contextID
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d:%s\x1f%s", len(owner), owner, contextID)))
	return "a2a_" + hex.EncodeToString(sum[:16])
}

// printable reports whether s is UTF-8 text without control characters,
// which a thread's name may be as it is: the store takes it in its keys.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// journalTurn names the journal of a task's turn.
func journalTurn(owner string, task sdk.TaskID) string {
	sum := sha256.Sum256([]byte(owner + "\x1f" + string(task)))
	return "a2a/" + hex.EncodeToString(sum[:16])
}

func (x executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		x.s.execute(ctx, ec, yield)
	}
}

func (s *Server) execute(ctx context.Context, ec *a2asrv.ExecutorContext, yield func(sdk.Event, error) bool) {
	owner := ownerFrom(ctx)
	if len(ec.ContextID) > maxIDBytes {
		yield(nil, fmt.Errorf("%w: a contextId of %d bytes: use at most %d", sdk.ErrInvalidParams, len(ec.ContextID), maxIDBytes))
		return
	}
	task := Task{Owner: owner, ContextID: ec.ContextID, TaskID: string(ec.TaskID), Thread: thread(owner, ec.ContextID)}
	in := requestOf(ec.Message)
	in.Task = task
	var pending *tool.Interrupted
	var answers []tool.Answer
	if st := ec.StoredTask; st != nil {
		if st.Status.State != sdk.TaskStateInputRequired {
			yield(nil, fmt.Errorf("%w: task %s is %s, not waiting for input: send a new message without its taskId (the same contextId continues the conversation)",
				sdk.ErrInvalidParams, st.ID, strings.ToLower(strings.TrimPrefix(string(st.Status.State), "TASK_STATE_"))))
			return
		}
		pending = pendingOf(st)
		// The resumed run is the turn that asked, run again with its
		// input: the message that started the task.
		in = requestOf(firstUserMessage(st))
		in.Task = task
		in.Resumed = true
		var err error
		answers, err = answersFrom(ec.Message, pending)
		if err != nil {
			s.askAgain(ec, pending, err, yield)
			return
		}
	} else {
		if strings.TrimSpace(in.text) == "" && len(in.data) == 0 {
			// The agent would be run on an empty message, which models
			// refuse, or answer at a cost.
			yield(nil, fmt.Errorf("%w: the message has no text or data part for the agent to read", sdk.ErrInvalidParams))
			return
		}
		if c := claimFrom(ctx); c != nil && !c.take() {
			// The request gave up its claim on the message's id before
			// this run began: a copy of the message may have started the
			// task since.
			yield(nil, errors.New("the request ended before its task started: send the message again"))
			return
		}
		if !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if pending != nil {
			// The task keeps waiting, for a server on the same store.
			s.askAgain(ec, pending, errors.New("the server is shutting down: send it again"), yield)
			return
		}
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateFailed, agentText(ec, "the server is shutting down: send the message again later")), nil)
		return
	}
	base, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rctx := base
	exec := &execution{cancel: cancel, owner: owner}
	key := runKey(owner, ec.TaskID)
	s.running[key] = exec
	s.wg.Add(1) // done once the SDK has stored what the run ends with
	s.settling.Store(ec, struct{}{})
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
	}()

	turn := journalTurn(owner, ec.TaskID)
	j, err := s.cfg.st.Journal(rctx, turn)
	if err != nil {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateFailed, agentText(ec, "the server could not open the task's journal: "+told(s.cfg.logger, task, err))), nil)
		return
	}
	// The run acts for the owner and in the thread the task belongs to:
	// a policy the served agent runs under reads them on every check.
	rctx = agent.WithJournal(agent.WithThread(agent.WithOwner(rctx, owner), task.Thread), j)
	if pending != nil {
		rctx, err = tool.Resume(rctx, pending, answers...)
		if err != nil {
			s.askAgain(ec, pending, err, yield)
			return
		}
	}
	if !yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateWorking, nil), nil) {
		return
	}

	q := newQueue()
	rctx = event.WithSink(rctx, q)
	var (
		out    outcome
		runErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		defer q.close()
		defer func() {
			if p := recover(); p != nil {
				// What the panic says is for the server's operator, not
				// for a client: it may name internals, or secrets.
				s.cfg.logger.Error("a2a: the served agent panicked", "task", ec.TaskID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				runErr = errors.New("the agent failed unexpectedly (it panicked); the server logged what happened")
			}
		}()
		out, runErr = s.run(rctx, in)
	}()
	stop := func() {
		cancel(nil)
		<-done
	}
	streamed := false
	for {
		batch, text, ok := q.next()
		if !ok {
			break
		}
		for _, e := range batch {
			raw, err := e.MarshalJSON()
			if err != nil {
				continue
			}
			ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateWorking, nil)
			ev.Metadata = map[string]any{EventKey: generic(json.RawMessage(raw))}
			if !yield(ev, nil) {
				stop()
				return
			}
		}
		if text != "" {
			ev := answerChunk(ec, []*sdk.Part{sdk.NewTextPart(text)}, streamed, false)
			streamed = true
			if !yield(ev, nil) {
				stop()
				return
			}
		}
	}
	<-done

	meta := map[string]any{UsageKey: generic(usageMeta(out.usage, out.earlier, out.cost, out.earlierCost)), EventKey: nil}
	var in2 *tool.Interrupted
	stopped := context.Cause(base)
	switch {
	case runErr != nil && (errors.Is(stopped, errCancelled) || errors.Is(stopped, errShutdown) || ctx.Err() != nil):
		// Stopped from outside: whatever the run ended with, a question
		// it asked included, the task is cancelled, with what it spent.
		_ = s.cfg.st.DeleteJournal(context.WithoutCancel(ctx), turn)
		meta[InterruptsKey] = nil
		why := "cancelled"
		if errors.Is(stopped, errCancelled) || errors.Is(stopped, errShutdown) {
			why = stopped.Error()
		}
		ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, agentText(ec, why))
		ev.Metadata = meta
		yield(ev, nil)
	case errors.As(runErr, &in2):
		meta[InterruptsKey] = generic(in2.Interrupts)
		ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateInputRequired, questionMessage(ec, in2, ""))
		ev.Metadata = meta
		yield(ev, nil)
		return
	case runErr == nil:
		_ = s.cfg.st.DeleteJournal(context.WithoutCancel(ctx), turn)
		parts := []*sdk.Part{sdk.NewTextPart(out.answer)}
		if len(out.value) > 0 {
			var v any
			if json.Unmarshal(out.value, &v) == nil {
				p := sdk.NewDataPart(v)
				p.MediaType = "application/json"
				parts = []*sdk.Part{p}
			}
		}
		if !yield(answerChunk(ec, parts, false, true), nil) {
			return
		}
		meta[InterruptsKey] = nil
		ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil)
		ev.Metadata = meta
		yield(ev, nil)
	default:
		_ = s.cfg.st.DeleteJournal(context.WithoutCancel(ctx), turn)
		meta[InterruptsKey] = nil
		ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateFailed, agentText(ec, told(s.cfg.logger, task, runErr)))
		ev.Metadata = meta
		yield(ev, nil)
	}
}

// askAgain answers a message that could not be used as the answers a
// task waits for: the task still waits, and its status says what was wrong.
func (s *Server) askAgain(ec *a2asrv.ExecutorContext, pending *tool.Interrupted, why error, yield func(sdk.Event, error) bool) {
	ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateInputRequired, questionMessage(ec, pending, "That answer could not be used ("+why.Error()+"). "))
	ev.Metadata = map[string]any{InterruptsKey: generic(pending.Interrupts)}
	yield(ev, nil)
}

// Cancel stops the task's run, if one is in progress: the run then ends
// the task itself, cancelled, with the usage it spent. A task that waits
// for input is cancelled here; its journal is deleted once that is
// stored (Cleanup), so that an answer racing the cancellation never
// finds the journal gone from under a task still waiting.
func (x executor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		s := x.s
		s.mu.Lock()
		e := s.running[runKey(ownerFrom(ctx), ec.TaskID)]
		if e != nil {
			e.cancel(errCancelled)
		}
		s.mu.Unlock()
		if e != nil {
			return
		}
		ev := sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, agentText(ec, errCancelled.Error()))
		ev.Metadata = map[string]any{InterruptsKey: nil, EventKey: nil}
		yield(ev, nil)
	}
}

// Cleanup runs once the SDK has stored what an execution or cancellation
// ended with: it releases Close's wait for a run and a first message's
// claim on its id when the run stored no task, and deletes the journal of
// a task a cancellation ended.
func (x executor) Cleanup(ctx context.Context, ec *a2asrv.ExecutorContext, result sdk.SendMessageResult, err error) {
	s := x.s
	if ec.Message != nil {
		if c := claimFrom(ctx); c != nil {
			// A run that did not store its task gives its claim on the
			// message's id up, for a copy of the message to start it.
			c.release(ctx, false)
		}
		if _, ok := s.settling.LoadAndDelete(ec); ok {
			s.wg.Done()
		}
		return
	}
	if t, ok := result.(*sdk.Task); ok && err == nil && t.Status.State == sdk.TaskStateCanceled {
		_ = s.cfg.st.DeleteJournal(context.WithoutCancel(ctx), journalTurn(ownerFrom(ctx), ec.TaskID))
	}
}

func answerChunk(ec *a2asrv.ExecutorContext, parts []*sdk.Part, appendTo, last bool) *sdk.TaskArtifactUpdateEvent {
	info := ec.TaskInfo()
	return &sdk.TaskArtifactUpdateEvent{
		TaskID: info.TaskID, ContextID: info.ContextID,
		Artifact:  &sdk.Artifact{ID: AnswerArtifact, Name: AnswerArtifact, Parts: parts},
		Append:    appendTo,
		LastChunk: last,
	}
}

func agentText(ec *a2asrv.ExecutorContext, text string) *sdk.Message {
	return sdk.NewMessageForTask(sdk.MessageRoleAgent, ec, sdk.NewTextPart(text))
}

// questionMessage is the status message of a task waiting for input: the
// questions as text, after prefix, and as data ({"interrupts":[…]}).
func questionMessage(ec *a2asrv.ExecutorContext, in *tool.Interrupted, prefix string) *sdk.Message {
	var b strings.Builder
	b.WriteString(prefix)
	for i, it := range in.Interrupts {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(cmp.Or(it.Message, "The agent asks for input ("+it.Reason+")."))
	}
	if len(in.Interrupts) == 1 && in.Interrupts[0].Reason == tool.ApprovalReason {
		b.WriteString(" Answer yes or no.")
	}
	data := generic(map[string]any{"interrupts": in.Interrupts})
	return sdk.NewMessageForTask(sdk.MessageRoleAgent, ec, sdk.NewTextPart(b.String()), sdk.NewDataPart(data))
}

// usageMeta is a task's UsageKey metadata: u, what it cost (costUsd, as
// in the usage of RUN_FINISHED, when priced), and under "earlier" the
// part of both spent before the task's last question was answered.
func usageMeta(u, earlier provider.Usage, cost, earlierCost float64) map[string]any {
	m := map[string]any{"requests": u.Requests, "inputTokens": u.InputTokens, "outputTokens": u.OutputTokens, "totalTokens": u.Tokens()}
	if u.CacheReadTokens != 0 {
		m["cachedInputTokens"] = u.CacheReadTokens
	}
	if u.CacheWriteTokens != 0 {
		m["cacheWriteInputTokens"] = u.CacheWriteTokens
	}
	if cost > 0 {
		m["costUsd"] = cost
	}
	if !earlier.IsZero() || earlierCost > 0 {
		m["earlier"] = usageMeta(earlier, provider.Usage{}, earlierCost, 0)
	}
	return m
}

// requestOf reads what a message asks: its text parts, joined, and its
// first data part.
func requestOf(m *sdk.Message) request {
	var r request
	if m == nil {
		return r
	}
	var texts []string
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		switch c := p.Content.(type) {
		case sdk.Text:
			texts = append(texts, string(c))
		case sdk.Data:
			if r.data == nil {
				if b, err := json.Marshal(c.Value); err == nil {
					r.data = b
				}
			}
		}
	}
	r.text = strings.Join(texts, "\n")
	return r
}

func firstUserMessage(t *sdk.Task) *sdk.Message {
	for _, m := range t.History {
		if m != nil && m.Role == sdk.MessageRoleUser {
			return m
		}
	}
	return nil
}

// pendingOf reads the questions a task waits on from its metadata.
func pendingOf(t *sdk.Task) *tool.Interrupted {
	in := &tool.Interrupted{}
	raw, err := json.Marshal(t.Metadata[InterruptsKey])
	if err == nil {
		_ = json.Unmarshal(raw, &in.Interrupts)
	}
	return in
}

// generic returns v as the plain maps, slices and values JSON decodes to:
// the SDK copies tasks with encoding/gob, which takes nothing else inside
// metadata and data parts.
func generic(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var g any
	if json.Unmarshal(raw, &g) != nil {
		return nil
	}
	return g
}
