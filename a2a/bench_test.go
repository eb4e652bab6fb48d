package a2a_test

import (
	"context"
	"iter"
	"net/http/httptest"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// echoExecutor is the least an A2A agent written on the SDK does for a
// message: a task, working, the answer as an artifact, completed.
type echoExecutor struct{}

func (echoExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		if ec.StoredTask == nil && !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateWorking, nil), nil) {
			return
		}
		if !yield(sdk.NewArtifactEvent(ec, sdk.NewTextPart("the answer")), nil) {
			return
		}
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
	}
}

func (echoExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, nil), nil)
	}
}

// BenchmarkSDKRoundTrip is the floor: the SDK's client streaming one
// message to an SDK server whose agent answers at once, over loopback
// HTTP and JSON-RPC.
func BenchmarkSDKRoundTrip(b *testing.B) {
	h := a2asrv.NewHandler(echoExecutor{})
	hs := httptest.NewServer(a2asrv.NewJSONRPCHandler(h))
	defer hs.Close()
	ctx := context.Background()
	c, err := a2aclient.NewFromEndpoints(ctx, []*sdk.AgentInterface{sdk.NewAgentInterface(hs.URL, sdk.TransportProtocolJSONRPC)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Destroy()
	b.ReportAllocs()
	for b.Loop() {
		var last sdk.Event
		for ev, err := range c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("the question"))}) {
			if err != nil {
				b.Fatal(err)
			}
			last = ev
		}
		if s, ok := last.(*sdk.TaskStatusUpdateEvent); !ok || s.Status.State != sdk.TaskStateCompleted {
			b.Fatalf("last event %T %v", last, last)
		}
	}
}

// BenchmarkDelegation is one delegation through deputy on both sides: a
// Remote's run streaming one message to a deputy Server whose agent
// answers at once, over the same loopback HTTP and JSON-RPC. Its ratio
// to BenchmarkSDKRoundTrip is what deputy adds.
func BenchmarkDelegation(b *testing.B) {
	answer := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: "the answer"}, nil
	})
	s, err := a2a.NewServer(answer, a2a.WithName("echo"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	ctx := context.Background()
	r, err := a2a.Connect(ctx, hs.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		out, err := r.Run(ctx, agent.Input{Text: "the question"})
		if err != nil || out.Answer != "the answer" {
			b.Fatalf("%q, %v", out.Answer, err)
		}
	}
}

// benchmarkServed streams one message to s per iteration through the
// SDK's client, over loopback HTTP and JSON-RPC, and calls after, if not
// nil, after each.
func benchmarkServed(b *testing.B, s *a2a.Server, after func()) {
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	ctx := context.Background()
	c, err := a2aclient.NewFromEndpoints(ctx, []*sdk.AgentInterface{sdk.NewAgentInterface(hs.URL, sdk.TransportProtocolJSONRPC)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Destroy()
	b.ReportAllocs()
	for b.Loop() {
		var last sdk.Event
		for ev, err := range c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("the question"))}) {
			if err != nil {
				b.Fatal(err)
			}
			last = ev
		}
		if s, ok := last.(*sdk.TaskStatusUpdateEvent); !ok || s.Status.State != sdk.TaskStateCompleted {
			b.Fatalf("last event %T %v", last, last)
		}
		if after != nil {
			after()
		}
	}
}

// expertParts are the model and tools of the served expert of the
// benchmarks: a model that answers at once, and three tools, built once.
func expertParts(b *testing.B) (provider.Provider, []tool.Tool) {
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("the answer"), Usage: provider.Usage{Requests: 1}}, nil
	})
	var tools []tool.Tool
	for _, name := range []string{"lookup", "refund", "notify"} {
		t, err := tool.New(name, "Does "+name+".", func(ctx context.Context, in struct {
			Order string `json:"order"`
		}) (string, error) {
			return "ok", nil
		})
		if err != nil {
			b.Fatal(err)
		}
		tools = append(tools, t)
	}
	return model, tools
}

// BenchmarkServeOneAgent is one ReAct agent served to every task, the way
// NewServer now refuses (its conversation is reset after each task, so
// that every task costs the same): the floor of BenchmarkServePerTask.
func BenchmarkServeOneAgent(b *testing.B) {
	model, tools := expertParts(b)
	shared, err := agent.NewReact(model, agent.WithName("expert"), agent.WithTools(tools...))
	if err != nil {
		b.Fatal(err)
	}
	s, err := a2a.NewServer(agent.Func(shared.Run), a2a.WithName("expert"))
	if err != nil {
		b.Fatal(err)
	}
	benchmarkServed(b, s, shared.Reset)
}

// BenchmarkServePerTask is the same agent built for each task (NewPerTask):
// its ratio to BenchmarkServeOneAgent is what building costs.
func BenchmarkServePerTask(b *testing.B) {
	model, tools := expertParts(b)
	s, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("expert"), agent.WithTools(tools...))
	}, a2a.WithName("expert"))
	if err != nil {
		b.Fatal(err)
	}
	benchmarkServed(b, s, nil)
}

// BenchmarkBuildPerTask is what NewPerTask adds to each task with the
// builder of BenchmarkServePerTask: building the agent alone.
func BenchmarkBuildPerTask(b *testing.B) {
	model, tools := expertParts(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agent.NewReact(model, agent.WithName("expert"), agent.WithTools(tools...)); err != nil {
			b.Fatal(err)
		}
	}
}
