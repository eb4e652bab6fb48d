package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// On a real server, a worker's policy over a three-level tree with a
// background job loses nothing it decided when the workers stop mid-tree
// and others take over: the first stops while both forks (one of them the
// lead's background job) are in the middle of a tool call, the second
// while the tree waits on the policy's questions. A denied call never
// runs, each question reaches the person once, and each call the person
// approved runs once, as does every other side effect — with models that
// name their calls afresh, not at all, or from call_0.
func TestPolicySurvivesAWorkerRestart(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Most of a tree's time is the server's timeouts (a lost attempt of
	// the stopped worker is retried once its heartbeat is missed): the
	// three trees wait for theirs at once, whatever -parallel says, each
	// on a task queue of its own.
	var wg sync.WaitGroup
	for i, mode := range policyIDModes {
		wg.Go(func() {
			t.Run(mode.name, func(t *testing.T) {
				policySurvivesRestart(t, c, fmt.Sprintf("deputy-policy-%d-%d", time.Now().UnixNano(), i), mode.id)
			})
		})
	}
	wg.Wait()
}

// policySurvivesRestart runs one tree on its task queue: the lead calls rm and search and
// spawns two forks, one in the background, then waits for the job; each
// fork calls rm and hold, then leaf, then spawns a grandchild, which calls
// rm and leaf. The policy denies rm and asks before leaf.
func policySurvivesRestart(t *testing.T, c client.Client, queue string, id func(int64, int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead := restartTree(id, new(atomic.Int64))
	var rm, search, leaf, held, holding, stopped atomic.Int64
	both := make(chan struct{})
	counted := func(name string, runs *atomic.Int64) tool.Tool {
		return tool.Must(tool.New(name, "Does "+name+".", func(context.Context, struct{}) (string, error) {
			runs.Add(1)
			return name + " done", nil
		}))
	}
	tools := func(hold tool.Tool) *tool.Registry {
		reg, err := tool.NewRegistry(counted("rm", &rm), counted("search", &search), counted("leaf", &leaf), hold)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	// The first worker's hold holds on until the worker stops; the
	// others' is done at once.
	holdOn := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		if holding.Add(1) == 2 {
			close(both)
		}
		<-ctx.Done()
		stopped.Add(1)
		return "", ctx.Err()
	}))
	pol := restartPolicy(t)
	start := func(hold tool.Tool) worker.Worker {
		// A workflow task left on a stopped worker's sticky queue goes to
		// the next worker after a second, not the default five.
		w := worker.New(c, queue, worker.Options{StickyScheduleToStartTimeout: time.Second})
		Register(w, &Runtime{Providers: map[string]provider.Provider{"m": lead}, Tools: tools(hold), Policy: pol})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := start(holdOn)
	defer func() { w.Stop() }()
	tree := "policy-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, restartTreeInput)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-both:
	case <-ctx.Done():
		t.Fatalf("the forks never both reached their hold (%d did)", holding.Load())
	}
	w.Stop() // both forks are in the middle of a tool call
	w = start(counted("hold", &held))

	// The questions come in two rounds: the forks' leaf, then the
	// grandchildren's. The person approves every other one.
	answered := map[string]bool{}
	approved := 0
	for round := 0; round < 2; round++ {
		var fresh []tool.Interrupt
		for len(fresh) < 2 {
			if ctx.Err() != nil {
				t.Fatalf("round %d: the tree waits on %+v, want two new questions", round, fresh)
			}
			time.Sleep(50 * time.Millisecond)
			pending, err := Pending(ctx, c, tree)
			if err != nil {
				t.Fatal(err)
			}
			fresh = fresh[:0]
			for _, q := range pending {
				if answered[q.ID] {
					t.Fatalf("round %d: %s was answered and is asked again", round, q.ID)
				}
				fresh = append(fresh, q)
			}
		}
		if leaf.Load() != int64(approved) {
			t.Errorf("round %d: leaf ran %d times before the answers, %d approved so far", round, leaf.Load(), approved)
		}
		if round == 0 {
			// The tree waits on the person: its worker stops and another
			// takes over before the answers go in.
			w.Stop()
			w = start(counted("hold", &held))
		}
		var answers []tool.Answer
		for _, q := range fresh {
			if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "approve-leaf") {
				t.Errorf("question %+v", q)
			}
			yes := len(answered)%2 == 0
			answered[q.ID] = true
			if yes {
				approved++
			}
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
		}
		if err := Answer(ctx, c, tree, answers...); err != nil {
			t.Fatal(err)
		}
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if len(answered) != 4 || approved != 2 {
		t.Errorf("%d questions, %d approved: want one per leaf call (4), every other one approved", len(answered), approved)
	}
	if rm.Load() != 0 {
		t.Errorf("rm, denied, ran %d times across the restarts", rm.Load())
	}
	if leaf.Load() != int64(approved) {
		t.Errorf("leaf ran %d times; the person approved %d calls", leaf.Load(), approved)
	}
	if search.Load() != 1 || held.Load() != 2 || holding.Load() != 2 || stopped.Load() != 2 {
		t.Errorf("search ran %d times (want 1); hold ran %d times on the first worker, %d of them ended by its stop, and %d times after (want 2, 2, 2)",
			search.Load(), holding.Load(), stopped.Load(), held.Load())
	}
	checkRestartAnswer(t, out.Answer, approved, len(answered)-approved)
}

// restartTree is the model of policySurvivesRestart's tree, which names its
// calls with id, numbered by n.
func restartTree(id func(int64, int) string, n *atomic.Int64) *steps {
	fork := &steps{name: "fork", id: id, n: n, steps: [][][2]string{
		{{"rm", `{}`}, {"hold", `{}`}}, {{"leaf", `{}`}}, {{SpawnToolName, `{"task":"deep: {task}"}`}}}}
	deep := &steps{name: "deep", id: id, n: n, steps: [][][2]string{{{"rm", `{}`}, {"leaf", `{}`}}}}
	return &steps{name: "lead", id: id, n: n, subs: map[string]*steps{"fork: ": fork, "deep: ": deep}, steps: [][][2]string{
		{{"rm", `{}`}, {"search", `{}`}, {SpawnToolName, `{"task":"fork: in the background","background":true}`}, {SpawnToolName, `{"task":"fork: now"}`}},
		{{subagent.JobsToolName, `{"action":"wait"}`}}}}
}

// restartTreeInput starts the lead of restartTree.
var restartTreeInput = RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"rm", "search", "leaf", "hold"}, Spawn: true, Background: true, MaxDepth: 2}, Text: "go"}

// restartPolicy is the policy of restartTree's workers: it denies rm and
// asks before leaf.
func restartPolicy(t *testing.T) *policy.Policy {
	pol, err := policy.New(policy.DenyTools("no-rm", policy.AnyDepth, "rm"), policy.AskBefore("approve-leaf", "leaf"))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// checkRestartAnswer checks that the lead's answer tells of each
// agent's denied rm, and of the leaf calls the person approved and
// refused.
func checkRestartAnswer(t *testing.T, answer string, approved, refused int) {
	t.Helper()
	if got := strings.Count(answer, "rm is not allowed here"); got != 5 {
		t.Errorf("the answer tells of %d denials of rm, want 5 (one per agent): %s", got, answer)
	}
	if got := strings.Count(answer, "leaf done"); got != approved {
		t.Errorf("the answer tells of %d leaf calls, want %d: %s", got, approved, answer)
	}
	if got := strings.Count(answer, "did not approve"); got != refused {
		t.Errorf("the answer tells of %d refusals, want %d: %s", got, refused, answer)
	}
}
