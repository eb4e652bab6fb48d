// Command durable shows a delegation tree surviving a crash. A lead agent
// fans out to 20 workers, one per chapter of a report, with a journal on
// the embedded store (one SQLite file, nothing to install). The first run
// is a child process that kills itself (SIGKILL) once some workers have
// finished and the others are still waiting for their model; the second
// run opens the same journal, runs the same turn again, and prints which
// workers were answered from the journal and which ran.
//
// It runs on scripted models that behave as real ones do: the lead decides
// from the conversation it is sent (no tool results yet: ask the workers;
// results: sum them up), names its calls afresh on every request (or, with
// -ids none or -ids restart, sends no ids or call_0, call_1, … every time),
// and each worker reads its task from its input. So it needs no key and no
// network.
//
//	go run ./examples/durable            # a fresh file in the temp directory
//	go run ./examples/durable -db my.db  # keep the file
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

const (
	chapters = 20
	// turn names the lead's turn: the run after a crash opens the journal
	// by the same name to find what had finished.
	turn = "report-summary-1"
	// crashEnv tells the first run, a child process, when to kill itself.
	crashEnv = "DEPUTY_DURABLE_CRASH_AFTER"
	task     = "Summarize the report, one worker per chapter."
)

var (
	dbFlag         = flag.String("db", "", "the store's file (default: a fresh one in the temp directory, removed at the end)")
	crashAfterFlag = flag.Int("crash-after", 8, "the first run kills itself when this many workers have finished")
	idsFlag        = flag.String("ids", "fresh", "how the lead's model names its tool calls: fresh (a new id every time, as real models do), none, or restart (call_0, call_1, … every time)")
)

func main() {
	flag.Parse()
	if n := os.Getenv(crashEnv); n != "" {
		k, err := strconv.Atoi(n)
		if err != nil {
			log.Fatalf("%s=%q: want a number of workers", crashEnv, n)
		}
		crash(*dbFlag, k, *idsFlag)
		return
	}
	if err := run(os.Stdout, *dbFlag, *crashAfterFlag, *idsFlag); err != nil {
		log.Fatal(err)
	}
}

// run is the example: the first run in a child process that is killed, the
// second here.
func run(w io.Writer, db string, crashAfter int, ids string) error {
	if crashAfter < 1 || crashAfter >= chapters {
		return fmt.Errorf("-crash-after %d: want 1 to %d, so that some workers finish and some do not", crashAfter, chapters-1)
	}
	if _, err := newLead(ids); err != nil {
		return err
	}
	if db == "" {
		dir, err := os.MkdirTemp("", "deputy-durable-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "deputy.db")
	}

	fmt.Fprintf(w, "run 1: the lead asks %d workers at once; the process kills itself once %d have finished\n", chapters, crashAfter)
	if err := firstRun(w, db, crashAfter, ids); err != nil {
		return err
	}

	st, err := open(db)
	if err != nil {
		return err
	}
	defer st.Close()
	lm, err := newLead(ids)
	if err != nil {
		return err
	}
	return secondRun(w, st, lm, &workers{model: workerModel}, nil)
}

// secondRun runs the turn again under its journal in st, the lead on lead
// and the workers on ws, and prints which workers were answered from the
// journal, which ran, and what the turn cost; also, when not nil, sees the
// run's events (a test's subagent.Tree).
func secondRun(w io.Writer, st *store.Store, lead provider.Provider, ws *workers, also event.Sink) error {
	ctx := context.Background()
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}
	j, err := st.Journal(ctx, turn)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "run 2: the same turn again, under the same journal")
	lm := &counted{Provider: lead}
	team, err := team(lm, ws)
	if err != nil {
		return err
	}
	out, err := team.Run(agent.WithJournal(ctx, j), agent.Input{Text: task})
	if err != nil {
		return err
	}
	ran := ws.asked()
	var replayed []int
	for i := 1; i <= chapters; i++ {
		if !slices.Contains(ran, i) {
			replayed = append(replayed, i)
		}
	}
	fmt.Fprintf(w, "replayed from the journal (no model call): %d workers, chapters %v\n", len(replayed), replayed)
	fmt.Fprintf(w, "ran: %d workers, chapters %v\n", len(ran), ran)
	fmt.Fprintf(w, "model calls in run 2: lead %d (its plan came from the journal), workers %d\n", lm.calls.Load(), len(ws.calls()))
	// The run reports the whole turn: what run 1 paid for, counted from
	// the journal (Output.Earlier), and what it paid for itself.
	all := out.TotalUsage()
	fmt.Fprintf(w, "usage of the whole turn: lead %d requests, workers %d requests, %d tokens\n", out.Usage.Requests, out.ChildUsage.Requests, all.Tokens())
	fmt.Fprintf(w, "of which run 1 spent (counted from the journal, not paid again): %d requests, %d tokens\n", out.Earlier.Requests, out.Earlier.Tokens())
	fmt.Fprintf(w, "paid in run 2: %d requests, %d tokens\n", all.Requests-out.Earlier.Requests, all.Tokens()-out.Earlier.Tokens())
	fmt.Fprintln(w, "answer:", out.Answer)
	// A turn that ended, not suspended for a person's answer, has no more
	// use for its journal.
	if err := st.DeleteJournal(ctx, turn); err != nil {
		return err
	}
	after, err := st.Journal(ctx, turn)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the turn ended and its journal was deleted: it holds %d entries\n", after.Len())
	return nil
}

