package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// digger is a model whose job digs on, a layer a step, until its limit
// stops it; asked to wrap up, it says nothing. The lead spawns the job,
// waits for it and answers with what it read. It keeps what the job's
// calls and all calls were billed.
type digger struct {
	id      func(n int64, i int) string
	n       atomic.Int64
	mu      sync.Mutex
	all     provider.Usage
	job     provider.Usage
	jobCall int
}

const digTask = "dig for ever"

func (m *digger) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	rs := resultsOf(req)
	var msg provider.Message
	job := firstUserOf(req) == digTask
	switch {
	case job && len(req.Tools) == 0:
		msg = provider.AssistantMessage("")
	case job:
		msg = provider.AssistantMessage(fmt.Sprint("dug layer ", len(rs)+1), provider.ToolCall{ID: m.id(m.n.Add(1), 0), Name: "noop", Arguments: json.RawMessage(`{}`)})
	case len(rs) == 0:
		msg = provider.AssistantMessage("", provider.ToolCall{ID: m.id(m.n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + digTask + `","background":true}`)})
	case len(rs) == 1:
		msg = provider.AssistantMessage("", provider.ToolCall{ID: m.id(m.n.Add(1), 0), Name: subagent.JobsToolName,
			Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":300,"job_id":"` + jobIDOf(rs[0]) + `"}`)})
	default:
		msg = provider.AssistantMessage("lead: " + rs[1])
	}
	u := fake.Usage(req, msg)
	if req.MaxTokens > 0 {
		u.OutputTokens = min(u.OutputTokens, int64(req.MaxTokens))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.all = m.all.Add(u)
	if job {
		m.job = m.job.Add(u)
		m.jobCall++
	}
	return provider.Response{Message: msg, Usage: u, StopReason: provider.StopEndTurn}, nil
}

// A job past its Spec's JobTokens, its JobCost or its JobSteps ends with
// a partial report, as with subagent.WithJobLimits in process: it spends
// within its limit, and what it spent is counted once in what the lead reports, in
// tokens and dollars — with models that name their calls afresh, not at
// all, or from call_0. Before, a job of an unlimited run dug on to its 50
// steps.
func TestJobPastItsLimitReportsPartiallyOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-6, Output: 1e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		spec   Spec
		tokens int64
		cost   float64
		steps  int // the job's model calls (0: not checked)
		// setting is the one the partial report names as the limit that
		// bound the job, and other the one it must not name.
		setting, other string
	}{
		{"tokens", Spec{JobTokens: 1500}, 1500, 0, 0, "Spec.JobTokens", "Spec.TokenLimit"},
		{"cost", Spec{JobCost: 0.0015}, 0, 0.0015, 0, "Spec.JobCost", "Spec.CostLimit"},
		{"steps", Spec{JobSteps: 4}, 0, 0, 4, "Spec.JobSteps", "Spec.MaxSteps"},
		// The lead's own limit, its share of it less than JobTokens, is
		// what bounds the job.
		{"lead's tokens", Spec{TokenLimit: 2800, JobTokens: 100_000}, 2800, 0, 0, "Spec.TokenLimit", "Spec.JobTokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				m := &digger{id: id}
				noop := tool.Must(tool.New("noop", "Does nothing.", func(context.Context, struct{}) (string, error) { return "ok", nil }))
				reg, err := tool.NewRegistry(noop)
				if err != nil {
					t.Fatal(err)
				}
				queue := fmt.Sprintf("deputy-job-limits-%d", time.Now().UnixNano())
				w := worker.New(c, queue, worker.Options{})
				Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Prices: prices})
				if err := w.Start(); err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				spec := tc.spec
				spec.Name, spec.Provider, spec.Tools, spec.Spawn, spec.Background = "lead", "m", []string{"noop"}, true, true
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "jobs-" + queue, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				var out RunOutput
				if err := run.Get(ctx, &out); err != nil {
					t.Fatal(err)
				}
				m.mu.Lock()
				defer m.mu.Unlock()
				t.Logf("the job made %d calls, %d tokens, $%.6f; the lead read %q", m.jobCall, m.job.Tokens(), price.Cost(m.job), out.Answer)
				if !strings.Contains(out.Answer, "stopped at its limit") || !strings.Contains(out.Answer, "its last words:\ndug layer ") {
					t.Errorf("the lead read %q: want the job's partial report, its last words", out.Answer)
				}
				if !strings.Contains(out.Answer, "raise "+tc.setting) || strings.Contains(out.Answer, tc.other) {
					t.Errorf("the lead read %q: want the limit that bound the job named, raise %s, not %s", out.Answer, tc.setting, tc.other)
				}
				if tc.tokens > 0 && m.job.Tokens() > tc.tokens || tc.cost > 0 && price.Cost(m.job) > tc.cost+1e-12 || m.jobCall < 3 || m.jobCall >= subagent.DefaultJobSteps {
					t.Errorf("the job made %d calls, %d tokens, $%.6f: want 3 or more, within %d tokens and $%g", m.jobCall, m.job.Tokens(), price.Cost(m.job), tc.tokens, tc.cost)
				}
				if tc.steps > 0 && m.jobCall != tc.steps {
					t.Errorf("the job made %d model calls, want %d, its JobSteps", m.jobCall, tc.steps)
				}
				if out.TotalUsage() != m.all || math.Abs(out.Cost-price.Cost(m.all)) > 1e-9 {
					t.Errorf("the lead reports %+v, $%.6f; the model billed %+v, $%.6f, each call once", out.TotalUsage(), out.Cost, m.all, price.Cost(m.all))
				}
			})
		})
	}
}

