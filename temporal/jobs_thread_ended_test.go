package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// beforeStart is a client that calls before as it starts each workflow,
// before the server has it.
type beforeStart struct {
	client.Client
	before func(ctx context.Context, opts client.StartWorkflowOptions)
}

func (c *beforeStart) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	c.before(ctx, opts)
	return c.Client.ExecuteWorkflow(ctx, opts, wf, args...)
}

// A job of a thread that ends after the thread's next turn has read the
// thread's jobs, and before that turn starts, is shown ending in that
// turn's stream, as in process: the turn, told the job runs on, announces
// it, then has its SUBAGENT_FINISHED, once, and its deputy.job_ended; and
// its wait collects the job's answer. The job ends, deterministically, as
// the turn's workflow is about to start. (Its SUBAGENT_FINISHED was
// published before the turn listened, and lost: the stream opened a
// sub-agent it never ended.)
func TestThreadJobEndingAsATurnStartsIsShownOnTemporal(t *testing.T) {
	inEachIDMode(t, threadJobEndingAsTurnStarts)
}

func threadJobEndingAsTurnStarts(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, leadCalls, jobCalls atomic.Int64
	reg, dug, release := releasableDig(t)
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		task := firstUserOf(req)
		if task == "dig" {
			jobCalls.Add(1)
			if len(rs) == 0 {
				return call("dig", `{}`)
			}
			return provider.AssistantMessage(rs[0]), nil
		}
		leadCalls.Add(1)
		switch {
		case task == "start" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`)
		case task == "wait" && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)
		}
		return provider.AssistantMessage("lead: " + rs[len(rs)-1]), nil
	}}
	hub := NewHub()
	queue := fmt.Sprintf("deputy-thread-ended-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var starts atomic.Int64
	hooked := &beforeStart{Client: c, before: func(ctx context.Context, opts client.StartWorkflowOptions) {
		if starts.Add(1) != 2 {
			return
		}
		// The second turn has read the thread's jobs, the job among them
		// running: it ends now, before the turn starts.
		release()
		if err := c.GetWorkflow(ctx, opts.ID+"/job_1", "").Get(ctx, nil); err != nil {
			t.Errorf("the job ended with %v", err)
		}
	}}
	h, err := agui.New(&Agent{Client: hooked, TaskQueue: queue, Events: hub,
		Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"dig"}, Spawn: true, Background: true, JobsAcrossTurns: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	thread := "thread-" + queue
	say := func(run, text string) ([]event.Event, string) {
		t.Helper()
		return postTurn(t, ctx, srv.URL, thread, run, text)
	}
	first, _ := say("r1", "start")
	starts2, job := announcedJob(t, first) // the job's announcement, as the first turn published it
	for dug.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	second, got := say("r2", "wait")
	if got != "lead: dug" {
		t.Errorf("the wait answered %q, want the job's answer", got)
	}
	announcedOnce(t, 2, second, starts2)
	finished, ended := -1, -1
	for i, e := range second {
		switch {
		case e.Type == event.SubagentFinished && e.SubagentRunID == job:
			if finished >= 0 {
				t.Errorf("the second turn's stream ends the job twice")
			}
			finished = i
		case e.Type == event.Custom && e.Name == subagent.JobEndedEvent && jobRunOf(t, e) == job:
			ended = i
		}
	}
	if finished < 0 || ended < finished {
		t.Errorf("the second turn's stream has the job's SUBAGENT_FINISHED at %d and its %s at %d; want the first, then the second:\n%s",
			finished, subagent.JobEndedEvent, ended, asJSON(second...))
	}
	if d, l, j := dug.Load(), leadCalls.Load(), jobCalls.Load(); d != 1 || l != 4 || j != 2 {
		t.Errorf("the dig ran %d times, the lead's model answered %d times, the job's %d; want 1, 4 and 2", d, l, j)
	}
}

// A job of an earlier turn of the thread that the next turn cancels is
// shown ending in that turn's stream, as a job of the turn is: its
// SUBAGENT_ERROR, code cancelled, once, then its deputy.job_ended. (The
// stream had only the deputy.job_* events: the sub-agent it was told of
// never ended.)
func TestThreadJobCancelledByALaterTurnIsShownOnTemporal(t *testing.T) {
	threadJobEndsInError(t, 0, "cancel", `{"action":"cancel","job_id":"job_1"}`, "cancelled", "cancelled")
}

// A job of the thread that runs past its time (Spec.JobTime) while a
// later turn waits for it ends in that turn's stream as in process, where
// its context's deadline passes: SUBAGENT_ERROR with the code "timeout",
// once, then its deputy.job_ended. (Its code was "error".)
func TestThreadJobPastItsTimeEndsAsATimeoutOnTemporal(t *testing.T) {
	threadJobEndsInError(t, 2*time.Second, "wait", `{"action":"wait","job_id":"job_1","timeout_seconds":60}`, "timeout", "a timeout")
}

// threadJobEndsInError runs two turns of a thread whose lead has jobs the
// time jobTime: the first starts a job whose dig runs until its context
// ends; the second, of the task second, calls the jobs tool with args. It
// checks the second turn's stream has the job's SUBAGENT_ERROR, with the
// code code (said as as), once, then its deputy.job_ended.
func threadJobEndsInError(t *testing.T, jobTime time.Duration, second, args, code, as string) {
	t.Helper()
	var dug atomic.Int64
	dig := tool.Must(tool.New("dig", "Digs.", func(ctx context.Context, _ struct{}) (string, error) {
		dug.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	}))
	reg, err := tool.NewRegistry(dig)
	if err != nil {
		t.Fatal(err)
	}
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: "call_1", Name: name, Arguments: json.RawMessage(args)}), nil
		}
		switch task := firstUserOf(req); {
		case task == "dig":
			return call("dig", `{}`)
		case task == "start" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`)
		case task == second && len(rs) == 0:
			return call(subagent.JobsToolName, args)
		}
		return provider.AssistantMessage("lead: done"), nil
	}}
	hub := NewHub()
	_, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: hub})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead := &Agent{Client: c, TaskQueue: queue, Events: hub,
		Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"dig"}, Spawn: true, Background: true, JobsAcrossTurns: true, JobTime: jobTime}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "ann")
	turn := func(text string) []event.Event {
		t.Helper()
		var mu sync.Mutex
		var evs []event.Event
		sink := event.SinkFunc(func(e event.Event) {
			mu.Lock()
			evs = append(evs, e)
			mu.Unlock()
		})
		if _, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: text}); err != nil {
			t.Fatalf("turn %q: %v", text, err)
		}
		mu.Lock()
		defer mu.Unlock()
		return evs
	}
	turn("start")
	for dug.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	job := ThreadWorkflowID("ann", "thread-"+queue) + "/job_1"
	evs := turn(second)
	errored, ended := -1, -1
	for i, e := range evs {
		switch {
		case e.Type == event.SubagentError && e.SubagentRunID == job:
			if errored >= 0 || e.Code != code {
				t.Errorf("the second turn's stream ends the job again, or not as %s: %s", as, asJSON(e))
			}
			errored = i
		case e.Type == event.Custom && e.Name == subagent.JobEndedEvent && jobRunOf(t, e) == job:
			ended = i
		}
	}
	if errored < 0 || ended < errored {
		t.Errorf("the second turn's stream has the job's SUBAGENT_ERROR at %d and its %s at %d; want the first, then the second:\n%s",
			errored, subagent.JobEndedEvent, ended, asJSON(evs...))
	}
}

