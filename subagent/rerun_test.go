package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A child re-run from inside its turn, the call to its own sub-agent
// edited: the grandchild runs anew on the edited task, the other call of
// that turn is not made again (its result is kept), the child is asked
// once more and answers with both, and its events announce a new
// invocation.
func TestRerunGoesOnFromInsideTheChildsTurn(t *testing.T) {
	var lookups, grandchildCalls, childCalls atomic.Int64
	lookup := tool.Must(tool.New("lookup", "Looks it up.", func(ctx context.Context, _ struct{}) (string, error) {
		lookups.Add(1)
		return "looked up", nil
	}))
	grandchild, err := subagent.FromFactory("writer", "Writes.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			grandchildCalls.Add(1)
			return provider.Response{Message: provider.AssistantMessage("wrote: " + req.Messages[len(req.Messages)-1].Content), Usage: provider.Usage{Requests: 1}}, nil
		}))
	}, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	childModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		childCalls.Add(1)
		last := req.Messages[len(req.Messages)-1]
		if last.Role == provider.RoleTool {
			var said []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleTool {
					said = append(said, m.Content)
				}
			}
			return provider.Response{Message: provider.AssistantMessage(strings.Join(said, " + ")), Usage: provider.Usage{Requests: 1}}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("",
			provider.ToolCall{ID: "g1", Name: "writer", Arguments: json.RawMessage(`{"task":"a poem"}`)},
			provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)}), Usage: provider.Usage{Requests: 1}}, nil
	})
	child, err := subagent.FromFactory("editor", "Edits.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(childModel, agent.WithTools(grandchild, lookup))
	})
	if err != nil {
		t.Fatal(err)
	}
	call := tool.Call{ID: "e1", Name: "editor", Arguments: json.RawMessage(`{"task":"edit it"}`)}
	first, err := child.Call(context.Background(), call)
	if err != nil || first.Content != "wrote: a poem + looked up" {
		t.Fatalf("first call: %q, %v", first.Content, err)
	}

	// The child's turn as it went, the call to the writer edited and left
	// without a result; the lookup's result kept.
	after := []provider.Message{
		provider.AssistantMessage("",
			provider.ToolCall{ID: "g1", Name: "writer", Arguments: json.RawMessage(`{"task":"a limerick"}`)},
			provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)}),
		{Role: provider.RoleTool, ToolCallID: "l1", Content: "looked up"},
	}
	lookups.Store(0)
	grandchildCalls.Store(0)
	childCalls.Store(0)
	var started []event.Event
	ctx := event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) {
		if e.Type == event.SubagentStarted {
			started = append(started, e)
		}
	}))
	again, err := child.Rerun(ctx, call, after)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(again.Content, "wrote: a limerick") || !strings.Contains(again.Content, "looked up") || strings.Contains(again.Content, "poem") {
		t.Errorf("re-run answered %q, want the edited grandchild's answer beside the kept lookup", again.Content)
	}
	if lookups.Load() != 0 || grandchildCalls.Load() != 1 || childCalls.Load() != 1 {
		t.Errorf("re-run made %d lookups, %d grandchild and %d child model calls; want 0, 1 and 1", lookups.Load(), grandchildCalls.Load(), childCalls.Load())
	}
	if len(started) != 2 || started[0].Name != "editor" || started[0].ParentToolCallID != "e1" || started[1].Name != "writer" || started[1].ParentSubagentRunID != started[0].SubagentRunID {
		t.Errorf("SUBAGENT_STARTED events %+v: want the editor under call e1, then the writer under it", started)
	}
}

// A resident keeps its own conversation: it is not re-run from another.
func TestRerunRefusesAResident(t *testing.T) {
	r, err := agent.NewReact(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("hi")}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("expert", "Knows.", r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = expert.Rerun(context.Background(), tool.Call{ID: "c", Name: "expert", Arguments: json.RawMessage(`{"task":"x"}`)}, nil)
	if err == nil || !strings.Contains(err.Error(), "resident") {
		t.Fatalf("Rerun of a resident: %v, want a refusal naming it", err)
	}
}
