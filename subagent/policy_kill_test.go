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
	"slices"
	"strconv"
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

// runRoundTurn runs a's turn on input, journaled as name in the store at
// path and resumed with answers if pending holds what it waits for, and
// writes what it reports to out.
func runRoundTurn(t *testing.T, a agent.Agent, path, name, input string, pending *tool.Interrupted, answers []tool.Answer, out string) {
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
	o, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: input})
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
	runRoundTurn(t, a, round.Store, "policy-turn", "go", round.Pending, round.Answers, round.Out)
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

// treeInput is the lead's input in TestPolicySurvivesSIGKILLInATree.
const treeInput = "audit the account with key " + secret

// The kinds of line of the log TestPolicySurvivesSIGKILLInATree's rounds
// write, each followed by a tab and what it is of.
const (
	logAsked  = "asked"  // a model asked for a tool call (callKey)
	logTool   = "tool"   // the root's policy saw a tool call (callKey)
	logRan    = "ran"    // a tool ran (callKey)
	logResult = "result" // the root's policy saw a call's result (callKey)
	logTask   = "task"   // a child's model was called on its task (the task)
	logEdge   = "edge"   // the root's policy saw a hand-off (its task)
	logModel  = "model"  // an agent's model was called (treeModel.name)
	logSeen   = "seen"   // the root's policy saw a model call (the agent, as logModel)
	logAsk    = "ask"    // the root's policy asks a person (callKey)
	logLeak   = "leak"   // the secret reached a child's model or a tool (which)
	logSecret = "secret" // the lead's model was given the secret
	logFork   = "fork"   // a child's model was given its task after its parent's conversation (the task)
)

// everyFormAndContextFork are everyForm's calls for a tree whose spawn
// tool makes context forks (treeSpec.contextForks): its foreground and
// background forks start fresh, as everyForm's do, and a context fork
// goes on from the lead's conversation, which holds the secret of the
// lead's input.
var everyFormAndContextFork = func() [][2]string {
	out := slices.Clone(everyForm)
	for i, c := range out {
		if c[0] == subagent.SpawnToolName && !strings.Contains(c[1], `"agent"`) {
			out[i][1] = strings.Replace(c[1], "{", `{"inherit_context":false,`, 1)
		}
	}
	return append(out, [2]string{subagent.SpawnToolName, `{"task":"c {task}"}`})
}()

// A three-level tree that delegates in every form (buildTree: resident,
// FromFactory, FromReact, roster member, foreground and background fork,
// and a context fork),
// its process killed with SIGKILL at random points (a model call or a
// question of the policy, of any agent of the tree, the job's included),
// loses nothing the root's policy decided and escapes it nowhere: on
// resume, over a durable store, a denied call never runs, each question
// reaches the person once, each call the person approved runs exactly
// once, as does every other side effect; the root's policy sees every tool
// call and every hand-off; and the secret in the lead's input reaches no
// child's model and no tool, before a kill or after — whatever ids the
// models give their calls. The seed of the kill points is logged.
//
// What happens is written to a log that outlives the processes, each
// round's lines after its start. The side effects are counted across all
// rounds: each happens once. The policy is asked again about what a
// killed round left undone, so it sees some calls and hand-offs in more
// than one round, and a killed round may not have made calls it saw; so
// what it saw is held against what the tree did in the same round. It
// sees 100% when:
//   - in every round, a tool runs only after the policy saw its call in
//     that round; a child's model works on a task only after the policy
//     saw its hand-off in that round (every form's child, the background
//     job's included, is handed its task again in the round that resumes
//     it); and an agent's model is called only after the policy saw that
//     call in that round;
//   - in every round that ran to its end, the policy saw the result of
//     every call that ran in it, and as many model calls of each agent as
//     were made;
//   - every call a model asked for, the policy saw in that round or a
//     later one (a run cancelled as its reply came, as the background job
//     is when the turn stops for questions, does not act on the reply,
//     which the journal keeps for the next round), and in the last round,
//     which ends the turn, in that round;
//   - across all rounds, the calls the policy saw are the calls the
//     models asked for, and the hand-offs it saw are the tasks the
//     children were given, all fourteen.
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
			approved, kills, rounds := 0, 0, 0
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
				rounds++
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
			if len(asked) != 14 {
				t.Errorf("%d questions, want one per leaf call (each child's and each grandchild's, 14)", len(asked))
			}
			checkTreeLog(t, resumetest.ReadRoundLog(t, round.Log, rounds, kills), approved)
			if c := strings.Count(got.Answer, "rm is not allowed here"); c != 15 {
				t.Errorf("the answer tells of %d denials of rm, want 15 (one per agent): %s", c, got.Answer)
			}
			if c := strings.Count(got.Answer, "leaf done"); c != approved {
				t.Errorf("the answer tells of %d leaf calls, want %d: %s", c, approved, got.Answer)
			}
			if c := strings.Count(got.Answer, "did not approve"); c != len(asked)-approved {
				t.Errorf("the answer tells of %d refusals, want %d: %s", c, len(asked)-approved, got.Answer)
			}
			t.Logf("%d rounds, %d kills, %d questions, %d approved", rounds, kills, len(asked), approved)
		})
	}
}

