package a2a_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
)

// parrot is a model that answers with every user message of its
// conversation: what an agent was told, and kept, shows in its answer.
var parrot = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
	var told []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			told = append(told, taskText(m.Content))
		}
	}
	return provider.Response{Message: provider.AssistantMessage("I was told: " + strings.Join(told, " | ")), Usage: provider.Usage{Requests: 1}}, nil
})

// answerOf sends text in contextID as c's owner and returns the completed
// task's answer.
func answerOf(t *testing.T, c *a2aclient.Client, contextID, text string) string {
	t.Helper()
	m := userText(text)
	m.ContextID = contextID
	evs := stream(t, c, m)
	if st := lastStatus(t, evs); st.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("%q in %s: %s (%q)", text, contextID, st.Status.State, textOf(st.Status.Message))
	}
	var answer string
	for _, ev := range evs {
		if a, ok := ev.(*sdk.TaskArtifactUpdateEvent); ok && a.Artifact != nil && a.LastChunk {
			for _, p := range a.Artifact.Parts {
				answer += p.Text()
			}
		}
	}
	return answer
}

// A ReAct agent keeps its conversation between runs: served as one agent
// to every request, Bob would be answered from what Alice told it. It is
// either refused when the server is made, saying what to do, or what
// Alice told it never reaches Bob's run, nor her own run in another
// context.
func TestSharedConversationNeverReachesAnotherOwner(t *testing.T) {
	t.Parallel()
	shared, err := agent.NewReact(parrot, agent.WithName("parrot"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := a2a.NewServer(shared, a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		for _, says := range []string{"keeps its conversation", "NewPerTask", "subagent.PerThread"} {
			if !strings.Contains(err.Error(), says) {
				t.Errorf("the refusal %q does not say %q", err, says)
			}
		}
		return
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	answerOf(t, alice, "c1", "my account password is hunter2")
	for who, got := range map[string]string{
		"bob, same context id": answerOf(t, bob, "c1", "hello"),
		"alice, other context": answerOf(t, alice, "c2", "hello"),
	} {
		if strings.Contains(got, "hunter2") {
			t.Errorf("%s was answered %q: another's message reached the run", who, got)
		}
	}
}

// An agent built per task (NewPerTask) keeps nothing of one task for
// another: each owner's and each context's run sees only its own message,
// and the builder is told whose task it builds for.
func TestPerTaskAgentSeesOnlyItsTask(t *testing.T) {
	t.Parallel()
	var built atomic.Int64
	var seen = make(chan a2a.Task, 8)
	s, err := a2a.NewPerTask(func(ctx context.Context, task a2a.Task) (agent.Agent, error) {
		built.Add(1)
		seen <- task
		return agent.NewReact(parrot, agent.WithName("parrot"))
	}, a2a.WithName("parrot"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	if got := answerOf(t, alice, "c1", "my account password is hunter2"); got != "I was told: my account password is hunter2" {
		t.Errorf("alice: %q", got)
	}
	first := <-seen
	if first.Owner != "alice" || first.ContextID != "c1" || first.TaskID == "" || first.Thread == "" || first.Resumed {
		t.Errorf("the builder was told %+v for alice's first task", first)
	}
	if got := answerOf(t, bob, "c1", "hello"); got != "I was told: hello" {
		t.Errorf("bob, in a context of the same id: %q", got)
	}
	if second := <-seen; second.Thread == first.Thread {
		t.Errorf("alice's and bob's contexts c1 share the thread %q", first.Thread)
	}
	if got := answerOf(t, alice, "c2", "hello"); got != "I was told: hello" {
		t.Errorf("alice, another context: %q", got)
	}
	if built.Load() != 3 {
		t.Errorf("%d agents built for 3 tasks", built.Load())
	}
}

// The safe form of a conversation per context: a resident scoped per
// thread, served as a tool. Alice's context remembers her, and nothing of
// it reaches Bob's context of the same id, nor her other context.
func TestScopedResidentKeepsEachContextApart(t *testing.T) {
	t.Parallel()
	expert, err := subagent.FromScoped("parrot", "Repeats what it was told.", subagent.PerThread, func(string) (agent.Agent, error) {
		return agent.NewReact(parrot, agent.WithName("parrot"))
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a2a.NewToolServer(expert, a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	answerOf(t, alice, "c1", "my account password is hunter2")
	if got := answerOf(t, alice, "c1", "what is it?"); got != "I was told: my account password is hunter2 | what is it?" {
		t.Errorf("alice's context does not continue: %q", got)
	}
	if got := answerOf(t, bob, "c1", "hello"); got != "I was told: hello" {
		t.Errorf("bob: %q", got)
	}
	if got := answerOf(t, alice, "c2", "hello"); got != "I was told: hello" {
		t.Errorf("alice, another context: %q", got)
	}
}

// failingJournals is a store backend whose journals cannot be read.
type failingJournals struct{ store.Backend }

func (b failingJournals) List(ctx context.Context, prefix string) ([]store.Item, error) {
	return nil, errors.New("disk on fire")
}

// A task that fails on the server's store tells the client so in plain
// words: no key of the store (its journal's, its thread's) reaches it.
func TestStoreFailureNamesNoStoreKey(t *testing.T) {
	t.Parallel()
	st, err := store.New(failingJournals{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := a2a.NewPerTask(func(ctx context.Context, _ a2a.Task) (agent.Agent, error) {
		return agent.NewReact(parrot)
	}, a2a.WithName("parrot"), a2a.WithStore(st), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "alice")
	m := userText("hello")
	m.ContextID = "c1"
	st2 := lastStatus(t, stream(t, c, m))
	said := textOf(st2.Status.Message)
	if st2.Status.State != sdk.TaskStateFailed || !strings.Contains(said, "send the message again") {
		t.Errorf("the task ended %s with %q, want failed, saying what to do", st2.Status.State, said)
	}
	for _, internal := range []string{"a2a/", "a2a_", "journal \"", "store:", "disk on fire"} {
		if strings.Contains(said, internal) {
			t.Errorf("the client reads %q, which names %q", said, internal)
		}
	}
}

// failingTasks is a store backend that cannot keep tasks: its error names
// the key it failed on, as a database's error would.
type failingTasks struct{ store.Backend }

func (b failingTasks) fails(key string) error {
	if strings.Contains(key, "a2a/tasks/") {
		return fmt.Errorf("disk on fire at %q", key)
	}
	return nil
}

func (b failingTasks) Get(ctx context.Context, key string) (store.Item, error) {
	if err := b.fails(key); err != nil {
		return store.Item{}, err
	}
	return b.Backend.Get(ctx, key)
}

func (b failingTasks) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := b.fails(prefix); err != nil {
		return nil, err
	}
	return b.Backend.Keys(ctx, prefix, after, limit)
}

func (b failingTasks) Put(ctx context.Context, writes ...store.Write) error {
	for _, w := range writes {
		if err := b.fails(w.Key); err != nil {
			return err
		}
	}
	return b.Backend.Put(ctx, writes...)
}

// A request that fails on the store that keeps tasks (a message that
// starts one, a read of one, a listing) is answered in plain words: no
// key of the store, which names the owner, reaches the client.
func TestTaskStoreFailureNamesNoStoreKey(t *testing.T) {
	t.Parallel()
	st, err := store.New(failingTasks{memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := a2a.NewPerTask(func(ctx context.Context, _ a2a.Task) (agent.Agent, error) {
		return agent.NewReact(parrot)
	}, a2a.WithName("parrot"), a2a.WithStore(st), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "alice")
	ctx := context.Background()
	_, sendErr := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: userText("hello")})
	_, streamErr := tryStream(c, userText("hello"))
	_, getErr := c.GetTask(ctx, &sdk.GetTaskRequest{ID: "0199a1b2-0000-7000-8000-000000000000"})
	_, listErr := c.ListTasks(ctx, &sdk.ListTasksRequest{ContextID: "c1"})
	for what, err := range map[string]error{"a message": sendErr, "a streamed message": streamErr, "a read": getErr, "a listing": listErr} {
		if err == nil {
			t.Errorf("%s succeeded on a store that keeps no task", what)
			continue
		}
		for _, internal := range []string{"a2a/tasks", "alice", "disk on fire"} {
			if strings.Contains(err.Error(), internal) {
				t.Errorf("%s: the client reads %q, which names %q", what, err, internal)
			}
		}
	}
}

// NewPerTask refuses what it cannot serve, saying what to give.
func TestPerTaskMisuse(t *testing.T) {
	build := func(context.Context, a2a.Task) (agent.Agent, error) { return agent.NewReact(parrot) }
	if _, err := a2a.NewPerTask(nil, a2a.WithName("x")); err == nil || !strings.Contains(err.Error(), "builder") {
		t.Errorf("a nil builder: %v", err)
	}
	if _, err := a2a.NewPerTask(build); err == nil || !strings.Contains(err.Error(), "WithName") {
		t.Errorf("no name: %v", err)
	}
	s, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		return nil, errors.New("no seat left for this owner: try tomorrow")
	}, a2a.WithName("x"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "alice")
	st := lastStatus(t, stream(t, c, userText("hi")))
	if st.Status.State != sdk.TaskStateFailed || !strings.Contains(textOf(st.Status.Message), "try tomorrow") {
		t.Errorf("a builder's refusal: %s, %q", st.Status.State, textOf(st.Status.Message))
	}
}
