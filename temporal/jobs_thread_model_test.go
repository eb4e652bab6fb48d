package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
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

// A job of an earlier turn of the thread that the next turn cancels ends
// in that turn's stream on Temporal as in process: its SUBAGENT_ERROR,
// code cancelled, names the model that answered the job's first call.
// (It named none: a turn read the job's end from its outcome, which did
// not keep the model.) With models that name their calls afresh, not at
// all, or from call_0.
func TestThreadJobCancelledNamesItsModelOnTemporal(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		threadJobErrorModels(t, c, id, "cancel", []string{"cancelled m-1"})
	})
}

// A job of an earlier turn of the thread whose model fails for good
// while the next turn waits for it ends in that turn's stream on Temporal
// as in process: its SUBAGENT_ERROR, code provider_error, names the model
// that answered the job's first call. With models that name their calls
// afresh, not at all, or from call_0.
func TestThreadJobFailedNamesItsModelOnTemporal(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		threadJobErrorModels(t, c, id, "wait", []string{"provider_error m-1"})
	})
}

// threadJobErrorModels runs two turns of a thread, in process and on
// Temporal: the first starts a job that digs (until the second turn
// releases it, or its context ends) and then fails for good; the second,
// of the text second, cancels the job or waits for it. It checks that the
// second turn's SUBAGENT_ERROR events, as "code model", are want in both.
func threadJobErrorModels(t *testing.T, c client.Client, id func(n int64, i int) string, second string, want []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tctx := agent.WithOwner(agent.WithThread(ctx, fmt.Sprintf("thread-%d", time.Now().UnixNano())), "ann")
	turns := func(lead agent.Agent, dug *atomic.Int64) []event.Event {
		t.Helper()
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
			return slices.Clone(evs)
		}
		turn("start")
		for dug.Load() == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		return turn(second)
	}

	// In process.
	p := newThreadJobModel(t, id)
	spawn, err := subagent.NewSpawner(p, p.reg, subagent.WithBackground(), subagent.WithJobsAcrossTurns(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer spawn.Close()
	local, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(append(p.reg.Tools(), spawn, spawn.JobsTool())...))
	if err != nil {
		t.Fatal(err)
	}
	inProcess := turns(local, p.dug)

	m := newThreadJobModel(t, id)
	hub := NewHub()
	queue := fmt.Sprintf("deputy-thread-model-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: m.reg, Events: hub})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Events: hub,
		Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"dig"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	onTemporal := turns(lead, m.dug)

	if got := errorEnds(inProcess); !slices.Equal(got, want) {
		t.Fatalf("in process, the second turn ends the job with %q, want %q", got, want)
	}
	if got := errorEnds(onTemporal); !slices.Equal(got, want) {
		t.Errorf("on Temporal, the second turn ends the job with %q, want %q, as in process", got, want)
	}
	if n := m.dug.Load(); n != 1 {
		t.Errorf("on Temporal the dig ran %d times, want 1", n)
	}
}

// threadJobModel is the model of a lead whose thread's job digs (a tool
// that waits until it is released or its context ends) and then fails
// for good: the lead starts the job on "start" (keeping its id), cancels
// it on "cancel", and releases the dig and waits for the job on "wait".
type threadJobModel struct {
	*script
	reg     *tool.Registry
	dug     *atomic.Int64
	release func()
	job     atomic.Value
}

func newThreadJobModel(t *testing.T, id func(n int64, i int) string) *threadJobModel {
	m := &threadJobModel{}
	m.reg, m.dug, m.release = releasableDig(t)
	var n atomic.Int64
	m.script = &script{model: "m-1", fn: func(_ context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == "dig" {
			if len(rs) == 0 {
				return call("dig", `{}`)
			}
			return provider.Message{}, &provider.Error{Provider: "m", StatusCode: http.StatusBadRequest, Kind: provider.KindBadRequest, Message: "no such model"}
		}
		job, _ := m.job.Load().(string)
		turn, at := lastCommand(req)
		rs = resultsOf(provider.Request{Messages: req.Messages[at:]}) // this turn's
		switch {
		case turn == "start" && len(rs) == 0:
			return call(SpawnToolName, `{"task":"dig","background":true}`)
		case turn == "start":
			m.job.Store(jobIDOf(rs[0]))
		case turn == "cancel" && len(rs) == 0:
			return call(subagent.JobsToolName, `{"action":"cancel","job_id":"`+job+`"}`)
		case turn == "wait" && len(rs) == 0:
			m.release()
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+job+`","timeout_seconds":60}`)
		}
		return provider.AssistantMessage("lead: done"), nil
	}}
	return m
}

// lastCommand is the latest of the turns' texts ("start", "cancel",
// "wait") among req's user messages, and its index (an agent in process
// reads the thread's earlier turns too).
func lastCommand(req provider.Request) (string, int) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == provider.RoleUser && slices.Contains([]string{"start", "cancel", "wait"}, m.Content) {
			return m.Content, i
		}
	}
	return "", 0
}

// errorEnds returns each SUBAGENT_ERROR of evs as its code and model.
func errorEnds(evs []event.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == event.SubagentError {
			out = append(out, e.Code+" "+e.Model)
		}
	}
	return out
}
