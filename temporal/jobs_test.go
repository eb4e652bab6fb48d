package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// jobIDOf reads the job id from a spawn's result.
func jobIDOf(result string) string {
	var r struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal([]byte(result), &r)
	return r.JobID
}

func resultsOf(req provider.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

func firstUserOf(req provider.Request) string {
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			return m.Content
		}
	}
	return ""
}

// blocking is a tool that blocks until its call's context ends, counting
// its runs and those ended so, and telling started of its first run.
func blocking(t *testing.T, name string, runs, stopped *atomic.Int64, started chan struct{}) tool.Tool {
	t.Helper()
	var once atomic.Bool
	return tool.Must(tool.New(name, "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		if once.CompareAndSwap(false, true) {
			close(started)
		}
		<-ctx.Done()
		stopped.Add(1)
		return "", ctx.Err()
	}))
}

// A background job on a real server whose worker stops while the job's
// child works: another worker takes over, and the job finishes exactly
// once — its side effect made once, the message the lead sent it read
// once, its answer collected once, every model answer paid once — with
// models that name their calls afresh, not at all, or from call_0.
func TestBackgroundJobSurvivesAWorkerRestart(t *testing.T) {
	inEachIDMode(t, jobSurvivesRestart)
}

func jobSurvivesRestart(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const task, note = "survey the hills", "list the rivers too"
	var n atomic.Int64
	var recorded, holds, held atomic.Int64
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		next := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == task {
			switch len(rs) {
			case 0:
				return provider.AssistantMessage("surveying", provider.ToolCall{ID: id(n.Add(1), 0), Name: "record", Arguments: json.RawMessage(`{}`)}), nil
			case 1:
				return next("hold", `{}`)
			}
			heard := 0
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					heard += strings.Count(msg.Content, note)
				}
			}
			return provider.AssistantMessage(fmt.Sprintf("hills surveyed, %q heard %d times", note, heard)), nil
		}
		switch len(rs) {
		case 0:
			return next(SpawnToolName, `{"task":"`+task+`","background":true}`)
		case 1:
			return next(subagent.JobsToolName, `{"action":"send","job_id":"`+jobIDOf(rs[0])+`","message":"`+note+`"}`)
		case 2:
			return next(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":300}`)
		}
		return provider.AssistantMessage("lead: " + rs[2]), nil
	}}
	record := tool.Must(tool.New("record", "Records.", func(context.Context, struct{}) (string, error) {
		recorded.Add(1)
		return "recorded", nil
	}))
	var stoppedBefore atomic.Int64
	holding := make(chan struct{})
	regBefore, err := tool.NewRegistry(record, blocking(t, "hold", &holds, &stoppedBefore, holding))
	if err != nil {
		t.Fatal(err)
	}
	regAfter, err := tool.NewRegistry(record, tool.Must(tool.New("hold", "Holds on.", func(context.Context, struct{}) (string, error) {
		held.Add(1)
		return "held", nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-%d", time.Now().UnixNano())
	tree := "jobs-" + queue
	// Both workers publish to one hub: the second replays the lead's and
	// the job's histories, and must publish nothing the first did again.
	hub := NewHub()
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), tree)()
	w1 := worker.New(c, queue, worker.Options{})
	Register(w1, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: regBefore, Events: hub})
	if err := w1.Start(); err != nil {
		t.Fatal(err)
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"record", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never reached its step that holds on")
	}
	w1.Stop() // the job's child workflow is in the middle of a tool call
	w2 := worker.New(c, queue, worker.Options{})
	Register(w2, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: regAfter, Events: hub})
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("lead: hills surveyed, %q heard 1 times", note); out.Answer != want {
		t.Errorf("the lead answered %q, want %q", out.Answer, want)
	}
	if recorded.Load() != 1 || holds.Load() != 1 || stoppedBefore.Load() != 1 || held.Load() != 1 {
		t.Errorf("recorded %d times, held on %d times before the stop (%d ended by it) and %d after; want 1, 1, 1, 1",
			recorded.Load(), holds.Load(), stoppedBefore.Load(), held.Load())
	}
	calls, spent := m.total()
	if calls != 7 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 7 (4 the lead's, 3 the job's), each counted once", calls, spent, out.TotalUsage())
	}
	// Each job event once, across the restart, as in process.
	counts := map[string]int{}
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Type == event.Custom && strings.HasPrefix(e.Name, "deputy.job_") {
			counts[e.Name]++
		}
		if e.Type == event.SubagentStarted {
			counts["started"]++
		}
	}
	rec.mu.Unlock()
	want := map[string]int{"started": 1, subagent.JobStartedEvent: 1, subagent.JobMessageEvent: 1, subagent.JobDeliveredEvent: 1, subagent.JobEndedEvent: 1}
	if !maps.Equal(counts, want) {
		t.Errorf("the tree published %v, want %v: each once, whatever a worker replayed", counts, want)
	}
	child := tree + "/0.0-" + SpawnToolName
	d, err := describe(ctx, c, child)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.WorkflowExecutionInfo.Status; st != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Errorf("the job's workflow is %v, want completed", st)
	}
}

