package agui_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// keptJobs is the world of a served thread whose lead starts background
// jobs that outlive its turns: a quick job that runs a side effect and
// answers, and a slow one that digs until dig is closed and answers with
// the messages it was sent. It counts side effects and model calls across
// processes.
type keptJobs struct {
	ids    int // resumetest.IDsFresh, IDsNone or IDsRestart
	fresh  atomic.Int64
	effect atomic.Int64
	quick  atomic.Int64 // the quick job's model calls
	slow   atomic.Int64 // the slow job's
	dig    chan struct{}
	digs   sync.Once
	inDig  chan struct{}

	mu    sync.Mutex
	first []provider.Request // the first request of each of the lead's turns
}

func (w *keptJobs) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
	calls := func(cs ...provider.ToolCall) (provider.Response, error) {
		resumetest.NameCalls(w.ids, cs, &w.fresh)
		return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
	}
	call := func(name, args string) (provider.Response, error) {
		return calls(provider.ToolCall{Name: name, Arguments: json.RawMessage(args)})
	}
	text := func(s string) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
	}
	last := req.Messages[len(req.Messages)-1]
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		done := false
		for _, m := range req.Messages {
			done = done || m.Role == provider.RoleTool
		}
		if strings.Contains(req.Messages[0].Content, "quick") {
			w.quick.Add(1)
			if done {
				return text("found gold")
			}
			return call("effect", `{}`)
		}
		w.slow.Add(1)
		if done {
			var got []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser && strings.Contains(m.Content, "from the agent that started you") {
					got = append(got, m.Content[strings.LastIndex(m.Content, "\n")+1:])
				}
			}
			return text("dug; messages: " + strings.Join(got, "|"))
		}
		return call("dig", `{}`)
	}
	if last.Role == provider.RoleTool {
		return text("lead: " + last.Content)
	}
	user := ""
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser && !strings.Contains(m.Content, "started in an earlier turn") {
			user = m.Content
		}
	}
	w.mu.Lock()
	w.first = append(w.first, req)
	w.mu.Unlock()
	cmd := strings.Fields(user)
	switch {
	case len(cmd) == 1 && cmd[0] == "start":
		return calls(
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"quick","background":true}`)},
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"slow","background":true}`)})
	case len(cmd) == 2 && cmd[0] == "send":
		return call(subagent.JobsToolName, `{"action":"send","job_id":"`+cmd[1]+`","message":"dig deeper"}`)
	case len(cmd) == 2 && cmd[0] == "wait":
		w.digs.Do(func() { close(w.dig) }) // the job ends during the turn that waits for it
		return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+cmd[1]+`","timeout_seconds":600}`)
	}
	return text("ok")
}

// notes returns the notes of jobs ended between turns that the lead's
// latest turn was told: those after its user message in its first
// request (the stored thread holds those of earlier turns before it).
func (w *keptJobs) notes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.first[len(w.first)-1].Messages {
		switch {
		case m.Role != provider.RoleUser:
		case strings.Contains(m.Content, "started in an earlier turn"):
			out = append(out, m.Content)
		default:
			out = nil // the turn's own message
		}
	}
	return out
}

// keptServer is one life of the serving program: its store, the spawner
// that owns the threads' jobs, and the AG-UI endpoint.
type keptServer struct {
	st   *store.Store
	s    *subagent.Spawner
	srv  *httptest.Server
	last []frame // the stream of the latest turn
}

func (w *keptJobs) serve(t *testing.T, path string, keep bool) *keptServer {
	t.Helper()
	st := sqliteStore(t, path)
	effect := tool.Func{Def: tool.Definition{Name: "effect", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			w.effect.Add(1)
			return tool.Result{Content: "done"}, nil
		}}
	dig := tool.Func{Def: tool.Definition{Name: "dig", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
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
	forkTools, err := tool.NewRegistry(effect, dig)
	if err != nil {
		t.Fatal(err)
	}
	opts := []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}
	if keep {
		opts = append(opts, subagent.WithJobStore(st))
	}
	s, err := subagent.NewSpawner(w, forkTools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(w, agent.WithName("lead"), agent.WithTools(s, s.JobsTool()))
	}, agui.WithThreads(st)))
	return &keptServer{st: st, s: s, srv: httptest.NewServer(h)}
}

