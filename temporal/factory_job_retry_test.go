package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// factoryJobRun starts, on a worker of its own queue, a lead that spawns
// roster member "writer", a factory's agent, in the background, and then
// calls pause until released; it returns the run, the tree's id and a
// function that starts another worker of the queue with rt (running
// workflows only, with workflowsOnly).
func factoryJobRun(t *testing.T, ctx context.Context, c client.Client, spec Spec, rt func() *Runtime) (client.WorkflowRun, string, func(workflowsOnly bool) worker.Worker) {
	t.Helper()
	queue := fmt.Sprintf("deputy-factory-retry-%d", time.Now().UnixNano())
	start := func(workflowsOnly bool) worker.Worker {
		w := worker.New(c, queue, worker.Options{LocalActivityWorkerOnly: workflowsOnly})
		Register(w, rt())
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	tree := "factory-retry-" + queue
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tree, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	return run, tree, start
}

// pausing is a tool that returns once released, and runs again (on
// another worker) when its worker stops.
func pausing(release <-chan struct{}) tool.Tool {
	return tool.Must(tool.New("pause", "Pauses.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case <-release:
			return "resumed", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
}

// A factory's job whose worker stops, and which is cancelled before its
// activity's next attempt has its agent again — as that attempt builds
// the agent (a remote's agent card is being fetched), or while it waits
// for a worker — ends cancelled, and hands back what its first attempt
// spent, which its workflow's journal holds: the lead reports what the
// models billed. Before, the first attempt's model call was counted
// nowhere.
func TestFactoryJobCancelledBetweenItsAttempts(t *testing.T) {
	for _, building := range []bool{true, false} {
		t.Run(fmt.Sprintf("building=%v", building), func(t *testing.T) {
			factoryJobCancelledBetweenAttempts(t, building)
		})
	}
}

func factoryJobCancelledBetweenAttempts(t *testing.T, whileBuilding bool) {
	ctx, c := dialServer(t, 2*time.Minute)
	writer := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
	}}
	release := make(chan struct{})
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		switch len(resultsOf(req)) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"write","agent":"writer","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "p", Name: "pause", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("lead: done"), nil
	}}
	var holds, stopped atomic.Int64
	holding := make(chan struct{})
	hold := blocking(t, "hold", &holds, &stopped, holding)
	building := make(chan struct{}, 1)
	reg, err := tool.NewRegistry(pausing(release))
	if err != nil {
		t.Fatal(err)
	}
	attempt := 0
	rt := func() *Runtime {
		attempt++
		again := attempt > 1
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Tools: reg, Factories: map[string]subagent.Factory{
			"writer": func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
				if again {
					building <- struct{}{}
					<-ctx.Done()
					return nil, fmt.Errorf("fetching the agent's card: %w", ctx.Err())
				}
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, Tools: []string{"pause"},
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	w1 := start(false)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never began its tool call")
	}
	w1.Stop()
	w2 := start(!whileBuilding)
	if whileBuilding {
		select {
		case <-building:
		case <-ctx.Done():
			t.Fatal("the job's activity never ran again")
		}
	}
	jobs, err := Jobs(ctx, c, tree)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("the run's jobs are %+v (%v), want one", jobs, err)
	}
	st, err := CancelJob(ctx, c, tree, jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != subagent.JobCancelled || st.Usage.Requests != 1 {
		t.Errorf("the cancelled job is %+v, want cancelled, its first attempt's model call counted", st)
	}
	if !whileBuilding {
		// The lead's pause runs again on a worker of activities.
		w2.Stop()
		w2 = start(false)
	}
	defer w2.Stop()
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	lc, lu := lead.total()
	wc, wu := writer.total()
	if lc != 3 || wc != 1 || out.TotalUsage() != lu.Add(wu) {
		t.Errorf("the lead's model was asked %d times and the writer's %d, billing %+v; the lead reports %+v: want 3 and 1, each counted once",
			lc, wc, lu.Add(wu), out.TotalUsage())
	}
}

// A factory's job's time (Spec.JobTime) bounds the job, not each attempt
// of its activity. A job whose worker stops part way goes on on another
// worker for what is left of its time, not for all of it again (with
// each attempt given the whole JobTime, the job ended 7s after it began).
// A job whose activity runs again only once its time is past ends at
// once, and hands back what its first attempt spent (before, that
// attempt's model call was counted nowhere). Either way the lead reports
// what the models billed.
func TestFactoryJobTimeSpansItsAttempts(t *testing.T) {
	for _, c := range []struct {
		name string
		// stopAfter: how long into the job its first worker stops;
		// restartAfter: how long after that the next starts.
		jobTime, stopAfter, restartAfter time.Duration
		holds                            int64 // the calls of its tool, one an attempt that reaches it
	}{
		{"part way", 4 * time.Second, 2 * time.Second, 0, 2},
		{"past its time", 2 * time.Second, 0, 3 * time.Second, 1},
	} {
		t.Run(c.name, func(t *testing.T) { factoryJobTimeSpansAttempts(t, c.jobTime, c.stopAfter, c.restartAfter, c.holds) })
	}
}

func factoryJobTimeSpansAttempts(t *testing.T, jobTime, stopAfter, restartAfter time.Duration, wantHolds int64) {
	ctx, c := dialServer(t, 2*time.Minute)
	writer := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
	}}
	lead := leadOfJob("write", "writer")
	var holds, stopped atomic.Int64
	holding := make(chan struct{})
	hold := blocking(t, "hold", &holds, &stopped, holding)
	rt := func() *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, JobTime: jobTime,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, _, start := factoryJobRun(t, ctx, c, spec, rt)
	w1 := start(false)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never began its tool call")
	}
	began := time.Now()
	time.Sleep(stopAfter)
	w1.Stop()
	time.Sleep(restartAfter)
	w2 := start(false)
	defer w2.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, "ran past its time") {
		t.Errorf("the lead read %q, want the job past its time", out.Answer)
	}
	// (Started past its time, an attempt ends when it runs: no bound on
	// when that is.)
	if took := time.Since(began); holds.Load() != wantHolds || restartAfter == 0 && took > jobTime+jobTime/2 {
		t.Errorf("the job held on %d times and ended %v after it began, want %d times and within its time of %v", holds.Load(), took.Round(100*time.Millisecond), wantHolds, jobTime)
	}
	lc, lu := lead.total()
	wc, wu := writer.total()
	if wc != 1 || out.TotalUsage() != lu.Add(wu) {
		t.Errorf("the lead's model was asked %d times and the writer's %d, billing %+v; the lead reports %+v: want the writer's once (its answer replayed), each counted once",
			lc, wc, lu.Add(wu), out.TotalUsage())
	}
}

