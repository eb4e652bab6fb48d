package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// noteTool returns "noted" at once.
var noteTool = tool.Func{Def: tool.Definition{Name: "note", Description: "Notes.", Parameters: json.RawMessage(`{"type":"object"}`)},
	Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) { return tool.Result{Content: "noted"}, nil }}

// noteServer serves threads kept in st by an agent whose model calls note
// and then answers with then (which may panic).
func noteServer(t *testing.T, st *store.Store, then func() provider.Response) string {
	t.Helper()
	m := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return then(), nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "n1", Name: "note", Arguments: json.RawMessage(`{}`)})}, nil
	})
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("assistant"), agent.WithTools(noteTool))
	}, agui.WithThreads(st)))
	return serve(t, h).URL
}

// A run that succeeds keeps no journal: nothing waits to be resumed.
func TestSucceededRunLeavesNoJournal(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	url := noteServer(t, st, func() provider.Response { return provider.Response{Message: provider.AssistantMessage("ok")} })
	finished(t, aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK))
	if n := entries(t, st, "th", "run-1"); n != 0 {
		t.Fatalf("the finished run left %d journal entries", n)
	}
}

// A run whose agent panics (after its tool ran) ends in RUN_ERROR and
// keeps no journal.
func TestPanickedRunLeavesNoJournal(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	url := noteServer(t, st, func() provider.Response { panic("boom") })
	evs := aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK)
	if last := evs[len(evs)-1]; last.Type != event.RunError {
		t.Fatalf("the run ended with %s, want RUN_ERROR", last.Type)
	}
	if n := entries(t, st, "th", "run-1"); n != 0 {
		t.Fatalf("the panicked run left %d journal entries", n)
	}
}

// A new run stopped by the server, or whose client goes away, keeps no
// journal.
func TestStoppedOrAbandonedRunLeavesNoJournal(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone bool
	}{{"stopped", false}, {"client gone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
			started := make(chan struct{}, 1)
			h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
				return slowLead(t, started, false), nil
			}, agui.WithThreads(st)))
			url := serve(t, h).URL
			if !tc.gone {
				stopWhenStarted(t, h, url, runBody("th", "run-1", nil), started)
				if n := entries(t, st, "th", "run-1"); n != 0 {
					t.Fatalf("the stopped run left %d journal entries", n)
				}
				return
			}
			resp := post(t, url, runBody("th", "run-1", nil))
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the tool did not start")
			}
			resp.Body.Close()
			// The server winds the run up after the client has gone.
			for deadline := time.Now().Add(10 * time.Second); entries(t, st, "th", "run-1") != 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the abandoned run left %d journal entries", entries(t, st, "th", "run-1"))
				}
			}
		})
	}
}

// A call that waits for an answer has no TOOL_CALL_RESULT, while a call of
// the same step that finished has its own.
func TestWaitingCallHasNoResultItsSiblingHas(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	m := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("",
			provider.ToolCall{ID: "n1", Name: "note", Arguments: json.RawMessage(`{}`)},
			provider.ToolCall{ID: "a1", Name: "risky", Arguments: json.RawMessage(`{}`)})}, nil
	})
	risky := tool.RequireApproval(tool.Func{Def: tool.Definition{Name: "risky", Description: "Risky.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) { return tool.Result{Content: "done"}, nil }}, "", 0)
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("assistant"), agent.WithTools(noteTool, risky))
	}, agui.WithThreads(st)))
	evs := aguiRun(t, serve(t, h).URL, runBody("th", "run-1", nil), http.StatusOK)
	if _, o := finished(t, evs); o.Type != "interrupt" {
		t.Fatalf("outcome %q, want interrupt", o.Type)
	}
	results := map[string]int{}
	for _, e := range evs {
		if e.Type == event.ToolCallResult {
			results[e.ToolCallID]++
		}
	}
	if results["n1"] != 1 || results["a1"] != 0 {
		t.Fatalf("TOOL_CALL_RESULTs by call %v, want one for n1 and none for the waiting a1", results)
	}
}
