//go:build unix

package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// killRound is what TestPolicySurvivesSIGKILLWithARemote tells the
// process that runs one round, and (its last three fields) what that
// process reports back.
type killRound struct {
	IDs     int               `json:"ids"`
	KillAt  int64             `json:"kill_at,omitempty"` // the event (model call or question) at which the process dies; 0: none
	URL     string            `json:"url"`               // the remote agent's
	Store   string            `json:"store"`
	Log     string            `json:"log"`
	Out     string            `json:"out"`
	Pending *tool.Interrupted `json:"pending,omitempty"`
	Answers []tool.Answer     `json:"answers,omitempty"`

	Answer      string            `json:"answer,omitempty"`
	Err         string            `json:"err,omitempty"`
	Interrupted *tool.Interrupted `json:"interrupted,omitempty"`
}

const killRoundEnv = "DEPUTY_TEST_A2A_POLICY_KILL_ROUND"

// killInput is the lead's input in TestPolicySurvivesSIGKILLWithARemote.
const killInput = "audit the account with key " + leadSecret

// The kinds of line of the log TestPolicySurvivesSIGKILLWithARemote's
// rounds write, each followed by a tab and what it is of.
const (
	logAsked    = "asked"    // a model asked for a tool call (callKey)
	logTool     = "tool"     // the root's policy saw a tool call (callKey)
	logRan      = "ran"      // a tool of the tree ran (callKey)
	logResult   = "result"   // the root's policy saw a call's result (callKey)
	logTask     = "task"     // a local child's model was called on its task (the task)
	logRemote   = "remote"   // the remote agent's model was called on a task (the task): written by the test's own process, which serves it
	logAnswered = "answered" // the remote agent's model answered (the task): written as logRemote
	logEdge     = "edge"     // the root's policy saw a hand-off (its task)
	logModel    = "model"    // a local agent's model was called (treeModel.name)
	logSeen     = "seen"     // the root's policy saw a model call (the agent, as logModel)
	logAsk      = "ask"      // the root's policy asks a person (callKey)
	logFault    = "fault"    // a secret reached where it must not, or a kill waited long (what)
	logKill     = "kill"     // the round's process dies now, with calls of the remote under way (how many)
	logSecret   = "secret"   // the lead's model was given the lead's secret
)

