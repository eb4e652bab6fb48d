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

	enums "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// spentOn is a provider that counts apart what the calls of one task
// were billed.
type spentOn struct {
	*script
	task string
	mu   sync.Mutex
	on   provider.Usage
}

func (s *spentOn) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, err := s.script.Complete(ctx, req)
	if err == nil && firstUserOf(req) == s.task {
		s.mu.Lock()
		s.on = s.on.Add(resp.Usage)
		s.mu.Unlock()
	}
	return resp, err
}

func (s *spentOn) spent() provider.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on
}

// A program starts a job in a running lead's workflow while the lead's
// model holds in a tool, and waits for it from Go: a wait whose time is
// up while the job works returns nothing; the next collects it, with what
// it spent. The lead's model then waits for the job too and reads its
// answer, its usage counted once in the lead's RunOutput, the job run
// once. Bad starts are refused before anything is recorded, and one past
// Spec.MaxBackground as a model's spawn past it is. With models that name
// their calls afresh, not at all, or from call_0.
func TestJobStartAndWaitFromGo(t *testing.T) {
	inEachIDMode(t, jobsStartedFromGo)
}

func jobsStartedFromGo(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const task = "count the stars"
	var n, gates, holds atomic.Int64
	letJob, release := make(chan struct{}), make(chan struct{})
	gating, holding := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: task, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == task {
			if len(rs) == 0 {
				return call("gate", `{}`)
			}
			return provider.AssistantMessage("stars: 7"), nil
		}
		switch len(rs) {
		case 0:
			return call("hold", `{}`)
		case 1:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":300}`)
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}}
	reg, err := tool.NewRegistry(holdOn("gate", &gates, gating, letJob), holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-start-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"gate", "hold"}, Spawn: true, Background: true, MaxBackground: 1}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the lead never reached its step that holds on")
	}
	for _, bad := range []struct {
		task subagent.Task
		want string
	}{
		{subagent.Task{Task: "  "}, `needs a non-empty "task"`},
		{subagent.Task{Task: task, Agent: "nobody"}, "leave Task.Agent empty"},
	} {
		if _, err := StartJob(ctx, c, tree, bad.task); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("starting %+v: %v, want it refused saying %q", bad.task, err, bad.want)
		}
	}
	if _, err := WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{"job_9"}}); err == nil || !strings.Contains(err.Error(), subagent.ErrUnknownJob.Error()) {
		t.Errorf("a wait for an unknown job: %v, want it refused as unknown", err)
	}
	if jobs, err := Jobs(ctx, c, tree); err != nil || len(jobs) != 0 {
		t.Fatalf("after the refusals the run has jobs %+v (%v), want none", jobs, err)
	}
	st, err := StartJob(ctx, c, tree, subagent.Task{Task: task})
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "job_1" || st.State != subagent.JobRunning || st.Task != task {
		t.Errorf("the started job's status is %+v, want job_1 running its task", st)
	}
	if _, err := StartJob(ctx, c, tree, subagent.Task{Task: "count the moons"}); err == nil || !strings.Contains(err.Error(), subagent.ErrMaxBackground.Error()) {
		t.Errorf("a start past Spec.MaxBackground: %v, want it refused", err)
	}
	select {
	case <-gating:
	case <-ctx.Done():
		t.Fatal("the job never reached its step that holds on")
	}
	got, err := WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{st.ID}, Timeout: 500 * time.Millisecond})
	if err != nil || len(got) != 0 {
		t.Fatalf("a wait whose time is up while the job works returned %+v (%v), want nothing", got, err)
	}
	close(letJob)
	got, err = WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{st.ID}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].State != subagent.JobDone || got[0].Result.Content != "stars: 7" || got[0].Err != nil {
		t.Fatalf("the wait collected %+v, want job_1 done, its answer", got)
	}
	if billed := m.spent(); got[0].Result.Usage != billed || billed.IsZero() {
		t.Errorf("the collected job's usage is %+v, want what its calls were billed, %+v", got[0].Result.Usage, billed)
	}
	again, err := WaitJobs(ctx, c, tree, subagent.WaitFor{IDs: []string{st.ID}, Timeout: time.Second})
	if err != nil || len(again) != 1 || !again[0].Result.Usage.IsZero() {
		t.Errorf("a second wait returned %+v (%v), want the job again without its usage", again, err)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: stars: 7" {
		t.Errorf("the lead answered %q, want the job's answer read by its own wait", out.Answer)
	}
	if gates.Load() != 1 || holds.Load() != 1 {
		t.Errorf("the job's step ran %d times, the lead's %d; want each once", gates.Load(), holds.Load())
	}
	if out.Refused != 1 {
		t.Errorf("RunOutput.Refused %d, want 1: the start past Spec.MaxBackground", out.Refused)
	}
	if calls, spent := m.total(); calls != 5 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 5 (3 the lead's, 2 its job's), each counted once", calls, spent, out.TotalUsage())
	}
	if _, err := StartJob(ctx, c, tree, subagent.Task{Task: task}); err == nil {
		t.Error("a start in a run that has ended went on")
	}
	// The lead's history, the program's start and waits in it, replays.
	replays(ctx, t, c, tree, "the lead's history does not replay")
}