// An entry of a factory's journal that its workflow does not keep (past
// the worker's payload limit, or the journal's bounds) leaves out what
// the agent did after it too: a journal with a hole would have the next
// attempt take a message before the step whose record is missing, and
// again, from the journal, before the step that took it first, so that
// the agent read it twice. Before, the entries after the hole were kept.
func TestFactoryJournalHasNoHoles(t *testing.T) {
	ctx, c := dialServer(t, 2*time.Minute)
	const note = "list the rivers too"
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		heard := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				heard += strings.Count(m.Content, note)
			}
		}
		switch len(resultsOf(req)) {
		case 0:
			// An answer past the payload limit: its record is not kept.
			return provider.AssistantMessage(strings.Repeat("surveying ", 400), provider.ToolCall{ID: "r", Name: "record", Arguments: json.RawMessage(`{}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage(fmt.Sprintf("heard %d times", heard)), nil
	}}
	noted := make(chan struct{})
	lead := leadOfJob("survey", "writer", note)
	var recorded atomic.Int64
	record := tool.Must(tool.New("record", "Records.", func(ctx context.Context, _ struct{}) (string, error) {
		if recorded.Add(1) == 1 {
			select {
			case <-noted: // the lead's note waits for the next step
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "recorded", nil
	}))
	var holds, stopped atomic.Int64
	holding := make(chan struct{})
	before := blocking(t, "hold", &holds, &stopped, holding)
	after := tool.Must(tool.New("hold", "Holds on.", func(context.Context, struct{}) (string, error) { return "held", nil }))
	first := true
	rt := func() *Runtime {
		hold := before
		if !first {
			hold = after
		}
		first = false
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, PayloadLimit: 2048, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(record, hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	w1 := start(false)
	for {
		jobs, err := Jobs(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 && len(jobs[0].Messages) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lead never sent its note: %+v", jobs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(200 * time.Millisecond) // for the job's workflow to take it
	close(noted)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never reached its step that holds on")
	}
	w1.Stop()
	w2 := start(false)
	defer w2.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := "lead: heard 1 times"; out.Answer != want {
		t.Errorf("the lead answered %q, want %q: the note read once", out.Answer, want)
	}
}

// A factory's agent, as a job or called in the foreground, whose worker
// stops under each attempt of its activity ends failed once its attempts
// are spent, and hands back what they paid for, which its journal holds:
// the lead reports what the models billed. Before, what they paid for
// was counted nowhere (the job's since the journal, the foreground's
// until it too read it).
func TestFactoryJobOutOfAttemptsCountsWhatItSpent(t *testing.T) {
	t.Run("job", func(t *testing.T) { factoryOutOfAttempts(t, true) })
	t.Run("foreground", func(t *testing.T) { factoryOutOfAttempts(t, false) })
}

func factoryOutOfAttempts(t *testing.T, background bool) {
	ctx, c := dialServer(t, 2*time.Minute)
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprintf("h%d", len(resultsOf(req))), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
	}}
	lead := leadOfJob("write", "writer")
	if !background {
		lead = &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
			if rs := resultsOf(req); len(rs) > 0 {
				return provider.AssistantMessage("lead: " + rs[0]), nil
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName,
				Arguments: json.RawMessage(`{"task":"write","agent":"writer"}`)}), nil
		}}
	}
	holding := make(chan struct{}, 8)
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		holding <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	rt := func() *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, _, start := factoryJobRun(t, ctx, c, spec, rt)
	w := start(false)
	for range 3 {
		select {
		case <-holding:
		case <-ctx.Done():
			t.Fatal("the job never began its tool call")
		}
		w.Stop()
		w = start(false)
	}
	defer w.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	lc, lu := lead.total()
	wc, wu := writer.total()
	if !strings.Contains(out.Answer, "failed") {
		t.Errorf("the lead read %q, want the job failed", out.Answer)
	}
	if wc != 1 || out.TotalUsage() != lu.Add(wu) {
		t.Errorf("the lead's model was asked %d times and the writer's %d, billing %+v; the lead reports %+v: want the writer's once, each counted once",
			lc, wc, lu.Add(wu), out.TotalUsage())
	}
}

// A factory's journal is read back whole by the next attempt, whose one
// query's answer the server bounds at 2 MB (its payload limit): a run
// whose journal would pass that records what fits and stops there, and
// an attempt that runs again replays what it recorded. Before, the
// journal took up to 3 MB, past which the next attempt could not read
// it, and ran the agent from its start: each tool call again, each model
// answer paid again, and what the first attempt spent counted nowhere.
func TestFactoryJournalFitsOneQuery(t *testing.T) {
	ctx, c := dialServer(t, 2*time.Minute)
	const pages = 6 // of 400 KB each: 2.4 MB in all
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		n := len(resultsOf(req))
		switch {
		case n < pages:
			return provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprintf("f%d", n), Name: "fetch", Arguments: json.RawMessage(fmt.Sprintf(`{"page":%d}`, n+1))}), nil
		case n == pages:
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("read them all"), nil
	}}
	var fetched [pages + 1]atomic.Int64
	fetch := tool.Must(tool.New("fetch", "Fetches a page.", func(_ context.Context, in struct {
		Page int `json:"page"`
	}) (string, error) {
		fetched[in.Page].Add(1)
		return strings.Repeat("p", 400<<10), nil
	}))
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if rs := resultsOf(req); len(rs) > 0 {
			return provider.AssistantMessage("lead: " + rs[0]), nil
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"read","agent":"writer"}`)}), nil
	}}
	var holds, stopped atomic.Int64
	holding := make(chan struct{})
	before := blocking(t, "hold", &holds, &stopped, holding)
	after := tool.Must(tool.New("hold", "Holds on.", func(context.Context, struct{}) (string, error) { return "held", nil }))
	first := true
	rt := func() *Runtime {
		hold := before
		if !first {
			hold = after
		}
		first = false
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(fetch, hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Roster: []SubAgent{{Name: "writer", Description: "Reads.", Factory: "writer"}}}
	run, _, start := factoryJobRun(t, ctx, c, spec, rt)
	w1 := start(false)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the agent never reached its step that holds on")
	}
	w1.Stop()
	w2 := start(false)
	defer w2.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: read them all" {
		t.Errorf("the lead answered %q, want the writer's answer", out.Answer)
	}
	if fetched[1].Load() != 1 || fetched[pages].Load() != 2 {
		t.Errorf("the pages were fetched %d, ..., %d times, want the first once (the next attempt replays what the journal kept) and the last twice (past it)",
			fetched[1].Load(), fetched[pages].Load())
	}
}

