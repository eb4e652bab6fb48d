//go:build unix

package temporal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

const policyKillEnv = "DEPUTY_TEST_TEMPORAL_POLICY_WORKER"

// policyWorker is what TestPolicySurvivesSIGKILL tells a worker process it
// starts.
type policyWorker struct {
	Mode  int   `json:"mode"`  // an index of policyIDModes
	Calls int64 `json:"calls"` // where its model's count of calls starts: fresh ids stay fresh across processes
	// KillAt is where the process kills itself: "hold" once both forks
	// hold, "leaf" at the first leaf call before it runs; any process
	// when it gets SIGUSR1.
	KillAt string `json:"killAt"`
	Log    string `json:"log"` // the world's log, shared by every process
	Queue  string `json:"queue"`
}

// TestPolicySurvivesSIGKILL is TestPolicySurvivesAWorkerRestart with its
// worker in a process of its own, killed with SIGKILL where the other's
// stops, and once more: at a tool call, once both forks (one of them the
// lead's background job) hold; while the tree waits on the forks'
// questions; and at the call the person approved, before it runs. Each
// time the test starts another. The models and tools log what they do in
// a file that outlives the processes, and a kill waits until the server
// has recorded each answer and effect let through (killGate). A denied
// call never runs, each question reaches the person once, each call the
// person approved runs once and a refused one never, as does every other
// side effect, and no step of an agent is answered twice — with models
// that name their calls afresh, not at all, or from call_0, the three at
// once.
func TestPolicySurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(policyKillEnv); spec != "" {
		runPolicyWorker(t, spec)
		return
	}
	hostPort, ns := serverAddr(t)
	if testing.Short() {
		t.Skip("starts worker processes and kills them")
	}
	c, err := Dial(context.Background(), hostPort, ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Most of a tree's time is the server's wait for a killed worker's
	// activity (HeartbeatTimeout): the three wait at once, whatever
	// -parallel says.
	var wg sync.WaitGroup
	for mode, m := range policyIDModes {
		wg.Go(func() {
			t.Run(m.name, func(t *testing.T) { policySurvivesSIGKILL(t, c, mode) })
		})
	}
	wg.Wait()
}

func policySurvivesSIGKILL(t *testing.T, c client.Client, mode int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	queue := fmt.Sprintf("deputy-policy-kill-%d-%d", mode, time.Now().UnixNano())
	procs := newWorkerProcs(t, "TestPolicySurvivesSIGKILL", policyKillEnv)
	logPath := filepath.Join(procs.dir, "world.log")
	var current *workerProc
	start := func(killAt string) {
		current = procs.start(policyWorker{Mode: mode, Calls: int64(len(procs.all)) * 1000, KillAt: killAt, Log: logPath, Queue: queue})
	}
	// alive fails the test if the worker has ended.
	alive := func() {
		t.Helper()
		select {
		case <-current.exited:
			t.Fatalf("worker %d ended by itself: %v", len(procs.all), current.err)
		default:
		}
	}
	// killed waits until the worker has killed itself at at.
	killed := func(at string) {
		t.Helper()
		select {
		case <-current.exited:
		case <-ctx.Done():
			t.Fatalf("worker %d did not kill itself %s", len(procs.all), at)
		}
		if !current.killed() {
			t.Fatalf("worker %d was to kill itself %s; it ended by itself: %v", len(procs.all), at, current.err)
		}
	}

	start("hold")
	tree := "policy-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, restartTreeInput)
	if err != nil {
		t.Fatal(err)
	}
	killed("once both forks hold")
	if w := readPolicyLog(t, logPath); len(w.holding) != 2 {
		t.Fatalf("the first worker was killed once %v held, want both forks", w.holding)
	}
	start("")

	// The questions come in two rounds: the forks' leaf, then the
	// grandchildren's. The person approves the first of each round.
	asked := map[string]string{} // the workflow that asks → its question's id
	approved := map[string]bool{}
	for round := 0; round < 2; round++ {
		var fresh []tool.Interrupt
		for len(fresh) < 2 {
			if ctx.Err() != nil {
				t.Fatalf("round %d: the tree waits on %+v, want two new questions", round, fresh)
			}
			alive()
			time.Sleep(50 * time.Millisecond)
			pending, err := Pending(ctx, c, tree)
			if err != nil {
				t.Fatal(err)
			}
			fresh = fresh[:0]
			for _, q := range pending {
				if id, ok := asked[q.SubagentRunID]; ok {
					t.Fatalf("round %d: %s asks %s; it asked %s before", round, q.SubagentRunID, q.ID, id)
				}
				fresh = append(fresh, q)
			}
		}
		if w := readPolicyLog(t, logPath); w.ran("leaf") != round {
			t.Errorf("round %d: leaf ran %d times before the answers, %d approved so far", round, w.ran("leaf"), round)
		}
		if round == 0 {
			// The tree waits on the person: its worker kills itself, and
			// the next kills itself at the call the person approves.
			_ = current.cmd.Process.Signal(syscall.SIGUSR1)
			killed("while the tree waits")
			start("leaf")
		}
		var answers []tool.Answer
		for i, q := range fresh {
			if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "approve-leaf") || q.SubagentRunID == "" {
				t.Errorf("question %+v", q)
			}
			asked[q.SubagentRunID], approved[q.SubagentRunID] = q.ID, i == 0
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, i == 0))})
		}
		if err := Answer(ctx, c, tree, answers...); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			killed("at the approved leaf")
			start("")
		}
	}
	done := make(chan error, 1)
	var out RunOutput
	go func() { done <- run.Get(ctx, &out) }()
	select {
	case err = <-done:
	case <-current.exited:
		cancel()
		<-done
		alive()
	}
	if err != nil {
		t.Fatal(err)
	}

	w := readPolicyLog(t, logPath)
	if w.stuck != "" {
		t.Error(w.stuck)
	}
	if want := []string{"hold", "asked", "leaf"}; !slices.Equal(w.kills, want) {
		t.Errorf("the workers were killed at %v, want %v", w.kills, want)
	}
	if n := w.ran("rm"); n != 0 {
		t.Errorf("rm, denied, ran %d times across the kills", n)
	}
	want := map[string]int{"search " + tree: 1}
	for wf := range w.holding {
		want["hold "+wf] = 1
	}
	for wf, yes := range approved {
		if yes {
			want["leaf "+wf] = 1
		}
	}
	if !maps.Equal(w.effects, want) {
		t.Errorf("the tools ran %v, want %v (each approved leaf once, a refused one never)", w.effects, want)
	}
	// 15 steps in all: the lead's three, each fork's four, each
	// grandchild's two; none answered twice.
	if len(w.answers) != 15 {
		t.Errorf("the models answered %d steps, want 15: %v", len(w.answers), w.answers)
	}
	for step, n := range w.answers {
		if n != 1 {
			t.Errorf("step %s was answered %d times", step, n)
		}
	}
	if len(asked) != 4 {
		t.Errorf("%d agents asked, want 4 (each fork and grandchild once)", len(asked))
	}
	checkRestartAnswer(t, out.Answer, 2, 2)
	t.Logf("%d worker processes, %d model answers, %d effects", len(procs.all), len(w.answers), len(w.effects))
}

