package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type cityArgs struct {
	City string `json:"city" jsonschema:"description=the city"`
}

func weather(t testing.TB) tool.Tool {
	t.Helper()
	w, err := tool.New("weather", "Reports the weather in a city.", func(ctx context.Context, in cityArgs) (string, error) {
		return "sunny in " + in.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// toolFunc is a tool with an object schema that runs f.
func toolFunc(name string, f func(ctx context.Context, c tool.Call) (tool.Result, error)) tool.Tool {
	return tool.Func{Def: tool.Definition{Name: name, Description: "The " + name + " tool.", Parameters: json.RawMessage(`{"type":"object"}`)}, Fn: f}
}

func newReact(t testing.TB, p provider.Provider, opts ...agent.Option) *agent.React {
	t.Helper()
	a, err := agent.NewReact(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// u is a usage of in and out tokens and one request.
func u(in, out int64) provider.Usage {
	return provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
}

// recorder is an event sink that keeps what it is sent.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Emit(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

func (r *recorder) of(t event.Type) []event.Event {
	var out []event.Event
	for _, e := range r.all() {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// turn is the four messages of a turn with one tool call.
func turn(question, callID, args, result, answer string) []provider.Message {
	return []provider.Message{
		provider.UserMessage(question),
		provider.AssistantMessage("", provider.ToolCall{ID: callID, Name: "weather", Arguments: json.RawMessage(args)}),
		provider.ToolMessage(callID, result, false),
		provider.AssistantMessage(answer),
	}
}

func withSink(ctx context.Context, s event.Sink) context.Context { return event.WithSink(ctx, s) }

// rawEqual compares JSON texts as bytes: cmp would walk a 10 MB argument
// byte by byte.
var rawEqual = cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })
