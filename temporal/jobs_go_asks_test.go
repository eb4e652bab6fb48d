package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// goUpdate is what an update a test sent on the test environment came
// to: refused by its validator, or done, with its value or error.
type goUpdate struct {
	mu       sync.Mutex
	rejected error
	done     bool
	value    any
	err      error
}

func (u *goUpdate) callbacks() *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) {
			u.mu.Lock()
			u.rejected, u.done = err, true
			u.mu.Unlock()
		},
		OnComplete: func(v any, err error) {
			u.mu.Lock()
			u.value, u.err, u.done = v, err, true
			u.mu.Unlock()
		},
	}
}

// outcome reports whether the update is done and, if so, its error,
// from its validator or its handler.
func (u *goUpdate) outcome() (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rejected != nil {
		return true, u.rejected
	}
	return u.done, u.err
}

// waited is what a program reads of a JobsWaitUpdate that is done.
func (u *goUpdate) waited(t *testing.T) []subagent.JobResult {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rejected != nil || u.err != nil {
		t.Fatalf("the wait failed: %v %v", u.rejected, u.err)
	}
	var got []jobWaited
	switch v := u.value.(type) {
	case []jobWaited:
		got = v
	case interface{ Get(any) error }:
		if err := v.Get(&got); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("the wait returned %T, want its jobs", u.value)
	}
	return jobResults(got)
}

// everyTick runs step on the test environment's clock every d until it
// reports true.
func everyTick(env *testsuite.TestWorkflowEnvironment, d time.Duration, step func() bool) {
	var tick func()
	tick = func() {
		if !step() {
			env.RegisterDelayedCallback(tick, d)
		}
	}
	env.RegisterDelayedCallback(tick, d)
}

// queried is what query name of the environment's workflow returns, into
// v; false where it could not be read.
func queried(env *testsuite.TestWorkflowEnvironment, name string, v any) bool {
	r, err := env.QueryWorkflow(name)
	return err == nil && r.Get(v) == nil
}

// payer is a tool that pays, once a person approves each payment.
func payer(paid *atomic.Int64) tool.Tool {
	return tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
		paid.Add(1)
		return "paid", nil
	})), "moves money", 0)
}

// A program's wait for a job that waits for a person's answer returns it
// at once, as subagent.Jobs.Wait returns a suspended job in process: its
// state suspended, its question, and an error that errors.As finds a
// *tool.Interrupted in, with the same question; not collected, no usage.
// Once the person has answered and the job has ended, a second wait
// collects it with what it spent, which the run counts once in its
// output. Before, the first wait waited on with the job, past the
// question, until the job ended. With models that name their calls
// afresh, not at all, or from call_0.
func TestGoWaitReturnsAJobThatAsksSuspended(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { goWaitSuspends(t, mode.id) })
	}
}

// billPayer answers as a lead that starts a job to pay a bill, holds on
// in its second step and then answers "lead done", and as the job, which
// pays (a person must approve) and says so. It counts apart what the
// job's calls were billed.
func billPayer(id func(n int64, i int) string) *spentOn {
	const bill = "pay the bill"
	var n atomic.Int64
	return &spentOn{task: bill, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == bill {
			if len(rs) == 0 {
				return call("pay", `{}`)
			}
			return provider.AssistantMessage("bill: " + rs[0]), nil
		}
		switch len(rs) {
		case 0:
			return call(SpawnToolName, `{"task":"`+bill+`","background":true}`)
		case 1:
			return call("hold", `{}`)
		}
		return provider.AssistantMessage("lead done"), nil
	}}}
}