// holdAfterFinished passes events on to next and, once it has passed on
// the SUBAGENT_FINISHED of a sub-agent run whose id ends in suffix, holds
// the publisher (the activity of the job's last model call, whose
// workflow stays open meanwhile) until hold is closed.
type holdAfterFinished struct {
	next      EventSink
	suffix    string
	once      sync.Once
	published chan struct{} // closed once it is passed on
	hold      chan struct{}
}

func (h *holdAfterFinished) Emit(tree string, e event.Event) {
	h.next.Emit(tree, e)
	if e.Type != event.SubagentFinished || !strings.HasSuffix(e.SubagentRunID, h.suffix) {
		return
	}
	h.once.Do(func() { close(h.published) })
	select {
	case <-h.hold:
	case <-time.After(time.Minute):
	}
}

// A job of a thread that publishes its SUBAGENT_FINISHED before the
// thread's next turn listens, its workflow still open as that turn reads
// the thread's jobs, is shown ending in that turn's stream: the turn, told
// the job runs on, announces it, then has its SUBAGENT_FINISHED, once,
// then its deputy.job_ended. The job's own SUBAGENT_FINISHED reached no
// one; the turn that adopted the job publishes it again when the job's
// workflow has ended, and the stream hands on one. (The stream opened a
// sub-agent it never ended.) The job's publisher is held past its
// SUBAGENT_FINISHED until the turn has read the thread's jobs.
func TestThreadJobFinishedBeforeATurnListensIsShownOnTemporal(t *testing.T) {
	inEachIDMode(t, threadJobFinishedBeforeTurnListens)
}

