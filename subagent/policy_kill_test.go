//go:build unix

package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// policyRound is what the parent tells the process that runs one round
// of TestPolicySurvivesSIGKILL, and what that process reports back.
type policyRound struct {
	IDs     int               `json:"ids"`
	Crash   string            `json:"crash,omitempty"` // where the process kills itself: see policyCrash
	Store   string            `json:"store"`
	Log     string            `json:"log"`
	Out     string            `json:"out"`
	Pending *tool.Interrupted `json:"pending,omitempty"`
	Answers []tool.Answer     `json:"answers,omitempty"`

	roundReport // reported by the round
}

// roundReport is what a round's process reports of its turn.
type roundReport struct {
	Answer      string            `json:"answer,omitempty"`
	Err         string            `json:"err,omitempty"`
	Interrupted *tool.Interrupted `json:"interrupted,omitempty"`
}

// runRoundTurn runs a's turn, journaled as name in the store at path and
// resumed with answers if pending holds what it waits for, and writes what
// it reports to out.
func runRoundTurn(t *testing.T, a agent.Agent, path, name string, pending *tool.Interrupted, answers []tool.Answer, out string) {
	t.Helper()
	st := openStoreAt(t, path)
	ctx := context.Background()
	j, err := st.Journal(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if pending != nil {
		if ctx, err = tool.Resume(ctx, pending, answers...); err != nil {
			t.Fatal(err)
		}
	}
	o, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	report := roundReport{Answer: o.Answer}
	var in *tool.Interrupted
	switch {
	case errors.As(err, &in):
		report.Interrupted = in
	case err != nil:
		report.Err = err.Error()
	}
	data, _ := json.Marshal(report)
	if err := os.WriteFile(out, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Where a round's process kills itself.
const (
	crashAfterDenial = "after-denial" // at the lead's second model call: its first step's rm was denied, its search ran
	crashAtAsk       = "at-ask"       // the moment the policy decides to ask about a call
	crashAfterLeaf   = "after-leaf"   // at the lead's last model call: the approved leaf ran
)

const policyRoundEnv = "DEPUTY_TEST_POLICY_ROUND"

// A process killed with SIGKILL after the root's policy denied a call, or
// between its question and the person's answer, or after the approved
// call ran, loses nothing the policy decided: on resume, over a durable
// store, the denied call still never runs, each question reaches the
// person once, keeps its id, and the call it approved runs exactly once —
// whatever ids the models give their calls. Side effects are counted in
// a log that outlives the processes.
func TestPolicySurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(policyRoundEnv); spec != "" {
		runPolicyRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			dir := t.TempDir()
			round := policyRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "effects.log"), Out: filepath.Join(dir, "round.json")}

			// 1: killed once the lead's rm was denied and its search ran.
			round.Crash = crashAfterDenial
			if _, killed := startPolicyRound(t, round); !killed {
				t.Fatal("the round meant to die after the denial ended by itself")
			}
			// 2: killed as the policy decides to ask, before the
			// question leaves the process.
			round.Crash = crashAtAsk
			if _, killed := startPolicyRound(t, round); !killed {
				t.Fatal("the round meant to die at the question ended by itself")
			}
			// 3: the questions reach the person.
			round.Crash = ""
			got, killed := startPolicyRound(t, round)
			if killed || got.Err != "" || got.Interrupted == nil {
				t.Fatalf("the third round: killed %v, err %q, interrupted %v: want the questions", killed, got.Err, got.Interrupted)
			}
			qs := got.Interrupted.Interrupts
			if len(qs) != 2 {
				t.Fatalf("%d questions, want one per leaf call (the lead's and the worker's): %+v", len(qs), qs)
			}
			// The person approves the first, refuses the second.
			round.Pending = got.Interrupted
			round.Answers = nil
			for i, q := range qs {
				if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "approve-leaf") {
					t.Errorf("question %+v", q)
				}
				round.Answers = append(round.Answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, i == 0))})
			}
			// 4: killed once the approved leaf ran and was recorded.
			round.Crash = crashAfterLeaf
			if _, killed := startPolicyRound(t, round); !killed {
				t.Fatal("the round meant to die after the approved call ended by itself")
			}
			// 5: resumed again with the same answers, to the end.
			round.Crash = ""
			got, killed = startPolicyRound(t, round)
			if killed || got.Err != "" {
				t.Fatalf("the last round: killed %v, err %q", killed, got.Err)
			}
			if got.Interrupted != nil {
				t.Errorf("a question answered was asked again: %+v", got.Interrupted.Interrupts)
			}
			data, err := os.ReadFile(round.Log)
			if err != nil {
				t.Fatal(err)
			}
			ran := map[string]int{}
			for _, line := range strings.Fields(string(data)) {
				ran[line]++
			}
			if ran["rm"] != 0 {
				t.Errorf("rm, denied, ran %d times across the killed processes", ran["rm"])
			}
			if ran["leaf"] != 1 {
				t.Errorf("leaf ran %d times across the killed processes; the person approved one call", ran["leaf"])
			}
			if ran["search"] != 1 {
				t.Errorf("search ran %d times: what ran before a kill ran again", ran["search"])
			}
			if ran["ask"] < 2 {
				t.Errorf("the policy asked %d times: the kills fell where they were meant to?", ran["ask"])
			}
			for _, want := range []string{"rm is not allowed here", "leaf done", "did not approve"} {
				if !strings.Contains(got.Answer, want) {
					t.Errorf("the answer %q does not hold %q", got.Answer, want)
				}
			}
			if strings.Count(got.Answer, "leaf done") != 1 || strings.Count(got.Answer, "rm is not allowed here") != 2 {
				t.Errorf("the answer %q: want one leaf done and two denials of rm", got.Answer)
			}
		})
	}
}