// checkTreeLog checks the log of TestPolicySurvivesSIGKILLInATree's
// rounds, in which the person approved approved calls: see the test's
// comment.
func checkTreeLog(t *testing.T, procs []resumetest.RoundLog, approved int) {
	var tasks []string // the children's tasks
	for _, c := range "ewiafbc" {
		task := string(c) + " " + redacted(treeInput)
		tasks = append(tasks, task, task+"/deep")
	}
	ran := map[string]int{}     // the side effects, across the rounds
	made := map[string]int{}    // the calls the models asked for: the last round that asked, from 1
	calls := map[string]int{}   // the calls the policy saw: the last round that saw it, from 1
	given := map[string]bool{}  // the tasks the children's models were given, across the rounds
	handed := map[string]bool{} // the hand-offs the policy saw, across the rounds
	asks := map[string]bool{}   // the calls the policy asked about, across the rounds
	forked := map[string]bool{} // the tasks a child went on from its parent's conversation with
	for n, p := range procs {
		saw := map[string]int{}     // the calls the policy saw in this process
		models := map[string]int{}  // the model calls of each agent in this process
		seen := map[string]int{}    // the model calls the policy saw, by agent
		results := map[string]int{} // the results the policy saw in this process
		edges := map[string]int{}   // the hand-offs the policy saw in this process
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
			case logSeen:
				seen[key]++
			case logModel:
				models[key]++
				if models[key] > seen[key] {
					t.Errorf("round %d: %s's model was called %d times, and the policy saw %d of them", n, key, models[key], seen[key])
				}
			case logAsk:
				asks[key] = true
			case logFork:
				forked[key] = true
			case logLeak:
				t.Errorf("round %d: the secret reached %s", n, key)
			}
		}
		if !p.Ended {
			continue
		}
		for _, l := range p.Lines {
			if l[0] == logRan && results[l[1]] == 0 {
				t.Errorf("round %d: %s ran, and the policy did not see its result", n, l[1])
			}
		}
		for agent, calls := range models {
			if seen[agent] != calls {
				t.Errorf("round %d: %s's model was called %d times, and the policy saw %d calls", n, agent, calls, seen[agent])
			}
		}
	}
	// The side effects: each once, but a leaf call the person refused, and
	// rm, denied, never.
	leaves := 0
	for _, task := range tasks {
		who := `{"who":` + strconv.Quote(task) + `}`
		if got := ran["write "+who]; got != 1 {
			t.Errorf("write for %q ran %d times, want 1", task, got)
		}
		if got := ran["leaf "+who]; got > 1 {
			t.Errorf("leaf for %q ran %d times", task, got)
		}
		leaves += ran["leaf "+who]
	}
	if len(asks) != len(tasks) {
		t.Errorf("the policy asked about %d calls, want each agent's leaf call (%d): %v", len(asks), len(tasks), asks)
	}
	if leaves != approved {
		t.Errorf("leaf ran %d times; the person approved %d calls", leaves, approved)
	}
	if got := ran["search "+`{"who":`+strconv.Quote(redacted(treeInput))+`}`]; got != 1 {
		t.Errorf("search ran %d times, want 1", got)
	}
	for key, n := range ran {
		if strings.HasPrefix(key, "rm ") {
			t.Errorf("%s, denied, ran %d times", key, n)
		}
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
	if len(made) < 59 {
		t.Errorf("the models asked for %d calls, want 59 or more (10 of the lead's, 4 of each child's, 3 of each grandchild's): the tree did not run as built", len(made))
	}
	for _, task := range tasks {
		if !given[task] || !handed[task] {
			t.Errorf("the task %q: given to a child %v, handed off under the policy %v", task, given[task], handed[task])
		}
	}
	// Only the context fork went on from its parent's conversation, the
	// lead's, which holds the secret (redacted, as logLeak checks).
	if want := "c " + redacted(treeInput); len(forked) != 1 || !forked[want] {
		t.Errorf("the children that went on from their parent's conversation were given %v, want only the context fork's %q", forked, want)
	}
	if len(given) != len(tasks) || len(handed) != len(tasks) {
		t.Errorf("%d tasks given, %d hand-offs seen, want %d: %v, %v", len(given), len(handed), len(tasks), given, handed)
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

// redacted is s with the secret redacted.
func redacted(s string) string { return strings.ReplaceAll(s, secret, policy.Redacted) }

// callKey names a call of the tool name with the arguments args, the
// secret redacted and the JSON made canonical, as the log of
// TestPolicySurvivesSIGKILLInATree's rounds does.
func callKey(name string, args json.RawMessage) string {
	return resumetest.CallKey(name, args, secret, policy.Redacted)
}

// runPolicyTreeRound is the process that runs one round: buildTree's
// tree, whose lead calls rm and search, then hands off in every form
// (everyFormAndContextFork),
// then waits for the background fork; each child calls rm and write, then
// leaf, then a grandchild, which calls rm and write, then leaf. The root's
// policy denies rm, asks before leaf, redacts the secret of the lead's
// input, and logs what it sees. Each agent's side effects are in a step
// of their own, so that a kill at a model call or a question finds no
// side effect unrecorded (the one window at-least-once remains in): the
// process dies only once every side effect that ran is read by the agent
// that made it, and none can run between that check and the kill.
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
		// The process dies holding mu, which a side effect takes to run.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			mu.Lock()
			if len(pending) == 0 || time.Now().After(deadline) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			mu.Unlock()
		}
	}
	// model stands between an agent and its treeModel: the results its
	// request holds are read (no longer pending), what it was sent and
	// what it asked for is logged, and its call is an event of the round.
	model := func(m *treeModel) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			mu.Lock()
			task, users := "", 0
			for _, msg := range req.Messages {
				switch msg.Role {
				case provider.RoleTool:
					delete(pending, msg.Content)
				case provider.RoleUser:
					task = msg.Content
					users++
				}
			}
			mu.Unlock()
			if m.name != "lead" && users > 1 {
				log(logFork, redacted(task))
			}
			b, _ := json.Marshal(req)
			has := strings.Contains(string(b), secret)
			switch {
			case m.name == "lead":
				if has {
					log(logSecret, "")
				}
			case has:
				log(logLeak, m.name+"'s model")
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
		return resumetest.Effect{Name: name, Secret: secret, Redacted: policy.Redacted, Leaked: func(where string) { log(logLeak, where) }, Ran: ran}
	}
	rm, search, write, leaf := effect("rm"), effect("search"), effect("write"), effect("leaf")
	ask := policy.AskBefore("approve-leaf", "leaf")
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
		policy.Redact("secrets", []string{secret}),
		policy.Func("approve-leaf", func(ctx context.Context, c *policy.Check) policy.Decision {
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
	fresh := new(atomic.Int64)
	fresh.Store(int64(os.Getpid()) * 1000) // fresh across the processes too
	who := `{"who":"{task}"}`
	lead, _ := buildTree(t, treeSpec{
		ids:             round.IDs,
		fresh:           fresh,
		lead:            [][][2]string{{{"rm", who}, {"search", who}}, everyFormAndContextFork, {waitJob}},
		child:           [][][2]string{{{"rm", who}, {"write", who}}, {{"leaf", who}}, {{"deep", `{"task":"{task}/deep"}`}}},
		grandchild:      [][][2]string{{{"rm", who}, {"write", who}}, {{"leaf", who}}},
		leadTools:       []tool.Tool{rm, search},
		childTools:      []tool.Tool{rm, write, leaf},
		grandchildTools: []tool.Tool{rm, write, leaf},
		model:           model,
		leadOpts:        []agent.Option{agent.WithPolicy(root)},
		contextForks:    true,
	})
	runRoundTurn(t, lead, round.Store, "policy-tree-turn", treeInput, round.Pending, round.Answers, round.Out)
	log(resumetest.LogEnd, "")
}