func threadJobFinishedBeforeTurnListens(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, leadCalls, jobCalls atomic.Int64
	reg, dug, release := releasableDig(t)
	m := &script{fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		task := firstUserOf(req)
		if task == "dig" {
			jobCalls.Add(1)
			if len(rs) == 0 {
				return call("dig", `{}`)
			}
			return provider.AssistantMessage(rs[0]), nil
		}
		leadCalls.Add(1)
		switch {
		case task == "start" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`)
		case task == "wait" && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)
		}
		return provider.AssistantMessage("lead: " + rs[len(rs)-1]), nil
	}}
	hub := NewHub()
	held := &holdAfterFinished{next: hub, suffix: "/job_1", published: make(chan struct{}), hold: make(chan struct{})}
	defer func() {
		select {
		case <-held.hold:
		default:
			close(held.hold)
		}
	}()
	queue := fmt.Sprintf("deputy-thread-finished-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Events: held})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var starts atomic.Int64
	hooked := &beforeStart{Client: c, before: func(ctx context.Context, opts client.StartWorkflowOptions) {
		if starts.Add(1) != 2 {
			return
		}
		// The second turn has read the thread's jobs, the job among them
		// running, its SUBAGENT_FINISHED published before the turn
		// listened: its workflow ends now, before the turn starts.
		close(held.hold)
		if err := c.GetWorkflow(ctx, opts.ID+"/job_1", "").Get(ctx, nil); err != nil {
			t.Errorf("the job ended with %v", err)
		}
	}}
	h, err := agui.New(&Agent{Client: hooked, TaskQueue: queue, Events: hub,
		Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"dig"}, Spawn: true, Background: true, JobsAcrossTurns: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	thread := "thread-" + queue
	first, _ := postTurn(t, ctx, srv.URL, thread, "r1", "start")
	starts2, job := announcedJob(t, first)
	for dug.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	release()
	select {
	case <-held.published:
	case <-ctx.Done():
		t.Fatal("the job never published its SUBAGENT_FINISHED")
	}
	second, got := postTurn(t, ctx, srv.URL, thread, "r2", "wait")
	if got != "lead: dug" {
		t.Errorf("the wait answered %q, want the job's answer", got)
	}
	announcedOnce(t, 2, second, starts2)
	finished, ended := -1, -1
	for i, e := range second {
		switch {
		case e.Type == event.SubagentFinished && e.SubagentRunID == job:
			if finished >= 0 {
				t.Errorf("the second turn's stream ends the job twice")
			}
			if r := string(e.Result); r != `"dug"` {
				t.Errorf("the job's SUBAGENT_FINISHED has the result %s, want its answer, \"dug\"", r)
			}
			finished = i
		case e.Type == event.Custom && e.Name == subagent.JobEndedEvent && jobRunOf(t, e) == job:
			ended = i
		}
	}
	if finished < 0 || ended < finished {
		t.Errorf("the second turn's stream has the job's SUBAGENT_FINISHED at %d and its %s at %d; want the first, then the second:\n%s",
			finished, subagent.JobEndedEvent, ended, asJSON(second...))
	}
	if d, l, j := dug.Load(), leadCalls.Load(), jobCalls.Load(); d != 1 || l != 4 || j != 2 {
		t.Errorf("the dig ran %d times, the lead's model answered %d times, the job's %d; want 1, 4 and 2", d, l, j)
	}
}
