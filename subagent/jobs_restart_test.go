package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/postgres"
	"github.com/deputy-go/deputy/store/postgres/pgtest"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// keptWorld is what outlives a process in the restart tests: the model's
// counts, the side effects, and how to open the store again.
type keptWorld struct {
	t      *testing.T
	open   func() *store.Store
	id     func(n int64, i int) string
	n      atomic.Int64 // model calls, of every process
	forks  atomic.Int64 // the job's model calls
	effect atomic.Int64 // the job's side effect, run
	digs   atomic.Int64 // the job's dig, entered
	dig    chan struct{}
	inDig  chan struct{}

	// log, if set, gets a line for each side effect, each model answer of
	// the job and the job's id, outliving a process that is killed;
	// killAt kills the process as the job's model is asked for that
	// answer (1: the first).
	log    *os.File
	killAt int64
	kill   func()

	// approve: the job's side effect needs a person's approval.
	approve bool
	// moreDigs: the job digs this many times more before it answers.
	moreDigs int
	// leadOpts are the lead's options besides its name and tools; ready,
	// if set, is waited for before the lead answers "cmd start2".
	leadOpts []agent.Option
	ready    chan struct{}
	// leadWaitsDig: the lead answers after a tool's result only once the
	// job is in its dig (its first two model calls ended).
	leadWaitsDig bool

	// model, if set, names the model of every answer (Response.Model),
	// for a price table to price.
	model string

	mu        sync.Mutex
	forkUsage provider.Usage // what the job's model calls were billed
	billed    provider.Usage // what every model call was billed
	firstReq  provider.Request
	lastFork  provider.Request
}

