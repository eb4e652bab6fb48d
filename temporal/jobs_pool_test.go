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
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// waitsAndCancels is how many waits, and how many cancels, the lead of
// TestJobWaitsOfOneStepStayFew makes in one step.
const waitsAndCancels = 50

// A lead's model that, in one step, waits 50 times for a job that ends
// only once its other job is cancelled, and cancels that other job 50
// times, runs the step's calls on at most 16 coroutines (jobWorkers) and
// one that waits for those that must wait, on one timer, not a coroutine
// and a timer each, which the SDK woke all at each event of the step: the
// waits, set aside, leave the pool to the cancels, and each wait collects
// the job's answer, each cancel the other job's end, the job's tool and
// the other's each run once. (A coroutine a call: 100 at once.)
func TestJobWaitsOfOneStepStayFew(t *testing.T) {
	hostPort, ns := serverAddr(t)
	c, err := Dial(context.Background(), hostPort, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	var dug, held atomic.Int64
	dig := tool.Must(tool.New("dig", "Digs.", func(ctx context.Context, _ struct{}) (string, error) {
		dug.Add(1)
		select {
		case <-release:
			return "dug", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	hold := tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		held.Add(1)
		<-ctx.Done()
		releaseOnce.Do(func() { close(release) }) // the dig ends once the hold is cancelled
		return "", ctx.Err()
	}))
	reg, err := tool.NewRegistry(dig, hold)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var mu sync.Mutex
	var results []string
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) provider.ToolCall {
			return provider.ToolCall{ID: fmt.Sprint("call_", n.Add(1)), Name: name, Arguments: json.RawMessage(args)}
		}
		switch firstUserOf(req) {
		case "dig":
			if len(rs) == 0 {
				return provider.AssistantMessage("", call("dig", `{}`)), nil
			}
			return provider.AssistantMessage(rs[0]), nil
		case "hold on":
			return provider.AssistantMessage("", call("hold", `{}`)), nil
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", call(SpawnToolName, `{"task":"dig","background":true}`), call(SpawnToolName, `{"task":"hold on","background":true}`)), nil
		case 2:
			for held.Load() == 0 { // the other job holds on
				select {
				case <-ctx.Done():
					return provider.Message{}, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			var calls []provider.ToolCall
			for range waitsAndCancels {
				calls = append(calls, call(subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`))
			}
			for range waitsAndCancels {
				calls = append(calls, call(subagent.JobsToolName, `{"action":"cancel","job_id":"job_2"}`))
			}
			return provider.AssistantMessage("", calls...), nil
		}
		mu.Lock()
		results = rs[2:]
		mu.Unlock()
		return provider.AssistantMessage("done"), nil
	}}
	queue := fmt.Sprintf("deputy-pool-%d", time.Now().UnixNano())
	co := newCoroutines()
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{co}})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := queue + "-lead"
	spec := Spec{Name: "lead", Provider: "m", Tools: []string{"dig", "hold"}, Spawn: true, Background: true}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: lead, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "wait and cancel"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "done" || len(results) != 2*waitsAndCancels {
		t.Fatalf("the lead answered %q after %d results", out.Answer, len(results))
	}
	for i, r := range results {
		if i < waitsAndCancels && r != "dug" {
			t.Fatalf("wait %d answered %q, want the job's answer", i+1, r)
		}
		if i >= waitsAndCancels && !strings.Contains(r, "job_2") {
			t.Fatalf("cancel %d answered %q, want the other job's end", i-waitsAndCancels+1, r)
		}
	}
	if d, h := dug.Load(), held.Load(); d != 1 || h != 1 {
		t.Errorf("the dig ran %d times, the hold %d; want each once", d, h)
	}
	events, tasks, _ := historyOf(t, c, lead)
	timers := timersOf(t, c, lead)
	most := co.peakOf(lead)
	t.Logf("the lead ran at most %d coroutines at once; its history has %d events, %d workflow tasks, %d timers", most, events, tasks, timers)
	if limit := 2*jobWorkers + 8; most > limit { // a worker's local activity holds one too
		t.Errorf("the lead ran %d coroutines at once for %d waits and cancels in one step, want at most %d", most, 2*waitsAndCancels, limit)
	}
	if timers > 1 {
		t.Errorf("the lead started %d timers for %d waits of one step, want 1", timers, waitsAndCancels)
	}
}

// timersOf counts the timers workflow id started.
func timersOf(t *testing.T, c client.Client, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.GetEventType() == enums.EVENT_TYPE_TIMER_STARTED {
			n++
		}
	}
	return n
}