// A tree whose lead and children delegate to an A2A remote served by
// deputy, its lead's process killed with SIGKILL at random points (any
// local agent's model call, or the root's policy deciding to ask) and
// started again until the turn ends, at times also between the questions
// and the person's answers, loses nothing the root's policy decided at the
// remote edge or elsewhere: on resume, over a durable store, a denied call
// never runs; each question reaches the person once and keeps its id, the
// remote's own included, also when the process is restarted before the
// person answers; each call the person approved runs once, a hand-off to
// the remote included (the remote runs its task once, and goes on with it
// once answered), and a refused one never runs; the root's policy sees
// every tool call, every hand-off (the remote's in each round the remote
// works on it) and every local model call; and the lead's secret reaches
// no child's model, no tool, no request to the remote and not the remote's
// model, nor does the remote's secret come back to any model of the tree
// — whatever ids the models give their calls. The seed of the kill points
// is logged.
//
// The tree: the lead calls rm and search, then hands off to a factory
// child (worker), a fork and the remote (clerk) at once; each child calls
// rm and write, then leaf, then the remote. The root's policy denies rm,
// asks before leaf and clerk, and redacts both secrets. The remote calls
// its own ledger, then its own post, which asks a person: the task waits
// for the answer, which the lead's person gives. The person refuses what
// the fork asks and the remote's post on the worker's task, and approves
// the rest.
//
// The remote is served by this process, not by the lead's: it is another
// service, which a crash of the lead's process does not take down, so its
// task waits for an answer across the lead's kills, and it keeps its own
// counts (its tasks, its tools' runs, the bodies it was sent) in memory
// across the rounds, so that what it is sent after a resume is held
// against what it ran before. A message to it is journaled when its answer
// comes (tool.Once), so a process killed while one is on its way sends it
// again on resume, under the same messageId, which the remote answers with
// the task the message started: the rounds are killed then too (the log
// counts those kills), but not between a local tool's effect and its
// record. What happens is written to a log that outlives
// the processes, the lines of this process's remote among them: see
// checkKillLog for what is checked.
func TestPolicySurvivesSIGKILLWithARemote(t *testing.T) {
	if spec := os.Getenv(killRoundEnv); spec != "" {
		runKillRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			dir := t.TempDir()
			round := killRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "effects.log"), Out: filepath.Join(dir, "round.json")}
			rem := serveKillRemote(t, ids, round.Log, nil)
			round.URL = rem.url
			asked := map[string]bool{} // the questions answered
			var held *tool.Interrupted // questions not answered yet, across a restart
			approved, kills, rounds, restarts := 0, 0, 0, 0
			answered := false // the last round's answers are new
			var got killRound
			for n := 0; ; n++ {
				if n > 40 {
					t.Fatal("no end after 40 rounds")
				}
				// Most rounds die somewhere in their first eight events;
				// after six kills the rounds run to their end. The first
				// dies within its first three (every round reaches them), so
				// that no schedule kills nothing, and the first after each
				// answer in its first eight, so that none resumes the calls
				// a person answered without a kill.
				round.KillAt = 0
				switch {
				case n == 0:
					round.KillAt = 1 + rng.Int64N(3)
				case answered || (kills < 6 && rng.IntN(4) > 0):
					round.KillAt = 1 + rng.Int64N(8)
				}
				var killed bool
				got, killed = startKillRound(t, "TestPolicySurvivesSIGKILLWithARemote", killRoundEnv, round, nil)
				rounds++
				answered = false
				if killed {
					kills++
					continue
				}
				if got.Err != "" {
					t.Fatalf("round %d (killed at %d): %s", n, round.KillAt, got.Err)
				}
				if got.Interrupted == nil {
					if held != nil {
						t.Fatalf("round %d: the questions %v were not answered, and the turn ended", n, held.Interrupts)
					}
					break
				}
				qs := got.Interrupted.Interrupts
				if held != nil {
					// Restarted before the person answered: the same
					// questions, under the same ids.
					if !slices.Equal(interruptIDs(qs), interruptIDs(held.Interrupts)) {
						t.Errorf("round %d: restarted before the person answered, the run asks %v, where it asked %v", n, interruptIDs(qs), interruptIDs(held.Interrupts))
					}
					held = nil
				} else if restarts < 2 && rng.IntN(2) == 0 {
					// The process is restarted (and maybe killed) before
					// the person answers.
					held = got.Interrupted
					restarts++
					continue
				}
				// The person answers the questions, approving all but the
				// fork's and the remote's question on the worker's task; a
				// killed round after this is resumed with the same answers.
				round.Pending, round.Answers, answered = got.Interrupted, nil, true
				for _, q := range qs {
					policyAsks, remoteAsks := strings.Contains(q.Message, `Policy "approve"`), strings.Contains(q.Message, "Allow post with")
					if q.Reason != tool.ApprovalReason || policyAsks == remoteAsks {
						t.Errorf("question %+v", q)
					}
					if asked[q.ID] {
						t.Errorf("round %d: %s was answered and asked again", n, q.ID)
					}
					asked[q.ID] = true
					yes := !strings.Contains(q.Message, "lead/"+subagent.DefaultForkName+" ") && !(remoteAsks && strings.Contains(q.Message, "/clerk"))
					if yes {
						approved++
					}
					round.Answers = append(round.Answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
				}
			}
			if kills == 0 {
				t.Fatal("no round was killed: the test tries nothing")
			}
			if len(asked) != 7 || approved != 4 {
				t.Errorf("%d questions, %d approved; want 7 (the policy's about the lead's call of the remote and each child's leaf and remote call; the remote's about each task's post), 4 approved", len(asked), approved)
			}
			procs := resumetest.ReadRoundLog(t, round.Log, rounds, kills)
			checkKillLog(t, procs)
			midCall := 0 // the kills with a call of the remote under way
			for _, p := range procs {
				for _, l := range p.Lines {
					if l[0] == logKill && l[1] != "0" {
						midCall++
					}
				}
			}
			rem.check(t)
			for _, c := range []struct {
				s    string
				want int
			}{{"rm is not allowed here", 3}, {"leaf done", 1}, {"did not approve", 3}, {"balance 42 on " + policy.Redacted, 2}, {"posted", 1}} {
				if n := strings.Count(got.Answer, c.s); n != c.want {
					t.Errorf("the answer tells %d times of %q, want %d: %s", n, c.s, c.want, got.Answer)
				}
			}
			if strings.Contains(got.Answer, leadSecret) || strings.Contains(got.Answer, remoteSecret) {
				t.Errorf("the answer holds a secret: %s", got.Answer)
			}
			t.Logf("%d rounds, %d kills (%d with a call of the remote under way), %d restarts before an answer, %d questions, %d approved", rounds, kills, midCall, restarts, len(asked), approved)
		})
	}
}