func goWaitSuspends(t *testing.T, id func(n int64, i int) string) {
	var paid, holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := billPayer(id)
	reg, err := tool.NewRegistry(payer(&paid), holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	var first, second goUpdate
	var asked []tool.Interrupt
	var early []subagent.JobStatus // the jobs as the first wait ended
	state, ticks := 0, 0
	// The lead holds on in its second step while the program waits for
	// its job; the steps below go on the environment's clock, which runs
	// as the wall clock's while the lead holds on.
	everyTick(env, 50*time.Millisecond, func() bool {
		ticks++
		switch state {
		case 0: // The job asks: the program waits for it.
			if queried(env, InterruptsQuery, &asked) && len(asked) > 0 {
				env.UpdateWorkflow(JobsWaitUpdate, "wait-1", first.callbacks(), subagent.WaitFor{IDs: []string{"job_1"}, Timeout: time.Hour})
				state, ticks = 1, 0
			}
		case 1: // The wait returns, or 3 seconds pass: the person answers.
			if done, _ := first.outcome(); done || ticks > 60 {
				if !done {
					t.Error("the program's wait did not return while its job waited for a person")
				}
				queried(env, JobsQuery, &early)
				env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, []tool.Answer{{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}})
				state = 2
			}
		case 2: // The job has ended: the program waits for it again.
			var jobs []subagent.JobStatus
			if queried(env, JobsQuery, &jobs) && len(jobs) == 1 && jobs[0].State == subagent.JobDone {
				env.UpdateWorkflow(JobsWaitUpdate, "wait-2", second.callbacks(), subagent.WaitFor{IDs: []string{"job_1"}, Timeout: time.Hour})
				state = 3
			}
		case 3:
			if done, _ := second.outcome(); done {
				close(release)
				return true
			}
		}
		return false
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || paid.Load() != 1 {
		t.Fatalf("asked %+v, paid %d times: want one question, the job's, and one payment", asked, paid.Load())
	}
	got := first.waited(t)
	if len(got) != 1 || got[0].ID != "job_1" || got[0].State != subagent.JobSuspended || len(got[0].Questions) != 1 || got[0].Questions[0].ID != asked[0].ID {
		t.Fatalf("the first wait returned %+v, want job_1 suspended with its question %s", got, asked[0].ID)
	}
	var in *tool.Interrupted
	if !errors.As(got[0].Err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].ID != asked[0].ID {
		t.Errorf("the suspended job's error is %v, want a *tool.Interrupted with its question", got[0].Err)
	}
	if !got[0].Result.Usage.IsZero() || got[0].Result.Content != "" {
		t.Errorf("the suspended job was handed over with %+v, want nothing: it is not collected", got[0].Result)
	}
	if len(early) != 1 || early[0].State != subagent.JobSuspended {
		t.Errorf("the jobs as the first wait returned: %+v, want job_1 still waiting for the person", early)
	}
	got = second.waited(t)
	if len(got) != 1 || got[0].State != subagent.JobDone || got[0].Result.Content != "bill: paid" || got[0].Err != nil {
		t.Fatalf("the second wait returned %+v, want job_1 done with its answer", got)
	}
	if billed := m.spent(); got[0].Result.Usage != billed || billed.IsZero() {
		t.Errorf("the second wait handed over usage %+v, want what the job's calls were billed, %+v", got[0].Result.Usage, billed)
	}
	if calls, spent := m.total(); calls != 5 || out.TotalUsage() != spent || out.Answer != "lead done" {
		t.Errorf("%d model calls costing %+v, the lead answered %q and reported %+v; want 5 (3 the lead's, 2 its job's), each counted once",
			calls, spent, out.Answer, out.TotalUsage())
	}
}

// A program's start past Spec.MaxBackground is refused as a model's
// spawn past it is, as subagent.Jobs.Start refuses it in process: with
// the same error, a deputy.refused event of the same reason and message,
// and counted in RunOutput.Refused. Before, the update's validator
// refused it, publishing and counting nothing. With models that name
// their calls afresh, not at all, or from call_0.
func TestGoStartPastMaxBackgroundIsARefusal(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { goStartRefused(t, mode.id) })
	}
}

