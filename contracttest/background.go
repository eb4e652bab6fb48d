package contracttest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The background cases: a lead starts a fork in the background with
// spawn_subagent and acts on it with subagent_jobs, by the same tool
// names, arguments and results on every runtime. A job's fork shares the
// lead's system prompt; its model tells it by its task.

// gate is a tool that returns once open is closed, or when its call's
// context ends; it counts its runs and those its context ended.
type gate struct {
	open          chan struct{}
	once          sync.Once
	runs, stopped atomic.Int64
	started       chan struct{}
	startOnce     sync.Once
}

func newGate() *gate { return &gate{open: make(chan struct{}), started: make(chan struct{})} }

func (g *gate) tool(name string) tool.Tool {
	return tool.Must(tool.New(name, "Waits for the world to change.", func(ctx context.Context, _ struct{}) (string, error) {
		g.runs.Add(1)
		g.startOnce.Do(func() { close(g.started) })
		select {
		case <-g.open:
			return "the world changed", nil
		case <-ctx.Done():
			g.stopped.Add(1)
			return "", ctx.Err()
		}
	}))
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// jobOf reads the job id from a spawn's result.
func jobOf(result string) string {
	var r struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal([]byte(result), &r)
	return r.JobID
}

// firstUser is the first user message of a request: the task.
func firstUser(req provider.Request) string {
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			return m.Content
		}
	}
	return ""
}

// spent is what the model handed out, against what a run reported.
func checkSpent(t *testing.T, m *model, out Outcome) {
	t.Helper()
	if got, want := out.Usage.Add(out.ChildUsage), m.total(); got != want {
		t.Errorf("the run reported %+v (own %+v, children %+v), the model handed out %+v: every job's usage counts once", got, out.Usage, out.ChildUsage, want)
	}
}

func backgroundMessage(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { backgroundMessageWith(t, rt, mode.id, "", false) })
	}
}

// rosterMessage is backgroundMessage with a member of the lead's roster
// as the job: it runs as itself (its own system prompt and tools), and
// its status names it.
func rosterMessage(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { backgroundMessageWith(t, rt, mode.id, "surveyor", false) })
	}
}

// factoryMemberMessage is rosterMessage with a member a factory builds
// (SubAgent.Factory): whatever a runtime runs it in, its job means the
// same.
func factoryMemberMessage(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { backgroundMessageWith(t, rt, mode.id, "surveyor", true) })
	}
}

