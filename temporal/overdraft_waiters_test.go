package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
)

// turnKeeperWorkflow keeps a tree's turn, as a tree's top-level run does,
// and takes an update of its own ("ping") until it is signalled to stop.
func turnKeeperWorkflow(ctx workflow.Context) error {
	turn, err := keepTreeTurn(ctx)
	if err != nil {
		return err
	}
	defer turn.endTurns()
	if err := workflow.SetUpdateHandler(ctx, "ping", func(workflow.Context) error { return nil }); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, "stop").Receive(ctx, nil)
	return nil
}

// turnKeepers starts a worker of turnKeeperWorkflow on the test server,
// on a queue named for name, and returns what starts one such workflow
// under an id, stopped as the test ends.
func turnKeepers(t *testing.T, name string) (context.Context, client.Client, func(id string) client.WorkflowRun) {
	t.Helper()
	ctx, c := dialServer(t, 2*time.Minute)
	queue := fmt.Sprintf("deputy-%s-%d", name, time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(turnKeeperWorkflow, workflow.RegisterOptions{Name: "deputy.test.TurnKeeper"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return ctx, c, func(id string) client.WorkflowRun {
		t.Helper()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + id, TaskQueue: queue, WorkflowRunTimeout: 2 * time.Minute}, "deputy.test.TurnKeeper")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.SignalWorkflow(context.WithoutCancel(ctx), run.GetID(), run.GetRunID(), "stop", nil) })
		return run
	}
}

// TestCallsWaitingForTheTurnLeaveRoomForUpdatesOnTemporal has a dozen
// calls wait for a tree's turn while one holds it: the tree's workflow
// still takes another update then (as Answer or CancelJob would send it),
// where before the calls waiting filled the ten updates the server lets a
// workflow have in flight and it was refused. Each call then takes the
// turn in turn.
func TestCallsWaitingForTheTurnLeaveRoomForUpdatesOnTemporal(t *testing.T) {
	ctx, c, start := turnKeepers(t, "turn-waiters")
	run := start("")
	first, err := askTreeTurn(ctx, c, run.GetID(), run.GetRunID(), "first", time.Minute)
	if err != nil || first == nil {
		t.Fatalf("the first call did not take the turn: %v, %v", first, err)
	}

	const calls = 12
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turn, err := askTreeTurn(ctx, c, run.GetID(), run.GetRunID(), fmt.Sprintf("call-%d", i), time.Minute)
			switch {
			case err != nil:
				errs <- err
			case turn == nil:
				errs <- fmt.Errorf("call %d went without the turn", i)
			default:
				turn.done(ctx, 0, 0)
			}
		}()
	}
	time.Sleep(3 * time.Second) // the calls wait for the turn, or ask again

	for i := range 5 {
		// The client asks again while the server refuses the update for
		// the updates in flight, until its context ends.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, err := c.UpdateWorkflow(pctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
			UpdateName: "ping", WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(pctx, nil)
		}
		cancel()
		if err != nil {
			t.Fatalf("update %d of the tree's workflow was not taken in 10s while calls waited for the turn: %v", i, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	first.done(ctx, 0, 0)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestACallThatStopsWaitingLeavesTheTurnOnTemporal has a call stop
// waiting for a tree's turn (its activity cancelled) while another holds
// it: as the holder ends its turn, the next call waiting takes it at once,
// where before the turn went to the call that stopped waiting, which never
// ended it, and the next call waited out that call's lease.
func TestACallThatStopsWaitingLeavesTheTurnOnTemporal(t *testing.T) {
	ctx, c, start := turnKeepers(t, "turn-withdrawn")
	run := start("")
	first, err := askTreeTurn(ctx, c, run.GetID(), run.GetRunID(), "first", time.Minute)
	if err != nil || first == nil {
		t.Fatalf("the first call did not take the turn: %v, %v", first, err)
	}

	// The second call waits, then stops waiting; the third asks once the
	// first has ended its turn.
	gctx, stop := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := askTreeTurn(gctx, c, run.GetID(), run.GetRunID(), "second", time.Minute)
		second <- err
	}()
	time.Sleep(time.Second)
	stop()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second call stopped waiting with %v, want context.Canceled", err)
	}
	first.done(ctx, 0, 0)
	time.Sleep(time.Second)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	third, err := askTreeTurn(tctx, c, run.GetID(), run.GetRunID(), "third", time.Minute)
	if err != nil || third == nil {
		t.Fatalf("the third call did not take the turn within 10s, the first having ended it and the second stopped waiting for it: %v, %v", third, err)
	}
	third.done(ctx, 0, 0)
}

// TestEndedTurnsLeaveNoUnhandledSignal ends a tree whose last call ended
// its turn after any call asked for it: the tree takes that signal as it
// ends, where before every such tree ended with the worker warning of an
// unhandled signal, deputy.overdraft_done.
func TestEndedTurnsLeaveNoUnhandledSignal(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	env := ts.NewTestWorkflowEnvironment()
	p := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("done"), nil
	}}
	Register(env, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(overdraftDoneSignal, overdraft{Holder: "lead/1", Tokens: 3})
	}, 0)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m"}, Text: "do it"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "unhandled signals") {
		t.Fatalf("the tree ended warning of an unhandled signal:\n%s", logs.String())
	}
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestACallAcrossItsTurnsEndHoldsTheJobsTurnOnTemporal has a call of a
// thread's job take the tree's turn, and the tree's workflow (the turn
// that started the job) end while the call is still in flight: the next
// call of the job, which takes the job's turn as the tree's workflow has
// ended, waits for the first and plans with what it passed its run's
// limits by. Before, it took the job's turn at once and planned as though
// the first had passed them by nothing, and the job passed its limit by
// the two calls' errors.
func TestACallAcrossItsTurnsEndHoldsTheJobsTurnOnTemporal(t *testing.T) {
	ctx, c, start := turnKeepers(t, "turn-job")
	tree, job := start("/turn"), start("/job_1")
	first, err := askRunTurn(ctx, c, tree.GetID(), tree.GetRunID(), job.GetID(), "first", time.Minute)
	if err != nil || first == nil {
		t.Fatalf("the first call did not take the turn: %v, %v", first, err)
	}
	// The turn ends while the first call is in flight.
	if err := c.SignalWorkflow(ctx, tree.GetID(), tree.GetRunID(), "stop", nil); err != nil {
		t.Fatal(err)
	}
	if err := tree.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	type taken struct {
		turn *treeTurnOf
		err  error
	}
	second := make(chan taken, 1)
	go func() {
		turn, err := askRunTurn(ctx, c, tree.GetID(), tree.GetRunID(), job.GetID(), "second", time.Minute)
		second <- taken{turn, err}
	}()
	time.Sleep(time.Second)
	const passed = 500
	first.done(ctx, passed, 0)
	got := <-second
	if got.err != nil || got.turn == nil {
		t.Fatalf("the second call did not take the job's turn: %v, %v", got.turn, got.err)
	}
	got.turn.done(ctx, 0, 0)
	if got.turn.debt.Tokens != passed {
		t.Errorf("the second call planned with a debt of %d tokens, want the %d the first call, in flight as the turn ended, passed its limit by", got.turn.debt.Tokens, passed)
	}
}