// A factory's job reads the messages its workflow took in pages, each
// within the server's bound on a query's answer: messages sent from
// outside the run (a signal to the job's workflow), 2.2 MB of them, do
// not keep the lead's message from the agent. Before, the activity read
// them all in one answer, which the server refused each time, and the
// agent took no message again.
func TestFactoryJobReadsItsMessagesInPages(t *testing.T) {
	ctx, c := dialServer(t, 2*time.Minute)
	const note = "list the rivers too"
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		heard := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				heard += strings.Count(m.Content, note)
			}
		}
		return provider.AssistantMessage(fmt.Sprintf("heard %d times", heard)), nil
	}}
	lead := leadOfJob("survey", "writer", note)
	release := make(chan struct{})
	holding := make(chan struct{}, 1)
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		holding <- struct{}{}
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	rt := func() *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	w := start(false)
	defer w.Stop()
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never began its tool call")
	}
	for i := range 2 {
		m := jobMessage{ID: fmt.Sprintf("outside-%d", i), Text: strings.Repeat("z", 1100<<10)}
		if err := c.SignalWorkflow(ctx, tree+"/0.0-"+SpawnToolName, "", jobMessageSignal, m); err != nil {
			t.Fatal(err)
		}
	}
	for {
		jobs, err := Jobs(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 && len(jobs[0].Messages) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lead never sent its note: %+v", jobs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(200 * time.Millisecond) // for the job's workflow to take it
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := "lead: heard 1 times"; out.Answer != want {
		t.Errorf("the lead answered %q, want %q", out.Answer, want)
	}
}

// leadOfJob is a lead's model that spawns roster member agent in the
// background with task, sends it notes, one a step, waits for it, and
// answers with what the wait returned.
func leadOfJob(task, agent string, notes ...string) *script {
	return &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(id, name string, args any) (provider.Message, error) {
			b, _ := json.Marshal(args)
			return provider.AssistantMessage("", provider.ToolCall{ID: id, Name: name, Arguments: b}), nil
		}
		switch n := len(rs); {
		case n == 0:
			return call("s", SpawnToolName, map[string]any{"task": task, "agent": agent, "background": true})
		case n <= len(notes):
			return call("m", subagent.JobsToolName, map[string]any{"action": "send", "job_id": jobIDOf(rs[0]), "message": notes[n-1]})
		case n == len(notes)+1:
			return call("w", subagent.JobsToolName, map[string]any{"action": "wait", "job_id": jobIDOf(rs[0]), "timeout_seconds": 300})
		}
		return provider.AssistantMessage("lead: " + rs[len(notes)+1]), nil
	}}
}

