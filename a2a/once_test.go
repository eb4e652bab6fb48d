package a2a_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

// charger builds a lead whose model calls its charge tool once and then
// answers; charges counts the tool's calls, the work a copy of a message
// must not do again.
type charger struct {
	build   a2a.Builder
	charges atomic.Int64
}

func newCharger() *charger {
	c := &charger{}
	charge := tool.Must(tool.New("charge", "Charges the card.", func(ctx context.Context, _ struct{}) (string, error) {
		c.charges.Add(1)
		return "charged", nil
	}))
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done: " + last.Content)}, nil
		}
		call := provider.ToolCall{ID: "c1", Name: "charge", Arguments: json.RawMessage(`{}`)}
		return provider.Response{Message: provider.AssistantMessage("", call)}, nil
	})
	c.build = func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("lead"), agent.WithTools(charge))
	}
	return c
}

// slowTasks is a backend slow to store a new task, as a loaded database
// is, so that copies of a message sent at once all arrive while the
// first copy's task is being stored.
type slowTasks struct{ store.Backend }

func (b slowTasks) Put(ctx context.Context, writes ...store.Write) error {
	for _, w := range writes {
		if w.Version == 0 && strings.Contains(w.Key, "a2a/tasks/") {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return b.Backend.Put(ctx, writes...)
}

func slowStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.New(slowTasks{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// sendAtOnce sends n copies of a first message (one messageId, one text)
// at once, taking the clients in turn, every other copy streamed, and
// returns the task each copy was answered with. A copy must end with its
// task completed unless its server is not the one running the task
// (there are several clients), which answers with the task as it stands.
func sendAtOnce(t *testing.T, clients []*a2aclient.Client, id string, n int) []sdk.TaskID {
	t.Helper()
	tasks := make([]sdk.TaskID, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Go(func() {
			c, m := clients[i/2%len(clients)], messageAs(id, "charge the card")
			ended := func(state sdk.TaskState) bool {
				return state == sdk.TaskStateCompleted || len(clients) > 1 && !state.Terminal()
			}
			start.Wait()
			if i%2 == 0 {
				evs, err := tryStream(c, m)
				if err != nil || len(evs) == 0 {
					t.Errorf("copy %d, streamed: %d events, %v", i, len(evs), err)
					return
				}
				tasks[i] = evs[0].TaskInfo().TaskID
				if st, ok := evs[len(evs)-1].(*sdk.TaskStatusUpdateEvent); !ok || !ended(st.Status.State) {
					if task, ok := evs[len(evs)-1].(*sdk.Task); !ok || !ended(task.Status.State) {
						t.Errorf("copy %d, streamed: the stream ended on %#v, want the task completed", i, evs[len(evs)-1])
					}
				}
				return
			}
			res, err := c.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: m})
			task, ok := res.(*sdk.Task)
			if err != nil || !ok {
				t.Errorf("copy %d: %#v, %v: want a task", i, res, err)
				return
			}
			tasks[i] = task.ID
			if !ended(task.Status.State) {
				t.Errorf("copy %d: task %s is %s, want completed", i, task.ID, task.Status.State)
			}
		})
	}
	start.Done()
	wg.Wait()
	return tasks
}

// oneTask reports the task all copies were answered with, failing the
// test when they were answered with more than one.
func oneTask(t *testing.T, who string, tasks []sdk.TaskID) sdk.TaskID {
	t.Helper()
	seen := map[sdk.TaskID]int{}
	for _, id := range tasks {
		seen[id]++
	}
	if len(seen) != 1 {
		t.Errorf("%s's %d copies of one message were answered with %d tasks, want one: %v", who, len(tasks), len(seen), seen)
	}
	return tasks[0]
}

// Copies of a first message sent at once, as a client that resends its
// message after a crash may while the first is on its way, start one
// task, and the agent's tool runs once: every copy, streamed or not, is
// answered with that task. The same messageId from another owner starts
// that owner's own task. Copies sent to two servers on one store start
// one task too.
func TestFirstMessageSentAtOnceStartsOneTask(t *testing.T) {
	const copies = 8
	for _, tc := range []struct {
		name    string
		servers int
		store   func(*testing.T) *store.Store // nil: the server's own memory
	}{
		{"one server", 1, nil},
		{"one server on a slow store", 1, slowStore},
		{"two servers on a slow store", 2, slowStore},
		{"two servers on sqlite", 2, func(t *testing.T) *store.Store { return sqliteStore(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := newCharger()
			opts := []a2a.Option{a2a.WithName("lead"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger())}
			if tc.store != nil {
				opts = append(opts, a2a.WithStore(tc.store(t)))
			}
			var alice, bob []*a2aclient.Client
			for range tc.servers {
				srv, err := a2a.NewPerTask(ch.build, opts...)
				if err != nil {
					t.Fatal(err)
				}
				hs := startServer(t, srv)
				alice, bob = append(alice, clientAs(t, hs, "alice")), append(bob, clientAs(t, hs, "bob"))
			}
			var aliceTasks, bobTasks []sdk.TaskID
			var wg sync.WaitGroup
			wg.Go(func() { aliceTasks = sendAtOnce(t, alice, "m-1", copies) })
			wg.Go(func() { bobTasks = sendAtOnce(t, bob, "m-1", copies) })
			wg.Wait()
			if t.Failed() {
				return
			}
			a, b := oneTask(t, "alice", aliceTasks), oneTask(t, "bob", bobTasks)
			if a == b {
				t.Errorf("alice's and bob's messages of one messageId were answered with one task, %s, want one each", a)
			}
			if n := ch.charges.Load(); n != 2 {
				t.Errorf("the tool ran %d times for %d copies of one message from each of two owners, want twice: once per owner", n, copies)
			}
			// The message sent once more, after, is answered with the
			// same task.
			if again, _ := streamedTask(t, alice[len(alice)-1], messageAs("m-1", "charge the card")); again != a {
				t.Errorf("sent again after: task %s, want %s", again, a)
			}
			if n := ch.charges.Load(); n != 2 {
				t.Errorf("the tool ran %d times, want twice", n)
			}
		})
	}
}

// gatedTasks holds the storing of each new task until open is closed,
// telling creating that one waits.
type gatedTasks struct {
	store.Backend
	creating chan struct{}
	open     chan struct{}
}

func (b gatedTasks) Put(ctx context.Context, writes ...store.Write) error {
	for _, w := range writes {
		if w.Version == 0 && strings.Contains(w.Key, "a2a/tasks/") {
			select {
			case b.creating <- struct{}{}:
			default:
			}
			<-b.open
		}
	}
	return b.Backend.Put(ctx, writes...)
}

// A copy of a message that waits for the task another copy is starting
// gives up when its request ends, and starts nothing; the task started
// is the one the message is answered with after.
func TestCopyWaitingForItsTaskGivesUpWithItsRequest(t *testing.T) {
	g := gatedTasks{Backend: memory.New(), creating: make(chan struct{}, 1), open: make(chan struct{})}
	st, err := store.New(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ch := newCharger()
	srv, err := a2a.NewPerTask(ch.build, a2a.WithName("lead"), a2a.WithStore(st), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, srv), "alice")
	first := startStream(t, c, messageAs("m-1", "charge the card"))
	select {
	case <-g.creating:
	case <-time.After(5 * time.Second):
		t.Fatal("the first copy's task was not stored")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	at := time.Now()
	if res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: messageAs("m-1", "charge the card")}); err == nil {
		t.Errorf("a copy sent while the first's task was being stored was answered before it was: %#v", res)
	}
	if waited := time.Since(at); waited > 2*time.Second {
		t.Errorf("the copy waited %v past its request's end", waited)
	}
	close(g.open)
	id := first.id(t)
	first.wait(t)
	if again, state := streamedTask(t, c, messageAs("m-1", "charge the card")); again != id || state != sdk.TaskStateCompleted {
		t.Errorf("sent again after: task %s %s, want %s completed", again, state, id)
	}
	if n := ch.charges.Load(); n != 1 {
		t.Errorf("the tool ran %d times for one message sent three times, want once", n)
	}
}

// A copy whose task could not start (the owner's runs were at their
// bound) gives its claim on the message's id up: the message sent again
// once a run is free starts its task at once.
func TestMessageRefusedAtItsStartCanBeSentAgain(t *testing.T) {
	b := newBlocker(t)
	ch := newCharger()
	build := func(ctx context.Context, task a2a.Task) (agent.Agent, error) {
		if strings.HasPrefix(task.ContextID, "block") {
			return b.build(ctx, task)
		}
		return ch.build(ctx, task)
	}
	srv, err := a2a.NewPerTask(build, a2a.WithName("lead"), a2a.WithAuthorize(byHeader), a2a.WithMaxRuns(4, 1), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, srv), "alice")
	m := userText("wait")
	m.ContextID = "block-1"
	blocked := startStream(t, c, m)
	b.waitStarted(t)
	if _, err := c.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: messageAs("m-1", "charge the card")}); err == nil {
		t.Fatal("a message past the owner's bound of one run was not refused")
	}
	close(b.release)
	blocked.wait(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: messageAs("m-1", "charge the card")})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.Status.State != sdk.TaskStateCompleted {
		t.Errorf("the refused message sent again: %#v, %v: want its task completed", res, err)
	}
	if n := ch.charges.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}
