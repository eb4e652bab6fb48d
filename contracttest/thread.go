package contracttest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// ThreadRuntime is a Runtime that also runs the turns of a thread whose
// background jobs outlive their turn (subagent.WithJobsAcrossTurns in
// process, Spec.JobsAcrossTurns on Temporal). Run runs the thread cases
// on a runtime that is one and skips them on another.
type ThreadRuntime interface {
	Runtime
	// RunThread builds tree, its jobs given to its thread, and runs each
	// of turns in order as a turn of one new thread, calling between(i)
	// once turn i has ended, before the next starts.
	RunThread(t *testing.T, tree Tree, turns []string, between func(turn int)) []Outcome
}

// thisTurn is the task of the turn a lead's request is of, and the tool
// results of that turn: what follows the last user message that is
// neither a note of a job nor a message to one.
func thisTurn(req provider.Request) (string, []string) {
	turn, at := "", 0
	for i, m := range req.Messages {
		if m.Role == provider.RoleUser && !strings.Contains(m.Content, "started in an earlier turn") {
			turn, at = m.Content, i
		}
	}
	var rs []string
	for _, m := range req.Messages[at:] {
		if m.Role == provider.RoleTool {
			rs = append(rs, m.Content)
		}
	}
	return turn, rs
}

func jobAcrossTurns(t *testing.T, rt Runtime) {
	tr, ok := rt.(ThreadRuntime)
	if !ok {
		t.Skip("the runtime runs no threads (ThreadRuntime)")
	}
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { jobAcrossTurnsWith(t, tr, mode.id, false) })
	}
}

// factoryJobAcrossTurns is jobAcrossTurns with a member of the lead's
// roster a factory builds (SubAgent.Factory) as the job.
func factoryJobAcrossTurns(t *testing.T, rt Runtime) {
	tr, ok := rt.(ThreadRuntime)
	if !ok {
		t.Skip("the runtime runs no threads (ThreadRuntime)")
	}
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { jobAcrossTurnsWith(t, tr, mode.id, true) })
	}
}

// A job one turn of a thread starts works on after the turn ends, and
// the next turn hands it over once: told of it before its first model
// call if it ended between the turns, or collecting it with a wait if it
// still runs. Its answer reaches the lead, its tool runs once, its model
// is asked twice, and what it spent counts once, in the turns' usage.
// With member, the job is a roster member a factory builds, not a fork.
func jobAcrossTurnsWith(t *testing.T, rt ThreadRuntime, id func(int64) string, member bool) {
	const task, found, start, collect = "count the stars", "stars: 12", "start the count", "collect the count"
	g := newGate()
	var replies, forkCalls atomic.Int64
	var job atomic.Value
	m := newModel(func(req provider.Request) (provider.Message, error) {
		c := func(text, name, args string) (provider.Message, error) {
			return provider.AssistantMessage(text, call(id(replies.Add(1)), name, args)), nil
		}
		if firstUser(req) == task {
			forkCalls.Add(1)
			if len(toolResults(req)) == 0 {
				return c("counting", "gate", `{}`)
			}
			return provider.AssistantMessage(found), nil
		}
		turn, rs := thisTurn(req)
		switch {
		case turn == start && len(rs) == 0 && member:
			return c("", subagent.SpawnToolName, `{"task":"`+task+`","agent":"counter","background":true}`)
		case turn == start && len(rs) == 0:
			return c("", subagent.SpawnToolName, `{"task":"`+task+`","background":true}`)
		case turn == start:
			job.Store(jobOf(rs[0]))
			return provider.AssistantMessage("started"), nil
		case turn != collect:
			return provider.Message{}, fmt.Errorf("a turn of no case: %q", turn)
		}
		for _, msg := range req.Messages {
			if msg.Role == provider.RoleUser && strings.Contains(msg.Content, "started in an earlier turn") && strings.Contains(msg.Content, found) {
				return provider.AssistantMessage("lead, told: " + found), nil
			}
		}
		if len(rs) == 0 {
			j, _ := job.Load().(string)
			return c("", subagent.JobsToolName, `{"action":"wait","job_id":"`+j+`","timeout_seconds":120}`)
		}
		return provider.AssistantMessage("lead, waited: " + rs[0]), nil
	})
	tree := Tree{System: "lead", Provider: m, Spawn: true, Background: true, Tools: []tool.Tool{g.tool("gate")}}
	if member {
		tree.Tools = nil
		tree.Roster = []SubAgent{{Name: "counter", Description: "Counts.", Tree: Tree{System: "counter", Provider: m, Tools: []tool.Tool{g.tool("gate")}}, Factory: true}}
	}
	outs := rt.RunThread(t, tree, []string{start, collect},
		func(int) {
			// The job reaches its tool after the turn that started it; it
			// may end before the next turn or while it runs.
			select {
			case <-g.started:
			case <-time.After(time.Minute):
				t.Error("the job never reached its tool")
			}
			g.release()
		})
	if len(outs) != 2 || outs[0].Err != nil || outs[1].Err != nil {
		t.Fatalf("the turns ended %+v, want two answers", outs)
	}
	if a := outs[1].Answer; !strings.HasPrefix(a, "lead, ") || !strings.Contains(a, found) {
		t.Errorf("the second turn answered %q, want the job's answer, handed over", a)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the job's tool ran %d times, want once", n)
	}
	if n := forkCalls.Load(); n != 2 {
		t.Errorf("the job's model was asked %d times, want twice", n)
	}
	var spent Outcome
	for _, o := range outs {
		spent.Usage, spent.ChildUsage = spent.Usage.Add(o.Usage), spent.ChildUsage.Add(o.ChildUsage)
	}
	checkSpent(t, m, spent)
}