// The jobs alive in one owner's threads are capped (Spec.MaxOwnerJobs),
// as with subagent.WithMaxOwnerJobs in process: a turn's spawn past the
// cap, its thread's job of an earlier turn working on, is refused with
// subagent.ErrMaxBackground and a deputy.refused event of reason
// max_owner_jobs; once that job has ended, the thread's next turn starts
// one; a turn of another of the owner's threads counts the first
// thread's job and is refused too, while another owner's is not; a
// spawn past a thread's MaxBackground is refused with the same event,
// reason max_background. Each refusal counts in the turn's
// Output.Refused and takes no job number, as in process — with
// models that name their calls afresh, not at all, or from call_0.
func TestOwnerJobsAreCappedOnTemporal(t *testing.T) {
	inEachIDMode(t, ownerJobsAreCapped)
}

func ownerJobsAreCapped(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const long = "count the stars"
	var runs, n atomic.Int64
	blocked := make(chan struct{}, 8)
	block := tool.Must(tool.New("block", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		blocked <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		switch {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			return provider.AssistantMessage("stars: many"), nil
		case strings.HasPrefix(task, "start") && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}), nil
		case strings.HasPrefix(task, "cancel") && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"cancel","job_id":"` + strings.TrimPrefix(task, "cancel ") + `"}`)}), nil
		case len(rs) == 0:
			return provider.AssistantMessage("nothing to do"), nil
		}
		return provider.AssistantMessage(task + ": " + rs[0]), nil
	}}
	reg, err := tool.NewRegistry(block)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-owner-jobs-%d", time.Now().UnixNano())
	hub := NewHub()
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Events: hub, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true,
		JobsAcrossTurns: true, MaxOwnerJobs: 1}}
	owner := "ann-" + queue
	thread := func(owner, th string) context.Context { return agent.WithOwner(agent.WithThread(ctx, th+queue), owner) }
	var spent provider.Usage
	turn := func(ctx context.Context, text string) (agent.Output, []event.Event) {
		t.Helper()
		rec := &recorder{}
		out, err := lead.Run(event.WithSink(ctx, rec), agent.Input{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		spent = spent.Add(out.TotalUsage())
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var refused []event.Event
		for _, e := range rec.events {
			if e.Type == event.Custom && e.Name == subagent.RefusedEvent {
				refused = append(refused, e)
			}
		}
		return out, refused
	}
	refusedOnce := func(out agent.Output, refused []event.Event, what string) {
		t.Helper()
		if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(out.Answer, "threads of this owner") {
			t.Errorf("%s answered %q: want its spawn refused, past the owner's cap", what, out.Answer)
		}
		if len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_owner_jobs"`) {
			t.Errorf("%s: refusal events %+v, want one, max_owner_jobs", what, refused)
		}
		if out.Refused != 1 {
			t.Errorf("%s: Output.Refused %d, want 1", what, out.Refused)
		}
	}
	if out, refused := turn(thread(owner, "t1"), "start the count"); strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || len(refused) != 0 {
		t.Fatalf("the first turn answered %q, refusals %+v: want its job started", out.Answer, refused)
	}
	<-blocked
	out, refused := turn(thread(owner, "t1"), "start another")
	refusedOnce(out, refused, "the thread's second turn")
	out, refused = turn(thread(owner, "t2"), "start one elsewhere")
	refusedOnce(out, refused, "a turn of the owner's other thread")
	if out, refused := turn(thread("bob-"+queue, "t1"), "start bob's"); strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || len(refused) != 0 {
		t.Errorf("another owner's turn answered %q, refusals %+v: want its job started", out.Answer, refused)
	}
	<-blocked
	// The first job ends (cancelled): a place is free.
	if out, _ := turn(thread(owner, "t1"), "cancel job_1"); !strings.Contains(out.Answer, "job job_1") {
		t.Errorf("the cancelling turn answered %q", out.Answer)
	}
	out, refused = turn(thread(owner, "t1"), "start again")
	if strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || len(refused) != 0 || out.Refused != 0 {
		t.Errorf("the turn after the job ended answered %q, refusals %+v, Output.Refused %d: want its job started", out.Answer, refused, out.Refused)
	}
	if !strings.Contains(out.Answer, "job_2") {
		t.Errorf("the turn after the job ended answered %q: want its job numbered job_2, the refused spawn having taken no number, as in process", out.Answer)
	}
	<-blocked
	if got := runs.Load(); got != 3 {
		t.Errorf("the blocking tool ran %d times, want 3: ann's first job, bob's, ann's after a place freed", got)
	}
	// The jobs still running are cancelled by turns of theirs, which
	// count what they spent.
	turn(thread(owner, "t1"), "cancel job_2")
	// Past the thread's own cap (MaxBackground), bob's next spawn is
	// refused the same way, reason max_background.
	lead.Spec.MaxBackground, lead.Spec.MaxOwnerJobs = 1, 0
	out, refused = turn(thread("bob-"+queue, "t1"), "start bob's second")
	if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(out.Answer, "one thread") ||
		len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_background"`) || out.Refused != 1 {
		t.Errorf("bob's second turn answered %q, refusals %+v, Output.Refused %d: want its spawn refused, max_background, the most one thread may have", out.Answer, refused, out.Refused)
	}
	turn(thread("bob-"+queue, "t1"), "cancel job_1")
	if calls, billed := m.total(); spent != billed {
		t.Errorf("the turns report %+v, the %d model calls billed %+v: want each counted once", spent, calls, billed)
	}
}

