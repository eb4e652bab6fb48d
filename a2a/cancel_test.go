package a2a_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
)

// Cancelling a task while its run works succeeds every time, and the task
// ends canceled: the cancellation's own status reaches the task before the
// run, stopped, ends it, so the client is never told the cancellation
// failed because the task had ended under it.
func TestCancelRunningTaskEveryTime(t *testing.T) {
	started := make(chan struct{}, 1)
	stopped := make(chan struct{}, 1)
	waiter := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- struct{}{}
		return agent.Output{}, ctx.Err()
	})
	s, err := a2a.NewServer(waiter, a2a.WithName("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serve(t, s, sdk.TransportProtocolJSONRPC)
	ctx := context.Background()
	for i := range 50 {
		var last sdk.TaskState
		for ev, err := range c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: userText("wait")}) {
			if err != nil {
				t.Fatalf("cancel %d: stream: %v", i, err)
			}
			switch e := ev.(type) {
			case *sdk.Task:
				<-started
				got, err := c.CancelTask(ctx, &sdk.CancelTaskRequest{ID: e.ID})
				if err != nil {
					t.Fatalf("cancel %d: %v", i, err)
				}
				if got.Status.State != sdk.TaskStateCanceled {
					t.Fatalf("cancel %d: the task is %s, want canceled", i, got.Status.State)
				}
			case *sdk.TaskStatusUpdateEvent:
				last = e.Status.State
			}
		}
		if last != sdk.TaskStateCanceled {
			t.Fatalf("cancel %d: the stream ended %s, want canceled", i, last)
		}
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatalf("cancel %d: the run was not stopped", i)
		}
	}
}
