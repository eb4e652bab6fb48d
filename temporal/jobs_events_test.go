package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// jobEventLines renders a tree's job events, as the in-process test of
// the same actions does (agui's TestJobActionsAreEvents): "name
// attribution job state seq step text", the attribution "lead" or the
// spawn call that started the sub-agent, the job by that call ("s1" is
// job1), and " after its sub-agent" on a job's end published after its
// sub-agent's own. Bad events fail t.
func jobEventLines(t *testing.T, evs []event.Event) []string {
	t.Helper()
	sub := map[string]string{} // sub-agent run id → spawn call
	var ended []string         // spawn calls, in the order their sub-agents ended
	var got []string
	for _, e := range evs {
		switch e.Type {
		case event.SubagentStarted:
			if _, again := sub[e.SubagentRunID]; again {
				t.Errorf("sub-agent %s started twice", e.SubagentRunID)
			}
			call := e.ParentToolCallID
			if i := strings.LastIndex(call, "/"); i >= 0 {
				call = call[i+1:]
			}
			sub[e.SubagentRunID] = call
		case event.SubagentFinished, event.SubagentError:
			ended = append(ended, sub[e.SubagentRunID])
		case event.Custom:
			if !strings.HasPrefix(e.Name, "deputy.job_") {
				continue
			}
			var v struct {
				JobID     string `json:"job_id"`
				RunID     string `json:"subagent_run_id"`
				State     string `json:"state"`
				Task      string `json:"task"`
				MessageID string `json:"message_id"`
				Step      int    `json:"step"`
				Seq       int    `json:"seq"`
				Text      string `json:"text"`
			}
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			call, ok := sub[v.RunID]
			if !ok {
				t.Fatalf("%s names sub-agent %q, which has not started: %s", e.Name, v.RunID, e.Value)
			}
			by := "lead"
			if e.SubagentRunID != "" {
				by = sub[e.SubagentRunID]
			}
			if v.JobID == "" || (v.State != "" && v.Task == "" && v.MessageID == "") {
				t.Errorf("%s: %s lacks its job", e.Name, e.Value)
			}
			job := map[string]string{"s1": "job1", "s2": "job2"}[call]
			line := fmt.Sprintf("%s %s %s %s %d %d %s", strings.TrimPrefix(e.Name, "deputy."), by, job, v.State, v.Seq, v.Step, v.Text)
			if e.Name == subagent.JobEndedEvent && slices.Contains(ended, call) {
				line += " after its sub-agent"
			}
			got = append(got, line)
		}
	}
	return got
}

// linesOf returns the lines about job.
func linesOf(lines []string, job string) []string {
	var out []string
	for _, l := range lines {
		if strings.Fields(l)[2] == job {
			out = append(out, l)
		}
	}
	return out
}

// wantJobEvents is what the actions of jobActions publish, per job, as
// in process.
var wantJobEvents = []string{
	"job_started lead job1 running 0 0 ",
	"job_started lead job2 running 0 0 ",
	"job_message lead job1 queued 1 0 look under the stairs",
	"job_status lead job1 running 0 1 ",
	"job_delivered s1 job1 delivered 1 2 ",
	"job_cancelled lead job2 running 0 1 ",
	"job_ended lead job2 cancelled 0 1  after its sub-agent",
	"job_ended lead job1 done 0 2  after its sub-agent",
}

// jobActions is a lead that starts two jobs, sends the first a message
// while it looks something up, asks its status, cancels the second while
// it holds on, waits for the first and answers; the first job answers
// with what it was told, the second holds on until it is cancelled.
// Calls are named by id (the spawns s1 and s2, for the events'
// attribution).
func jobActions(t *testing.T) (*script, []tool.Tool) {
	t.Helper()
	const dig, idle = "dig", "idle"
	sent, looking := make(chan struct{}), make(chan struct{})
	var once, lookOnce sync.Once
	lookup := tool.Must(tool.New("lookup", "Looks.", func(ctx context.Context, _ struct{}) (string, error) {
		lookOnce.Do(func() { close(looking) }) // its first step is told to the lead by now
		select {
		case <-sent:
			return "nothing yet", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	holding := make(chan struct{})
	var holdOnce sync.Once
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		holdOnce.Do(func() { close(holding) })
		<-ctx.Done()
		return "", ctx.Err()
	}))
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(id, name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch firstUserOf(req) {
		case dig:
			if len(rs) == 0 {
				return call("l1", "lookup", `{}`)
			}
			last := req.Messages[len(req.Messages)-1].Content
			return provider.AssistantMessage("found it: " + last[strings.LastIndex(last, "\n")+1:]), nil
		case idle:
			return call("h1", "hold", `{}`)
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("",
				provider.ToolCall{ID: "s1", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + dig + `","background":true}`)},
				provider.ToolCall{ID: "s2", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + idle + `","background":true}`)}), nil
		case 2:
			select {
			case <-looking:
			case <-time.After(time.Minute):
				return provider.Message{}, fmt.Errorf("the first job never looked")
			}
			return call("j_send", subagent.JobsToolName, `{"action":"send","job_id":"`+jobIDOf(rs[0])+`","message":"look under the stairs"}`)
		case 3:
			return call("j_status", subagent.JobsToolName, `{"action":"status","job_id":"`+jobIDOf(rs[0])+`"}`)
		case 4:
			once.Do(func() { close(sent) }) // the receipt and the status are in the conversation
			select {
			case <-holding:
			case <-time.After(time.Minute):
				return provider.Message{}, fmt.Errorf("the second job never held on")
			}
			return call("j_cancel", subagent.JobsToolName, `{"action":"cancel","job_id":"`+jobIDOf(rs[1])+`"}`)
		case 5:
			return call("j_wait", subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":600}`)
		}
		return provider.AssistantMessage("done: " + rs[5]), nil
	}}
	return m, []tool.Tool{lookup, hold}
}