func goStartRefused(t *testing.T, id func(n int64, i int) string) {
	const bill = "pay the bill"
	var paid, n atomic.Int64
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == bill {
			if len(rs) == 0 {
				return call("pay", `{}`)
			}
			return provider.AssistantMessage("bill: " + rs[0]), nil
		}
		switch len(rs) {
		case 0:
			return call(SpawnToolName, `{"task":"`+bill+`","background":true}`)
		case 1:
			return call(SpawnToolName, `{"task":"count the coins","background":true}`)
		case 2:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":30}`)
		}
		return provider.AssistantMessage("lead: " + rs[1] + " | " + rs[2]), nil
	}}
	reg, err := tool.NewRegistry(payer(&paid))
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub()
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "refused-tree"})
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), "refused-tree")()
	refusals := func() []map[string]string { return refusalsIn(t, &rec) }
	var start goUpdate
	var asked []tool.Interrupt
	var modelRefusals int
	state := 0
	// The lead's first job waits for a person; its second spawn is
	// refused; then, while the lead waits with its job, a program starts
	// one, and the person answers once that start is done.
	everyTick(env, time.Second, func() bool {
		switch state {
		case 0:
			if queried(env, InterruptsQuery, &asked) && len(asked) > 0 && len(refusals()) > 0 {
				modelRefusals = len(refusals())
				env.UpdateWorkflow(JobStartUpdate, "start", start.callbacks(), subagent.Task{Task: "count the moons"})
				state = 1
			}
		case 1:
			if done, _ := start.outcome(); done {
				env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, []tool.Answer{{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}})
				return true
			}
		}
		return false
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay"}, Spawn: true, Background: true, MaxBackground: 1}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(out.Answer, "bill: paid") || modelRefusals != 1 {
		t.Fatalf("the lead answered %q with %d refusal events before the program's start: want its second spawn refused, once, and its job's answer", out.Answer, modelRefusals)
	}
	done, err := start.outcome()
	if !done || err == nil || !strings.Contains(err.Error(), subagent.ErrMaxBackground.Error()) {
		t.Fatalf("the program's start past the cap came to %v (done %v), want it refused with %v", err, done, subagent.ErrMaxBackground)
	}
	rs := refusals()
	if len(rs) != 2 {
		t.Fatalf("refusal events %+v, want two: the model's spawn and the program's start", rs)
	}
	model, program := rs[0], rs[1]
	if program["reason"] != "max_background" || program["reason"] != model["reason"] || program["message"] != model["message"] || program["name"] != model["name"] {
		t.Errorf("the program's start was refused with %+v, the model's spawn with %+v: want the same reason, message and name", program, model)
	}
	if model["name"] != subagent.DefaultForkName || program["toolCallId"] != "" || model["toolCallId"] == "" {
		t.Errorf("the model's spawn was refused with %+v, the program's start with %+v: want each named as the fork it would have started, as in process, the model's with its call", model, program)
	}
	if !strings.Contains(err.Error(), program["message"]) {
		t.Errorf("the program read %q, want the refusal's message %q", err, program["message"])
	}
	if out.Refused != 2 {
		t.Errorf("RunOutput.Refused %d, want 2: the model's spawn and the program's start", out.Refused)
	}
	if paid.Load() != 1 {
		t.Errorf("paid %d times, want once", paid.Load())
	}
}

// The same on a real server, through WaitJobs: the first wait returns
// the job suspended at once, with its question and a *tool.Interrupted;
// after the answer a second wait collects it, its usage counted once in
// the run's output; the lead's history, the waits in it, replays. With
// models that name their calls afresh, not at all, or from call_0.
func TestGoWaitReturnsAJobThatAsksSuspendedOnServer(t *testing.T) {
	inEachIDMode(t, goWaitSuspendsOnServer)
}

func goWaitSuspendsOnServer(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var paid, holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := billPayer(id)
	reg, err := tool.NewRegistry(payer(&paid), holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-go-wait-asks-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the lead never reached its step that holds on")
	}
	var asked []tool.Interrupt
	for len(asked) == 0 {
		if asked, err = Pending(ctx, c, tree); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{"job_1"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].State != subagent.JobSuspended || len(got[0].Questions) != 1 || got[0].Questions[0].ID != asked[0].ID {
		t.Fatalf("the first wait returned %+v, want job_1 suspended with its question %s", got, asked[0].ID)
	}
	var in *tool.Interrupted
	if !errors.As(got[0].Err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].ID != asked[0].ID {
		t.Errorf("the suspended job's error is %v, want a *tool.Interrupted with its question", got[0].Err)
	}
	if !got[0].Result.Usage.IsZero() {
		t.Errorf("the suspended job was handed over with usage %+v, want none: it is not collected", got[0].Result.Usage)
	}
	if err := Answer(ctx, c, tree, tool.Answer{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
		t.Fatal(err)
	}
	got, err = WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{"job_1"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].State != subagent.JobDone || got[0].Result.Content != "bill: paid" || got[0].Err != nil {
		t.Fatalf("the second wait returned %+v, want job_1 done with its answer", got)
	}
	if billed := m.spent(); got[0].Result.Usage != billed || billed.IsZero() {
		t.Errorf("the second wait handed over usage %+v, want what the job's calls were billed, %+v", got[0].Result.Usage, billed)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if calls, spent := m.total(); calls != 5 || out.TotalUsage() != spent || out.Answer != "lead done" || paid.Load() != 1 {
		t.Errorf("%d model calls costing %+v, %d payments, the lead answered %q and reported %+v; want 5 (3 the lead's, 2 its job's), each counted once, one payment",
			calls, spent, paid.Load(), out.Answer, out.TotalUsage())
	}
	replays(ctx, t, c, tree, "the lead's history does not replay")
}