// interruptIDs returns the ids of qs, sorted.
func interruptIDs(qs []tool.Interrupt) []string {
	var ids []string
	for _, q := range qs {
		ids = append(ids, q.ID)
	}
	slices.Sort(ids)
	return ids
}

// killRemote is the remote agent of TestPolicySurvivesSIGKILLWithARemote,
// served by the test's own process: the clerk, whose model calls its own
// ledger, which answers with remoteSecret, then its own post, which asks a
// person first (tool.RequireApproval): the question reaches the person
// who answers the lead's, and the task waits for the answer.
type killRemote struct {
	url          string
	model        *treeModel
	ledger, post *countedTool
	bodies       bodies // what it was sent
}

// serveKillRemote serves the clerk for the rounds of one subtest; it
// writes a line to the log at path each time its model is called, and
// another when it answers. called, if not nil, is called with each
// request to its model, before the model answers.
func serveKillRemote(t *testing.T, ids int, path string, called func(provider.Request)) *killRemote {
	t.Helper()
	logf, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	r := &killRemote{
		model: &treeModel{name: "clerk", ids: ids, fresh: new(atomic.Int64), steps: [][][2]string{
			{{"ledger", `{"q":"{task}"}`}}, {{"post", `{"q":"{task}"}`}}}},
		ledger: &countedTool{name: "ledger", answer: "balance 42 on " + remoteSecret},
		post:   &countedTool{name: "post", answer: "posted"},
	}
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task, _ := taskOf(req)
		_, _ = logf.WriteString(logRemote + "\t" + task + "\n")
		if called != nil {
			called(req)
		}
		resp, err := r.model.Complete(ctx, req)
		if err == nil && len(resp.Message.ToolCalls) == 0 {
			_, _ = logf.WriteString(logAnswered + "\t" + task + "\n")
		}
		return resp, err
	})
	post := tool.RequireApproval(r.post, "Posts to the books", 0)
	srv, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("clerk"), agent.WithTools(r.ledger, post))
	}, a2a.WithName("clerk"), a2a.WithDescription("Keeps the books."),
		a2a.WithAuthorize(func(*http.Request) (string, error) { return "acme", nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(r.bodies.wrap(srv))
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

// check checks what the remote ran across the rounds: one task for each
// call of it the person approved (the lead's and the worker's), its
// ledger once for each and its post once for the lead's (the person
// refused the worker's), and never the lead's secret.
func (r *killRemote) check(t *testing.T) {
	t.Helper()
	want := []string{"l " + redacted(killInput), "w " + redacted(killInput) + "/clerk"}
	for _, c := range []struct {
		tool *countedTool
		want []string
	}{{r.ledger, want}, {r.post, want[:1]}} {
		c.tool.mu.Lock()
		var ran []string
		for _, a := range c.tool.args {
			var v struct{ Q string }
			_ = json.Unmarshal([]byte(a), &v)
			ran = append(ran, v.Q)
		}
		c.tool.mu.Unlock()
		slices.Sort(ran)
		if !slices.Equal(ran, c.want) {
			t.Errorf("the remote's %s ran for %q, want once for each of %q", c.tool.name, ran, c.want)
		}
	}
	r.model.mu.Lock()
	tasks := r.model.tasks
	r.model.mu.Unlock()
	if tasks != len(want) {
		t.Errorf("the remote's model started %d tasks, want %d", tasks, len(want))
	}
	if r.bodies.count() == 0 {
		t.Fatal("no request reached the remote agent")
	}
	if r.bodies.holds(leadSecret) || r.model.sent(leadSecret) {
		t.Errorf("the lead's secret reached the remote (in a request to it: %v; its model: %v)", r.bodies.holds(leadSecret), r.model.sent(leadSecret))
	}
	if !r.model.sent(remoteSecret) {
		t.Error("the remote's model never read the remote's secret: the test tries nothing")
	}
}

// taskOf returns the task of a request, its last user message, and the
// steps that follow it: the assistant messages after it.
func taskOf(req provider.Request) (task string, step int) {
	for _, m := range req.Messages {
		switch m.Role {
		case provider.RoleUser:
			task, step = m.Content, 0
		case provider.RoleAssistant:
			step++
		}
	}
	return task, step
}

// startKillRound runs one round of test in a process of its own, the
// round as JSON in the environment variable env, and returns its report,
// or killed when SIGKILL ended it. pid, if not nil, holds the process's
// id while it runs.
func startKillRound(t *testing.T, test, env string, round killRound, pid *atomic.Int64) (report killRound, killed bool) {
	t.Helper()
	return resumetest.StartRound[killRound](t, test, round, round.Out, env, pid)
}

// redacted is s with the lead's secret redacted.
func redacted(s string) string { return strings.ReplaceAll(s, leadSecret, policy.Redacted) }

// callKey names a call of the tool name with the arguments args, the
// secret redacted and the JSON made canonical, as the log does.
func callKey(name string, args json.RawMessage) string {
	return resumetest.CallKey(name, args, leadSecret, policy.Redacted)
}

// runKillRound is the process that runs one round (see
// TestPolicySurvivesSIGKILLWithARemote for the tree and its policy). Each
// local agent's side effects are in a step of their own, so that a kill at
// a model call or a question finds no side effect unrecorded: the process
// dies only once every side effect that ran is read by the agent that made
// it, and none can run between that check and the kill. A message to the
// remote may be on its way.
func runKillRound(t *testing.T, spec string) {
	var round killRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(round.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var mu sync.Mutex
	pending := map[string]bool{} // side effects not yet read by their agent's model
	calling := map[string]bool{} // the remote's invocations not yet ended: their messages may be on their way, or not yet journaled
	log := func(kind, key string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = logf.WriteString(kind + "\t" + key + "\n")
	}
	log(resumetest.LogStart, "")
	ran := func(key, res string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = logf.WriteString(logRan + "\t" + key + "\n")
		pending[res] = true
	}
	var events atomic.Int64
	tick := func() {
		if events.Add(1) != round.KillAt {
			return
		}
		// The process dies holding mu, which a side effect takes to run
		// and a hand-off to the remote to start.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			mu.Lock()
			stalled := time.Now().After(deadline)
			if stalled {
				_, _ = fmt.Fprintf(logf, "%s\tthe kill waited 20 s for the side effects %v\n", logFault, slices.Collect(maps.Keys(pending)))
			}
			if len(pending) == 0 || stalled {
				_, _ = fmt.Fprintf(logf, "%s\t%d\n", logKill, len(calling))
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			mu.Unlock()
		}
	}
	// model stands between a local agent and its treeModel: the results
	// its request holds are read (no longer pending), what it was sent and
	// what it asked for is logged, and its call is an event of the round.
	model := func(m *treeModel) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			mu.Lock()
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleTool {
					delete(pending, msg.Content)
				}
			}
			mu.Unlock()
			task, _ := taskOf(req)
			b, _ := json.Marshal(req)
			if strings.Contains(string(b), remoteSecret) {
				log(logFault, "the remote's secret, to "+m.name+"'s model")
			}
			has := strings.Contains(string(b), leadSecret)
			switch {
			case m.name == "lead":
				if has {
					log(logSecret, "")
				}
			case has:
				log(logFault, m.name+"'s model")
				fallthrough
			default:
				log(logTask, redacted(task))
			}
			log(logModel, m.name)
			tick()
			resp, err := m.Complete(ctx, req)
			for _, c := range resp.Message.ToolCalls {
				log(logAsked, callKey(c.Name, c.Arguments))
			}
			return resp, err
		})
	}
	effect := func(name string) resumetest.Effect {
		return resumetest.Effect{Name: name, Secret: leadSecret, Redacted: policy.Redacted, Leaked: func(where string) { log(logFault, where) }, Ran: ran}
	}
	rm, search, write, leaf := effect("rm"), effect("search"), effect("write"), effect("leaf")
	ask := policy.AskBefore("approve", "leaf", "clerk")
	root, err := policy.New(
		policy.Func("observer", func(_ context.Context, c *policy.Check) policy.Decision {
			switch c.Point {
			case policy.BeforeTool:
				log(logTool, callKey(c.Tool, c.Arguments))
			case policy.AfterResult:
				log(logResult, callKey(c.Tool, c.Arguments))
			case policy.BeforeDelegation:
				log(logEdge, redacted(c.Task))
			case policy.BeforeModel:
				name := c.Path[strings.LastIndexByte(c.Path, '/')+1:]
				if name == subagent.DefaultForkName {
					name = "fork"
				}
				log(logSeen, name)
			}
			return policy.Decision{}
		}),
		policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
		policy.Redact("secrets", []string{leadSecret, remoteSecret}),
		policy.Func("approve", func(ctx context.Context, c *policy.Check) policy.Decision {
			d := ask.Decide(ctx, c)
			if d.Verdict == policy.Ask {
				log(logAsk, callKey(c.Tool, c.Arguments))
				tick()
			}
			return d
		}))
	if err != nil {
		t.Fatal(err)
	}

	// An invocation of the remote runs from its SUBAGENT_STARTED to its
	// SUBAGENT_FINISHED (its answer, or its questions) or SUBAGENT_ERROR:
	// until then a message to the remote may be on its way, or its answer
	// not yet journaled. The process may die then: the message goes again
	// on resume under the same id, and the remote answers it with the task
	// it started.
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		switch {
		case e.Type == event.SubagentStarted && e.Name == "clerk":
			mu.Lock()
			calling[e.SubagentRunID] = true
			mu.Unlock()
		case e.Type == event.SubagentFinished || e.Type == event.SubagentError:
			mu.Lock()
			delete(calling, e.SubagentRunID)
			mu.Unlock()
		}
	}))
	remote, err := a2a.Connect(ctx, round.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	clerk, err := remote.Tool(subagent.WithMaxDepth(2)) // the children delegate to it too
	if err != nil {
		t.Fatal(err)
	}
	fresh := new(atomic.Int64)
	fresh.Store(int64(os.Getpid()) * 1000) // fresh across the processes too
	who := `{"who":"{task}"}`
	childSteps := [][][2]string{{{"rm", who}, {"write", who}}, {{"leaf", who}}, {{"clerk", `{"task":"{task}/clerk"}`}}}
	childTools := func() []tool.Tool { return []tool.Tool{rm, write, leaf, clerk} }
	workerModel := model(&treeModel{name: "worker", ids: round.IDs, fresh: fresh, steps: childSteps})
	worker, err := subagent.FromFactory("worker", "One-shot.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(workerModel, agent.WithName("worker"), agent.WithTools(childTools()...))
	})
	if err != nil {
		t.Fatal(err)
	}
	forkTools, err := tool.NewRegistry(childTools()...)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(model(&treeModel{name: "fork", ids: round.IDs, fresh: fresh, steps: childSteps}), forkTools)
	if err != nil {
		t.Fatal(err)
	}
	leadModel := model(&treeModel{name: "lead", ids: round.IDs, fresh: fresh, steps: [][][2]string{
		{{"rm", who}, {"search", who}},
		{{"worker", `{"task":"w {task}"}`}, {subagent.SpawnToolName, `{"task":"f {task}"}`}, {"clerk", `{"task":"l {task}"}`}},
	}})
	lead, err := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(rm, search, worker, sp, clerk), agent.WithPolicy(root))
	if err != nil {
		t.Fatal(err)
	}

	runKillTurn(ctx, t, lead, round, killInput)
	log(resumetest.LogEnd, "")
}

