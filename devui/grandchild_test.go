package devui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// counts are what a grandchild re-run may and may not do again.
type counts struct {
	writes, lookups, leadCalls, editorCalls atomic.Int64
}

// grandchildSetup serves a lead that asks an editor, which in one step
// asks a writer (its own sub-agent) and looks something up, then answers
// with both; the lead answers with the editor's answer. ids says how the
// models name their calls.
func grandchildSetup(t *testing.T, ids string) (*httptest.Server, *counts) {
	t.Helper()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &counts{}
	var n atomic.Int64
	id := func(i int) string {
		switch ids {
		case "fresh":
			return fmt.Sprintf("call_%d_%d", n.Add(1), i)
		case "none":
			return ""
		}
		return fmt.Sprintf("call_%d", i) // the same in every reply
	}
	toolsSaid := func(req provider.Request) string {
		var parts []string
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				parts = append(parts, m.Content)
			}
		}
		return strings.Join(parts, " + ")
	}
	p := fake.NewProvider(
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			c.leadCalls.Add(1)
			if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage("final: " + toolsSaid(req))}, nil
			}
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: id(0), Name: "editor", Arguments: json.RawMessage(`{"task":"edit"}`)})}, nil
		}).For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			c.editorCalls.Add(1)
			if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage("edited: " + toolsSaid(req))}, nil
			}
			return provider.Response{Message: provider.AssistantMessage("",
				provider.ToolCall{ID: id(0), Name: "writer", Arguments: json.RawMessage(`{"task":"a poem"}`)},
				provider.ToolCall{ID: id(1), Name: "lookup", Arguments: json.RawMessage(`{}`)})}, nil
		}).For("editor"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			c.writes.Add(1)
			return provider.Response{Message: provider.AssistantMessage("wrote " + req.Messages[len(req.Messages)-1].Content)}, nil
		}).For("writer"),
	).Loop()
	build := func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		lookup := tool.Must(tool.New("lookup", "Looks it up.", func(context.Context, struct{}) (string, error) {
			c.lookups.Add(1)
			return "looked up", nil
		}))
		writer, err := subagent.FromFactory("writer", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("writer"))
		}, subagent.WithMaxDepth(2))
		if err != nil {
			return nil, err
		}
		editor, err := subagent.FromFactory("editor", "Edits.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("editor"), agent.WithTools(writer, lookup))
		})
		if err != nil {
			return nil, err
		}
		return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(editor))
	}
	return rerunViewer(t, st, build), c
}

// A grandchild re-run with its task edited: the writer runs anew, the
// lookup its parent made beside it is not made again, the editor goes on
// from its call (one more model call) and the lead from its call to the
// editor (one more) — whatever ids the models give their calls.
func TestRerunAGrandchild(t *testing.T) {
	for _, ids := range []string{"fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) {
			srv, c := grandchildSetup(t, ids)
			status, first := post(t, srv.URL+"/run", runBody)
			if status != http.StatusOK || !strings.Contains(finalAnswer(first), "wrote a poem") {
				t.Fatalf("the run: %d, %q", status, finalAnswer(first))
			}
			var editorRun, writerCall string
			for _, raw := range first {
				var e struct{ Type, Name, SubagentRunID, ToolCallID, ToolCallName string }
				json.Unmarshal(raw, &e)
				if e.Type == "SUBAGENT_STARTED" && e.Name == "editor" {
					editorRun = e.SubagentRunID
				}
				if e.Type == "TOOL_CALL_START" && e.ToolCallName == "writer" && e.SubagentRunID == editorRun {
					writerCall = e.ToolCallID
				}
			}
			if editorRun == "" || writerCall == "" {
				t.Fatalf("no editor (%q) or writer call (%q) in the run's events", editorRun, writerCall)
			}
			writes, lookups, leadCalls, editorCalls := c.writes.Load(), c.lookups.Load(), c.leadCalls.Load(), c.editorCalls.Load()
			body := fmt.Sprintf(`{"threadId":"t1","runId":"r2","fromRunId":"r1","subagentRunId":%q,"parentStep":1,"step":1,"toolCallId":%q,"task":"a limerick"}`, editorRun, writerCall)
			status, events := post(t, srv.URL+"/rerun", body)
			got := finalAnswer(events)
			if status != http.StatusOK || !strings.Contains(got, "wrote a limerick") || !strings.Contains(got, "looked up") || strings.Contains(got, "poem") {
				t.Fatalf("the re-run: %d, answer %q; want the limerick beside the kept lookup", status, got)
			}
			if d := c.writes.Load() - writes; d != 1 {
				t.Errorf("the writer ran %d more times, want 1", d)
			}
			if d := c.lookups.Load() - lookups; d != 0 {
				t.Errorf("the lookup ran %d more times, want 0: its result was kept", d)
			}
			if d1, d2 := c.editorCalls.Load()-editorCalls, c.leadCalls.Load()-leadCalls; d1 != 1 || d2 != 1 {
				t.Errorf("the editor's model was asked %d more times and the lead's %d; want 1 and 1", d1, d2)
			}
			var startedEditor bool
			for _, raw := range events {
				var e struct{ Type, Name string }
				json.Unmarshal(raw, &e)
				startedEditor = startedEditor || (e.Type == "SUBAGENT_STARTED" && e.Name == "editor")
			}
			if !startedEditor {
				t.Error("the re-run's stream does not show the editor going on")
			}
			// A call inside a sub-agent that names no recorded run is
			// re-run from the one the sub-agent is in.
			unnamed := fmt.Sprintf(`{"threadId":"t1","runId":"r3","subagentRunId":%q,"parentStep":1,"step":1,"toolCallId":%q,"task":"a haiku"}`, editorRun, writerCall)
			if status, events := post(t, srv.URL+"/rerun", unnamed); status != http.StatusOK || !strings.Contains(finalAnswer(events), "wrote a haiku") {
				t.Errorf("a re-run inside a sub-agent with no fromRunId: %d, answer %q", status, finalAnswer(events))
			}
			bad := fmt.Sprintf(`{"threadId":"t1","runId":"r3","fromRunId":"r1","subagentRunId":"sub_nope","toolCallId":%q,"task":"x"}`, writerCall)
			if status, _ := post(t, srv.URL+"/rerun", bad); status != http.StatusBadRequest {
				t.Errorf("a re-run inside an unknown sub-agent: %d, want 400", status)
			}
		})
	}
}