// A job steered by a message: the message reaches the job — a fork, or
// the roster member named member (built by a factory, with factory) —
// once, at its next step boundary, its receipt says delivered before
// that step, and the wait collects the job's answer.
func backgroundMessageWith(t *testing.T, rt Runtime, id func(int64) string, member string, factory bool) {
	const task, note = "count the stars", "count the moons too"
	g := newGate()
	var replies, forkCalls, heardAt atomic.Int64
	m := newModel(func(req provider.Request) (provider.Message, error) {
		if firstUser(req) == task {
			step := forkCalls.Add(1)
			if strings.Contains(lastMessage(req).Content, note) {
				heardAt.CompareAndSwap(0, step)
			}
			if len(toolResults(req)) == 0 {
				return provider.AssistantMessage("counting", call(id(replies.Add(1)), "gate", `{}`)), nil
			}
			heard := 0
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					heard += strings.Count(msg.Content, note)
				}
			}
			return provider.AssistantMessage(fmt.Sprintf("heard %q %d times", note, heard)), nil
		}
		rs := toolResults(req)
		c := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", call(id(replies.Add(1)), name, args)), nil
		}
		switch len(rs) {
		case 0:
			if member != "" {
				return c(subagent.SpawnToolName, `{"task":"`+task+`","agent":"`+member+`","background":true}`)
			}
			return c(subagent.SpawnToolName, `{"task":"`+task+`","background":true}`)
		case 1:
			return c(subagent.JobsToolName, `{"action":"send","job_id":"`+jobOf(rs[0])+`","message":"`+note+`"}`)
		case 2:
			g.release() // the message is sent: the fork may take its next step
			return c(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobOf(rs[0])+`","timeout_seconds":120}`)
		case 3:
			return c(subagent.JobsToolName, `{"action":"status","job_id":"`+jobOf(rs[0])+`"}`)
		}
		return provider.AssistantMessage("lead: " + rs[2]), nil
	})
	tree := Tree{System: "lead", Provider: m, Task: "go", Spawn: true, Background: true, Tools: []tool.Tool{g.tool("gate")}}
	if member != "" {
		tree.Tools = nil
		tree.Roster = []SubAgent{{Name: member, Description: "Surveys.", Tree: Tree{System: member, Provider: m, Tools: []tool.Tool{g.tool("gate")}}, Factory: factory}}
	}
	out := rt.Run(t, tree, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if member != "" {
		if n := len(m.requestsOf(member)); n != 2 {
			t.Errorf("the member's model was asked %d times under its own system prompt, want 2: the job runs as the member", n)
		}
	}
	if want := fmt.Sprintf("lead: heard %q 1 times", note); out.Answer != want {
		t.Errorf("the lead answered %q, want %q: the message reaches the job once, at its next step", out.Answer, want)
	}
	if n := forkCalls.Load(); n != 2 {
		t.Errorf("the job's model was asked %d times, want 2", n)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the job's tool ran %d times, want once", n)
	}
	lead := m.requestsOf("lead")
	var status subagent.JobStatus
	for _, req := range lead {
		if rs := toolResults(req); len(rs) == 4 && firstUser(req) != task {
			if err := json.Unmarshal([]byte(rs[3]), &status); err != nil {
				t.Fatalf("the status %q: %v", rs[3], err)
			}
			var receipt subagent.Receipt
			if err := json.Unmarshal([]byte(rs[1]), &receipt); err != nil || receipt.MessageID == "" || receipt.Seq != 1 {
				t.Errorf("the send returned %q (%v), want a receipt with a message id and seq 1", rs[1], err)
			}
		}
	}
	// The message may come before the job's first step or its second,
	// as the job and the lead race; its receipt says which.
	if want := cmp.Or(member, subagent.DefaultForkName); status.Agent != want {
		t.Errorf("the job's status names %q, want %q", status.Agent, want)
	}
	if at := int(heardAt.Load()); status.State != subagent.JobDone || len(status.Messages) != 1 || status.Messages[0].State != subagent.MessageDelivered || status.Messages[0].Step != at {
		t.Errorf("the job's status is %+v, want done with its one message delivered before step %d, where its model read it", status, at)
	}
	checkSpent(t, m, out)
}

func backgroundCancel(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { backgroundCancelWith(t, rt, mode.id) })
	}
}