// startPolicyRound runs one round in a process of its own and returns its
// report, or killed when it was killed.
func startPolicyRound(t *testing.T, round policyRound) (policyRound, bool) {
	t.Helper()
	return startRound[policyRound](t, "TestPolicySurvivesSIGKILL", round, round.Out, policyRoundEnv)
}

// loggedTool appends its name to a log that outlives the process each
// time it runs.
func loggedTool(name string, log func(string)) tool.Tool {
	return tool.Must(tool.New(name, "Does "+name+".", func(context.Context, struct{}) (string, error) {
		log(name)
		return name + " done", nil
	}))
}

// runPolicyRound is the process that runs one round: a lead that calls
// rm and search, then leaf and a worker, which calls rm and leaf; under a
// root policy that denies rm and asks before leaf.
func runPolicyRound(t *testing.T, spec string) {
	var round policyRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(round.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var mu sync.Mutex
	log := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = logf.WriteString(line + "\n")
	}
	kill := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }

	fresh := new(atomic.Int64)
	fresh.Store(int64(os.Getpid()) * 1000) // fresh across the processes too
	leadModel := &treeModel{name: "lead", ids: round.IDs, fresh: fresh, steps: [][][2]string{
		{{"rm", `{}`}, {"search", `{}`}},
		{{"worker", `{"task":"{task}"}`}, {"leaf", `{}`}},
	}}
	var leadCalls atomic.Int64
	lead := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := leadCalls.Add(1)
		if (round.Crash == crashAfterDenial && n == 2) || (round.Crash == crashAfterLeaf && stepOf(req) == 2) {
			kill()
		}
		return leadModel.Complete(ctx, req)
	})
	workerModel := &treeModel{name: "worker", ids: round.IDs, fresh: fresh, steps: [][][2]string{{{"rm", `{}`}, {"leaf", `{}`}}}}
	rm, search, leaf := loggedTool("rm", log), loggedTool("search", log), loggedTool("leaf", log)
	worker, err := subagent.FromFactory("worker", "Works.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(workerModel, agent.WithName("worker"), agent.WithTools(rm, leaf))
	})
	if err != nil {
		t.Fatal(err)
	}
	ask := policy.AskBefore("approve-leaf", "leaf")
	root, err := policy.New(
		policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
		policy.Func("approve-leaf", func(ctx context.Context, c *policy.Check) policy.Decision {
			d := ask.Decide(ctx, c)
			if d.Verdict == policy.Ask {
				log("ask")
				if round.Crash == crashAtAsk {
					kill()
				}
			}
			return d
		}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(rm, search, leaf, worker), agent.WithPolicy(root))
	if err != nil {
		t.Fatal(err)
	}
	runRoundTurn(t, a, round.Store, "policy-turn", round.Pending, round.Answers, round.Out)
}

// stepOf returns how many steps of its turn a request follows: the
// assistant messages after the last user message.
func stepOf(req provider.Request) int {
	step := 0
	for _, m := range req.Messages {
		switch m.Role {
		case provider.RoleUser:
			step = 0
		case provider.RoleAssistant:
			step++
		}
	}
	return step
}

