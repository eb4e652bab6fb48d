package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestSpawnFanoutBound checks that the spawns of one turn run side by side,
// as many at once as the lower of the spawn bound and the registry's.
func TestSpawnFanoutBound(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		n, concurrency, parallelism int
		wantMax                     int
		wantWall                    time.Duration
	}{
		{6, 2, 16, 2, 30 * time.Millisecond},
		{6, 8, 16, 6, 10 * time.Millisecond},
		{6, 8, 3, 3, 20 * time.Millisecond},
		{4, 1, 16, 1, 40 * time.Millisecond},
		{256, 32, 256, 32, 80 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d children, %d slots, registry %d", tc.n, tc.concurrency, tc.parallelism), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, most := slowSpawns(tc.n)
				reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithSpawnConcurrency(tc.concurrency), subagent.WithMaxSpawns(tc.n)})
				if err := reg.SetParallelism(tc.parallelism); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				if wall := time.Since(start); wall != tc.wantWall {
					t.Errorf("wall time %v, want %v", wall, tc.wantWall)
				}
				if most() != tc.wantMax {
					t.Errorf("at most %d children ran at once, want %d", most(), tc.wantMax)
				}
				if diff := cmp.Diff(times(int64(tc.n), usage(1)), out.ChildUsage); diff != "" {
					t.Errorf("child usage (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestSpawnDefaultsRunAWideFanOutInOneWave checks that, with the default
// bounds, a turn spawning a thousand children runs them all at once:
// neither the registry nor the spawn tool cuts a fan-out into waves. An
// explicit bound still does.
func TestSpawnDefaultsRunAWideFanOutInOneWave(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		n, bound, wantMax int
		wantWall          time.Duration
	}{
		{1024, 0, 1024, 10 * time.Millisecond},
		{65, 64, 64, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%d children", tc.n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, most := slowSpawns(tc.n)
				opts := []subagent.SpawnOption{subagent.WithMaxSpawns(tc.n)}
				if tc.bound > 0 {
					opts = append(opts, subagent.WithSpawnConcurrency(tc.bound))
				}
				reg, _ := setup(t, p, false, opts)
				start := time.Now()
				if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
					t.Fatal(err)
				}
				if wall := time.Since(start); wall != tc.wantWall {
					t.Errorf("wall time %v, want %v", wall, tc.wantWall)
				}
				if most() != tc.wantMax {
					t.Errorf("at most %d children ran at once, want %d", most(), tc.wantMax)
				}
			})
		})
	}
}

// TestSpawnFanoutOrderAndIsolation checks that results come back in call
// order whatever order the children finish in, and that one child's
// failure leaves its siblings running.
func TestSpawnFanoutOrderAndIsolation(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		// Child i answers after (4-i)×10ms, so they finish in reverse; t2 fails.
		child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			task := req.Messages[0].Content
			i, _ := strconv.Atoi(strings.TrimPrefix(task, "t"))
			if i == 2 {
				return provider.Response{}, errors.New("model crashed")
			}
			select {
			case <-time.After(time.Duration(4-i) * 10 * time.Millisecond):
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
			return provider.Response{Message: provider.AssistantMessage("answer to " + task), Usage: usage(1)}, nil
		}).For(subagent.DefaultForkName)
		p := fake.NewProvider(
			spawns(`{"task":"t0"}`, `{"task":"t1"}`, `{"task":"t2"}`, `{"task":"t3"}`).For("lead"),
			fake.Text("done").For("lead"),
			child, child, child, child,
		)
		reg, _ := setup(t, p, false, nil)
		rec := &recorder{}
		ctx := event.WithSink(t.Context(), rec)
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		want := []string{"answer to t0", "answer to t1", "", "answer to t3"}
		if len(got) != 4 {
			t.Fatalf("tool results %q", got)
		}
		mustContain(t, got[2], `subagent: child failed: "subagent"`, "model crashed")
		got[2] = ""
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tool results (-want +got):\n%s", diff)
		}
		var calls []string
		for _, m := range out.Messages {
			for _, c := range m.ToolCalls {
				calls = append(calls, c.ID)
			}
		}
		var parents []string
		for _, e := range rec.of(event.SubagentStarted) {
			parents = append(parents, e.ParentToolCallID)
		}
		sort.Strings(calls)
		sort.Strings(parents)
		if diff := cmp.Diff(calls, parents); diff != "" {
			t.Errorf("SUBAGENT_STARTED parent tool calls (-want +got):\n%s", diff)
		}
		if n, e := len(rec.of(event.SubagentFinished)), len(rec.of(event.SubagentError)); n != 3 || e != 1 {
			t.Errorf("%d SUBAGENT_FINISHED and %d SUBAGENT_ERROR, want 3 and 1", n, e)
		}
	})
}

