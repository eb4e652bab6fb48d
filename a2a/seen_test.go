package a2a_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
)

// messageAs returns a first message of text under the message id id.
func messageAs(id, text string) *sdk.Message {
	m := userText(text)
	m.ID = id
	return m
}

// streamedTask sends m on c, streamed, and returns the task its events
// name and the state the stream ended on.
func streamedTask(t testing.TB, c *a2aclient.Client, m *sdk.Message) (sdk.TaskID, sdk.TaskState) {
	t.Helper()
	evs, err := tryStream(c, m)
	if err != nil || len(evs) == 0 {
		t.Fatalf("stream: %d events, %v", len(evs), err)
	}
	last := evs[len(evs)-1]
	var state sdk.TaskState
	switch e := last.(type) {
	case *sdk.Task:
		state = e.Status.State
	case *sdk.TaskStatusUpdateEvent:
		state = e.Status.State
	}
	return last.TaskInfo().TaskID, state
}

// A message sent again with the messageId of one that started a task, and
// no taskId, is answered with that task — streamed or not, ended or still
// running — and the agent does not run again; another owner sending the
// same messageId gets a task of its own, and never the first owner's.
func TestMessageSentAgainFollowsItsTask(t *testing.T) {
	e := &echo{}
	srv, err := a2a.NewServer(e, a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, srv)
	alice, mallory := clientAs(t, hs, "alice"), clientAs(t, hs, "mallory")

	first, state := streamedTask(t, alice, messageAs("m-1", "hello"))
	if state != sdk.TaskStateCompleted {
		t.Fatalf("the first message ended %s", state)
	}
	again, state := streamedTask(t, alice, messageAs("m-1", "hello"))
	if again != first || state != sdk.TaskStateCompleted {
		t.Errorf("sent again, streamed: task %s %s, want %s completed", again, state, first)
	}
	res, err := alice.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: messageAs("m-1", "hello")})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.ID != first || task.Status.State != sdk.TaskStateCompleted {
		t.Errorf("sent again, not streamed: %#v, %v: want task %s completed", res, err, first)
	}
	if n := e.runs.Load(); n != 1 {
		t.Errorf("the agent ran %d times for one message sent three times, want once", n)
	}

	other, state := streamedTask(t, mallory, messageAs("m-1", "hello"))
	if other == first || state != sdk.TaskStateCompleted {
		t.Errorf("another owner's message with the same messageId: task %s %s, want a completed task of its own, not %s", other, state, first)
	}
	if _, err := mallory.GetTask(context.Background(), &sdk.GetTaskRequest{ID: first}); !notFound(err) {
		t.Errorf("another owner read the first owner's task: %v", err)
	}
	if n := e.runs.Load(); n != 2 {
		t.Errorf("the agent ran %d times, want twice: once per owner", n)
	}
	if again, _ := streamedTask(t, mallory, messageAs("m-1", "hello")); again != other {
		t.Errorf("the other owner's message sent again: task %s, want its own %s", again, other)
	}
	// A message that says something else under the id is not the one
	// sent again.
	if other, _ := streamedTask(t, alice, messageAs("m-1", "goodbye")); other == first {
		t.Error("a message of other text under a messageId seen was answered with the task of the first")
	}
	// A message with a new id is a new task.
	if next, _ := streamedTask(t, alice, messageAs("m-2", "hello")); next == first {
		t.Error("a new messageId was answered with the task of another")
	}
}

// A message sent again while the task it started runs follows that task
// to its end, as its first stream does.
func TestMessageSentAgainFollowsItsRunningTask(t *testing.T) {
	b := newBlocker(t)
	srv, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, srv)
	c := clientAs(t, hs, "alice")
	r1 := startStream(t, c, messageAs("m-1", "go"))
	id := r1.id(t)
	b.waitStarted(t)
	r2 := startStream(t, c, messageAs("m-1", "go"))
	if again := r2.id(t); again != id {
		t.Fatalf("sent again while it ran: task %s, want %s", again, id)
	}
	close(b.release)
	r1.wait(t)
	r2.wait(t)
	if r2.err != nil || len(r2.evs) == 0 {
		t.Fatalf("the second stream: %d events, %v", len(r2.evs), r2.err)
	}
	if st, ok := r2.evs[len(r2.evs)-1].(*sdk.TaskStatusUpdateEvent); !ok || st.Status.State != sdk.TaskStateCompleted {
		t.Errorf("the second stream ended on %#v, want the task completed", r2.evs[len(r2.evs)-1])
	}
	if n := b.models.Load(); n != 4 {
		t.Errorf("the models were called %d times, want 4: one run", n)
	}
}