// A factory's agent called in the foreground whose worker stops, and
// whose lead is cancelled as its activity's next attempt builds the agent
// again, hands back what its first attempt spent, which its workflow's
// journal holds: the cancelled lead's error carries what the models
// billed. Before, the first attempt's model call was counted nowhere.
func TestFactoryCancelledBetweenItsAttempts(t *testing.T) {
	ctx, c := dialServer(t, 2*time.Minute)
	writer := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
	}}
	lead := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "s", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"write","agent":"writer"}`)}), nil
		}
		return provider.AssistantMessage("lead: done"), nil
	}}
	var holds, stopped atomic.Int64
	holding := make(chan struct{})
	hold := blocking(t, "hold", &holds, &stopped, holding)
	building := make(chan struct{}, 1)
	attempt := 0
	rt := func() *Runtime {
		attempt++
		again := attempt > 1
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
				if again {
					building <- struct{}{}
					<-ctx.Done()
					return nil, fmt.Errorf("fetching the agent's card: %w", ctx.Err())
				}
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	w1 := start(false)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the writer never began its tool call")
	}
	w1.Stop()
	w2 := start(false)
	defer w2.Stop()
	select {
	case <-building:
	case <-ctx.Done():
		t.Fatal("the writer's activity never ran again")
	}
	if err := c.CancelWorkflow(ctx, tree, ""); err != nil {
		t.Fatal(err)
	}
	err := run.Get(ctx, nil)
	if err == nil {
		t.Fatal("the cancelled lead ended without an error")
	}
	lc, lu := lead.total()
	wc, wu := writer.total()
	if lc != 1 || wc != 1 || UsageOf(err) != lu.Add(wu) {
		t.Errorf("the lead's model was asked %d times and the writer's %d, billing %+v; the cancelled lead carries %+v (%v): want 1 and 1, each counted once",
			lc, wc, lu.Add(wu), UsageOf(err), err)
	}
}

// A message a factory's job took after its journal stopped recording (an
// entry past the worker's payload limit) is taken again by the attempt
// that runs after its worker stopped, since the journal lacks it — and
// its deputy.job_delivered is published once, and the lead told of it
// once: the workflow hands the attempt what the one before told it. The
// model answer the first attempt paid for past the journal, which the
// second pays for again, counts in what the lead reports: what the
// models billed. Before, the event was published at each attempt that
// took it, and that answer's spend was counted nowhere.
func TestFactoryJobDeliveredOnceWhatItsJournalLacks(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { factoryJobDeliveredOnce(t, mode.id) })
	}
}

func factoryJobDeliveredOnce(t *testing.T, id func(n int64, i int) string) {
	ctx, c := dialServer(t, 2*time.Minute)
	const note = "list the rivers too"
	var n atomic.Int64
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		switch len(resultsOf(req)) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "big", Arguments: json.RawMessage(`{}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		heard := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleUser {
				heard += strings.Count(m.Content, note)
			}
		}
		return provider.AssistantMessage(fmt.Sprintf("heard %d times", heard)), nil
	}}
	lead := leadOfJob("survey", "writer", note)
	sent := make(chan struct{})
	var bigs atomic.Int64
	big := tool.Must(tool.New("big", "Reads a lot.", func(ctx context.Context, _ struct{}) (string, error) {
		bigs.Add(1)
		select {
		case <-sent:
			return strings.Repeat("r", 8<<10), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	holding := make(chan struct{}, 2)
	var holds atomic.Int64
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		if holds.Add(1) > 1 {
			return "held", nil
		}
		holding <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	hub := NewHub()
	rt := func() *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Events: hub, PayloadLimit: 4 << 10, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(big, hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	var rec recorder
	defer hub.Subscribe(event.WithSink(context.Background(), &rec), tree)()
	w := start(false)
	for {
		jobs, err := Jobs(ctx, c, tree)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 && len(jobs[0].Messages) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lead never sent its note: %+v", jobs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(200 * time.Millisecond) // for the job's workflow to take it
	close(sent)
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the job never began to hold")
	}
	w.Stop()
	w = start(false)
	defer w.Stop()
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := "lead: heard 1 times"; out.Answer != want {
		t.Errorf("the lead answered %q, want %q: the note read once, in the attempt that answered", out.Answer, want)
	}
	if bigs.Load() != 2 {
		t.Errorf("the big read ran %d times, want twice: its result, past the payload limit, was not journaled (the test checks too little)", bigs.Load())
	}
	rec.mu.Lock()
	delivered := 0
	for _, e := range rec.events {
		if e.Type == event.Custom && e.Name == subagent.JobDeliveredEvent {
			delivered++
		}
	}
	rec.mu.Unlock()
	if delivered != 1 {
		t.Errorf("deputy.job_delivered was published %d times, want once", delivered)
	}
	lc, lu := lead.total()
	wc, wu := writer.total()
	if out.TotalUsage() != lu.Add(wu) {
		t.Errorf("the lead's model was asked %d times and the writer's %d, billing %+v; the lead reports %+v", lc, wc, lu.Add(wu), out.TotalUsage())
	}
}

// A factory's journal takes no record of an attempt before the latest
// it has a record of: a record an earlier attempt sends after that (its
// worker cut off from the server, which gave up on it, but running on)
// is not taken, so no later attempt replays a run mixed of two.
func TestFactoryJournalFencesAnAttemptGivenUpOn(t *testing.T) {
	ctx, c := dialServer(t, 2*time.Minute)
	writer := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		if len(resultsOf(req)) == 0 {
			return provider.AssistantMessage("", provider.ToolCall{ID: "h", Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		}
		return provider.AssistantMessage("written"), nil
	}}
	lead := leadOfJob("write", "writer")
	release := make(chan struct{})
	holding := make(chan struct{}, 2)
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		holding <- struct{}{}
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	rt := func() *Runtime {
		return &Runtime{Providers: map[string]provider.Provider{"m": lead}, Factories: map[string]subagent.Factory{
			"writer": func(context.Context, json.RawMessage) (agent.Agent, error) {
				return agent.NewReact(writer, agent.WithName("writer"), agent.WithTools(hold))
			},
		}}
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true,
		Roster: []SubAgent{{Name: "writer", Description: "Writes.", Factory: "writer"}}}
	run, tree, start := factoryJobRun(t, ctx, c, spec, rt)
	wait := func(what string) {
		t.Helper()
		select {
		case <-holding:
		case <-ctx.Done():
			t.Fatalf("%s never began to hold", what)
		}
	}
	w := start(false)
	wait("the first attempt")
	w.Stop()
	w = start(false)
	defer w.Stop()
	wait("the second attempt")
	job := tree + "/0.0-" + SpawnToolName
	// The second attempt records (as its hold ends, it would), and then
	// the first, which the server gave up on, does.
	fresh := journalRecord{Key: "fresh", Entry: journal.Entry{Value: json.RawMessage(`"from the second"`)}, Attempt: 2}
	if err := c.SignalWorkflow(ctx, job, "", factoryJournalSignal, fresh); err != nil {
		t.Fatal(err)
	}
	stale := journalRecord{Key: "stale", Entry: journal.Entry{Value: json.RawMessage(`"from the first attempt"`)}, Attempt: 1}
	if err := c.SignalWorkflow(ctx, job, "", factoryJournalSignal, stale); err != nil {
		t.Fatal(err)
	}
	last := journalRecord{Key: "last", Entry: journal.Entry{Value: json.RawMessage(`"from the second, last"`)}, Attempt: 2}
	if err := c.SignalWorkflow(ctx, job, "", factoryJournalSignal, last); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for !slices.Contains(keys, "last") {
		v, err := c.QueryWorkflow(ctx, job, "", factoryJournalQuery)
		if err != nil {
			t.Fatal(err)
		}
		var rs []journalRecord
		if err := v.Get(&rs); err != nil {
			t.Fatal(err)
		}
		keys = keys[:0]
		for _, r := range rs {
			keys = append(keys, r.Key)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the journal never took the second attempt's last record: %v", keys)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if slices.Contains(keys, "stale") {
		t.Errorf("the journal took a record of the attempt given up on: %v", keys)
	}
	close(release)
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if want := "lead: written"; out.Answer != want {
		t.Errorf("the lead answered %q, want %q", out.Answer, want)
	}
}