// Cancelling a job cancels its child workflow's own children, and the
// job hands back its partial report and what it spent.
func TestCancelledJobEndsItsOwnChildren(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const task, sub = "map the coast", "walk the beach"
	var runs, stopped atomic.Int64
	blocked := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch firstUserOf(req) {
		case sub:
			return provider.AssistantMessage("walking", provider.ToolCall{ID: "c", Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task:
			return provider.AssistantMessage("mapping", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + sub + `"}`)}), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","background":true}`)}), nil
		case 1:
			select {
			case <-blocked:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"cancel","job_id":"` + jobIDOf(rs[0]) + `"}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}
	reg, err := tool.NewRegistry(blocking(t, "block", &runs, &stopped, blocked))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-cancel-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true, MaxDepth: 2}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, "cancelled at step 1") || !strings.Contains(out.Answer, "its last words:\nmapping") {
		t.Errorf("the lead answered %q, want the job's partial report: its step and its last words", out.Answer)
	}
	grandchild := tree + "/0.0-" + SpawnToolName + "/0.0-" + SpawnToolName
	for {
		d, err := describe(ctx, c, grandchild)
		if err != nil {
			t.Fatal(err)
		}
		if st := d.WorkflowExecutionInfo.Status; st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if st != enums.WORKFLOW_EXECUTION_STATUS_CANCELED {
				t.Errorf("the job's own child ended %v, want cancelled", st)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the job's own child runs on after the job was cancelled")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for stopped.Load() == 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	if runs.Load() != 1 || stopped.Load() != 1 {
		t.Errorf("the grandchild's tool ran %d times, %d of them stopped; want one, stopped by the cancel", runs.Load(), stopped.Load())
	}
	calls, spent := m.total()
	if calls != 5 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 5, each counted once", calls, spent, out.TotalUsage())
	}
}