func (w *keptWorld) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	k := w.n.Add(1)
	u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
	w.mu.Lock()
	w.billed = w.billed.Add(u)
	w.mu.Unlock()
	call := func(name, args string) provider.Response {
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: w.id(k, 0), Name: name, Arguments: json.RawMessage(args)}), Usage: u, Model: w.model}
	}
	text := func(s string) provider.Response {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u, Model: w.model}
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		if n := w.forks.Add(1); n == w.killAt && w.kill != nil {
			w.kill()
			<-ctx.Done() // the signal is on its way
		}
		w.note("answer")
		w.mu.Lock()
		w.forkUsage = w.forkUsage.Add(u)
		w.lastFork = req
		w.mu.Unlock()
		switch n := len(toolResults(req.Messages)); {
		case n == 0:
			return call("effect", `{}`), nil
		case n <= 1+w.moreDigs:
			return call("dig", `{}`), nil
		}
		return text("found gold; messages: " + strings.Join(inboundTexts(req), "|")), nil
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool {
		for deadline := time.Now().Add(30 * time.Second); w.leadWaitsDig && w.digs.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		return text("lead: " + last.Content), nil
	}
	w.mu.Lock()
	w.firstReq = req
	w.mu.Unlock()
	user := last.Content
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser && !strings.Contains(m.Content, "started in an earlier turn") {
			user = m.Content // the turn's, not a note of jobs that ended meanwhile
		}
	}
	cmd := strings.Fields(user)
	switch {
	case len(cmd) == 2 && cmd[1] == "start2":
		if w.ready != nil {
			select {
			case <-w.ready:
			case <-time.After(30 * time.Second):
			}
		}
		return provider.Response{Message: provider.AssistantMessage("",
			provider.ToolCall{ID: w.id(k, 0), Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig more","background":true}`)},
			provider.ToolCall{ID: w.id(k, 1), Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig more","background":true}`)}), Usage: u, Model: w.model}, nil
	case len(cmd) >= 2 && cmd[1] == "start":
		return call(subagent.SpawnToolName, `{"task":"dig","background":true}`), nil
	case len(cmd) == 2 && cmd[1] == "list":
		return call(subagent.JobsToolName, `{"action":"list"}`), nil
	case len(cmd) == 3 && cmd[1] == "send":
		return call(subagent.JobsToolName, `{"action":"send","job_id":"`+cmd[2]+`","message":"dig deeper"}`), nil
	case len(cmd) == 3 && cmd[1] == "cancel":
		return call(subagent.JobsToolName, `{"action":"cancel","job_id":"`+cmd[2]+`"}`), nil
	case len(cmd) == 3 && cmd[1] == "wait":
		return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+cmd[2]+`","timeout_seconds":600}`), nil
	}
	return text("ok"), nil
}

// note writes a line to the log, if any.
func (w *keptWorld) note(line string) {
	if w.log != nil {
		_, _ = w.log.WriteString(line + "\n")
	}
}

// process is one life of the program: a store, a spawner over it and a
// lead.
type process struct {
	st *store.Store
	s  *subagent.Spawner
	a  *agent.React
}

func (w *keptWorld) start(opts ...subagent.SpawnOption) *process {
	t := w.t
	effect := tool.Func{Def: tool.Definition{Name: "effect", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			w.effect.Add(1)
			w.note("effect")
			return tool.Result{Content: "done"}, nil
		}}
	dig := tool.Func{Def: tool.Definition{Name: "dig", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			w.digs.Add(1)
			select {
			case w.inDig <- struct{}{}:
			default:
			}
			select {
			case <-w.dig:
				return tool.Result{Content: "dug"}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}}
	st := w.open()
	var eff tool.Tool = effect
	if w.approve {
		eff = tool.RequireApproval(effect, "", 0)
	}
	reg, s := setup(t, w, true, append([]subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil), subagent.WithJobStore(st)}, opts...), eff, dig)
	return &process{st: st, s: s, a: lead(t, w, reg, w.leadOpts...)}
}

// stop ends the process as a restart does: the spawner, then the store.
func (p *process) stop(t *testing.T) {
	if err := p.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.st.Close(); err != nil {
		t.Fatal(err)
	}
}

func (p *process) run(t *testing.T, ctx context.Context, text string) agent.Output {
	t.Helper()
	out, err := p.a.Run(ctx, agent.Input{Text: text})
	if err != nil {
		t.Fatalf("turn %q: %v", text, err)
	}
	return out
}

// keptStores are the stores the restart tests run on: SQLite always,
// PostgreSQL when DEPUTY_TEST_POSTGRES names a server.
var keptStores = []struct {
	name string
	open func(t *testing.T, n int) func() *store.Store
}{
	{"sqlite", func(t *testing.T, _ int) func() *store.Store {
		path := filepath.Join(t.TempDir(), "deputy.db")
		return func() *store.Store {
			b, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.New(b)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}},
	{"postgres", func(t *testing.T, n int) func() *store.Store {
		dsn := pgtest.DSN(t, fmt.Sprintf("deputy_test_keptjobs_%d", n))
		return func() *store.Store {
			b, err := postgres.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.New(b)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}},
}

// forEachKept runs f for each store and id mode.
func forEachKept(t *testing.T, f func(t *testing.T, w *keptWorld)) {
	n := 0
	for _, sk := range keptStores {
		for _, mode := range callIDModes {
			n++
			t.Run(sk.name+"/"+mode.name, func(t *testing.T) {
				w := &keptWorld{t: t, open: sk.open(t, n), id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1)}
				f(t, w)
			})
		}
	}
}

// notesIn returns the notes of jobs ended between turns in req.
func notesIn(req provider.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser && strings.Contains(m.Content, "started in an earlier turn") {
			out = append(out, m.Content)
		}
	}
	return out
}

// A job running when its process stops continues in the next process
// when its thread is next used, from its own journal: its model answers
// are not asked for again, its side effect does not run again, and the
// message sent to it before the restart reaches it once. Its thread's
// turn that waits collects it with what every model call of it cost; a
// later process is not told of it again.
func TestKeptJobContinuesAfterRestart(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
		p := w.start()
		p.run(t, ctx, "cmd start")
		job := p.s.Jobs(ctx).List()[0].ID
		select {
		case <-w.inDig:
		case <-time.After(30 * time.Second):
			t.Fatal("the job never reached its second step")
		}
		if out := p.run(t, ctx, "cmd send "+job); !strings.Contains(out.Answer, `"state":"queued"`) {
			t.Fatalf("the send answered %q", out.Answer)
		}
		p.stop(t)
		if w.forks.Load() != 2 || w.effect.Load() != 1 {
			t.Fatalf("before the restart the job made %d model calls and ran its effect %d times, want 2 and 1", w.forks.Load(), w.effect.Load())
		}

		close(w.dig)
		p = w.start()
		out := p.run(t, ctx, "cmd wait "+job)
		if out.Answer != "lead: found gold; messages: dig deeper" {
			t.Errorf("the wait after the restart answered %q", out.Answer)
		}
		if n, e := w.forks.Load(), w.effect.Load(); n != 3 || e != 1 {
			t.Errorf("the job made %d model calls and ran its effect %d times, want 3 (one after the restart) and 1", n, e)
		}
		w.mu.Lock()
		got, billed := inboundTexts(w.lastFork), w.forkUsage
		w.mu.Unlock()
		if len(got) != 1 || got[0] != "dig deeper" {
			t.Errorf("the job's last step saw the messages %q, want the one sent, once", got)
		}
		if out.ChildUsage != billed {
			t.Errorf("the turn that collected the job counts %+v of its children, want what the job's calls were billed, %+v", out.ChildUsage, billed)
		}
		st := p.s.Jobs(ctx).List()
		if len(st) != 1 || st[0].State != subagent.JobDone || len(st[0].Messages) != 1 || st[0].Messages[0].State != subagent.MessageDelivered {
			t.Errorf("the thread's jobs after the wait: %+v", st)
		}
		p.stop(t)

		p = w.start()
		defer p.stop(t)
		p.run(t, ctx, "what now?")
		if notes := notesIn(w.firstReq); len(notes) != 0 {
			t.Errorf("a turn after the job was collected is told %q", notes)
		}
		st = p.s.Jobs(ctx).List()
		if len(st) != 1 || st[0].State != subagent.JobDone || st[0].Usage != billed {
			t.Errorf("after a second restart the thread's jobs are %+v, want the one done, with its usage %+v", st, billed)
		}
	})
}