// A program's start and wait in a run that offers no jobs are refused,
// saying what to do, and start nothing.
func TestJobsFromGoNeedBackground(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("done"), nil
	}}
	hold := holdOn("hold", &holds, holding, release)
	reg, err := tool.NewRegistry(hold)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-nobg-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	if _, err := StartJob(ctx, c, tree, subagent.Task{Task: "count the stars"}); err == nil || !strings.Contains(err.Error(), "Spec.Background") {
		t.Errorf("a start in a run without Spec.Background: %v, want it refused saying to set it", err)
	}
	if _, err := WaitJobs(ctx, c, tree, subagent.WaitFor{}); err == nil || !strings.Contains(err.Error(), "Spec.Background") {
		t.Errorf("a wait in a run without Spec.Background: %v, want it refused saying to set it", err)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if calls, _ := m.total(); calls != 2 || out.Answer != "done" {
		t.Errorf("the run made %d model calls and answered %q, want 2 and done: nothing started", calls, out.Answer)
	}
}

// A program's wait under way when the run answers collects the job the
// run cancels as it ends: its partial report and what it spent, which
// the run counts once in its RunOutput. With models that name their calls
// afresh, not at all, or from call_0.
func TestJobsWaitFromGoAsTheRunEnds(t *testing.T) {
	inEachIDMode(t, waitFromGoAsTheRunEnds)
}

func waitFromGoAsTheRunEnds(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const task = "count the stars"
	var n, gates, stopped, holds atomic.Int64
	release := make(chan struct{})
	gating, holding := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: task, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		call := func(name string) (provider.Message, error) {
			return provider.AssistantMessage("working", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(`{}`)}), nil
		}
		switch {
		case firstUserOf(req) == task:
			return call("gate")
		case len(resultsOf(req)) == 0:
			return call("hold")
		}
		return provider.AssistantMessage("done"), nil
	}}}
	hold := holdOn("hold", &holds, holding, release)
	reg, err := tool.NewRegistry(hold, blocking(t, "gate", &gates, &stopped, gating))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-wait-end-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"gate", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	st, err := StartJob(ctx, c, tree, subagent.Task{Task: task})
	if err != nil {
		t.Fatal(err)
	}
	<-gating
	// Accepted: the wait is under way in the run's workflow.
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: tree, UpdateName: JobsWaitUpdate,
		Args: []any{subagent.WaitFor{IDs: []string{st.ID}}}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	var got []jobWaited
	if err := h.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Status.State != subagent.JobCancelled || !strings.Contains(got[0].Result, "cancelled at step 1") {
		t.Fatalf("the wait collected %+v, want job_1 cancelled with its partial report", got)
	}
	if billed := m.spent(); got[0].Usage != billed || billed.IsZero() {
		t.Errorf("the collected job's usage is %+v, want what its call was billed, %+v", got[0].Usage, billed)
	}
	if calls, spent := m.total(); calls != 3 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 3 (2 the lead's, 1 its job's), each counted once", calls, spent, out.TotalUsage())
	}
	if gates.Load() != 1 {
		t.Errorf("the job's step ran %d times, want once", gates.Load())
	}
}

