package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The jobs of all an owner's threads are counted by the owner's workflow,
// which one spawn at a time takes a place from (Spec.MaxOwnerJobs), so
// the cap holds where a count made by each thread missed jobs: a turn of
// thread t2 begins; thread t1's first turn, which t2's knew nothing of,
// starts a job; t2's spawn is then refused at a cap of one (before, t2
// counted only the threads Agent knew as its turn began, and the owner had
// two jobs). Then threads t3 and t4 spawn at the same moment: one starts
// its job and the other is refused (before, each could miss the other's).
// With the owner's workflow gone, a spawn still counts the jobs of the
// threads this process ran.
// Every refusal is a deputy.refused event of reason max_owner_jobs —
// with models that name their calls afresh, not at all, or from call_0.
func TestOwnerCapCountsEveryThreadOnTemporal(t *testing.T) {
	inEachIDMode(t, ownerCapCountsEveryThread)
}

// heldThreads is a lead whose threads' turns spawn a background job
// each when asked to start: a turn asked one of the tasks it was made
// with waits at its first model call until that task's release is
// closed (began is told as it waits); each job blocks until cancelled
// (blocked is told as it begins; jobs counts them). A turn asked to
// "cancel" cancels its thread's job_1. The owner's cap is one job.
type heldThreads struct {
	t              *testing.T
	ctx            context.Context
	m              *script
	lead           *Agent
	queue, owner   string
	jobs           atomic.Int64
	blocked        chan struct{}
	began, release map[string]chan struct{}
}

// heldTurn is how a turn of heldThreads ended: its output, the
// deputy.refused events it published, and its error.
type heldTurn struct {
	out     agent.Output
	refused []event.Event
	err     error
}