// The actions on background jobs on Temporal publish the deputy.job_*
// events an in-process run emits for them, with the same values and
// attribution, each once: two jobs started, a message queued for one and
// delivered before its second step, its status asked, the other
// cancelled, both ended after their sub-agents.
func TestJobActionsAreEventsOnTemporal(t *testing.T) {
	m, tools := jobActions(t)
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "jobs-tree"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "jobs-tree")()
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"lookup", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "done: found it: look under the stairs" {
		t.Errorf("the lead answered %q", out.Answer)
	}
	rec.mu.Lock()
	got := jobEventLines(t, rec.events)
	rec.mu.Unlock()
	for _, job := range []string{"job1", "job2"} {
		if d := cmp.Diff(linesOf(wantJobEvents, job), linesOf(got, job)); d != "" {
			t.Errorf("the events of %s (-want +got):\n%s", job, d)
		}
	}
}

// A lead at the top of its tree that waits for jobs, one of which waits
// for a person — here the job's own child, which must have a payment
// approved — waits with it, past its timeout, as a wait in process
// suspends with the job: while it waits the job's status says suspended
// with the question, the question reaches the person once, attributed to
// the child that asks, and once answered the payment is made once and
// the one wait collects both jobs; the lead never reads that a job is
// still running. With models that name their calls afresh, not at all,
// or from call_0.
func TestWaitWaitsWithAJobWhoseChildAsks(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { waitsWithAskingJob(t, mode.id) })
	}
}

func waitsWithAskingJob(t *testing.T, id func(n int64, i int) string) {
	const viaChild, quick, bill = "settle up", "count the coins", "pay the bill"
	var paid, n, leadCalls atomic.Int64
	pay := tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
		paid.Add(1)
		return "paid", nil
	})), "moves money", 0)
	reg, err := tool.NewRegistry(pay)
	if err != nil {
		t.Fatal(err)
	}
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch firstUserOf(req) {
		case bill:
			if len(rs) == 0 {
				return call("pay", `{}`)
			}
			return provider.AssistantMessage("bill: " + rs[0]), nil
		case viaChild:
			if len(rs) == 0 {
				return call(SpawnToolName, `{"task":"`+bill+`"}`)
			}
			return provider.AssistantMessage("settled, " + rs[0]), nil
		case quick:
			return provider.AssistantMessage("twelve coins"), nil
		}
		leadCalls.Add(1)
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("",
				provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + viaChild + `","background":true}`)},
				provider.ToolCall{ID: id(n.Add(1), 1), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + quick + `","background":true}`)}), nil
		case 2:
			return call(subagent.JobsToolName, `{"action":"wait","job_ids":["`+jobIDOf(rs[0])+`","`+jobIDOf(rs[1])+`"],"timeout_seconds":30}`)
		}
		return provider.AssistantMessage("lead: " + rs[len(rs)-1]), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	var asked []tool.Interrupt
	var seen []subagent.JobStatus
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(InterruptsQuery)
		if err == nil {
			err = v.Get(&asked)
		}
		if err == nil {
			v, err = env.QueryWorkflow(JobsQuery)
		}
		if err == nil {
			err = v.Get(&seen)
		}
		if err != nil {
			t.Error(err)
			return
		}
		var as []tool.Answer
		for _, it := range asked {
			as = append(as, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
		}
		env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, as)
	}, time.Hour) // long past the wait's timeout
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true, MaxDepth: 2}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !strings.HasPrefix(asked[0].SubagentRunID, "default-test-workflow-id/0.0-"+SpawnToolName+"/") || paid.Load() != 1 {
		t.Fatalf("asked %+v, paid %d times: want one question, from the job's own child, and one payment", asked, paid.Load())
	}
	if want := "settled, bill: paid"; !strings.Contains(out.Answer, want) || !strings.Contains(out.Answer, "twelve coins") || strings.Contains(out.Answer, "still running") || leadCalls.Load() != 3 {
		t.Errorf("the lead answered %q in %d calls, want both jobs collected by its one wait (3 calls)", out.Answer, leadCalls.Load())
	}
	if len(seen) != 2 || seen[0].State != subagent.JobSuspended || len(seen[0].Questions) != 1 || seen[0].Questions[0].ID != asked[0].ID || seen[1].State != subagent.JobDone {
		t.Errorf("the jobs while the person was asked: %+v; want the first suspended with the question, the second done", seen)
	}
	if calls, spent := m.total(); out.TotalUsage() != spent {
		t.Errorf("%d model calls cost %+v, the lead reported %+v: each counted once", calls, spent, out.TotalUsage())
	}
}

// The same actions served through an Agent on a real server: the run's
// stream, with its jobs' events, is a whole AG-UI stream (each job's
// sub-agent started before the spawn's result and before its own events,
// every job event naming a sub-agent that has started), and the job
// events are those in process.
func TestJobEventsStreamOnServer(t *testing.T) {
	m, tools := jobActions(t)
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	a := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"lookup", "hold"}, Spawn: true, Background: true}, Events: hub}
	var rec eventcheck.Recorder
	out, err := a.Run(event.WithSink(ctx, &rec), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "done: found it: look under the stairs" {
		t.Errorf("the lead answered %q", out.Answer)
	}
	evs := rec.Events()
	for _, p := range eventcheck.Check(evs, eventcheck.Options{Background: true}) {
		t.Error(p)
	}
	got := jobEventLines(t, evs)
	for _, job := range []string{"job1", "job2"} {
		if d := cmp.Diff(linesOf(wantJobEvents, job), linesOf(got, job)); d != "" {
			t.Errorf("the events of %s (-want +got):\n%s", job, d)
		}
	}
}