// A run's job past its Spec's JobTime ends by itself with a partial
// report and what it spent, counted once, as a thread's job does; before
// deputy.job-limits the server ended it at subagent.DefaultJobTime, with
// nothing it spent.
func TestRunJobPastItsTimeReportsPartiallyOnTemporal(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Dial(ctx, hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const task = "count the stars"
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == task {
			return provider.AssistantMessage("counting", provider.ToolCall{ID: "c", Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + task + `","background":true}`)}), nil
		case 1:
			return provider.AssistantMessage("", provider.ToolCall{ID: "c", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","job_id":"` + jobIDOf(rs[0]) + `","timeout_seconds":300}`)}), nil
		}
		return provider.AssistantMessage("lead: " + rs[1]), nil
	}}
	block := tool.Must(tool.New("block", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}))
	reg, err := tool.NewRegistry(block)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-job-time-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "jobs-" + queue, TaskQueue: queue}, AgentWorkflowName,
		RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true, JobTime: 2 * time.Second}, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Answer, "stopped at its limit") || !strings.Contains(out.Answer, "past its time") || !strings.Contains(out.Answer, "its last words:\ncounting") {
		t.Errorf("the lead read %q: want the job's partial report, past its time, its last words", out.Answer)
	}
	if calls, spent := m.total(); calls != 4 || out.TotalUsage() != spent {
		t.Errorf("%d model calls costing %+v, the lead reported %+v; want 4, each counted once", calls, spent, out.TotalUsage())
	}
}

// A spawn counts the jobs alive in the owner's other threads as it is to
// start its job, not only as its turn began (Spec.MaxOwnerJobs): a turn
// that began while another of the owner's threads had no job, and that
// spawns once that thread has started one, is refused at the cap of one,
// with a deputy.refused event of reason max_owner_jobs. Before, it
// counted what it saw as it began, and the owner had two jobs alive —
// with models that name their calls afresh, not at all, or from call_0.
func TestOwnerJobsCountedAsAJobStartsOnTemporal(t *testing.T) {
	inEachIDMode(t, ownerJobsCountedAsAJobStarts)
}

