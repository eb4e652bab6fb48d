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
