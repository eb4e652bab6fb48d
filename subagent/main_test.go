package subagent

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// child a call starts must be finished when the call returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// must returns v, failing the test when err is not nil. It reads
// must(FromAgent(...))(t).
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// argsTask is taskInput as WithInputFromArgs takes it: a tool whose
// arguments are its own hands the child their task.
func argsTask(args json.RawMessage) (agent.Input, error) { return taskInput(args, string(args)) }

func newReact(t testing.TB, p provider.Provider, opts ...agent.Option) *agent.React {
	t.Helper()
	return must(agent.NewReact(p, opts...))(t)
}

// callTool calls tl as a model would, with this call id and arguments.
func callTool(ctx context.Context, tl tool.Tool, callID, args string) (tool.Result, error) {
	return tl.Call(ctx, tool.Call{ID: callID, Name: tl.Definition().Name, Arguments: json.RawMessage(args)})
}

// recorder collects events from any goroutine.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) context(ctx context.Context) context.Context {
	return event.WithSink(ctx, event.SinkFunc(func(e event.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}))
}

// subagentEvents returns the SUBAGENT_* events, in order.
func (r *recorder) subagentEvents() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		switch e.Type {
		case event.SubagentStarted, event.SubagentFinished, event.SubagentError:
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

// formBuilder builds a SubAgentTool named "child" one of the three ways. Its child
// agent is a ReAct agent named "child" over p with tools, so that a script
// routes replies to it with For("child").
type formBuilder struct {
	name  string
	build func(t testing.TB, p provider.Provider, tools *tool.Registry, opts ...Option) *SubAgentTool
}

var forms = []formBuilder{
	{"FromAgent", func(t testing.TB, p provider.Provider, tools *tool.Registry, opts ...Option) *SubAgentTool {
		child := newReact(t, p, agent.WithName("child"), agent.WithRegistry(tools))
		return must(FromAgent("child", "Consults the child.", child, opts...))(t)
	}},
	{"FromFactory", func(t testing.TB, p provider.Provider, tools *tool.Registry, opts ...Option) *SubAgentTool {
		return must(FromFactory("child", "Delegates to a fresh child.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(p, agent.WithName("child"), agent.WithRegistry(tools))
		}, opts...))(t)
	}},
	{"FromReact", func(t testing.TB, p provider.Provider, tools *tool.Registry, opts ...Option) *SubAgentTool {
		return must(FromReact("child", "Runs a sub-agent the model defines.", p, tools, opts...))(t)
	}},
}

// toolMessages returns the tool results in msgs.
func toolMessages(msgs []provider.Message) []provider.Message {
	var out []provider.Message
	for _, m := range msgs {
		if m.Role == provider.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// reply is a provider.Response with text, for fake.Respond.
func reply(text string) (provider.Response, error) {
	return provider.Response{Message: provider.AssistantMessage(text), Usage: provider.Usage{Requests: 1}}, nil
}