// treeRound is what the parent tells the process that runs one round of
// TestPolicySurvivesSIGKILLInATree, and what that process reports back.
type treeRound struct {
	IDs     int               `json:"ids"`
	KillAt  int64             `json:"kill_at,omitempty"` // the event (model call or question) at which the process dies; 0: none
	Store   string            `json:"store"`
	Log     string            `json:"log"`
	Out     string            `json:"out"`
	Pending *tool.Interrupted `json:"pending,omitempty"`
	Answers []tool.Answer     `json:"answers,omitempty"`

	roundReport // reported by the round
}

const policyTreeRoundEnv = "DEPUTY_TEST_POLICY_TREE_ROUND"

// A three-level tree with a background job, its process killed with
// SIGKILL at random points (a model call or a question of the policy, of
// any agent of the tree, the job's included), loses nothing the root's
// policy decided: on resume, over a durable store, a denied call never
// runs, each question reaches the person once, and each call the person
// approved runs exactly once, as does every other side effect — whatever
// ids the models give their calls. Side effects are counted in a log that
// outlives the processes. The seed of the kill points is logged.
func TestPolicySurvivesSIGKILLInATree(t *testing.T) {
	if spec := os.Getenv(policyTreeRoundEnv); spec != "" {
		runPolicyTreeRound(t, spec)
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
			round := treeRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "effects.log"), Out: filepath.Join(dir, "round.json")}
			asked := map[string]bool{} // the questions answered
			approved, kills := 0, 0
			var got treeRound
			for n := 0; ; n++ {
				if n > 30 {
					t.Fatal("no end after 30 rounds")
				}
				// Most rounds die somewhere in their first eight events;
				// after six kills the rounds run to their end. The first
				// dies within its first three (every round reaches them), so
				// that no schedule kills nothing.
				round.KillAt = 0
				switch {
				case n == 0:
					round.KillAt = 1 + rng.Int64N(3)
				case kills < 6 && rng.IntN(4) > 0:
					round.KillAt = 1 + rng.Int64N(8)
				}
				var killed bool
				got, killed = startRound[treeRound](t, "TestPolicySurvivesSIGKILLInATree", round, round.Out, policyTreeRoundEnv)
				if killed {
					kills++
					continue
				}
				if got.Err != "" {
					t.Fatalf("round %d (killed at %d): %s", n, round.KillAt, got.Err)
				}
				if got.Interrupted == nil {
					break
				}
				// The person answers the questions, approving every other
				// one; a killed round after this is resumed with the same
				// answers.
				round.Pending, round.Answers = got.Interrupted, nil
				for _, q := range got.Interrupted.Interrupts {
					if q.Reason != tool.ApprovalReason || !strings.Contains(q.Message, "approve-leaf") {
						t.Errorf("question %+v", q)
					}
					if asked[q.ID] {
						t.Errorf("round %d: %s was answered and asked again", n, q.ID)
					}
					yes := len(asked)%2 == 0
					asked[q.ID] = true
					if yes {
						approved++
					}
					round.Answers = append(round.Answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
				}
			}
			if kills == 0 {
				t.Fatal("no round was killed: the test tries nothing")
			}
			data, err := os.ReadFile(round.Log)
			if err != nil {
				t.Fatal(err)
			}
			ran := map[string]int{}
			for _, line := range strings.Fields(string(data)) {
				ran[line]++
			}
			if len(asked) != 4 {
				t.Errorf("%d questions, want one per leaf call (the worker's, the job's and their grandchildren's)", len(asked))
			}
			if ran["rm"] != 0 {
				t.Errorf("rm, denied, ran %d times across %d killed processes", ran["rm"], kills)
			}
			if ran["leaf"] != approved {
				t.Errorf("leaf ran %d times across %d killed processes; the person approved %d calls", ran["leaf"], kills, approved)
			}
			if ran["search"] != 1 || ran["write"] != 4 {
				t.Errorf("search ran %d times (want 1), write %d (want 4) across %d killed processes", ran["search"], ran["write"], kills)
			}
			if c := strings.Count(got.Answer, "rm is not allowed here"); c != 5 {
				t.Errorf("the answer tells of %d denials of rm, want 5 (one per agent): %s", c, got.Answer)
			}
			if c := strings.Count(got.Answer, "leaf done"); c != approved {
				t.Errorf("the answer tells of %d leaf calls, want %d: %s", c, approved, got.Answer)
			}
			if c := strings.Count(got.Answer, "did not approve"); c != len(asked)-approved {
				t.Errorf("the answer tells of %d refusals, want %d: %s", c, len(asked)-approved, got.Answer)
			}
			t.Logf("%d kills, %d questions, %d approved", kills, len(asked), approved)
		})
	}
}

