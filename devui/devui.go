// Package devui is a run-tree viewer in the browser for an agent served
// over AG-UI (package agui): a page that starts runs through the AG-UI
// endpoint and draws the delegation tree as its events arrive — the lead,
// its sub-agents and theirs, side by side when they run in parallel — with
// each node's status, wall time, tokens, cached share, cost, model,
// streamed text and tool calls; that shows a suspended run's questions
// where they were asked, with a form for the answer, and resumes the run
// with it; that lists stored threads and redraws the trees of their past
// runs, each answered question with its answer, who gave it and when;
// and that re-runs a turn from a call of the lead or of one of its
// sub-agents, its task or answer edited, the rest of the turn kept
// (WithRerun); and that draws the tree of a run recorded in a cassette
// (WithCassette, package cassette).
//
// A node's tokens and cost are those of the whole turn: after a resume,
// what it spent before the question too (the events of the resumed run
// report the whole turn, and mark the part before it, which the node
// shows); a re-run's lead shows what the re-run spent.
//
//	h, _ := agui.NewPerRequest(build, agui.WithThreads(st))
//	v, _ := devui.New(h, devui.WithStore(st))
//	mux.Handle("/agui", h)
//	mux.Handle("/devui/", http.StripPrefix("/devui", v))
//
// The page and its script are embedded: nothing is fetched from elsewhere,
// and there is no build step. The viewer sends its runs to the AG-UI
// handler through itself (POST /run), so that, given a store, it keeps each
// run's events under its thread (WithStore) and a restarted server still
// draws the thread's trees. Runs served at the AG-UI endpoint directly cost
// nothing more: nothing is recorded for the viewer unless it starts the run
// and a store is set.
//
// The viewer answers only its own page: not a page of another site (a
// form, a fetch, a beacon), whose requests that would change something are
// refused, nor one that rebinds its own name to the viewer's address, as
// only the hosts the viewer was told it serves are answered (loopback
// names, the listener's address, and WithHosts); see Handler.ServeHTTP.
//
// The viewer is a development tool. Without WithAuthorize whoever reaches
// it reads the runs it recorded, as a threadId is a bearer secret to the
// AG-UI handler without agui.WithAuthorize; give both the same function to
// serve it to more than one person.
package devui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/sameorigin"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

//go:embed assets
var assets embed.FS

// Limits of what the viewer records and serves.
const (
	// MaxRunLogBytes bounds the events recorded of one run; a run that
	// sends more is recorded up to the bound and marked truncated.
	MaxRunLogBytes = 4 << 20
	// MaxRunsListed bounds one page of a thread's recorded runs (GET
	// /runs/{threadId}?limit=N); the newest come first.
	MaxRunsListed = 100
	// maxBodyBytes bounds a run request read to learn its thread.
	maxBodyBytes = agui.DefaultMaxBodyBytes
)

// Handler serves the viewer. Build it with New.
type Handler struct {
	agui      *agui.Handler
	rerun     agui.Builder // WithRerun's; nil: no re-runs
	runs      http.Handler // the AG-UI handler
	threads   http.Handler // its Threads
	store     *store.Store
	authorize agui.Authorize
	log       *slog.Logger
	mux       *http.ServeMux
	guard     *sameorigin.Guard
	cassette  *cassette.Cassette // WithCassette's; nil: none
}

type config struct {
	cassette  *cassette.Cassette
	rerun     agui.Builder
	store     *store.Store
	authorize agui.Authorize
	log       *slog.Logger
	guard     *sameorigin.Guard
}

// Option configures New.
type Option func(*config) error

// WithStore records the events of each run started from the viewer in st,
// under its thread (and owner, WithAuthorize), so that the viewer redraws
// past runs after a restart. Give it the store the AG-UI handler keeps its
// threads in (agui.WithThreads), so that the threads it lists have trees.
func WithStore(st *store.Store) Option {
	return func(c *config) error {
		if st == nil {
			return errors.New("devui: WithStore(nil): pass the store, or leave the option out to record nothing")
		}
		c.store = st
		return nil
	}
}

// WithAuthorize decides who may read the runs the viewer recorded, and
// keeps them per owner, as agui.WithAuthorize does for threads: give both
// handlers the same function.
func WithAuthorize(fn agui.Authorize) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("devui: WithAuthorize(nil): pass a function, or leave the option out")
		}
		c.authorize = fn
		return nil
	}
}

