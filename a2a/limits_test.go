package a2a_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
)

// Runs go on after their client leaves, so the server bounds how many are
// in progress: a message past the owner's bound, or past the total, is
// refused and runs nothing; once a run ends, its place is free again.
func TestRunsAreBounded(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int64
	started := make(chan struct{}, 8)
	waiter := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return agent.Output{Answer: "done"}, nil
		case <-ctx.Done():
			return agent.Output{}, ctx.Err()
		}
	})
	s, err := a2a.NewServer(waiter, a2a.WithName("waiter"), a2a.WithAuthorize(byHeader), a2a.WithMaxRuns(2, 1), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob, carol := clientAs(t, hs, "alice"), clientAs(t, hs, "bob"), clientAs(t, hs, "carol")
	a1 := startStream(t, alice, userText("one"))
	<-started
	refused := func(c interface {
		SendMessage(context.Context, *sdk.SendMessageRequest) (sdk.SendMessageResult, error)
	}, who, why string) {
		t.Helper()
		_, err := c.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: userText("more")})
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s's message past %s: %v, want it refused naming the limit", who, why, err)
		}
	}
	refused(alice, "alice", "her bound of one run")
	b1 := startStream(t, bob, userText("one"))
	<-started
	refused(carol, "carol", "the total of two runs")
	if got := runs.Load(); got != 2 {
		t.Errorf("%d runs started, want 2: a refused message ran", got)
	}
	close(release)
	<-a1.done
	<-b1.done
	if _, err := carol.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: userText("now")}); err != nil {
		t.Errorf("carol's message once the runs ended: %v", err)
	}
	if _, err := a2a.NewServer(waiter, a2a.WithName("w"), a2a.WithMaxRuns(0, 0)); err == nil {
		t.Error("WithMaxRuns(0, 0) was taken")
	}
}
