package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// jobsLead is a lead that starts a background fork on "secret plan", then
// a fork in the foreground on "plain", then waits for its job (when it got
// one), under a spawner allowed maxSpawns spawns; each fork calls leaf
// once.
type jobsLead struct {
	lead, fork *treeModel
	leaf       *counted
	a          *agent.React
}

func newJobsLead(t *testing.T, ids, maxSpawns int, pol *policy.Policy) *jobsLead {
	t.Helper()
	fresh := new(atomic.Int64)
	l := &jobsLead{leaf: &counted{name: "leaf"}}
	l.lead = &treeModel{name: "lead", ids: ids, fresh: fresh, steps: [][][2]string{
		{{subagent.SpawnToolName, `{"task":"secret plan","background":true}`}},
		{{subagent.SpawnToolName, `{"task":"plain"}`}},
		{{subagent.JobsToolName, `{"action":"wait","job_id":"{job}"}`}},
	}}
	l.fork = &treeModel{name: "fork", ids: ids, fresh: fresh, steps: [][][2]string{{{"leaf", `{}`}}}}
	reg, err := tool.NewRegistry(l.leaf)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(l.fork, reg, subagent.WithBackground(), subagent.WithMaxSpawns(maxSpawns))
	if err != nil {
		t.Fatal(err)
	}
	if l.a, err = agent.NewReact(l.lead, agent.WithName("lead"), agent.WithTools(sp, sp.JobsTool()), agent.WithPolicy(pol)); err != nil {
		t.Fatal(err)
	}
	return l
}

// toolResults returns what the lead's last request holds of its tools'
// results, in order.
func (l *jobsLead) toolResults() []string {
	l.lead.mu.Lock()
	defer l.lead.mu.Unlock()
	req := l.lead.requests[len(l.lead.requests)-1]
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

// A background job's hand-off is decided by the policy before the job
// starts, as on Temporal: a denied one returns the denial in the spawning
// call's result, not a job id; its child never runs, no SUBAGENT_STARTED
// goes out for it, and it is not counted against WithMaxSpawns, so the
// run's one spawn is still there for the next call.
func TestPolicyDecidesBackgroundHandOffFirst(t *testing.T) {
	var mu sync.Mutex
	var order []string // what happened, in order: the policy's decisions and what the lead read
	pol, err := policy.New(policy.Func("no-secret-jobs", func(_ context.Context, c *policy.Check) policy.Decision {
		if c.Point != policy.BeforeDelegation {
			return policy.Decision{}
		}
		mu.Lock()
		defer mu.Unlock()
		order = append(order, "hand-off "+c.Task)
		if strings.Contains(c.Task, "secret") {
			return policy.Denied("no secret jobs")
		}
		return policy.Decision{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	l := newJobsLead(t, resumetest.IDsFresh, 1, pol)
	var started atomic.Int64
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		if e.Type == event.SubagentStarted {
			started.Add(1)
		}
	}))
	if _, err := l.a.Run(ctx, agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	res := l.toolResults()
	if len(res) < 2 {
		t.Fatalf("the lead read %d results: %q", len(res), res)
	}
	if strings.Contains(res[0], "job_") || !strings.Contains(res[0], "no secret jobs") {
		t.Errorf("the denied background spawn returned %q: want the denial, and no job id", res[0])
	}
	if strings.Contains(res[1], "max") || !strings.Contains(res[1], "fork(leaf done)") {
		t.Errorf("the spawn after the denied one returned %q: want the fork's answer (the denied one is not counted)", res[1])
	}
	l.fork.mu.Lock()
	tasks := l.fork.tasks
	for _, req := range l.fork.requests {
		if b, _ := json.Marshal(req); strings.Contains(string(b), "secret") {
			t.Error("the denied job's child was asked")
		}
	}
	l.fork.mu.Unlock()
	if tasks != 1 || l.leaf.runs() != 1 {
		t.Errorf("the forks started %d tasks and ran leaf %d times: want 1 and 1 (the denied job started nothing)", tasks, l.leaf.runs())
	}
	if got := started.Load(); got != 1 {
		t.Errorf("%d SUBAGENT_STARTED events, want 1: the denied job was announced", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[hand-off secret plan hand-off plain]" {
		t.Errorf("the policy decided %q", order)
	}
}

// A background job's hand-off the policy asks about is asked in the
// spawning call, before any job starts: the run stops with the question,
// no child has run, and the job starts once, after the approval, its side
// effect run once, under a journal whatever ids the models give their
// calls; refused, it starts nothing.
func TestPolicyAsksBackgroundHandOffFirst(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		for _, yes := range []bool{true, false} {
			t.Run(fmt.Sprint("ids=", ids, ",approved=", yes), func(t *testing.T) {
				pol, err := policy.New(policy.Func("ask-jobs", func(_ context.Context, c *policy.Check) policy.Decision {
					if c.Point == policy.BeforeDelegation && strings.Contains(c.Task, "secret") {
						return policy.Asked("start a secret job?")
					}
					return policy.Decision{}
				}))
				if err != nil {
					t.Fatal(err)
				}
				st, err := store.New(memory.New())
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				ctx := context.Background()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				l := newJobsLead(t, ids, 2, pol)
				_, err = l.a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 || !strings.Contains(in.Interrupts[0].Message, "ask-jobs") {
					t.Fatalf("want one question of ask-jobs, got %v", err)
				}
				if l.leaf.runs() != 0 {
					t.Fatalf("leaf ran %d times before the question was answered: the job started before the policy decided", l.leaf.runs())
				}
				rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
				if err != nil {
					t.Fatal(err)
				}
				if _, err = l.a.Run(agent.WithJournal(rctx, j), agent.Input{Text: "go"}); err != nil {
					t.Fatalf("the resumed run: %v", err)
				}
				res := l.toolResults()
				want := 1 // the foreground fork's
				if yes {
					want = 2
				}
				if l.leaf.runs() != want {
					t.Errorf("leaf ran %d times, want %d", l.leaf.runs(), want)
				}
				if got := strings.Contains(res[0], "job_"); got != yes {
					t.Errorf("the background spawn returned %q (approved %v)", res[0], yes)
				}
				if !strings.Contains(res[1], "fork(leaf done)") {
					t.Errorf("the foreground spawn returned %q", res[1])
				}
			})
		}
	}
}