func ownerJobsCountedAsAJobStarts(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHeldThreads(ctx, t, c, id, "owner-recount", "start in t1", "start in t2")
	m, jobs, blocked, began, release := h.m, &h.jobs, h.blocked, h.began, h.release
	thread, turn, wait := h.thread, h.turn, h.wait
	// t1's turn runs, with no job yet; t2's begins while it does, and
	// counts none alive elsewhere.
	first := turn(thread("t1"), "start in t1")
	wait(began["start in t1"], "t1's first model call")
	second := turn(thread("t2"), "start in t2")
	wait(began["start in t2"], "t2's first model call")
	// t1 starts its job, which runs on; then t2 spawns.
	close(release["start in t1"])
	r1 := <-first
	if r1.err != nil || len(r1.refused) != 0 {
		t.Fatalf("t1's turn answered %q (%v), refusals %+v: want its job started", r1.out.Answer, r1.err, r1.refused)
	}
	wait(blocked, "t1's job")
	close(release["start in t2"])
	r2 := <-second
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if !strings.Contains(r2.out.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(r2.out.Answer, "threads of this owner") ||
		len(r2.refused) != 1 || !strings.Contains(string(r2.refused[0].Value), `"max_owner_jobs"`) || r2.out.Refused != 1 {
		t.Errorf("t2's turn answered %q, refusals %+v, Output.Refused %d: want its spawn refused, t1's job counted against the owner's cap of one",
			r2.out.Answer, r2.refused, r2.out.Refused)
	}
	if got := jobs.Load(); got != 1 {
		t.Errorf("%d jobs ran, want t1's alone", got)
	}
	spent := r1.out.TotalUsage().Add(r2.out.TotalUsage())
	r3 := <-turn(thread("t1"), "cancel")
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	spent = spent.Add(r3.out.TotalUsage())
	if calls, billed := m.total(); spent != billed {
		t.Errorf("the turns report %+v, the %d model calls billed %+v: want each counted once", spent, calls, billed)
	}
}

// A thread's spawns of one step past Spec.MaxBackground are refused
// while the owner has another thread, whose jobs each spawn counts as it
// is to start (a local activity it waits for): the spawns of the step
// counted as they each start, not all before any did. Before, all three
// of a step's spawns started under a MaxBackground of two.
func TestSpawnsOfAStepStayUnderMaxBackgroundOnTemporal(t *testing.T) {
	inEachIDMode(t, spawnsOfAStepStayUnderMaxBackground)
}

func spawnsOfAStepStayUnderMaxBackground(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const long = "count the stars"
	var n, jobs atomic.Int64
	block := tool.Must(tool.New("block", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		jobs.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	}))
	idle := make(chan struct{})
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		spawn := func(i int) provider.ToolCall {
			return provider.ToolCall{ID: id(n.Load(), i), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}
		}
		switch {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == "wait" && len(rs) == 0:
			select { // the owner's other thread, its turn running
			case <-idle:
			case <-ctx.Done():
			}
			return provider.AssistantMessage("waited"), nil
		case task == "start three" && len(rs) == 0:
			n.Add(1)
			return provider.AssistantMessage("", spawn(0), spawn(1), spawn(2)), nil
		case task == "cancel" && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"cancel","job_id":"job_1"}`)},
				provider.ToolCall{ID: id(n.Load(), 1), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"cancel","job_id":"job_2"}`)}), nil
		}
		return provider.AssistantMessage(task + ": " + strings.Join(rs, "; ")), nil
	}}
	reg, err := tool.NewRegistry(block)
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-step-spawns-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true,
		JobsAcrossTurns: true, MaxBackground: 2, MaxOwnerJobs: 8}}
	owner := "ann-" + queue
	thread := func(th string) context.Context { return agent.WithOwner(agent.WithThread(ctx, th+queue), owner) }
	other := make(chan error, 1)
	go func() {
		_, err := lead.Run(thread("t0"), agent.Input{Text: "wait"})
		other <- err
	}()
	for calls, _ := m.total(); calls == 0; calls, _ = m.total() {
		select {
		case <-ctx.Done():
			t.Fatal("the other thread's turn never began")
		case <-time.After(20 * time.Millisecond):
		}
	}
	out, err := lead.Run(thread("t1"), agent.Input{Text: "start three"})
	if err != nil {
		t.Fatal(err)
	}
	close(idle)
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if out.Refused != 1 || strings.Count(out.Answer, subagent.ErrMaxBackground.Error()) != 1 {
		t.Errorf("the turn answered %q, Output.Refused %d: want one of its three spawns refused, past MaxBackground of two", out.Answer, out.Refused)
	}
	if _, err := lead.Run(thread("t1"), agent.Input{Text: "cancel"}); err != nil {
		t.Fatal(err)
	}
	if got := jobs.Load(); got > 2 {
		t.Errorf("%d jobs ran, want two at most", got)
	}
}