// runKillTurn runs lead's turn on input, journaled in the SQLite store of
// the round and resumed with its answers if it has questions pending, and
// writes what it reports where the round says.
func runKillTurn(ctx context.Context, t *testing.T, lead agent.Agent, round killRound, input string) {
	b, err := sqlite.Open(round.Store)
	if err != nil {
		t.Fatal(err)
	}
	// A lease short enough that a killed process's locks are soon free.
	st, err := store.New(b, store.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, err := st.Journal(ctx, "a2a-turn")
	if err != nil {
		t.Fatal(err)
	}
	if round.Pending != nil {
		if ctx, err = tool.Resume(ctx, round.Pending, round.Answers...); err != nil {
			t.Fatal(err)
		}
	}
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: input})
	report := killRound{Answer: out.Answer}
	var in *tool.Interrupted
	switch {
	case errors.As(err, &in):
		report.Interrupted = in
	case err != nil:
		report.Err = err.Error()
	}
	data, _ := json.Marshal(report)
	if err := os.WriteFile(round.Out, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkKillLog checks the log of TestPolicySurvivesSIGKILLWithARemote's
// rounds. The policy is asked again about what a killed round left
// undone, so it sees some calls and hand-offs in more than one round, and
// a killed round may not have made calls it saw; so what it saw is held
// against what the tree did in the same round. It sees 100% when:
//   - in every round, a tool runs only after the policy saw its call in
//     that round; a local child's model works on a task, and the remote's
//     model starts one, only after the policy saw its hand-off in that
//     round (or, for the remote, in the round before, killed while the
//     remote worked on it); and a local agent's model is called only after the policy
//     saw that call in that round;
//   - in every round that ran to its end, the policy saw the result of
//     every call that ran in it and of every task the remote ran in it,
//     and as many model calls of each local agent as were made;
//   - every call a model asked for, the policy saw in that round or a
//     later one, and across all rounds the calls it saw are the calls the
//     models asked for, and the hand-offs it saw are the tasks the
//     children and the remote were given.
//
// Each side effect of the tree's tools happens once across the rounds;
// an approved leaf once, a refused one and rm, denied, never.
func checkKillLog(t *testing.T, procs []resumetest.RoundLog) {
	t.Helper()
	input := redacted(killInput)
	w, f := "w "+input, "f "+input
	local := []string{w, f}                        // the local children's tasks
	remote := []string{"l " + input, w + "/clerk"} // the tasks the remote is given: the calls of it approved
	refused := []string{f + "/clerk"}              // the fork's call of the remote, refused
	ran := map[string]int{}                        // the side effects, across the rounds
	made := map[string]int{}                       // the calls the models asked for: the last round that asked, from 1
	calls := map[string]int{}                      // the calls the policy saw: the last round that saw it, from 1
	given := map[string]bool{}                     // the tasks the local children's models were given, across the rounds
	remoteWorked := map[string]bool{}              // the tasks the remote's model worked on, across the rounds
	handed := map[string]bool{}                    // the hand-offs the policy saw, across the rounds
	asks := map[string]bool{}                      // the calls the policy asked about, across the rounds
	var killedEdges map[string]int                 // the hand-offs the policy saw in the round before, if it was killed
	for n, p := range procs {
		saw := map[string]int{}     // the calls the policy saw in this process
		models := map[string]int{}  // the model calls of each agent in this process
		seen := map[string]int{}    // the model calls the policy saw, by agent
		results := map[string]int{} // the results the policy saw in this process
		edges := map[string]int{}   // the hand-offs the policy saw in this process
		var done []string           // the tasks the remote answered in this process
		for _, l := range p.Lines {
			kind, key := l[0], l[1]
			switch kind {
			case logAsked:
				made[key] = n + 1
			case logTool:
				saw[key]++
				calls[key] = n + 1
			case logRan:
				ran[key]++
				if saw[key] == 0 {
					t.Errorf("round %d: %s ran, and the policy did not see the call", n, key)
				}
			case logResult:
				results[key]++
			case logEdge:
				handed[key] = true
				edges[key]++
			case logTask:
				given[key] = true
				if edges[key] == 0 {
					t.Errorf("round %d: a child was given %q, and the policy saw no hand-off of it in that round", n, key)
				}
			case logRemote:
				remoteWorked[key] = true
				if strings.Contains(key, leadSecret) {
					t.Errorf("round %d: the lead's secret reached the remote's model: %q", n, key)
				}
				// A task the remote took from a round killed while it
				// waited goes on as the next round starts.
				if edges[key] == 0 && killedEdges[key] == 0 {
					t.Errorf("round %d: the remote worked on %q, and the policy saw no hand-off of it in that round or a round killed before it", n, key)
				}
			case logAnswered:
				done = append(done, key)
			case logSeen:
				seen[key]++
			case logModel:
				models[key]++
				if models[key] > seen[key] {
					t.Errorf("round %d: %s's model was called %d times, and the policy saw %d of them", n, key, models[key], seen[key])
				}
			case logAsk:
				asks[key] = true
			case logFault:
				t.Errorf("round %d: %s", n, key)
			}
		}
		killedEdges = nil
		if !p.Ended {
			killedEdges = edges
			continue
		}
		for _, l := range p.Lines {
			if l[0] == logRan && results[l[1]] == 0 {
				t.Errorf("round %d: %s ran, and the policy did not see its result", n, l[1])
			}
		}
		for _, task := range done {
			if key := callKey("clerk", mustJSON(map[string]string{"task": task})); results[key] == 0 {
				t.Errorf("round %d: the remote answered %q, and the policy did not see the answer", n, task)
			}
		}
		for agent, calls := range models {
			if seen[agent] != calls {
				t.Errorf("round %d: %s's model was called %d times, and the policy saw %d calls", n, agent, calls, seen[agent])
			}
		}
	}
	// The side effects: each once, but the fork's leaf, refused, and rm,
	// denied, never; the remote ran each task approved once, and the one
	// refused never.
	for _, task := range local {
		who := `{"who":` + strconv.Quote(task) + `}`
		if got := ran["write "+who]; got != 1 {
			t.Errorf("write for %q ran %d times, want 1", task, got)
		}
		want := 0
		if task == w {
			want = 1
		}
		if got := ran["leaf "+who]; got != want {
			t.Errorf("leaf for %q ran %d times, want %d", task, got, want)
		}
	}
	if got := ran["search "+`{"who":`+strconv.Quote(input)+`}`]; got != 1 {
		t.Errorf("search ran %d times, want 1", got)
	}
	for key, n := range ran {
		if strings.HasPrefix(key, "rm ") {
			t.Errorf("%s, denied, ran %d times", key, n)
		}
	}
	for _, task := range remote {
		if !remoteWorked[task] {
			t.Errorf("the remote never worked on %q: %v", task, remoteWorked)
		}
	}
	if len(remoteWorked) != len(remote) {
		t.Errorf("the remote worked on %v, want only %q", remoteWorked, remote)
	}
	// The policy asked about each leaf call and each call of the remote.
	wantAsks := []string{callKey("clerk", mustJSON(map[string]string{"task": "l " + input}))}
	for _, task := range local {
		wantAsks = append(wantAsks, callKey("leaf", mustJSON(map[string]string{"who": task})), callKey("clerk", mustJSON(map[string]string{"task": task + "/clerk"})))
	}
	for _, key := range wantAsks {
		if !asks[key] {
			t.Errorf("the policy never asked about %s", key)
		}
	}
	if len(asks) != len(wantAsks) {
		t.Errorf("the policy asked about %d calls, want %d: %v", len(asks), len(wantAsks), asks)
	}
	// The policy saw every call and every hand-off.
	for key, n := range made {
		if calls[key] < n {
			t.Errorf("a model asked for %s in round %d, and the policy did not see it then or after", key, n-1)
		}
	}
	for key := range calls {
		if made[key] == 0 {
			t.Errorf("the policy saw %s, which no model asked for", key)
		}
	}
	if len(made) != 13 {
		t.Errorf("the models asked for %d calls, want 13 (5 of the lead's, 4 of each child's): the tree did not run as built", len(made))
	}
	for _, task := range local {
		if !given[task] || !handed[task] {
			t.Errorf("the task %q: given to a child %v, handed off under the policy %v", task, given[task], handed[task])
		}
	}
	for _, task := range remote {
		if !handed[task] {
			t.Errorf("the remote ran %q, and the policy never saw its hand-off", task)
		}
	}
	for _, task := range refused {
		if handed[task] {
			t.Errorf("the hand-off of %q, refused by the person, went ahead", task)
		}
	}
	if len(given) != len(local) || len(handed) != len(local)+len(remote) {
		t.Errorf("%d tasks given to local children, %d hand-offs seen, want %d and %d: %v, %v", len(given), len(handed), len(local), len(local)+len(remote), given, handed)
	}
	// The lead was given the secret, in every process its model was called in.
	for n, p := range procs {
		leads, secrets := 0, 0
		for _, l := range p.Lines {
			switch {
			case l[0] == logModel && l[1] == "lead":
				leads++
			case l[0] == logSecret:
				secrets++
			}
		}
		if secrets != leads {
			t.Errorf("round %d: the lead's model was called %d times, %d of them with the secret: the test tries nothing", n, leads, secrets)
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

const replyRoundEnv = "DEPUTY_TEST_A2A_REPLY_KILL_ROUND"

// A process killed while the answer to a remote task's question is on its
// way, which the remote agent takes and goes on with to the task's end,
// does not send the answer again on resume, which the ended task refuses:
// the resumed run finds the task ended, and takes its answer, which the
// remote's tools made once — whatever ids the models give their calls.
// The remote is served by the test's own process, whose model, once the
// post the person approved ran, kills the lead's process before it
// answers.
func TestRemoteAnswerSentBeforeAKillIsNotSentAgain(t *testing.T) {
	if spec := os.Getenv(replyRoundEnv); spec != "" {
		runReplyRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			dir := t.TempDir()
			round := killRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Out: filepath.Join(dir, "round.json")}
			var pid atomic.Int64
			var kills atomic.Int64
			rem := serveKillRemote(t, ids, filepath.Join(dir, "remote.log"), func(req provider.Request) {
				if last := req.Messages[len(req.Messages)-1]; last.Role != provider.RoleTool || last.Content != "posted" {
					return
				}
				if p := pid.Load(); p != 0 && kills.Add(1) == 1 {
					_ = syscall.Kill(int(p), syscall.SIGKILL)
				}
			})
			round.URL = rem.url
			start := func() (killRound, bool) {
				return startKillRound(t, "TestRemoteAnswerSentBeforeAKillIsNotSentAgain", replyRoundEnv, round, &pid)
			}
			// 1: the remote asks before its post.
			got, killed := start()
			if killed || got.Err != "" || got.Interrupted == nil || len(got.Interrupted.Interrupts) != 1 {
				t.Fatalf("the first round: killed %v, err %q, interrupted %v: want the remote's question", killed, got.Err, got.Interrupted)
			}
			q := got.Interrupted.Interrupts[0]
			if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "Allow post with") {
				t.Fatalf("question %+v", q)
			}
			round.Pending = got.Interrupted
			round.Answers = []tool.Answer{{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}
			// 2: the person approves; the process dies as the remote
			// agent reads what its post returned.
			if _, killed := start(); !killed {
				t.Fatal("the round meant to die with the answer on its way ended by itself")
			}
			// 3: resumed with the same answer, to the end.
			got, killed = start()
			if killed || got.Err != "" || got.Interrupted != nil {
				t.Fatalf("the last round: killed %v, err %q, interrupted %v", killed, got.Err, got.Interrupted)
			}
			if want := "lead(clerk(balance 42 on " + remoteSecret + "; posted))"; got.Answer != want {
				t.Errorf("the answer is %q, want %q", got.Answer, want)
			}
			rem.model.mu.Lock()
			tasks := rem.model.tasks
			rem.model.mu.Unlock()
			if tasks != 1 || rem.ledger.runs() != 1 || rem.post.runs() != 1 {
				t.Errorf("the remote started %d tasks, its ledger ran %d times and its post %d, want each once", tasks, rem.ledger.runs(), rem.post.runs())
			}
		})
	}
}

// runReplyRound is the process that runs one round of
// TestRemoteAnswerSentBeforeAKillIsNotSentAgain: a lead that hands its
// task to the remote.
func runReplyRound(t *testing.T, spec string) {
	var round killRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	remote, err := a2a.Connect(ctx, round.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	clerk, err := remote.Tool()
	if err != nil {
		t.Fatal(err)
	}
	fresh := new(atomic.Int64)
	fresh.Store(int64(os.Getpid()) * 1000)
	leadModel := &treeModel{name: "lead", ids: round.IDs, fresh: fresh, steps: [][][2]string{{{"clerk", `{"task":"{task}"}`}}}}
	lead, err := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(clerk))
	if err != nil {
		t.Fatal(err)
	}
	runKillTurn(ctx, t, lead, round, "audit")
}

const firstRoundEnv = "DEPUTY_TEST_A2A_FIRST_KILL_ROUND"

// A process killed while its first message to a remote agent is on its
// way, which the remote agent took and started a task on, sends it again
// on resume under the same messageId, which the remote (a deputy server)
// answers with the task it started: the remote has one task, and its
// tools run once — whatever ids the models give their calls. The remote
// is served by the test's own process, whose model, called on the task
// for the first time, kills the lead's process; the task goes on to ask
// before its post, which the person approves.
func TestRemoteFirstMessageSentBeforeAKillStartsOneTask(t *testing.T) {
	if spec := os.Getenv(firstRoundEnv); spec != "" {
		runReplyRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			dir := t.TempDir()
			round := killRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Out: filepath.Join(dir, "round.json")}
			var pid atomic.Int64
			var kills atomic.Int64
			rem := serveKillRemote(t, ids, filepath.Join(dir, "remote.log"), func(req provider.Request) {
				if req.Messages[len(req.Messages)-1].Role != provider.RoleUser {
					return // not the task's first call
				}
				if p := pid.Load(); p != 0 && kills.Add(1) == 1 {
					_ = syscall.Kill(int(p), syscall.SIGKILL)
				}
			})
			round.URL = rem.url
			start := func() (killRound, bool) {
				return startKillRound(t, "TestRemoteFirstMessageSentBeforeAKillStartsOneTask", firstRoundEnv, round, &pid)
			}
			// 1: the process dies as the remote agent starts on the task.
			if _, killed := start(); !killed {
				t.Fatal("the round meant to die with the first message on its way ended by itself")
			}
			// 2: resumed, the run finds the task, which asks before its
			// post.
			got, killed := start()
			if killed || got.Err != "" || got.Interrupted == nil || len(got.Interrupted.Interrupts) != 1 {
				t.Fatalf("the resumed round: killed %v, err %q, interrupted %v: want the remote's question", killed, got.Err, got.Interrupted)
			}
			q := got.Interrupted.Interrupts[0]
			if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "Allow post with") {
				t.Fatalf("question %+v", q)
			}
			// 3: the person approves.
			round.Pending = got.Interrupted
			round.Answers = []tool.Answer{{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}}
			got, killed = start()
			if killed || got.Err != "" || got.Interrupted != nil {
				t.Fatalf("the last round: killed %v, err %q, interrupted %v", killed, got.Err, got.Interrupted)
			}
			if want := "lead(clerk(balance 42 on " + remoteSecret + "; posted))"; got.Answer != want {
				t.Errorf("the answer is %q, want %q", got.Answer, want)
			}
			rem.model.mu.Lock()
			tasks := rem.model.tasks
			rem.model.mu.Unlock()
			if tasks != 1 || rem.ledger.runs() != 1 || rem.post.runs() != 1 {
				t.Errorf("the remote started %d tasks, its ledger ran %d times and its post %d, want each once", tasks, rem.ledger.runs(), rem.post.runs())
			}
		})
	}
}