// A job that ended between turns, in a process that then stopped, is told
// of in the thread's next turn in the next process, once, its usage
// counted by that turn; the process after that is not told of it again.
func TestKeptJobToldOnceAfterRestart(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
		close(w.dig)
		p := w.start()
		first := p.run(t, ctx, "cmd start").ChildUsage // what the turn that started the job counted of it
		for deadline := time.Now().Add(30 * time.Second); p.s.Jobs(ctx).List()[0].State == subagent.JobRunning; {
			if time.Now().After(deadline) {
				t.Fatal("the job did not end")
			}
			time.Sleep(time.Millisecond)
		}
		job := p.s.Jobs(ctx).List()[0]
		p.stop(t)

		p = w.start()
		out := p.run(t, ctx, "what now?")
		notes := notesIn(w.firstReq)
		if len(notes) != 1 || !strings.Contains(notes[0], job.ID) || !strings.Contains(notes[0], "found gold") {
			t.Fatalf("the first turn after the restart is told %q, want the job's answer once", notes)
		}
		w.mu.Lock()
		billed := w.forkUsage
		w.mu.Unlock()
		if out.ChildUsage.Add(first) != billed || job.Usage != billed {
			t.Errorf("the turn told of the job counts %+v of its children and the turn that started it %+v (the job reported %+v), want %+v in all", out.ChildUsage, first, job.Usage, billed)
		}
		p.stop(t)

		p = w.start()
		defer p.stop(t)
		out = p.run(t, ctx, "and now?")
		if notes := notesIn(w.firstReq); len(notes) != 0 {
			t.Errorf("the next process tells the thread again: %q", notes)
		}
		if !out.ChildUsage.IsZero() {
			t.Errorf("the next process counts %+v of the job again", out.ChildUsage)
		}
		if w.forks.Load() != 3 || w.effect.Load() != 1 {
			t.Errorf("the job made %d model calls and ran its effect %d times, want 3 and 1", w.forks.Load(), w.effect.Load())
		}
	})
}

// A served thread may name the journals of its turns the same (an A2A
// task answered again): a turn after one that ended, under a journal of
// the same name, starts a job of its own and its message is a message of
// its own, not taken for the earlier turn's run again.
func TestKeptJobsOfTurnsUnderOneJournalName(t *testing.T) {
	m := &threadModel{dig: make(chan struct{})}
	a, s := threadLead(t, m)
	st := newStore(t)
	ctx := agent.WithThread(context.Background(), "t1")
	turn := func(text string) string {
		t.Helper()
		j, err := st.Journal(ctx, "task-1")
		if err != nil {
			t.Fatal(err)
		}
		out, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		// The turn has ended: its server forgets its journal.
		if err := st.DeleteJournal(ctx, "task-1"); err != nil {
			t.Fatal(err)
		}
		return out.Answer
	}
	turn("cmd start")
	turn("cmd start")
	jobs := s.Jobs(ctx).List()
	if len(jobs) != 2 {
		t.Fatalf("two turns that started a job each left %d jobs, want 2", len(jobs))
	}
	turn("cmd send")
	turn("cmd send")
	if got := s.Jobs(ctx).List()[1].Messages; len(got) != 2 || got[0].MessageID == got[1].MessageID {
		t.Errorf("two turns that sent a message each left the receipts %+v, want two messages", got)
	}
	close(m.dig)
}
