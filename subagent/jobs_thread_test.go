package subagent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// threadModel is the model of a lead and its forks across turns: the lead
// does what its latest user message says, the fork digs (a tool that
// waits for dig to be closed) and answers with what it found and the
// messages it got.
type threadModel struct {
	mu     sync.Mutex
	billed provider.Usage
	dig    chan struct{}
	reqs   []provider.Request // the lead's
	n      int64
	id     func(n int64, i int) string // names the calls (nil: no ids)
	crash  func(req provider.Request) bool
}

func (m *threadModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if m.crash != nil && m.crash(req) {
		return provider.Response{}, context.Canceled
	}
	u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
	m.mu.Lock()
	m.billed = m.billed.Add(u)
	m.n++
	id := ""
	if m.id != nil {
		id = m.id(m.n, 0)
	}
	m.mu.Unlock()
	call := func(name, args string) provider.Response {
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}), Usage: u}
	}
	text := func(s string) provider.Response {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u}
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		if len(toolResults(req.Messages)) == 0 {
			return call("dig", `{}`), nil
		}
		return text("found gold; messages: " + strings.Join(inboundTexts(req), "|")), nil
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool {
		return text("lead: " + last.Content), nil
	}
	var user string
	for _, msg := range req.Messages {
		if msg.Role == provider.RoleUser && !strings.Contains(msg.Content, "started in an earlier turn") {
			user = msg.Content
		}
	}
	job := latestJob(req.Messages)
	switch user {
	case "cmd start":
		return call(subagent.SpawnToolName, `{"task":"dig","background":true}`), nil
	case "cmd send":
		return call(subagent.JobsToolName, `{"action":"send","job_id":"`+job+`","message":"dig deeper"}`), nil
	case "cmd wait":
		return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+job+`","timeout_seconds":600}`), nil
	}
	return text("ok"), nil
}

// inboundTexts returns the texts of the messages from the parent in req.
func inboundTexts(req provider.Request) []string {
	var out []string
	for _, m := range inbound(req) {
		out = append(out, m[strings.LastIndex(m, "\n")+1:])
	}
	return out
}

func threadLead(t *testing.T, m *threadModel, opts ...subagent.SpawnOption) (*agent.React, *subagent.Spawner) {
	t.Helper()
	dig := tool.Func{Def: tool.Definition{Name: "dig", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-m.dig:
				return tool.Result{Content: "dug"}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}}
	reg, s := setup(t, m, true, append([]subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, opts...), dig)
	t.Cleanup(func() { s.Close() })
	return lead(t, m, reg), s
}

// A background job started by one turn of a thread works on after the
// turn ends; the thread's next turn is told, before its first model
// call, what the job found, and counts what the job spent after the
// turn that started it reported, once.
func TestJobOutlivesItsTurn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, s := threadLead(t, m)
	ctx := agent.WithThread(t.Context(), "t1")
	out1, err := a.Run(ctx, agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	jobs := s.Jobs(ctx)
	if jobs == nil {
		t.Fatal("no jobs for the thread outside its runs")
	}
	list := jobs.List()
	if len(list) != 1 || list[0].State != subagent.JobRunning {
		t.Fatalf("after the turn, the thread's jobs are %+v: want one, running", list)
	}
	close(m.dig)
	waited, err := jobs.Wait(t.Context(), subagent.WaitFor{})
	if err != nil {
		t.Fatal(err)
	}
	if n := out1.ChildUsage.Requests + waited[0].Result.Usage.Requests; n != 2 {
		t.Errorf("the first turn counts %+v of its job, the wait %+v: %d calls, want the job's two", out1.ChildUsage, waited[0].Result.Usage, n)
	}
	// Wait collected it for Go code: start another, left uncollected.
	m.dig = make(chan struct{})
	close(m.dig)
	out2, err := a.Run(ctx, agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); jobs.List()[1].State == subagent.JobRunning; {
		if time.Now().After(deadline) {
			t.Fatal("the second job did not end")
		}
		time.Sleep(time.Millisecond)
	}
	out3, err := a.Run(ctx, agent.Input{Text: "what now?"})
	if err != nil {
		t.Fatal(err)
	}
	first := m.reqs[len(m.reqs)-1]
	var notes []string
	for _, msg := range first.Messages {
		if msg.Role == provider.RoleUser && strings.Contains(msg.Content, "started in an earlier turn") {
			notes = append(notes, msg.Content)
		}
	}
	second := jobs.List()[1].ID
	if len(notes) != 1 || !strings.Contains(notes[0], "found gold") || !strings.Contains(notes[0], second) || strings.Contains(notes[0], list[0].ID) {
		t.Fatalf("the third turn's first request carries the notes %q: want one, of the second job, with its answer", notes)
	}
	// The second job's calls count once: in the turn that started it
	// those that ended before it reported, the rest in the turn told.
	if n := out2.ChildUsage.Requests + out3.ChildUsage.Requests; n != 2 {
		t.Errorf("the second turn counts %+v of its children, the third %+v: %d calls, want the second job's two", out2.ChildUsage, out3.ChildUsage, n)
	}
	// A fourth turn is told nothing again.
	if _, err := a.Run(ctx, agent.Input{Text: "and now?"}); err != nil {
		t.Fatal(err)
	}
	for _, msg := range m.reqs[len(m.reqs)-1].Messages[len(first.Messages):] {
		if strings.Contains(msg.Content, "started in an earlier turn") {
			t.Errorf("the fourth turn was told again: %q", msg.Content)
		}
	}
}