// A program acts on a run's jobs from outside, through the run's
// workflow: it lists them, sends one a message (an update, which the
// job's next step reads once) and cancels the other, and bad input is
// refused before anything is sent; the run's model then collects both.
func TestJobsFromGo(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const hear, stall, note = "hear the news", "stall for time", "the news is good"
	var blocks, stopped atomic.Int64
	blocking1 := make(chan struct{})
	open := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch firstUserOf(req) {
		case hear:
			if len(rs) == 0 {
				return provider.AssistantMessage("listening", provider.ToolCall{ID: "c", Name: "listen", Arguments: json.RawMessage(`{}`)}), nil
			}
			heard := 0
			for _, msg := range req.Messages {
				if msg.Role == provider.RoleUser {
					heard += strings.Count(msg.Content, note)
				}
			}
			return provider.AssistantMessage(fmt.Sprintf("heard %q %d times", note, heard)), nil
		case stall:
			return provider.AssistantMessage("stalling", provider.ToolCall{ID: "c", Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		}
		if len(rs) == 0 {
			return provider.AssistantMessage("",
				provider.ToolCall{ID: "a", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + hear + `","background":true}`)},
				provider.ToolCall{ID: "b", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + stall + `","background":true}`)}), nil
		}
		if len(rs) == 2 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "w", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":300}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[2]), nil
	}}
	listen := tool.Must(tool.New("listen", "Listens.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case <-open:
			return "listened", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	reg, err := tool.NewRegistry(listen, blocking(t, "block", &blocks, &stopped, blocking1))
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-jobs-go-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"listen", "block"}, Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-blocking1
	ids := map[string]string{}
	for len(ids) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the run never listed its two jobs")
		}
		time.Sleep(50 * time.Millisecond)
		jobs, err := Jobs(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			ids[j.Task] = j.ID
		}
	}
	if _, err := SendToJob(ctx, c, tree, "job_9", note); err == nil || !strings.Contains(err.Error(), subagent.ErrUnknownJob.Error()) {
		t.Errorf("a message to an unknown job: %v, want it refused as unknown", err)
	}
	if _, err := SendToJob(ctx, c, tree, ids[hear], "  "); err == nil || !strings.Contains(err.Error(), "blank") {
		t.Errorf("a blank message: %v, want it refused", err)
	}
	r, err := SendToJob(ctx, c, tree, ids[hear], note)
	if err != nil {
		t.Fatal(err)
	}
	if r.JobID != ids[hear] || r.State != subagent.MessageQueued || r.Seq != 1 || r.MessageID == "" {
		t.Errorf("the receipt is %+v, want queued, first of the job's messages", r)
	}
	close(open)
	st, err := CancelJob(ctx, c, tree, ids[stall])
	if err != nil {
		t.Fatal(err)
	}
	if st.State != subagent.JobCancelled || st.LastWords != "stalling" {
		t.Errorf("the cancelled job's status is %+v, want cancelled, its last words said", st)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, fmt.Sprintf("heard %q 1 times", note)) || !strings.Contains(out.Answer, "cancelled at step 1") {
		t.Errorf("the lead answered %q, want the message heard once and the other job's partial report", out.Answer)
	}
	if _, err := SendToJob(ctx, c, tree, ids[hear], note); err == nil {
		t.Error("a message to a run that has ended was taken")
	}
	if calls, spent := m.total(); calls != 6 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 6 (3 the lead's, 2 and 1 its jobs'), each counted once", calls, spent, out.TotalUsage())
	}
}

// A run under a token limit holds back the shares of its jobs not yet
// collected: its own calls and later children get what is left after
// them, so that the tree spends at most its limit, as in process. The
// lead starts four jobs, each given its share, and then writes as much
// as it is let; without the hold it writes as if the jobs spent nothing,
// and the tree passes its limit.
func TestJobsSharesAreHeldBack(t *testing.T) {
	const limit = 3000
	var mu sync.Mutex
	var sent []int
	long := strings.Repeat("word ", 1600) // 8,000 bytes: 2,000 tokens
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		bounded := func(s string) string {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, req.MaxTokens)
			if req.MaxTokens > 0 && len(s) > 4*req.MaxTokens {
				s = s[:4*req.MaxTokens]
			}
			return s
		}
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage(bounded("done: " + task + " " + long)), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool, len(req.Tools) == 0:
			return provider.AssistantMessage(bounded("all parts started: " + long)), nil
		}
		bounded("")
		calls := make([]provider.ToolCall, 4)
		for i := range calls {
			calls[i] = provider.ToolCall{ID: fmt.Sprint("c", i), Name: SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d","background":true}`, i))}
		}
		return provider.AssistantMessage("", calls...), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, TokenLimit: limit}, Text: "split the work in four"})
	calls, billed := p.total()
	var out RunOutput
	err := env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&out)
	}
	// A cancelled job's activity may still be calling the model.
	mu.Lock()
	t.Logf("%d calls billed %d tokens (%v) under a limit of %d; bounds sent %v; error %v", calls, billed.Tokens(), billed, limit, sent, err)
	mu.Unlock()
	if billed.Tokens() > limit {
		t.Errorf("the tree billed %d tokens, past its limit of %d", billed.Tokens(), limit)
	}
	// A job the lead's answer cancels during its model call does not
	// count what the provider bills for that call, as in process.
	if err == nil && out.TotalUsage().Tokens() > billed.Tokens() {
		t.Errorf("the run reports %v, more than the model billed, %v", out.TotalUsage(), billed)
	}
	if calls < 3 {
		t.Errorf("%d calls: want the lead's two and a job's at least (a job the lead's answer finds not started is cancelled before its call)", calls)
	}
}