// firstRun runs the turn in a child process that kills itself part way.
func firstRun(w io.Writer, db string, crashAfter int, ids string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-db", db, "-ids", ids)
	cmd.Env = append(os.Environ(), crashEnv+"="+strconv.Itoa(crashAfter))
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != -1 {
		return fmt.Errorf("the first run was meant to be killed; it ended with %v", err)
	}
	fmt.Fprintln(w, "run 1 was killed:", cmd.ProcessState)
	return nil
}

// crash is the first run: once k workers have finished it holds the
// others' model calls (as a process dies while calls are in flight), lets
// the finished ones' results reach the journal, and kills itself.
func crash(db string, k int, ids string) {
	st, err := open(db)
	if err != nil {
		log.Fatal(err)
	}
	lm, err := newLead(ids)
	if err != nil {
		log.Fatal(err)
	}
	ws := &workers{model: workerModel, answerOnly: k}
	if _, err := runUntil(st, lm, ws, k); err != nil {
		log.Fatal(err)
	}
	report(os.Stdout, ws, k)
	p, _ := os.FindProcess(os.Getpid())
	p.Kill()
	select {}
}

// runUntil runs the turn under its journal in st, the lead on lead and
// the workers on ws (which answers k of them and holds the others), until
// k workers have finished; then it gives the last one's result time to
// reach the journal and closes st, as a process dies. The run goes on
// until stop, which ends it and waits for it.
func runUntil(st *store.Store, lead provider.Provider, ws *workers, k int) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	j, err := st.Journal(ctx, turn)
	if err != nil {
		cancel()
		return nil, err
	}
	team, err := team(lead, ws)
	if err != nil {
		cancel()
		return nil, err
	}
	var finished atomic.Int64
	die := make(chan struct{})
	sink := event.SinkFunc(func(e event.Event) {
		if e.Type == event.SubagentFinished && finished.Add(1) == int64(k) {
			close(die)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = team.Run(agent.WithJournal(event.WithSink(ctx, sink), j), agent.Input{Text: task})
	}()
	stop = func() { cancel(); <-done }
	select {
	case <-die:
	case <-done:
		cancel()
		return nil, fmt.Errorf("the first run ended before %d workers finished", k)
	case <-time.After(time.Minute):
		stop()
		return nil, fmt.Errorf("only %d of %d workers finished in a minute", finished.Load(), k)
	}
	// The lead queues a worker's result for the journal as the worker
	// returns it, a few steps after the event, with no wait between: give
	// the last one ample time to be queued (the others hold no lock it
	// needs), and let Close wait for the writes in flight.
	time.Sleep(500 * time.Millisecond)
	st.Close()
	return stop, nil
}

// report prints what the first run, stopped after k workers, left.
func report(w io.Writer, ws *workers, k int) {
	fmt.Fprintf(w, "run 1: workers of chapters %v finished; the other %d were still waiting for their model\n", ws.answered(), len(ws.calls())-k)
}

func open(path string) (*store.Store, error) {
	b, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	return store.New(b)
}

// team returns the lead on lead, which delegates each chapter to a
// worker on ws.
func team(lead provider.Provider, ws *workers) (*agent.React, error) {
	worker, err := subagent.FromFactory("summarize_chapter", "Summarizes one chapter of the report; the task names the chapter (\"chapter 7\").",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(ws, agent.WithName("worker"))
		})
	if err != nil {
		return nil, err
	}
	return agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(worker))
}

