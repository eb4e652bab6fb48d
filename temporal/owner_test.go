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

func ownerCapCountsEveryThread(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const long = "count the stars"
	var n, jobs atomic.Int64
	blocked := make(chan struct{}, 8)
	block := tool.Must(tool.New("block", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		jobs.Add(1)
		blocked <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}))
	// A turn asked to start waits at its first model call until let go.
	tasks := []string{"start in t1", "start in t2", "start in t3", "start in t4", "start again in t1"}
	began, release := map[string]chan struct{}{}, map[string]chan struct{}{}
	for _, task := range tasks {
		began[task], release[task] = make(chan struct{}, 1), make(chan struct{})
	}
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		task := firstUserOf(req)
		switch {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("counting", provider.ToolCall{ID: id(n.Add(1), 0), Name: "block", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			return provider.AssistantMessage("stars: many"), nil
		case strings.HasPrefix(task, "start") && len(rs) == 0:
			select {
			case began[task] <- struct{}{}:
			default:
			}
			select {
			case <-release[task]:
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
	queue := fmt.Sprintf("deputy-owner-cap-%d", time.Now().UnixNano())
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
	thread := func(th string) context.Context { return agent.WithOwner(agent.WithThread(ctx, th+queue), owner) }
	type result struct {
		out     agent.Output
		refused []event.Event
		err     error
	}
	turn := func(ctx context.Context, text string) <-chan result {
		done := make(chan result, 1)
		go func() {
			rec := &recorder{}
			out, err := lead.Run(event.WithSink(ctx, rec), agent.Input{Text: text})
			rec.mu.Lock()
			defer rec.mu.Unlock()
			var refused []event.Event
			for _, e := range rec.events {
				if e.Type == event.Custom && e.Name == subagent.RefusedEvent {
					refused = append(refused, e)
				}
			}
			done <- result{out, refused, err}
		}()
		return done
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s never came", what)
		}
	}
	refused := func(r result) bool {
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