// WithRerun lets a person re-run a turn of a stored thread from one of the
// lead's sub-agent calls: with the call's task edited, or its answer. The
// viewer builds the lead with build, as the AG-UI handler does, and runs
// it on the turn cut at that call: the model's answer that made the call
// and the other calls' results are kept (no model call, no tool run
// again), the edited call runs anew (or, with its answer edited, does not
// run), and the lead goes on from there. The re-run streams to the page
// like any run and is kept beside the original in the thread's recorded
// runs (WithStore); the thread's own conversation stays as it was.
//
// A call one of the lead's sub-agents made (to its own sub-agent, or to a
// tool) is re-run the same way one level down, given the run it is in was
// recorded (WithStore): the sub-agent's turns are rebuilt from the run's
// events and cut at the call, the sub-agent goes on from there
// (subagent.SubAgentTool.Rerun), and the lead goes on from its call to the
// sub-agent with what it answers now. A sub-agent built per call is
// re-run so (FromFactory, FromReact); a resident keeps its own
// conversation and is refused. The lead runs the call to the sub-agent
// again within its budget, as it ran it the first time.
//
// A re-run goes on with the turn: the lead's token and cost limits
// (agent.WithTokenLimit, agent.WithCostLimit) count what the turn had
// spent before the point it goes on from — the model calls the re-run
// keeps the answers of, and the calls it keeps the results of — as read
// from the recorded run (fromRunId), so the turn, its part kept and the
// re-run, stays within them. A re-run that names no recorded run reads the
// one the viewer recorded that holds the call (WithStore): the call's id,
// or the sub-agent's invocation, is in one run of the thread, or the
// re-run is refused until it names one; only a turn the viewer recorded
// no run of (one served past it, or without a store) counts nothing spent
// before it. What the re-run reaches that asks a person
// again (an approval after the edited call) ends it there: nothing is done
// without the person, and a re-run, not a run of the thread, is not resumed.
func WithRerun(build agui.Builder) Option {
	return func(c *config) error {
		if build == nil {
			return errors.New("devui: WithRerun(nil): pass the Builder the AG-UI handler builds its agent with")
		}
		c.rerun = build
		return nil
	}
}

// WithHosts names the hosts the viewer answers to besides loopback names
// (localhost and its subdomains, loopback addresses) and the address a
// request arrived at: a name ("devbox.local", any port) or a name and a
// port ("devbox.local:8080"). A request naming any other Host is refused
// with 421 Misdirected Request: a page of another site that rebinds its own
// name to the viewer's address (DNS rebinding) reads nothing and runs
// nothing. Give the AG-UI handler the same names (agui.WithHosts): the
// viewer passes runs to it.
func WithHosts(hosts ...string) Option {
	return func(c *config) error {
		if len(hosts) == 0 {
			return errors.New("devui: WithHosts(): name the hosts to answer to, or leave the option out")
		}
		for _, h := range hosts {
			if err := c.guard.AddHost(h); err != nil {
				return errors.New("devui: WithHosts: " + err.Error())
			}
		}
		return nil
	}
}

// WithLogger logs what the viewer could not record.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("devui: WithLogger(nil): pass a logger, or leave the option out")
		}
		c.log = l
		return nil
	}
}

// New returns the viewer of the runs h serves.
func New(h *agui.Handler, opts ...Option) (*Handler, error) {
	if h == nil {
		return nil, errors.New("devui: New(nil): pass the AG-UI handler whose runs to show")
	}
	c := config{guard: &sameorigin.Guard{Where: sameorigin.Everywhere, JSON: true, HostsOption: "devui.WithHosts and agui.WithHosts"}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	d := &Handler{agui: h, rerun: c.rerun, runs: h, threads: h.Threads(), store: c.store, authorize: c.authorize, log: c.log, mux: http.NewServeMux(), guard: c.guard, cassette: c.cassette}
	static, _ := fs.Sub(assets, "assets")
	d.mux.Handle("GET /", http.FileServerFS(static))
	d.mux.HandleFunc("POST /run", d.serveRun)
	threads := http.StripPrefix("/threads", d.threads)
	for _, m := range []string{"GET", "DELETE", "POST"} {
		d.mux.Handle(m+" /threads/", threads)
	}
	d.mux.HandleFunc("DELETE /threads/{thread}", d.serveDelete)
	d.mux.HandleFunc("GET /runs/{thread}", d.serveRuns)
	d.mux.HandleFunc("POST /rerun", d.serveRerun)
	d.mux.HandleFunc("GET /cassette", d.serveCassette)
	d.mux.HandleFunc("GET /config", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]bool{"rerun": d.rerun != nil, "recorded": d.store != nil, "cassette": d.cassette != nil})
	})
	return d, nil
}