// stop ends the program as a restart does.
func (k *keptServer) stop(t *testing.T) {
	t.Helper()
	k.srv.Close()
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.st.Close(); err != nil {
		t.Fatal(err)
	}
}

// say posts one turn of thread t1, and returns its answer.
func (k *keptServer) say(t *testing.T, run, text string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"threadId": "t1", "runId": run,
		"messages": []map[string]string{{"id": run, "role": "user", "content": text}}})
	resp := post(t, k.srv.URL, string(b))
	defer resp.Body.Close()
	fs := readFrames(t, resp.Body)
	k.last = fs
	last := fs[len(fs)-1].e
	if last.Type != event.RunFinished {
		t.Fatalf("turn %q ended with %s %s", text, last.Type, last.Message)
	}
	var answer string
	if err := json.Unmarshal(last.Result, &answer); err != nil {
		t.Fatalf("turn %q: result %s: %v", text, last.Result, err)
	}
	return answer
}

// jobs returns the thread's jobs, as the spawner holds them.
func (k *keptServer) jobs() []subagent.JobStatus {
	ctx := agent.WithThread(context.Background(), agui.ThreadScope("", "t1"))
	js := k.s.Jobs(ctx)
	if js == nil {
		return nil
	}
	return js.List()
}

// A served thread's lead starts two background jobs and its turn ends;
// one job finishes between turns, the other digs on. The thread's next
// turn is told, once, what the finished job found, and sends the other a
// message; the turn after that waits for it and reads its answer, which
// took the message once. Served from memory, and kept in SQLite with the
// server restarted between the turns; in the three id modes. The side
// effect runs once, and no job's model answer is asked for twice. Each
// turn's stream is told of a job (SUBAGENT_STARTED, once, as the turn
// that started it was) before any other event of it, the turns that
// inherit the slow job running included.
func TestServedThreadSeesKeptJobsBetweenTurns(t *testing.T) {
	modes := []struct {
		name string
		ids  int
	}{{"fresh ids", resumetest.IDsFresh}, {"no ids", resumetest.IDsNone}, {"ids restarting at call_0", resumetest.IDsRestart}}
	for _, kept := range []bool{false, true} {
		for _, mode := range modes {
			name := map[bool]string{false: "in memory", true: "kept, restarted between turns"}[kept] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				w := &keptJobs{ids: mode.ids, dig: make(chan struct{}), inDig: make(chan struct{}, 1)}
				path := filepath.Join(t.TempDir(), "deputy.db")
				k := w.serve(t, path, kept)
				defer func() { k.stop(t) }()
				var turns [][]frame
				k.say(t, "r1", "start")
				turns = append(turns, k.last)
				starts := map[string]event.Event{} // the SUBAGENT_STARTED of each job, as the first turn saw it
				for _, f := range k.last {
					if f.e.Type == event.SubagentStarted {
						starts[f.e.SubagentRunID] = f.e
					}
				}
				var quick, slow subagent.JobStatus
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					if js := k.jobs(); len(js) == 2 && js[0].State == subagent.JobDone {
						quick, slow = js[0], js[1]
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the quick job did not end: %+v", k.jobs())
					}
				}
				if slow.State != subagent.JobRunning || !strings.Contains(slow.Task, "slow") {
					t.Fatalf("the jobs after the first turn: %+v, %+v", quick, slow)
				}
				<-w.inDig
				if kept {
					k.stop(t)
					k = w.serve(t, path, kept)
				}
				if got := k.say(t, "r2", "send "+slow.ID); !strings.Contains(got, `"state":"queued"`) {
					t.Errorf("the send answered %q, want a receipt, queued", got)
				}
				turns = append(turns, k.last)
				if notes := w.notes(); len(notes) != 1 || !strings.Contains(notes[0], quick.ID) || !strings.Contains(notes[0], "found gold") {
					t.Errorf("the second turn is told %q, want the quick job's answer, once", notes)
				}
				if got := k.say(t, "r3", "wait "+slow.ID); got != "lead: dug; messages: dig deeper" {
					t.Errorf("the wait answered %q, want the slow job's answer, with the message once", got)
				}
				turns = append(turns, k.last)
				if notes := w.notes(); len(notes) != 0 {
					t.Errorf("the third turn is told %q again", notes)
				}
				k.say(t, "r4", "what now?")
				if notes := w.notes(); len(notes) != 0 {
					t.Errorf("the fourth turn is told %q again", notes)
				}
				for turn, fs := range turns {
					jobsAnnounced(t, turn+1, fs, starts, !kept)
				}
				if n := jobEvents(turns[1], slow.ID, subagent.JobMessageEvent); n != 1 {
					t.Errorf("the second turn's stream has %d %s events of the slow job, want 1", n, subagent.JobMessageEvent)
				}
				if n := jobEvents(turns[2], slow.ID, subagent.JobEndedEvent); n != 1 {
					t.Errorf("the third turn's stream has %d %s events of the slow job, want 1", n, subagent.JobEndedEvent)
				}
				if e, q, s := w.effect.Load(), w.quick.Load(), w.slow.Load(); e != 1 || q != 2 || s != 2 {
					t.Errorf("the effect ran %d times, the quick job's model answered %d times, the slow job's %d; want 1, 2 and 2", e, q, s)
				}
			})
		}
	}
}