// TestSpawnCancelParent checks that cancelling the parent cancels every
// child in flight, that the spawn fails rather than answering with what a
// child had, and that the children's usage still reaches the parent.
func TestSpawnCancelParent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			spawns(`{"task":"a"}`, `{"task":"b"}`, `{"task":"c"}`).For("lead").WithUsage(usage(1)),
			fake.Text("never").For("lead"),
		)
		for range 3 {
			p.Add(fake.Call("lookup", `{}`).For(fork).WithUsage(usage(10)))
		}
		for range 3 {
			p.Add(fake.Text("too late").For(fork).After(time.Hour))
		}
		reg, _ := setup(t, p, false, nil)
		rec := &recorder{}
		ctx, cancel := context.WithCancel(event.WithSink(t.Context(), rec))
		defer cancel()
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
		if wall := time.Since(start); wall != time.Minute {
			t.Errorf("the run ended after %v, want 1m0s (the cancellation)", wall)
		}
		if out.Answer != "" {
			t.Errorf("answer %q from a cancelled run", out.Answer)
		}
		if diff := cmp.Diff(usage(1), out.Usage); diff != "" {
			t.Errorf("parent usage (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(times(3, usage(10)), out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
		for _, e := range rec.of(event.SubagentError) {
			if e.Code != "cancelled" {
				t.Errorf("SUBAGENT_ERROR code %q, want cancelled", e.Code)
			}
		}
		if n, f := len(rec.of(event.SubagentError)), len(rec.of(event.SubagentFinished)); n != 3 || f != 0 {
			t.Errorf("%d SUBAGENT_ERROR and %d SUBAGENT_FINISHED, want 3 and 0", n, f)
		}
	})
}

// TestSpawnChildIgnoringCancellation checks that a member that answers
// after its context ended does not get to answer.
func TestSpawnChildIgnoringCancellation(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		stubborn, err := subagent.FromFactory("stubborn", "Never stops.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
				<-ctx.Done()
				return agent.Output{Answer: "half done", Usage: usage(5)}, nil
			}), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reg, _ := setup(t, fake.NewProvider(), false, []subagent.SpawnOption{subagent.WithRoster(stubborn)})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		res, err := reg.Execute(ctx, []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t","agent":"stubborn"}`)}})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Execute: %v, want context.Canceled", err)
		}
		if res[0].Content == "half done" {
			t.Error("the cancelled child's partial answer came back as its result")
		}
		if diff := cmp.Diff(usage(5), res[0].Usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
	})
}

// TestSpawnDeeperChildrenDoNotWaitForTheirParentsSlot checks that a child
// that spawns in turn (below a depth cap of 2) does not wait for a slot
// its parent holds, whatever the concurrency bound.
func TestSpawnDeeperChildrenDoNotWaitForTheirParentsSlot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			spawns(`{"task":"a"}`).For("lead"),
			spawns(`{"task":"b"}`).For(fork),
			fake.Text("grandchild done").For(fork),
			fake.Text("child done").For(fork),
			fake.Text("done").For("lead"),
		)
		reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxDepth(2), subagent.WithSpawnConcurrency(1)})
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		out, err := lead(t, p, reg).Run(ctx, agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"child done"}, toolResults(out.Messages)); diff != "" {
			t.Errorf("tool results (-want +got):\n%s", diff)
		}
	})
}

// slowSpawns returns a provider whose lead spawns n children in one turn,
// each answering after 10 ms, and a function reporting the most children
// that ran at once.
func slowSpawns(n int) (*fake.Provider, func() int) {
	var mu sync.Mutex
	running, most := 0, 0
	child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		return provider.Response{Message: provider.AssistantMessage("ok"), Usage: usage(1)}, nil
	}).For(subagent.DefaultForkName)
	args := make([]string, n)
	for i := range args {
		args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
	}
	p := fake.NewProvider(spawns(args...).For("lead"), fake.Text("done").For("lead"), child).Loop()
	return p, func() int { mu.Lock(); defer mu.Unlock(); return most }
}
