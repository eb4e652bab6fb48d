//go:build unix

package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

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

	// Reported by the round.
	Answer      string            `json:"answer,omitempty"`
	Err         string            `json:"err,omitempty"`
	Interrupted *tool.Interrupted `json:"interrupted,omitempty"`
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
	st := openStoreAt(t, round.Store)
	ctx := context.Background()
	j, err := st.Journal(ctx, "policy-turn")
	if err != nil {
		t.Fatal(err)
	}
	if round.Pending != nil {
		if ctx, err = tool.Resume(ctx, round.Pending, round.Answers...); err != nil {
			t.Fatal(err)
		}
	}
	out, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	report := policyRound{Answer: out.Answer}
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