// policyWorld is what the log of the policy test's processes says
// happened.
type policyWorld struct {
	answers map[string]int  // model answers, by workflow and step
	effects map[string]int  // tool runs, by tool and workflow: "leaf <workflow>"
	holding map[string]bool // the workflows whose hold held on in the first worker
	kills   []string
	stuck   string
}

// ran is how many times the tool ran, in every workflow.
func (w policyWorld) ran(name string) int {
	n := 0
	for k, c := range w.effects {
		if strings.HasPrefix(k, name+" ") {
			n += c
		}
	}
	return n
}

func readPolicyLog(t *testing.T, path string) policyWorld {
	t.Helper()
	w := policyWorld{answers: map[string]int{}, effects: map[string]int{}, holding: map[string]bool{}}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "stuck: ") {
			w.stuck = line
			continue
		}
		f := strings.Fields(strings.TrimSuffix(line, "."))
		if len(f) < 2 || !strings.HasSuffix(line, ".") {
			continue // a line cut by the kill
		}
		switch f[0] {
		case "answer": // answer <workflow>/<step>
			w.answers[f[1]]++
		case "effect": // effect <tool> <workflow>
			w.effects[f[1]+" "+f[2]]++
		case "holding": // holding <workflow>
			w.holding[f[1]] = true
		case "kill": // kill <where>
			w.kills = append(w.kills, f[1])
		}
	}
	return w
}

// runPolicyWorker is a worker process of TestPolicySurvivesSIGKILL: the
// tree's model and tools, each answer and effect let through a killGate
// and logged under its workflow's id.
func runPolicyWorker(t *testing.T, spec string) {
	var pw policyWorker
	if err := json.Unmarshal([]byte(spec), &pw); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(pw.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var logMu sync.Mutex
	logLine := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = fmt.Fprintf(logf, format+".\n", args...)
	}
	g := newKillGate(rand.N(20*time.Millisecond), logLine)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		g.kill("asked")
	}()
	workflowOf := func(ctx context.Context) string { return activity.GetInfo(ctx).WorkflowExecution.ID }

	n := new(atomic.Int64)
	n.Store(pw.Calls)
	tree := restartTree(policyIDModes[pw.Mode].id, n)
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		mark := g.pass("a")
		res, err := tree.Complete(ctx, req)
		if err != nil {
			return res, err
		}
		steps := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleAssistant {
				steps++
			}
		}
		logLine("answer %s/%d", workflowOf(ctx), steps)
		res.Message.Content = strings.TrimSpace(res.Message.Content + " " + mark)
		return res, nil
	})
	var holding, leaves atomic.Int64
	effect := func(name string, before func(ctx context.Context) error) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: name, Description: "Does " + name + ".", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
				if before != nil {
					if err := before(ctx); err != nil {
						return tool.Result{}, err
					}
				}
				mark := g.pass("e")
				logLine("effect %s %s", name, workflowOf(ctx))
				return tool.Result{Content: name + " done " + mark}, nil
			}}
	}
	hold := effect("hold", func(ctx context.Context) error {
		if pw.KillAt != "hold" {
			return nil
		}
		logLine("holding %s", workflowOf(ctx))
		if holding.Add(1) == 2 {
			g.kill("hold")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	leaf := effect("leaf", func(context.Context) error {
		if pw.KillAt == "leaf" && leaves.Add(1) == 1 {
			g.kill("leaf") // the call waits at the gate for the kill
		}
		return nil
	})
	reg, err := tool.NewRegistry(effect("rm", nil), effect("search", nil), leaf, hold)
	if err != nil {
		t.Fatal(err)
	}
	c := g.dial(t)
	defer c.Close()
	// A killed worker's sticky tasks go to the next one after a second.
	w := worker.New(c, pw.Queue, worker.Options{StickyScheduleToStartTimeout: time.Second})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": model}, Tools: reg, Policy: restartPolicy(t)})
	if err := w.Run(worker.InterruptCh()); err != nil {
		t.Fatal(err)
	}
}