// A program starts a job in a thread's turn (Spec.JobsAcrossTurns) and
// collects it: the job is numbered in the thread, under the thread's
// workflow, and what it spent counts once, in that turn's output; the
// next turn is told nothing of it and counts none of it.
func TestThreadJobStartedAndCollectedFromGo(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const turn1, turn2, task = "start", "again", "count the moons"
	var holds atomic.Int64
	var told atomic.Bool
	holding, release := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: task, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		switch firstUserOf(req) {
		case task:
			return provider.AssistantMessage("moons counted"), nil
		case turn1:
			if len(resultsOf(req)) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
			}
			return provider.AssistantMessage("turn one done"), nil
		}
		for _, msg := range req.Messages {
			if strings.Contains(msg.Content, "job_1") {
				told.Store(true)
			}
		}
		return provider.AssistantMessage("turn two done"), nil
	}}}
	reg, err := tool.NewRegistry(holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-go-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	thread := ThreadWorkflowID("", "thread-"+queue)
	type result struct {
		out agent.Output
		err error
	}
	first := make(chan result, 1)
	go func() {
		out, err := lead.Run(tctx, agent.Input{Text: turn1})
		first <- result{out, err}
	}()
	<-holding
	st, err := StartJob(ctx, c, thread, subagent.Task{Task: task})
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "job_1" {
		t.Errorf("the job started as %q, want job_1, the thread's first", st.ID)
	}
	got, err := WaitJobs(ctx, c, thread, subagent.WaitFor{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Result.Content != "moons counted" || got[0].Result.Usage != m.spent() {
		t.Fatalf("the wait collected %+v, want job_1's answer and what it was billed, %+v", got, m.spent())
	}
	var job RunOutput
	if err := c.GetWorkflow(ctx, thread+"/job_1", "").Get(ctx, &job); err != nil || job.Answer != "moons counted" {
		t.Errorf("the job's workflow under the thread's ended with %q (%v), want its answer", job.Answer, err)
	}
	close(release)
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	out2, err := lead.Run(tctx, agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	if told.Load() {
		t.Error("the next turn was told of the job a program collected")
	}
	calls, billed := m.total()
	if spent := r1.out.TotalUsage().Add(out2.TotalUsage()); calls != 4 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 4 (2 + 1 the turns', 1 the job's), each counted once", calls, billed, spent)
	}
}

// A job a program starts in a run under a token limit, outside any step,
// gets half of what the run has left, the other half kept for the run,
// and the steps of a job; its share is held back from the run until it is
// collected, and the tree spends what the model billed, counted once.
func TestJobStartedFromGoGetsHalfOfWhatIsLeft(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const task, limit = "count the moons", 20_000
	var holds atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: task, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch {
		case firstUserOf(req) == task:
			return provider.AssistantMessage("moons counted"), nil
		case len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case len(rs) == 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":60}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}}
	reg, err := tool.NewRegistry(holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-go-share-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, TokenLimit: limit}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	_, before := m.total() // the lead's first call
	if _, err := StartJob(ctx, c, tree, subagent.Task{Task: task}); err != nil {
		t.Fatal(err)
	}
	it := c.GetWorkflowHistory(ctx, tree+"/go.1-"+SpawnToolName, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	e, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	var in RunInput
	if err := converter.GetDefaultDataConverter().FromPayloads(e.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		t.Fatal(err)
	}
	if want := (limit - before.Tokens()) / 2; in.Spec.TokenLimit != want || in.Spec.MaxSteps != subagent.DefaultJobSteps {
		t.Errorf("the job's Spec has TokenLimit %d and MaxSteps %d, want %d (half of what the run had left) and %d", in.Spec.TokenLimit, in.Spec.MaxSteps, want, subagent.DefaultJobSteps)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: moons counted" {
		t.Errorf("the lead answered %q, want the job's answer", out.Answer)
	}
	if calls, billed := m.total(); calls != 4 || out.TotalUsage() != billed || billed.Tokens() > limit {
		t.Errorf("%d model calls billing %+v, the lead reported %+v; want 4, each counted once, within %d tokens", calls, billed, out.TotalUsage(), limit)
	}
}

// A job that ended in a thread's turn, uncollected, is a note of the next
// turn; a program that collects it while that turn starts (its input
// guardrail runs) has it: the turn tells its model nothing of it and
// counts none of what it spent, which the program's wait collected and the
// turn counts once.
func TestThreadNoteCollectedFromGoAsTheTurnStarts(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const turn1, turn2, task = "start", "again", "count the moons"
	var told atomic.Bool
	holding, release := make(chan struct{}), make(chan struct{})
	checking, checked := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: task, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		switch firstUserOf(req) {
		case task:
			return provider.AssistantMessage("moons counted"), nil
		case turn1:
			if len(resultsOf(req)) == 0 {
				return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
			}
			return provider.AssistantMessage("turn one done"), nil
		}
		for _, msg := range req.Messages {
			if strings.Contains(msg.Content, "job_1") {
				told.Store(true)
			}
		}
		return provider.AssistantMessage("turn two done"), nil
	}}}
	reg, err := tool.NewRegistry(holdOn("hold", new(atomic.Int64), holding, release))
	if err != nil {
		t.Fatal(err)
	}
	gate := policy.Guardrail{Name: "gate", Stage: policy.Input, Check: func(ctx context.Context, text string) (policy.Finding, error) {
		if text == turn2 {
			close(checking)
			select {
			case <-checked:
			case <-ctx.Done():
				return policy.Finding{}, ctx.Err()
			}
		}
		return policy.Finding{}, nil
	}}
	queue := fmt.Sprintf("deputy-thread-go-note-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Guardrails: []policy.Guardrail{gate}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true, Guardrails: []string{"gate"}}}
	tctx := agent.WithThread(ctx, "thread-"+queue)
	thread := ThreadWorkflowID("", "thread-"+queue)
	type result struct {
		out agent.Output
		err error
	}
	first := make(chan result, 1)
	go func() {
		out, err := lead.Run(tctx, agent.Input{Text: turn1})
		first <- result{out, err}
	}()
	<-holding
	if _, err := StartJob(ctx, c, thread, subagent.Task{Task: task}); err != nil {
		t.Fatal(err)
	}
	var job RunOutput
	if err := c.GetWorkflow(ctx, thread+"/job_1", "").Get(ctx, &job); err != nil || job.Answer != "moons counted" {
		t.Fatalf("the job's workflow ended with %q (%v), want its answer", job.Answer, err)
	}
	close(release)
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	second := make(chan result, 1)
	go func() {
		out, err := lead.Run(tctx, agent.Input{Text: turn2})
		second <- result{out, err}
	}()
	<-checking
	got, err := WaitJobs(ctx, c, thread, subagent.WaitFor{IDs: []string{"job_1"}, Timeout: time.Minute})
	close(checked)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Result.Content != "moons counted" || got[0].Result.Usage != m.spent() {
		t.Fatalf("the wait collected %+v, want job_1's answer and what it was billed, %+v", got, m.spent())
	}
	r2 := <-second
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if told.Load() {
		t.Error("the turn was told of the job a program collected as it started")
	}
	calls, billed := m.total()
	if spent := r1.out.TotalUsage().Add(r2.out.TotalUsage()); calls != 4 || spent != billed {
		t.Errorf("%d model calls billing %+v, the turns reported %+v; want 4 (2 + 1 the turns', 1 the job's), each counted once", calls, billed, spent)
	}
	// The second turn's history, the program's wait in it, replays.
	replays(ctx, t, c, thread, "the second turn's history does not replay")
}

// A job a program starts is a hand-off the workers' policy is asked
// about, as a background spawn is: one it denies is refused with the
// rule's reason, starts nothing and takes no number.
func TestJobStartedFromGoIsCheckedByThePolicy(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const denied, allowed = "read the diaries", "count the moons"
	var holds, asked atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	m := &spentOn{task: denied, script: &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch {
		case firstUserOf(req) == allowed:
			return provider.AssistantMessage("moons counted"), nil
		case len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case len(rs) == 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":60}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}}
	pol, err := policy.New(policy.Func("no-diaries", func(ctx context.Context, ch *policy.Check) policy.Decision {
		if ch.Point == policy.BeforeDelegation {
			asked.Add(1)
			if strings.Contains(ch.Task, "diaries") {
				return policy.Denied("the diaries are private")
			}
		}
		return policy.Decision{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-go-policy-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Policy: pol})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"hold"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	if _, err := StartJob(ctx, c, tree, subagent.Task{Task: denied}); err == nil || !strings.Contains(err.Error(), "the diaries are private") {
		t.Errorf("a start the policy denies: %v, want it refused with the rule's reason", err)
	}
	st, err := StartJob(ctx, c, tree, subagent.Task{Task: allowed})
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "job_1" {
		t.Errorf("the allowed job is %q, want job_1: the denied start took no number", st.ID)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: moons counted" || asked.Load() != 2 || !m.spent().IsZero() {
		t.Errorf("the lead answered %q, the policy was asked %d times, the denied task's calls spent %+v; want the allowed job's answer, 2, nothing",
			out.Answer, asked.Load(), m.spent())
	}
}

// holdOn is a tool named name that counts its runs, closes started at its
// first and holds each until open is closed or its context ends.
func holdOn(name string, runs *atomic.Int64, started, open chan struct{}) tool.Tool {
	return tool.Must(tool.New(name, "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		if runs.Add(1) == 1 {
			close(started)
		}
		select {
		case <-open:
			return name + " passed", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
}

// replays checks that the history of workflow id, an agent workflow's,
// replays on the code under test; what names the history in the error.
func replays(ctx context.Context, t *testing.T, c client.Client, id, what string) {
	t.Helper()
	var h historypb.History
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, e)
	}
	if err := replayer(t, AgentWorkflow).ReplayWorkflowHistoryWithOptions(nil, &h, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id},
	}); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}