// ServeHTTP serves the page, its assets and its calls:
//
//	GET  /                the page
//	POST /run             a run, passed to the AG-UI handler (recorded WithStore)
//	GET  /threads/…       the AG-UI handler's Threads
//	GET  /runs/{threadId} {"runs":[{"runId":…,"events":[…],"truncated":…,"rerun":…,"answers":[…]},…],"older":N}
//	                      ?limit=N (default 20, at most MaxRunsListed) &before=N (a page's older)
//	POST /rerun           {"threadId","runId","fromRunId","step","toolCallId","task"|"answer"}: a re-run's events (WithRerun)
//	GET  /cassette        {"runs":[{"runId":"cassette","events":[…]}]}: a recorded run's tree (WithCassette)
//	GET  /config          {"rerun":…,"recorded":…,"cassette":…}
//
// It answers only its own page: a request naming a Host it was not told it
// serves (WithHosts) is refused with 421, one that would change something
// (any method but GET, HEAD and OPTIONS) with 403 when a page of another
// origin sent it (Origin, Sec-Fetch-Site) and with 415 unless its body is
// application/json, which no form and no request without a preflight can
// send.
func (d *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := d.guard.Check(r); err != nil {
		httpError(w, err.Status, "devui: "+err.Msg)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// serveRun passes a run to the AG-UI handler and, with a store, records
// its events as they stream.
func (d *Handler) serveRun(w http.ResponseWriter, r *http.Request) {
	if d.store == nil {
		d.runs.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	// The AG-UI handler gets the body whole, what was read and the rest:
	// it applies its own bound.
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	var in struct {
		ThreadID string        `json:"threadId"`
		RunID    string        `json:"runId"`
		Resume   []tool.Answer `json:"resume"`
	}
	if len(body) > maxBodyBytes || json.Unmarshal(body, &in) != nil || in.ThreadID == "" {
		d.runs.ServeHTTP(w, r) // which says what is wrong with it, or runs it unrecorded
		return
	}
	owner := ""
	if d.authorize != nil {
		if owner, err = d.authorize(r, in.ThreadID); err != nil {
			d.runs.ServeHTTP(w, r) // which refuses it as it refuses it
			return
		}
	}
	// Where the run's turn starts in the thread's conversation, so that a
	// re-run finds the turn whatever ids the model gave its calls.
	turn := 0
	if th, err := d.agui.ReadThread(r.Context(), owner, in.ThreadID); err == nil {
		turn = len(th.Messages)
		if len(th.Interrupts) > 0 {
			turn-- // the message that started the suspended run: this run resumes it
		}
	}
	asked := time.Now()
	rec := &recorder{ResponseWriter: w}
	d.runs.ServeHTTP(rec, r)
	if rec.status != http.StatusOK || len(rec.events) == 0 {
		return
	}
	rl := runLog{RunID: in.RunID, Turn: turn, Events: rec.events, Truncated: rec.truncated}
	// The answers this run resumed with (the AG-UI handler took them: the
	// run streamed), so that a thread redrawn later shows each question
	// answered, by whom and when, not asking still.
	for _, a := range in.Resume {
		rl.Answers = append(rl.Answers, answerLog{Answer: a, By: owner, At: asked.UnixMilli()})
	}
	// The run has ended: its events are written even when its client left.
	if err := d.save(context.WithoutCancel(r.Context()), owner, in.ThreadID, rl); err != nil {
		d.log.Warn("devui: recording a run", "thread", in.ThreadID, "run", in.RunID, "err", err)
	}
}

// runLog is the record of one run.
type runLog struct {
	RunID string `json:"runId"`
	// Turn is where the run's turn starts in the thread's conversation:
	// the index of the message that started it.
	Turn      int               `json:"turn"`
	Events    []json.RawMessage `json:"events"`
	Truncated bool              `json:"truncated,omitempty"`
	// Rerun, on a re-run, says which call it re-ran and how.
	Rerun *rerunRequest `json:"rerun,omitempty"`
	// Answers, on a run that resumed a suspended one, are the answers it
	// was given to the questions the suspended run asked.
	Answers []answerLog `json:"answers,omitempty"`
}

// answerLog is one answer a person gave, as the viewer keeps it.
type answerLog struct {
	tool.Answer
	// By is the owner who answered (WithAuthorize), or "" when unknown.
	By string `json:"by,omitempty"`
	// At is when the answer reached the server, in Unix milliseconds.
	At int64 `json:"at"`
}

// recorder passes a run's response through and keeps its events, up to
// MaxRunLogBytes.
type recorder struct {
	http.ResponseWriter
	status    int
	partial   []byte // the frame being written
	events    []json.RawMessage
	size      int
	truncated bool
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
	rec.ResponseWriter.WriteHeader(status)
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status == http.StatusOK && !rec.truncated {
		rec.keep(p)
	}
	return rec.ResponseWriter.Write(p)
}

// keep takes the whole frames out of what was written: "data: <json>"
// lines, each event one line.
func (rec *recorder) keep(p []byte) {
	rec.partial = append(rec.partial, p...)
	for {
		i := bytes.IndexByte(rec.partial, '\n')
		if i < 0 {
			return
		}
		line := rec.partial[:i]
		rec.partial = rec.partial[i+1:]
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || !json.Valid(data) {
			continue
		}
		if rec.size+len(data) > MaxRunLogBytes {
			rec.truncated, rec.partial = true, nil
			return
		}
		rec.size += len(data)
		rec.events = append(rec.events, bytes.Clone(data))
	}
}

// Unwrap lets http.ResponseController reach the connection's writer, to
// flush each event and set write deadlines.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": strings.TrimSpace(msg)})
	_, _ = w.Write(b)
}

// refuse answers a request WithAuthorize's function refused, as the AG-UI
// handler does: a *agui.Refusal as it is, any other error with 403.
func refuse(w http.ResponseWriter, err error) {
	var ref *agui.Refusal
	if !errors.As(err, &ref) {
		httpError(w, http.StatusForbidden, err.Error())
		return
	}
	for k, vs := range ref.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := ref.Status
	if status == 0 {
		status = http.StatusForbidden
	}
	if ref.Body == nil {
		httpError(w, status, http.StatusText(status))
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(ref.Body)
}