// effectTool is a tool whose run is a side effect: it is logged, and
// until the agent that called it reads its result (which is recorded in
// the journal by then), it is pending.
func effectTool(name string, log func(string), pend func(string)) tool.Tool {
	return tool.Must(tool.New(name, "Does "+name+".", func(_ context.Context, a struct {
		Who string `json:"who"`
	}) (string, error) {
		log(name)
		res := name + " done for " + a.Who
		pend(res)
		return res, nil
	}))
}

// runPolicyTreeRound is the process that runs one round: a lead that
// calls rm and search, then starts a background fork and calls a worker
// (FromFactory), then waits for the job; the worker and the fork call rm
// and write, then leaf, then a grandchild (FromFactory), which calls rm
// and write, then leaf. The root's policy denies rm and asks before leaf.
// Each agent's side effects are in a step of their own, so that a kill
// at a model call or a question finds no side effect unrecorded (the one
// window at-least-once remains in): the process dies only once every
// side effect that ran is read by the agent that made it.
func runPolicyTreeRound(t *testing.T, spec string) {
	var round treeRound
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
	log := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = logf.WriteString(line + "\n")
	}
	pend := func(res string) {
		mu.Lock()
		defer mu.Unlock()
		pending[res] = true
	}
	var events atomic.Int64
	tick := func() {
		if events.Add(1) != round.KillAt {
			return
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			mu.Lock()
			n := len(pending)
			mu.Unlock()
			if n == 0 {
				break
			}
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	fresh := new(atomic.Int64)
	fresh.Store(int64(os.Getpid()) * 1000) // fresh across the processes too
	// model wraps m: the results its request holds are read (no longer
	// pending), and its call is an event of the round.
	model := func(m *treeModel) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			mu.Lock()
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleTool {
					delete(pending, msg.Content)
				}
			}
			mu.Unlock()
			tick()
			return m.Complete(ctx, req)
		})
	}
	rm, search, write, leaf := loggedTool("rm", log), effectTool("search", log, pend), effectTool("write", log, pend), effectTool("leaf", log, pend)
	agentSteps := func(next bool) [][][2]string {
		steps := [][][2]string{{{"rm", `{}`}, {"write", `{"who":"{task}"}`}}, {{"leaf", `{"who":"{task}"}`}}}
		if next {
			steps = append(steps, [][2]string{{"deep", `{"task":"{task}/deep"}`}})
		}
		return steps
	}
	deepModel := model(&treeModel{name: "grandchild", ids: round.IDs, fresh: fresh, steps: agentSteps(false)})
	deep := func() tool.Tool {
		d, err := subagent.FromFactory("deep", "Goes deeper.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(deepModel, agent.WithName("grandchild"), agent.WithTools(rm, write, leaf))
		}, subagent.WithMaxDepth(2))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	workerModel := model(&treeModel{name: "worker", ids: round.IDs, fresh: fresh, steps: agentSteps(true)})
	worker, err := subagent.FromFactory("worker", "Works.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(workerModel, agent.WithName("worker"), agent.WithTools(rm, write, leaf, deep()))
	})
	if err != nil {
		t.Fatal(err)
	}
	forkTools, err := tool.NewRegistry(rm, write, leaf, deep())
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(model(&treeModel{name: "fork", ids: round.IDs, fresh: fresh, steps: agentSteps(true)}), forkTools, subagent.WithBackground())
	if err != nil {
		t.Fatal(err)
	}
	lead := model(&treeModel{name: "lead", ids: round.IDs, fresh: fresh, steps: [][][2]string{
		{{"rm", `{}`}, {"search", `{"who":"lead"}`}},
		{{subagent.SpawnToolName, `{"task":"f","background":true}`}, {"worker", `{"task":"w"}`}},
		{{subagent.JobsToolName, `{"action":"wait","job_id":"{job}"}`}},
	}})
	ask := policy.AskBefore("approve-leaf", "leaf")
	root, err := policy.New(
		policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
		policy.Func("approve-leaf", func(ctx context.Context, c *policy.Check) policy.Decision {
			d := ask.Decide(ctx, c)
			if d.Verdict == policy.Ask {
				tick()
			}
			return d
		}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(rm, search, worker, sp, sp.JobsTool()), agent.WithPolicy(root))
	if err != nil {
		t.Fatal(err)
	}
	runRoundTurn(t, a, round.Store, "policy-tree-turn", round.Pending, round.Answers, round.Out)
}