// jobsAnnounced checks the stream of a turn: every event of a sub-agent
// (its own, and the deputy.job_* events that name it) comes after its
// SUBAGENT_STARTED, which the stream has once, naming the sub-agent and,
// if same, the call that started it as the turn that started it did
// (starts).
func jobsAnnounced(t *testing.T, turn int, fs []frame, starts map[string]event.Event, same bool) {
	t.Helper()
	told := map[string]bool{}
	for i, f := range fs {
		e := f.e
		if e.Type == event.SubagentStarted {
			if told[e.SubagentRunID] {
				t.Errorf("turn %d: frame %d: sub-agent %s is announced again", turn, i, e.SubagentRunID)
			}
			told[e.SubagentRunID] = true
			if first, ok := starts[e.SubagentRunID]; ok && (e.Name != first.Name || same && e.ParentToolCallID != first.ParentToolCallID) {
				t.Errorf("turn %d: sub-agent %s is announced as %s under call %q, want %s under %q, as it started",
					turn, e.SubagentRunID, e.Name, e.ParentToolCallID, first.Name, first.ParentToolCallID)
			}
			continue
		}
		of := e.SubagentRunID
		if e.Type == event.Custom && strings.HasPrefix(e.Name, "deputy.job_") {
			var v struct {
				RunID string `json:"subagent_run_id"`
			}
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatalf("turn %d: %s: %s: %v", turn, e.Name, e.Value, err)
			}
			of = v.RunID
		}
		if of != "" && !told[of] {
			t.Errorf("turn %d: frame %d: %s %s of sub-agent %s, which the stream was not told started", turn, i, e.Type, e.Name, of)
		}
	}
}

// jobEvents counts the CUSTOM events named name of the job id in fs.
func jobEvents(fs []frame, id, name string) int {
	n := 0
	for _, f := range fs {
		if f.e.Type == event.Custom && f.e.Name == name && strings.Contains(string(f.e.Value), `"job_id":"`+id+`"`) {
			n++
		}
	}
	return n
}