// A job stopped at one of its bounds (here its steps) hands back a
// partial report, as in process: the step it reached and its last words.
func TestJobPastItsStepsHandsBackAPartialReport(t *testing.T) {
	const task = "dig deeper"
	p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == task {
			return provider.AssistantMessage(fmt.Sprint("dug layer ", len(rs)+1), provider.ToolCall{ID: "c", Name: "noop", Arguments: json.RawMessage(`{}`)}), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `"}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}
	noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
	reg, err := tool.NewRegistry(noop)
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"noop"}, Spawn: true, Background: true, MaxSteps: 3}, Text: "go"})
	var out RunOutput
	err = env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&out)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, "stopped at its limit") || !strings.Contains(out.Answer, "at step 3") || !strings.Contains(out.Answer, "its last words:\ndug layer 3") {
		t.Errorf("the lead answered %q, want the job's partial report: stopped at its limit at step 3, its last words", out.Answer)
	}
	if calls, spent := p.total(); calls != 6 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 6, each counted once", calls, spent, out.TotalUsage())
	}
}

// A job cancelled while its model call is in flight waits for the call,
// and what the call was billed comes back with the job: in its status,
// and in the run's usage once collected. Before, the cancel returned at
// once and the job's spend was dropped.
func TestJobCancelledDuringItsModelCallCountsIt(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const task = "think it over"
	thinking, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == task {
			if once.CompareAndSwap(false, true) {
				close(thinking)
			}
			<-release // a provider that bills the call whatever happens meanwhile
			return provider.AssistantMessage("thought it over"), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":300}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}
	queue := fmt.Sprintf("deputy-jobs-inflight-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	tree := "jobs-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	<-thinking
	done := make(chan subagent.JobStatus, 1)
	go func() {
		st, err := CancelJob(ctx, c, tree, "job_1")
		if err != nil {
			t.Errorf("cancelling: %v", err)
		}
		done <- st
	}()
	time.Sleep(500 * time.Millisecond) // the cancel reaches the job during its call
	close(release)
	st := <-done
	// The call answered, so the job may have ended with its answer before
	// the cancel took: done then, as in process; either way its call counts.
	if (st.State != subagent.JobCancelled && st.State != subagent.JobDone) || st.Usage.Requests != 1 {
		t.Errorf("the cancelled job's status is %+v, want it ended with its one model call counted", st)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if calls, spent := m.total(); calls != 4 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v (%q); want 4, each counted once", calls, spent, out.TotalUsage(), out.Answer)
	}
}

// describe is what the server says of a workflow's execution.
func describe(ctx context.Context, c client.Client, workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d, err := c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		return nil, err
	}
	return d.RawResponse, nil
}

// A wait's timeout past the tool's bound is refused with the bound, as in
// process, whatever its size: never turned into a look that returns at
// once (a duration that overflows) nor a wait without end; the job is
// then waited for with a timeout in bounds.
func TestJobWaitTimeoutIsBounded(t *testing.T) {
	const task = "sort the shells"
	for _, timeout := range []string{"1e20", "600.5", "-1", "1e308"} {
		t.Run(timeout, func(t *testing.T) {
			p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				if firstUserOf(req) == task {
					return provider.AssistantMessage("sorted"), nil
				}
				call := func(name, args string) (provider.Message, error) {
					return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: name, Arguments: json.RawMessage(args)}), nil
				}
				switch len(rs) {
				case 0:
					return call(SpawnToolName, `{"task":"`+task+`","background":true}`)
				case 1:
					return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":`+timeout+`}`)
				case 2:
					return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+jobIDOf(rs[0])+`","timeout_seconds":600}`)
				}
				return provider.AssistantMessage(strings.Join(rs[1:], " | ")), nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "go"})
			var out RunOutput
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			first, second, _ := strings.Cut(out.Answer, " | ")
			if !strings.Contains(first, tool.ErrInvalidArguments.Error()) || !strings.Contains(first, "600") || strings.Contains(first, "still running") {
				t.Errorf("a wait of %s seconds said %q, want it refused with the bound", timeout, first)
			}
			if second != "sorted" {
				t.Errorf("the wait in bounds said %q, want the job's answer", second)
			}
		})
	}
}
