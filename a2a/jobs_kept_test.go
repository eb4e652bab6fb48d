package a2a_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// keptJobs is the world of an A2A context whose lead starts background
// jobs that outlive its tasks: a quick job that runs a side effect and
// answers, and a slow one that digs until the lead waits for it and
// answers with the messages it was sent. It counts side effects and model
// calls across servers.
type keptJobs struct {
	id     func(n int64, i int) string
	n      atomic.Int64
	effect atomic.Int64
	quick  atomic.Int64 // the quick job's model calls
	slow   atomic.Int64 // the slow job's
	dig    chan struct{}
	digs   sync.Once
	inDig  chan struct{}

	mu     sync.Mutex
	thread string             // the run's thread, as the server names it
	first  []provider.Request // the first request of each of the lead's tasks
}

func (w *keptJobs) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	n := w.n.Add(1)
	u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
	calls := func(cs ...provider.ToolCall) (provider.Response, error) {
		for i := range cs {
			cs[i].ID = w.id(n, i)
		}
		return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
	}
	call := func(name, args string) (provider.Response, error) {
		return calls(provider.ToolCall{Name: name, Arguments: json.RawMessage(args)})
	}
	text := func(s string) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
	}
	done := false
	for _, m := range req.Messages {
		done = done || m.Role == provider.RoleTool
	}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
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
	if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
		return text("lead: " + last.Content)
	}
	w.mu.Lock()
	w.first = append(w.first, req)
	w.mu.Unlock()
	cmd := strings.Fields(req.Messages[0].Content) // a task's run starts with its message
	switch {
	case len(cmd) == 1 && cmd[0] == "start":
		return calls(
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"quick","background":true}`)},
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"slow","background":true}`)})
	case len(cmd) == 2 && cmd[0] == "send":
		return call(subagent.JobsToolName, `{"action":"send","job_id":"`+cmd[1]+`","message":"dig deeper"}`)
	case len(cmd) == 2 && cmd[0] == "wait":
		w.digs.Do(func() { close(w.dig) }) // the job ends during the task that waits for it
		return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+cmd[1]+`","timeout_seconds":600}`)
	}
	return text("ok")
}

// notes returns the notes of jobs ended between tasks in the first
// request of the lead's latest task.
func (w *keptJobs) notes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.first[len(w.first)-1].Messages {
		if m.Role == provider.RoleUser && strings.Contains(m.Content, "started in an earlier turn") {
			out = append(out, m.Content)
		}
	}
	return out
}

// keptServer is one life of the serving program: its store, the spawner
// that owns the contexts' jobs, and the A2A server and its client.
type keptServer struct {
	st  *store.Store
	sp  *subagent.Spawner
	srv *a2a.Server
	c   *a2aclient.Client
	hs  interface{ Close() }
}

func (w *keptJobs) serve(t *testing.T, path string, keep bool) *keptServer {
	t.Helper()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
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
	sp, err := subagent.NewSpawner(w, forkTools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := a2a.NewPerTask(func(ctx context.Context, task a2a.Task) (agent.Agent, error) {
		w.mu.Lock()
		w.thread = task.Thread
		w.mu.Unlock()
		return agent.NewReact(w, agent.WithName("lead"), agent.WithTools(sp, sp.JobsTool()))
	}, a2a.WithName("lead"), a2a.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	c, hs := serve(t, srv, sdk.TransportProtocolJSONRPC)
	return &keptServer{st: st, sp: sp, srv: srv, c: c, hs: hs}
}

// stop ends the program as a restart does.
func (k *keptServer) stop(t *testing.T) {
	t.Helper()
	k.hs.Close()
	if err := k.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.st.Close(); err != nil {
		t.Fatal(err)
	}
}

// say sends text as a new task of the context (none: a new context),
// and returns its context and its answer.
func (k *keptServer) say(t *testing.T, contextID, text string) (string, string) {
	t.Helper()
	m := userText(text)
	m.ContextID = contextID
	done := lastStatus(t, stream(t, k.c, m))
	if done.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("task %q ended %s (%q), want completed", text, done.Status.State, textOf(done.Status.Message))
	}
	task, err := k.c.GetTask(context.Background(), &sdk.GetTaskRequest{ID: done.TaskID})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Artifacts) != 1 {
		t.Fatalf("task %q has %d artifacts, want its answer", text, len(task.Artifacts))
	}
	return done.ContextID, task.Artifacts[0].Parts[0].Text()
}