// A job cancelled while it works hands back a partial report with its
// last words, is listed as cancelled, and what it spent counts.
func backgroundCancelWith(t *testing.T, rt Runtime, id func(int64) string) {
	const task = "watch the sky"
	g := newGate()
	var replies atomic.Int64
	m := newModel(func(req provider.Request) (provider.Message, error) {
		if firstUser(req) == task {
			return provider.AssistantMessage("looking up", call(id(replies.Add(1)), "block", `{}`)), nil
		}
		rs := toolResults(req)
		c := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", call(id(replies.Add(1)), name, args)), nil
		}
		switch len(rs) {
		case 0:
			return c(subagent.SpawnToolName, `{"task":"`+task+`","background":true}`)
		case 1:
			return c(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobOf(rs[0])+`","timeout_seconds":0}`)
		case 2:
			// The job works in its tool before the lead cancels it.
			select {
			case <-g.started:
			case <-time.After(time.Minute):
				return provider.Message{}, fmt.Errorf("the job never reached its tool")
			}
			return c(subagent.JobsToolName, `{"action":"cancel","job_id":"`+jobOf(rs[0])+`"}`)
		case 3:
			return c(subagent.JobsToolName, `{"action":"list"}`)
		}
		return provider.AssistantMessage("lead: " + strings.Join(rs[1:], " | ")), nil
	})
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Spawn: true, Background: true, Tools: []tool.Tool{g.tool("block")}}, nil)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	parts := strings.Split(strings.TrimPrefix(out.Answer, "lead: "), " | ")
	if len(parts) != 3 {
		t.Fatalf("the lead answered %q, want the wait, the cancel and the list", out.Answer)
	}
	if !strings.Contains(parts[0], "still running") {
		t.Errorf("a wait of no time said %q, want the job still running", parts[0])
	}
	if !strings.Contains(parts[1], "cancelled at step 1") || !strings.Contains(parts[1], "its last words:\nlooking up") {
		t.Errorf("the cancel said %q, want a partial report: the step reached and its last words", parts[1])
	}
	if !strings.Contains(parts[2], "\tcancelled\t") {
		t.Errorf("the list said %q, want the job cancelled", parts[2])
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the job's tool ran %d times, want once", n)
	}
	checkSpent(t, m, out)
}

func backgroundAsks(t *testing.T, rt Runtime) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) { backgroundAsksWith(t, rt, mode.id) })
	}
}

// A job whose fork asks a person: the question reaches the person through
// the tree's questions, attributed to the fork, and once answered the
// fork's call runs once and the lead collects the job's answer.
func backgroundAsksWith(t *testing.T, rt Runtime, id func(int64) string) {
	const task = "pay the bill"
	var paid, replies atomic.Int64
	pay := tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
		paid.Add(1)
		return "paid", nil
	})), "moves money", 0)
	m := newModel(func(req provider.Request) (provider.Message, error) {
		rs := toolResults(req)
		if firstUser(req) == task {
			if len(rs) == 0 {
				return provider.AssistantMessage("", call(id(replies.Add(1)), "pay", `{}`)), nil
			}
			return provider.AssistantMessage("fork: " + rs[0]), nil
		}
		switch {
		case len(rs) == 0:
			return provider.AssistantMessage("", call(id(replies.Add(1)), subagent.SpawnToolName, `{"task":"`+task+`","background":true}`)), nil
		case len(rs) == 1 || strings.Contains(rs[len(rs)-1], "still running"):
			return provider.AssistantMessage("", call(id(replies.Add(1)), subagent.JobsToolName, `{"action":"wait","job_id":"`+jobOf(rs[0])+`","timeout_seconds":600}`)), nil
		}
		return provider.AssistantMessage("lead: " + rs[len(rs)-1]), nil
	})
	var asked []tool.Interrupt
	out := rt.Run(t, Tree{System: "lead", Provider: m, Task: "go", Spawn: true, Background: true, Tools: []tool.Tool{pay}}, func(its []tool.Interrupt) []tool.Answer {
		asked = append(asked, its...)
		var as []tool.Answer
		for _, it := range its {
			as = append(as, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
		}
		return as
	})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if len(asked) != 1 || asked[0].SubagentRunID == "" || paid.Load() != 1 || out.Answer != "lead: fork: paid" {
		t.Errorf("asked %+v, paid %d, answered %q: want one question, from the job's fork, one payment, and the job's answer", asked, paid.Load(), out.Answer)
	}
	// The lead's wait meets the job waiting for the person and waits with
	// it (in process, the lead suspends with the job's question): it
	// never reads that the job is still running, however long the person
	// takes.
	for _, req := range m.requestsOf("lead") {
		if firstUser(req) == task {
			continue
		}
		for _, r := range toolResults(req) {
			if strings.Contains(r, "still running") {
				t.Errorf("the lead's wait said %q while its job waited for a person: want it to wait with the job for the answer", r)
				return
			}
		}
	}
	checkSpent(t, m, out)
}