// The server remembers at most WithSeenMessages's number of first
// messages, the oldest forgotten first, each for at most its time; with
// WithStore what it remembers survives a restart.
func TestSeenMessagesAreBounded(t *testing.T) {
	t.Run("number", func(t *testing.T) {
		e := &echo{}
		srv, err := a2a.NewServer(e, a2a.WithSeenMessages(2, time.Hour), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		c := clientAs(t, startServer(t, srv), "")
		ids := map[string]sdk.TaskID{}
		for _, m := range []string{"m-1", "m-2", "m-3"} {
			ids[m], _ = streamedTask(t, c, messageAs(m, "hi"))
		}
		if again, _ := streamedTask(t, c, messageAs("m-3", "hi")); again != ids["m-3"] {
			t.Errorf("a message remembered, sent again, started task %s, want %s", again, ids["m-3"])
		}
		if again, _ := streamedTask(t, c, messageAs("m-1", "hi")); again == ids["m-1"] {
			t.Error("the oldest message past the bound is still remembered")
		}
		if n := e.runs.Load(); n != 4 {
			t.Errorf("the agent ran %d times, want 4", n)
		}
	})
	t.Run("time", func(t *testing.T) {
		e := &echo{}
		srv, err := a2a.NewServer(e, a2a.WithSeenMessages(10, 300*time.Millisecond), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		c := clientAs(t, startServer(t, srv), "")
		first, _ := streamedTask(t, c, messageAs("m-1", "hi"))
		if again, _ := streamedTask(t, c, messageAs("m-1", "hi")); again != first {
			t.Errorf("a message sent again at once started task %s, want %s", again, first)
		}
		time.Sleep(400 * time.Millisecond)
		if again, _ := streamedTask(t, c, messageAs("m-1", "hi")); again == first {
			t.Error("a message older than the bound is still remembered")
		}
	})
	t.Run("restart", func(t *testing.T) {
		st := sqliteStore(t)
		e := &echo{}
		s1, err := a2a.NewServer(e, a2a.WithStore(st), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		hs1 := httptest.NewServer(s1)
		first, _ := streamedTask(t, clientAs(t, hs1, ""), messageAs("m-1", "hi"))
		hs1.Close()
		s1.Close()
		s2, err := a2a.NewServer(e, a2a.WithStore(st), a2a.WithSeenMessages(1, time.Hour), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		c := clientAs(t, startServer(t, s2), "")
		if again, state := streamedTask(t, c, messageAs("m-1", "hi")); again != first || state != sdk.TaskStateCompleted {
			t.Errorf("after a restart, sent again: task %s %s, want %s completed", again, state, first)
		}
		if n := e.runs.Load(); n != 1 {
			t.Errorf("the agent ran %d times, want once", n)
		}
	})
	if _, err := a2a.NewServer(&echo{}, a2a.WithSeenMessages(0, time.Hour)); err == nil {
		t.Error("WithSeenMessages(0, …) was taken")
	}
}

// A message sent again to a server on the store of the one that runs its
// task is answered with the task as it stands, and starts nothing.
func TestMessageSentAgainToAnotherServerOnTheStore(t *testing.T) {
	st := sqliteStore(t)
	b := newBlocker(t)
	s1, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithStore(st), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c1 := clientAs(t, startServer(t, s1), "alice")
	r1 := startStream(t, c1, messageAs("m-1", "go"))
	id := r1.id(t)
	b.waitStarted(t)
	// The SDK stores the task's events apart from the run that sends
	// them: the run may reach its tool before the task as stored says it
	// works.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		task, err := c1.GetTask(context.Background(), &sdk.GetTaskRequest{ID: id})
		if err == nil && task.Status.State == sdk.TaskStateWorking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task as stored is %v (%v), want working", task, err)
		}
	}
	s2, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithStore(st), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	models := b.models.Load()
	again, state := streamedTask(t, clientAs(t, startServer(t, s2), "alice"), messageAs("m-1", "go"))
	if again != id || state != sdk.TaskStateWorking {
		t.Errorf("sent again to the other server: task %s %s, want %s working", again, state, id)
	}
	if n := b.models.Load(); n != models {
		t.Errorf("the other server called the models %d times, want none", n-models)
	}
	close(b.release)
	r1.wait(t)
}

// flaky fails its first run, as an agent whose model was down does, and
// answers after.
type flaky struct{ runs atomic.Int64 }

func (f *flaky) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	if f.runs.Add(1) == 1 {
		return agent.Output{}, errors.New("the model is down")
	}
	return agent.Output{Answer: "echo: " + in.Text}, nil
}

func (f *flaky) Name() string { return "flaky" }

// A message sent again whose first task failed or was cancelled is a new
// try: it starts a task of its own, where it was answered with the failed
// task, so that a turn resumed after its remote failed, or after it was
// stopped and cancelled its task, failed again as long as the server
// remembered the message.
func TestMessageSentAgainAfterItsTaskFailedRunsAgain(t *testing.T) {
	f := &flaky{}
	srv, err := a2a.NewServer(f, a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, srv), "")
	first, state := streamedTask(t, c, messageAs("m-1", "hi"))
	if state != sdk.TaskStateFailed {
		t.Fatalf("the first message ended %s, want failed", state)
	}
	again, state := streamedTask(t, c, messageAs("m-1", "hi"))
	if again == first || state != sdk.TaskStateCompleted {
		t.Errorf("sent again after its task failed: task %s %s, want a new task completed, not %s", again, state, first)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("the agent ran %d times, want twice", n)
	}
	// The new task is the one the message follows from now on.
	if next, _ := streamedTask(t, c, messageAs("m-1", "hi")); next != again {
		t.Errorf("sent a third time: task %s, want %s", next, again)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("the agent ran %d times, want twice", n)
	}
}