// jobs returns the context's jobs, as the spawner holds them.
func (k *keptServer) jobs(w *keptJobs) []subagent.JobStatus {
	w.mu.Lock()
	ctx := agent.WithThread(context.Background(), w.thread)
	w.mu.Unlock()
	js := k.sp.Jobs(ctx)
	if js == nil {
		return nil
	}
	return js.List()
}

// An A2A context's lead starts two background jobs and its task ends;
// one job finishes between tasks, the other digs on. The context's next
// task is told, once, what the finished job found, and sends the other a
// message; the task after that waits for it and reads its answer, which
// took the message once. Served from memory, and kept in SQLite with the
// server restarted between the tasks; in the three id modes. The side
// effect runs once, and no job's model answer is asked for twice.
func TestContextSeesKeptJobsBetweenTasks(t *testing.T) {
	modes := []struct {
		name string
		id   func(n int64, i int) string
	}{
		{"fresh ids", func(n int64, i int) string { return "call_" + strconv.FormatInt(1000*n+int64(i), 10) }},
		{"no ids", func(int64, int) string { return "" }},
		{"ids restarting at call_0", func(_ int64, i int) string { return "call_" + strconv.Itoa(i) }},
	}
	for _, kept := range []bool{false, true} {
		for _, mode := range modes {
			name := map[bool]string{false: "in memory", true: "kept, restarted between tasks"}[kept] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				w := &keptJobs{id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1)}
				path := filepath.Join(t.TempDir(), "deputy.db")
				k := w.serve(t, path, kept)
				defer func() { k.stop(t) }()
				ctxID, _ := k.say(t, "", "start")
				var quick, slow subagent.JobStatus
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					if js := k.jobs(w); len(js) == 2 && js[0].State == subagent.JobDone {
						quick, slow = js[0], js[1]
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the quick job did not end: %+v", k.jobs(w))
					}
				}
				if slow.State != subagent.JobRunning || !strings.Contains(slow.Task, "slow") {
					t.Fatalf("the jobs after the first task: %+v, %+v", quick, slow)
				}
				<-w.inDig
				if kept {
					k.stop(t)
					k = w.serve(t, path, kept)
				}
				if _, got := k.say(t, ctxID, "send "+slow.ID); !strings.Contains(got, `"state":"queued"`) {
					t.Errorf("the send answered %q, want a receipt, queued", got)
				}
				if notes := w.notes(); len(notes) != 1 || !strings.Contains(notes[0], quick.ID) || !strings.Contains(notes[0], "found gold") {
					t.Errorf("the second task is told %q, want the quick job's answer, once", notes)
				}
				if _, got := k.say(t, ctxID, "wait "+slow.ID); got != "lead: dug; messages: dig deeper" {
					t.Errorf("the wait answered %q, want the slow job's answer, with the message once", got)
				}
				if notes := w.notes(); len(notes) != 0 {
					t.Errorf("the third task is told %q again", notes)
				}
				k.say(t, ctxID, "what now?")
				if notes := w.notes(); len(notes) != 0 {
					t.Errorf("the fourth task is told %q again", notes)
				}
				if e, q, s := w.effect.Load(), w.quick.Load(), w.slow.Load(); e != 1 || q != 2 || s != 2 {
					t.Errorf("the effect ran %d times, the quick job's model answered %d times, the slow job's %d; want 1, 2 and 2", e, q, s)
				}
			})
		}
	}
}