// leadModel is the lead's scripted model. Like a real model it answers the
// conversation it is sent, not a position in a script: asked before any
// worker has reported, it calls a worker per chapter; once the workers'
// results are in, it sums them up.
type leadModel struct {
	ids   string
	calls atomic.Int64
	// stamp makes fresh ids differ between processes, as a real model's do.
	stamp string
}

func newLead(ids string) (*leadModel, error) {
	switch ids {
	case "fresh", "none", "restart":
	default:
		return nil, fmt.Errorf("-ids %q: want fresh, none or restart", ids)
	}
	return &leadModel{ids: ids, stamp: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}, nil
}

func (m *leadModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	n := m.calls.Add(1)
	var summaries []string
	for _, msg := range req.Messages {
		if msg.Role == provider.RoleTool && !msg.IsError {
			summaries = append(summaries, msg.Content)
		}
	}
	usage := provider.Usage{InputTokens: 200 + 30*int64(len(summaries)), OutputTokens: 40, Requests: 1}
	if len(summaries) > 0 {
		text := fmt.Sprintf("The report in %d chapter summaries: revenue grew, costs fell.", len(summaries))
		return provider.Response{Message: provider.AssistantMessage(text), Usage: usage}, nil
	}
	calls := make([]provider.ToolCall, chapters)
	for i := range calls {
		var id string
		switch m.ids {
		case "fresh":
			id = fmt.Sprintf("toolu_%s_%d_%d", m.stamp, n, i)
		case "restart":
			id = "call_" + strconv.Itoa(i)
		}
		calls[i] = provider.ToolCall{ID: id, Name: "summarize_chapter", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"chapter %d"}`, i+1))}
	}
	msg := provider.AssistantMessage("One worker per chapter.")
	msg.ToolCalls = calls
	return provider.Response{Message: msg, Usage: usage}, nil
}

// counted counts the calls its provider gets.
type counted struct {
	provider.Provider
	calls atomic.Int64
}

func (c *counted) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	c.calls.Add(1)
	return c.Provider.Complete(ctx, req)
}

// workerModel is the workers' scripted model: it reads the chapter from
// the task it is given and answers after 100 to 500 ms.
var workerModel = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
	ch, ok := chapter(req)
	if !ok {
		return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("I was asked %q, which names no chapter.", lastUser(req)))}, nil
	}
	select {
	case <-time.After(time.Duration(100+(ch*137)%400) * time.Millisecond):
	case <-ctx.Done():
		return provider.Response{}, ctx.Err()
	}
	return provider.Response{
		Message: provider.AssistantMessage(fmt.Sprintf("Chapter %d: the figures are in line with the plan.", ch)),
		Usage:   provider.Usage{InputTokens: 400, OutputTokens: 30, Requests: 1},
	}, nil
})

// lastUser is the text of req's last user message: a worker's task.
func lastUser(req provider.Request) string {
	var text string
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			text = m.Content
		}
	}
	return text
}

// chapter is the chapter a worker's task names.
func chapter(req provider.Request) (int, bool) {
	ch, err := strconv.Atoi(strings.TrimPrefix(lastUser(req), "chapter "))
	return ch, err == nil
}

// workers is the workers' provider: it passes their calls to model and
// notes which chapters it was asked about. With answerOnly set, it passes
// on that many calls and holds the rest until their context ends, as a
// process that dies leaves its calls unanswered.
type workers struct {
	model      provider.Provider
	answerOnly int

	mu      sync.Mutex
	asks    []int // chapters, as asked
	passed  int   // calls passed to model
	answers []int // chapters, as answered
}

func (w *workers) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	ch, ok := chapter(req)
	if !ok {
		return w.model.Complete(ctx, req)
	}
	w.mu.Lock()
	w.asks = append(w.asks, ch)
	hold := w.answerOnly > 0 && w.passed >= w.answerOnly
	if !hold {
		w.passed++
	}
	w.mu.Unlock()
	if hold {
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	}
	resp, err := w.model.Complete(ctx, req)
	if err == nil {
		w.mu.Lock()
		w.answers = append(w.answers, ch)
		w.mu.Unlock()
	}
	return resp, err
}

// asked returns the chapters the model was asked about, sorted.
func (w *workers) asked() []int {
	out := w.calls()
	slices.Sort(out)
	return out
}

// calls returns the chapters the model was asked about, as asked.
func (w *workers) calls() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.asks)
}

// answered returns the chapters the model answered, sorted.
func (w *workers) answered() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.answers)
	slices.Sort(out)
	return out
}