// The thread's next turn steers a job an earlier turn started: its message
// reaches the job, and its wait collects the answer. The job's two model
// calls count once, in the turn that started it those that ended before
// it reported, the rest in the turn that waited.
func TestJobSteeredByTheNextTurn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, _ := threadLead(t, m)
	ctx := agent.WithThread(t.Context(), "t1")
	out1, err := a.Run(ctx, agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Run(ctx, agent.Input{Text: "cmd send"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, `"state":"queued"`) {
		t.Fatalf("the send answered %q", out.Answer)
	}
	close(m.dig)
	out, err = a.Run(ctx, agent.Input{Text: "cmd wait"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: found gold; messages: dig deeper" {
		t.Errorf("answer %q", out.Answer)
	}
	if n := out1.ChildUsage.Requests + out.ChildUsage.Requests; n != 2 {
		t.Errorf("the turn that started the job counts %+v of its children, the turn that waited %+v: %d calls, want the job's two", out1.ChildUsage, out.ChildUsage, n)
	}
}

// Another thread, or another owner of the same thread id, sees none of a
// thread's jobs; Close ends the jobs still running and waits for them.
func TestThreadJobsAreTheThreads(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, s := threadLead(t, m)
	ctx := agent.WithOwner(agent.WithThread(t.Context(), "t1"), "ann")
	if _, err := a.Run(ctx, agent.Input{Text: "cmd start"}); err != nil {
		t.Fatal(err)
	}
	for _, other := range []context.Context{
		agent.WithOwner(agent.WithThread(t.Context(), "t1"), "bob"),
		agent.WithOwner(agent.WithThread(t.Context(), "t2"), "ann"),
	} {
		if got := s.Jobs(other).List(); len(got) != 0 {
			t.Errorf("another thread sees %+v", got)
		}
	}
	if got := s.Jobs(ctx).List(); len(got) != 1 {
		t.Fatalf("the thread has %d jobs", len(got))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// goleak: the job's goroutine has ended.
	if s.Jobs(ctx) != nil {
		t.Error("a closed spawner still hands out jobs")
	}
}

// A turn that crashed after it was told of a job that ended is told again
// when it is run again from its journal, once, and counts the job's usage
// once.
func TestJobNoteOnceAcrossResume(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the store closes
			m := &threadModel{dig: make(chan struct{}), id: mode.id}
			close(m.dig)
			a, s := threadLead(t, m)
			ctx := agent.WithThread(t.Context(), "t1")
			if _, err := a.Run(ctx, agent.Input{Text: "cmd start"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Jobs(ctx).Wait(t.Context(), subagent.WaitFor{}); err != nil {
				t.Fatal(err)
			}
			// Wait collected the first job: a second one is the one told of.
			out2, err := a.Run(ctx, agent.Input{Text: "cmd start"})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); s.Jobs(ctx).List()[1].State == subagent.JobRunning; {
				if time.Now().After(deadline) {
					t.Fatal("the job did not end")
				}
				time.Sleep(time.Millisecond)
			}
			job := s.Jobs(ctx).List()[1]
			st := newStore(t)
			crashed := false
			m.crash = func(req provider.Request) bool {
				if !crashed && strings.Contains(req.Messages[len(req.Messages)-1].Content, "started in an earlier turn") {
					crashed = true
					return true
				}
				return false
			}
			j, err := st.Journal(t.Context(), "turn-3")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "what now?"}); err == nil || !crashed {
				t.Fatalf("the turn did not crash (%v)", err)
			}
			out, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "what now?"})
			if err != nil {
				t.Fatal(err)
			}
			var told int
			for _, msg := range m.reqs[len(m.reqs)-1].Messages {
				if strings.Contains(msg.Content, "started in an earlier turn") && strings.Contains(msg.Content, job.ID) {
					told++
				}
			}
			if told != 1 {
				t.Errorf("the resumed turn was told of the job %d times, want once", told)
			}
			// The job's calls count once: those that ended before the turn
			// that started it reported count there, the rest in the turn
			// told, which its resume must not count again.
			if got := out2.ChildUsage.Add(out.ChildUsage); got != job.Usage {
				t.Errorf("the turn that started the job counts %+v of it, the resumed turn %+v: %+v in all, want the job's %+v", out2.ChildUsage, out.ChildUsage, got, job.Usage)
			}
		})
	}
}