// newHeldThreads starts a worker of such a lead on a new task queue named
// after name, for the test's time.
func newHeldThreads(ctx context.Context, t *testing.T, c client.Client, id func(n int64, i int) string, name string, tasks ...string) *heldThreads {
	t.Helper()
	const long = "count the stars"
	h := &heldThreads{t: t, ctx: ctx, blocked: make(chan struct{}, 8), began: map[string]chan struct{}{}, release: map[string]chan struct{}{}}
	for _, task := range tasks {
		h.began[task], h.release[task] = make(chan struct{}, 1), make(chan struct{})
	}
	var n atomic.Int64
	block := tool.Must(tool.New("block", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		h.jobs.Add(1)
		h.blocked <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	h.m = &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		switch {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			return provider.AssistantMessage("stars: many"), nil
		case strings.HasPrefix(task, "start") && len(rs) == 0:
			select {
			case h.began[task] <- struct{}{}:
			default:
			}
			select {
			case <-h.release[task]:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}), nil
		case strings.HasPrefix(task, "cancel") && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"cancel","job_id":"job_1"}`)}), nil
		}
		return provider.AssistantMessage(task + ": " + strings.Join(rs, "; ")), nil
	}}
	reg, err := tool.NewRegistry(block)
	if err != nil {
		t.Fatal(err)
	}
	h.queue = fmt.Sprintf("deputy-%s-%d", name, time.Now().UnixNano())
	hub := NewHub()
	w := worker.New(c, h.queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": h.m}, Tools: reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	h.lead = &Agent{Client: c, TaskQueue: h.queue, Events: hub, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"block"}, Spawn: true, Background: true,
		JobsAcrossTurns: true, MaxOwnerJobs: 1}}
	h.owner = "ann-" + h.queue
	return h
}

// thread is the context of a turn of the owner's thread th.
func (h *heldThreads) thread(th string) context.Context {
	return agent.WithOwner(agent.WithThread(h.ctx, th+h.queue), h.owner)
}

// turn runs a turn of the lead under ctx, asked text, and tells how it
// ended once it has.
func (h *heldThreads) turn(ctx context.Context, text string) <-chan heldTurn {
	done := make(chan heldTurn, 1)
	go func() {
		rec := &recorder{}
		out, err := h.lead.Run(event.WithSink(ctx, rec), agent.Input{Text: text})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var refused []event.Event
		for _, e := range rec.events {
			if e.Type == event.Custom && e.Name == subagent.RefusedEvent {
				refused = append(refused, e)
			}
		}
		done <- heldTurn{out, refused, err}
	}()
	return done
}

// wait waits for ch, failing the test, which names it what, when the
// test's context ends first.
func (h *heldThreads) wait(ch <-chan struct{}, what string) {
	h.t.Helper()
	select {
	case <-ch:
	case <-h.ctx.Done():
		h.t.Fatalf("%s never came", what)
	}
}

func ownerCapCountsEveryThread(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHeldThreads(ctx, t, c, id, "owner-cap", "start in t1", "start in t2", "start in t3", "start in t4", "start again in t1")
	m, jobs, blocked, began, release := h.m, &h.jobs, h.blocked, h.began, h.release
	thread, turn, wait := h.thread, h.turn, h.wait
	queue, owner := h.queue, h.owner
	refused := func(r heldTurn) bool {
		return strings.Contains(r.out.Answer, subagent.ErrMaxBackground.Error()) && strings.Contains(r.out.Answer, "threads of this owner") &&
			len(r.refused) == 1 && strings.Contains(string(r.refused[0].Value), `"max_owner_jobs"`) && r.out.Refused == 1
	}
	var spent provider.Usage
	// t2's turn begins; t1's first turn comes after it, and starts a job.
	second := turn(thread("t2"), "start in t2")
	wait(began["start in t2"], "t2's first model call")
	first := turn(thread("t1"), "start in t1")
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
	if !refused(r2) {
		t.Errorf("t2's turn answered %q, refusals %+v, Output.Refused %d: want its spawn refused, t1's job counted against the owner's cap of one",
			r2.out.Answer, r2.refused, r2.out.Refused)
	}
	if got := jobs.Load(); got != 1 {
		t.Errorf("%d jobs ran, want t1's alone", got)
	}
	spent = spent.Add(r1.out.TotalUsage()).Add(r2.out.TotalUsage())
	// t1's job is cancelled: its place is free again.
	r := <-turn(thread("t1"), "cancel")
	if r.err != nil {
		t.Fatal(r.err)
	}
	spent = spent.Add(r.out.TotalUsage())
	// t3 and t4 spawn at once: one job starts.
	third, fourth := turn(thread("t3"), "start in t3"), turn(thread("t4"), "start in t4")
	wait(began["start in t3"], "t3's first model call")
	wait(began["start in t4"], "t4's first model call")
	close(release["start in t3"])
	close(release["start in t4"])
	r3, r4 := <-third, <-fourth
	if r3.err != nil || r4.err != nil {
		t.Fatalf("t3's turn: %v; t4's: %v", r3.err, r4.err)
	}
	spent = spent.Add(r3.out.TotalUsage()).Add(r4.out.TotalUsage())
	wait(blocked, "the job of t3 or t4")
	if refused(r3) == refused(r4) {
		t.Errorf("t3's turn answered %q, t4's %q: want one spawn refused, the other's job started, at the owner's cap of one", r3.out.Answer, r4.out.Answer)
	}
	if got := jobs.Load(); got != 2 {
		t.Errorf("%d jobs ran, want t1's and one of t3's and t4's", got)
	}
	started := "t3"
	if refused(r3) {
		started = "t4"
	}
	// The owner's workflow is gone, and with it the places it counted:
	// a spawn in t1 still counts the job of the thread that started it,
	// which this process ran a turn of, and is refused.
	if err := c.TerminateWorkflow(ctx, ownerWorkflowID(ownerKey(queue, owner)), "", "the test ends it"); err != nil {
		t.Fatal(err)
	}
	close(release["start again in t1"])
	r5 := <-turn(thread("t1"), "start again in t1")
	if r5.err != nil {
		t.Fatal(r5.err)
	}
	spent = spent.Add(r5.out.TotalUsage())
	if !refused(r5) {
		t.Errorf("t1's turn, the owner's workflow gone, answered %q: want its spawn refused, %s's job counted", r5.out.Answer, started)
	}
	if got := jobs.Load(); got != 2 {
		t.Errorf("%d jobs ran, want 2", got)
	}
	// The job that runs is cancelled, so that the test leaves none.
	r = <-turn(thread(started), "cancel")
	if r.err != nil {
		t.Fatal(r.err)
	}
	spent = spent.Add(r.out.TotalUsage())
	if calls, billed := m.total(); spent != billed {
		t.Errorf("the turns report %+v, the %d model calls billed %+v: want each counted once", spent, calls, billed)
	}
}