// spinModel is a lead that starts one background job and answers, and a
// fork that calls spin at every step until its step limit: a job that
// emits events all the time, the turn that started it ending meanwhile.
type spinModel struct {
	ids   int
	fresh atomic.Int64
}

func (m *spinModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	call := func(name, args string) (provider.Response, error) {
		cs := []provider.ToolCall{{Name: name, Arguments: json.RawMessage(args)}}
		resumetest.NameCalls(m.ids, cs, &m.fresh)
		return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		return call("spin", `{}`)
	}
	if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("ok"), Usage: u}, nil
	}
	return call(subagent.SpawnToolName, `{"task":"spin","background":true}`)
}

// afterSink records a run's events in the order its sink took them, each
// event of a sub-agent a little late: an event of a thread's job under
// way as the turn ends is still being taken when the turn's would come.
type afterSink struct {
	mu     sync.Mutex
	events []event.Event
}

func (s *afterSink) Emit(e event.Event) {
	if e.SubagentRunID != "" || e.Type == event.Custom {
		time.Sleep(50 * time.Microsecond)
	}
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

// No event of a thread's job reaches the sink of the turn that started
// it after the turn's RUN_FINISHED, though the job works on, emitting,
// as the turn ends: the turn's end waits for an event on its way to its
// sink, and sends it none after. In the three id modes.
func TestThreadJobEventsEndWithTheirTurn(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		m := &spinModel{ids: mode}
		spin := tool.Func{Def: tool.Definition{Name: "spin", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "spun"}, nil }}
		tools, err := tool.NewRegistry(spin)
		if err != nil {
			t.Fatal(err)
		}
		s, err := subagent.NewSpawner(m, tools, subagent.WithJobsAcrossTurns(nil))
		if err != nil {
			t.Fatal(err)
		}
		lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool()))
		if err != nil {
			t.Fatal(err)
		}
		sink := &afterSink{}
		ctx := event.WithSink(agent.WithThread(context.Background(), "t1"), sink)
		if _, err := lead.Run(ctx, agent.Input{Text: "start"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the job works on, emitting to no one
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		sink.mu.Lock()
		events := sink.events
		sink.mu.Unlock()
		end := slices.IndexFunc(events, func(e event.Event) bool { return e.Type == event.RunFinished })
		switch {
		case end < 0:
			t.Fatalf("mode %d: no RUN_FINISHED among %d events", mode, len(events))
		case end != len(events)-1:
			e := events[end+1]
			t.Fatalf("mode %d: %d events after RUN_FINISHED, the first %s %s of %q", mode, len(events)-1-end, e.Type, e.Name, e.SubagentRunID)
		}
		if !slices.ContainsFunc(events, func(e event.Event) bool { return e.Type == event.SubagentStarted }) {
			t.Fatalf("mode %d: the job was not started: %d events", mode, len(events))
		}
	}
}
