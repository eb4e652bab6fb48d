package a2a_test

// These tests treat the server as something an untrusted client talks to:
// they send what a well-behaved client would not, try to reach other
// owners' tasks, race answers and cancellations, and stop the server in
// the middle of a run.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// ownerHeader is the header the tests' Authorize names the owner from.
const ownerHeader = "X-Owner"

// byHeader is an Authorize that trusts a header, with a few names that
// make it refuse or misbehave.
func byHeader(r *http.Request) (string, error) {
	switch o := r.Header.Get(ownerHeader); o {
	case "":
		return "", &a2a.Refusal{Status: http.StatusUnauthorized, Message: "say who you are"}
	case "banned":
		return "", &a2a.Refusal{Status: http.StatusForbidden, Message: "you are banned"}
	case "unset":
		return "", &a2a.Refusal{Message: "no status given"}
	case "broken":
		return "", errors.New("the identity service is down")
	case "long":
		return strings.Repeat("o", a2a.MaxOwnerBytes+1), nil
	case "anonymous":
		return "", nil
	default:
		return o, nil
	}
}

// countingBackend counts the reads made of a memory backend.
type countingBackend struct {
	store.Backend
	reads atomic.Int64
}

func (b *countingBackend) Get(ctx context.Context, key string) (store.Item, error) {
	b.reads.Add(1)
	return b.Backend.Get(ctx, key)
}

func (b *countingBackend) List(ctx context.Context, prefix string) ([]store.Item, error) {
	b.reads.Add(1)
	return b.Backend.List(ctx, prefix)
}

func (b *countingBackend) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	b.reads.Add(1)
	return b.Backend.Keys(ctx, prefix, after, limit)
}

func countingStore(t testing.TB) (*store.Store, *countingBackend) {
	t.Helper()
	b := &countingBackend{Backend: memory.New()}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, b
}

// headerTransport names an owner on each request it sends.
type headerTransport struct {
	owner string
	base  *http.Transport
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.owner != "" {
		r.Header.Set(ownerHeader, h.owner)
	}
	return h.base.RoundTrip(r)
}

// clientAs returns a JSON-RPC client of hs whose requests come from owner
// ("" names none). Its connections are closed when the test ends.
func clientAs(t testing.TB, hs *httptest.Server, owner string) *a2aclient.Client {
	t.Helper()
	tr := &http.Transport{}
	hc := &http.Client{Transport: headerTransport{owner: owner, base: tr}}
	c, err := a2aclient.NewFromEndpoints(context.Background(),
		[]*sdk.AgentInterface{sdk.NewAgentInterface(hs.URL, sdk.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Destroy()
		tr.CloseIdleConnections()
	})
	return c
}

// startServer serves s on a loopback server closed, with s, when the test
// ends.
func startServer(t testing.TB, s *a2a.Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return hs
}

// tryStream sends m and gathers the events, and the error that ended the
// stream, if any.
func tryStream(c *a2aclient.Client, m *sdk.Message) ([]sdk.Event, error) {
	var evs []sdk.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &sdk.SendMessageRequest{Message: m}) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// reply is m sent on the task that st reports.
func reply(m *sdk.Message, st *sdk.TaskStatusUpdateEvent) *sdk.Message {
	m.TaskID, m.ContextID = st.TaskID, st.ContextID
	return m
}

func answersPart(answers ...map[string]any) *sdk.Message {
	list := make([]any, len(answers))
	for i, a := range answers {
		list[i] = a
	}
	return sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(map[string]any{"answers": list}))
}

// interruptID reads the id of the one question a waiting task asks.
func interruptID(t testing.TB, st *sdk.TaskStatusUpdateEvent) string {
	t.Helper()
	raw, _ := json.Marshal(st.Metadata[a2a.InterruptsKey])
	var its []tool.Interrupt
	if err := json.Unmarshal(raw, &its); err != nil || len(its) != 1 {
		t.Fatalf("the task waits on %s, want one question", raw)
	}
	return its[0].ID
}

func getTask(t testing.TB, c *a2aclient.Client, id sdk.TaskID) *sdk.Task {
	t.Helper()
	task, err := c.GetTask(context.Background(), &sdk.GetTaskRequest{ID: id})
	if err != nil {
		t.Fatalf("GetTask %s: %v", id, err)
	}
	return task
}

func usageOf(t testing.TB, meta map[string]any) (requests, input int64) {
	t.Helper()
	raw, _ := json.Marshal(meta[a2a.UsageKey])
	var u struct{ Requests, InputTokens int64 }
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("usage %s: %v", raw, err)
	}
	return u.Requests, u.InputTokens
}

// notFound reports whether err says no such task, as a client reads it.
func notFound(err error) bool {
	return err != nil && (errors.Is(err, sdk.ErrTaskNotFound) || strings.Contains(strings.ToLower(err.Error()), "not found"))
}

// blocker is a lead whose model calls a sub-agent whose model calls a tool
// that blocks until its context ends or the test releases it; then each
// answers. It records what the tool's context said.
type blocker struct {
	build    a2a.Builder   // a fresh lead for each task
	started  chan struct{} // closed when the tool has started
	release  chan struct{} // closed by the test to let the tool finish
	toolErr  chan error    // the tool's context error as it returned
	models   atomic.Int64
	startOne sync.Once
}

func newBlocker(t testing.TB) *blocker {
	t.Helper()
	b := &blocker{started: make(chan struct{}), release: make(chan struct{}), toolErr: make(chan error, 1)}
	usage := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	wait := tool.Must(tool.New("wait", "Waits.", func(ctx context.Context, _ struct{}) (string, error) {
		b.startOne.Do(func() { close(b.started) })
		select {
		case <-ctx.Done():
			b.toolErr <- ctx.Err()
			return "", ctx.Err()
		case <-b.release:
			b.toolErr <- nil
			return "waited", nil
		}
	}))
	childModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		b.models.Add(1)
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("child: " + last.Content), Usage: usage}, nil
		}
		call := provider.ToolCall{ID: "w1", Name: "wait", Arguments: json.RawMessage(`{}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
	child, err := agent.NewReact(childModel, agent.WithName("waiter"), agent.WithTools(wait))
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("waiter", "Waits for things.", child)
	if err != nil {
		t.Fatal(err)
	}
	leadModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		b.models.Add(1)
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("lead: " + last.Content), Usage: usage}, nil
		}
		call := provider.ToolCall{ID: "d1", Name: "waiter", Arguments: json.RawMessage(`{"task":"wait"}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
	b.build = func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(leadModel, agent.WithName("lead"), agent.WithTools(expert))
	}
	return b
}

// waitStarted waits for the blocker's tool to start.
func (b *blocker) waitStarted(t testing.TB) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the tool did not start")
	}
}

// running is a streamed message in progress.
type running struct {
	done   chan struct{}
	evs    []sdk.Event
	err    error
	taskID chan sdk.TaskID
}

// startStream sends m on c in the background; the task's id arrives on
// taskID as soon as the server reports it. A stream still open when the
// test ends is closed, and waited for.
func startStream(t testing.TB, c *a2aclient.Client, m *sdk.Message) *running {
	r := &running{done: make(chan struct{}), taskID: make(chan sdk.TaskID, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	go func() {
		defer close(r.done)
		sent := false
		for ev, err := range c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: m}) {
			if err != nil {
				r.err = err
				return
			}
			r.evs = append(r.evs, ev)
			if !sent {
				r.taskID <- ev.TaskInfo().TaskID
				sent = true
			}
		}
	}()
	return r
}

func (r *running) wait(t testing.TB) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func (r *running) id(t testing.TB) sdk.TaskID {
	t.Helper()
	select {
	case id := <-r.taskID:
		return id
	case <-r.done:
		t.Fatalf("the stream ended before naming its task: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the stream named no task")
	}
	return ""
}

// Another owner cannot read, cancel, list, subscribe to or answer a
// waiting task, even knowing its ids; and nothing of the task changes
// for the trying: it still waits, and its owner's answer still works.
func TestOwnersCannotReachEachOthersTasks(t *testing.T) {
	t.Parallel()
	p := newPayer(t, idModes[0].id)
	s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")

	asked := lastStatus(t, stream(t, alice, userText("pay 100")))
	if asked.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("alice's task is %s, want input-required", asked.Status.State)
	}
	before := getTask(t, alice, asked.TaskID)
	models := p.model.Load()
	ctx := context.Background()

	if _, err := bob.GetTask(ctx, &sdk.GetTaskRequest{ID: asked.TaskID}); !notFound(err) {
		t.Errorf("bob's GetTask of alice's task: %v, want not found", err)
	}
	if _, err := bob.CancelTask(ctx, &sdk.CancelTaskRequest{ID: asked.TaskID}); !notFound(err) {
		t.Errorf("bob's CancelTask of alice's task: %v, want not found", err)
	}
	list, err := bob.ListTasks(ctx, &sdk.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 0 {
		t.Errorf("bob lists %v (%v), want no task", list, err)
	}
	list, err = bob.ListTasks(ctx, &sdk.ListTasksRequest{ContextID: asked.ContextID})
	if err != nil || len(list.Tasks) != 0 {
		t.Errorf("bob lists alice's context: %v (%v), want no task", list, err)
	}
	var subscribed []sdk.Event
	var subErr error
	for ev, err := range bob.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: asked.TaskID}) {
		if err != nil {
			subErr = err
			break
		}
		subscribed = append(subscribed, ev)
	}
	if len(subscribed) != 0 || !notFound(subErr) {
		t.Errorf("bob's subscription to alice's task: %d events, %v; want none and not found", len(subscribed), subErr)
	}
	for _, m := range []*sdk.Message{userText("yes"), answersPart(map[string]any{"interruptId": interruptID(t, asked), "status": "resolved", "payload": map[string]any{"approved": true}})} {
		if evs, err := tryStream(bob, reply(m, asked)); !notFound(err) {
			t.Errorf("bob's answer to alice's task: %d events, %v; want not found", len(evs), err)
		}
		if _, err := bob.SendMessage(ctx, &sdk.SendMessageRequest{Message: reply(userText("yes"), asked)}); !notFound(err) {
			t.Errorf("bob's unstreamed answer to alice's task: %v, want not found", err)
		}
	}

	after := getTask(t, alice, asked.TaskID)
	if after.Status.State != sdk.TaskStateInputRequired || len(after.History) != len(before.History) {
		t.Errorf("alice's task after bob: %s with %d messages, want input-required with %d", after.Status.State, len(after.History), len(before.History))
	}
	if p.transfers.Load() != 0 || p.model.Load() != models {
		t.Fatalf("bob's tries ran alice's turn: %d transfers, %d model calls (was %d)", p.transfers.Load(), p.model.Load(), models)
	}

	// Bob's own message in alice's context is a task of his own.
	mine := userText("pay 5")
	mine.ContextID = asked.ContextID
	bobs := lastStatus(t, stream(t, bob, mine))
	if bobs.TaskID == asked.TaskID {
		t.Fatal("bob's message joined alice's task")
	}
	if list, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{}); err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != asked.TaskID {
		t.Errorf("alice lists %+v (%v), want her one task", list, err)
	}

	done := lastStatus(t, stream(t, alice, reply(userText("yes"), asked)))
	if done.Status.State != sdk.TaskStateCompleted || p.transfers.Load() != 1 {
		t.Fatalf("alice's answer: %s with %d transfers, want completed with 1", done.Status.State, p.transfers.Load())
	}
}

// While an owner's task runs, another owner who knows its id can neither
// watch its events nor cancel it nor send to it: each is told there is
// no such task, as for a task that is not running.
func TestOwnersCannotReachEachOthersRunningTasks(t *testing.T) {
	t.Parallel()
	b := newBlocker(t)
	s, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	run := startStream(t, alice, userText("wait"))
	id := run.id(t)
	b.waitStarted(t)
	ctx := context.Background()

	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var seen []sdk.Event
	var subErr error
	for ev, err := range bob.SubscribeToTask(sctx, &sdk.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			subErr = err
			break
		}
		seen = append(seen, ev)
		if len(seen) == 1 {
			close(b.release) // let alice's run end, so a leaked stream ends too
		}
	}
	if len(seen) != 0 || !notFound(subErr) {
		t.Errorf("bob subscribed to alice's running task: %d events of hers, %v; want none and not found", len(seen), subErr)
	}
	if len(seen) == 0 {
		if _, err := bob.CancelTask(ctx, &sdk.CancelTaskRequest{ID: id}); !notFound(err) {
			t.Errorf("bob's CancelTask of alice's running task: %v, want not found", err)
		}
		m := userText("yes")
		m.TaskID = id
		if _, err := tryStream(bob, m); !notFound(err) {
			t.Errorf("bob's message to alice's running task: %v, want not found", err)
		}
		// The same over the REST binding.
		for _, req := range []struct{ method, path string }{
			{"GET", "/rest/tasks/" + string(id) + ":subscribe"},
			{"POST", "/rest/tasks/" + string(id) + ":subscribe"},
			{"POST", "/rest/tasks/" + string(id) + ":cancel"},
			{"GET", "/rest/tasks/" + string(id)},
		} {
			r, _ := http.NewRequestWithContext(sctx, req.method, hs.URL+req.path, nil)
			r.Header.Set(ownerHeader, "bob")
			resp, err := hs.Client().Do(r)
			if err != nil {
				t.Fatalf("%s %s: %v", req.method, req.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// A stream is opened (200) before its first event, here the error.
			if !strings.Contains(string(body), "TASK_NOT_FOUND") || strings.Contains(string(body), "statusUpdate") {
				t.Errorf("bob's %s %s: %d %s; want not found and nothing of alice's", req.method, req.path, resp.StatusCode, body)
			}
		}
		close(b.release)
	}
	run.wait(t)
	if run.err != nil {
		t.Fatalf("alice's stream: %v", run.err)
	}
	if st := lastStatus(t, run.evs); st.Status.State != sdk.TaskStateCompleted {
		t.Errorf("alice's task ended %s (%q), want completed: bob's tries reached it", st.Status.State, textOf(st.Status.Message))
	}
}

// A refused request is answered with its status before any state is read
// or any run starts, over both bindings; an owner longer than
// MaxOwnerBytes is the server's fault, and says so without naming it.
func TestRefusedBeforeAnythingIsRead(t *testing.T) {
	t.Parallel()
	st, counted := countingStore(t)
	p := newPayer(t, idModes[0].id)
	s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithAuthorize(byHeader), a2a.WithStore(st), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"pay 100"}]}}}`
	list := `{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{}}`
	for _, c := range []struct {
		owner  string
		status int
		says   string
	}{
		{"", http.StatusUnauthorized, "say who you are"},
		{"banned", http.StatusForbidden, "you are banned"},
		{"unset", http.StatusForbidden, "no status given"},
		{"broken", http.StatusUnauthorized, "not authorized"},
		{"long", http.StatusInternalServerError, "could not tell who"},
	} {
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/", send},
			{"POST", "/", list},
			{"POST", "/rest/message:send", `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"pay 100"}]}}`},
			{"GET", "/rest/tasks", ""},
			{"GET", "/rest/tasks/some-task", ""},
		} {
			r, _ := http.NewRequest(req.method, hs.URL+req.path, strings.NewReader(req.body))
			if c.owner != "" {
				r.Header.Set(ownerHeader, c.owner)
			}
			r.Header.Set("Content-Type", "application/json")
			resp, err := hs.Client().Do(r)
			if err != nil {
				t.Fatalf("%s %s as %q: %v", req.method, req.path, c.owner, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
				t.Errorf("%s %s as %q: %d %s; want %d saying %q", req.method, req.path, c.owner, resp.StatusCode, body, c.status, c.says)
			}
			if c.owner == "long" && strings.Contains(string(body), "ooooo") {
				t.Errorf("the refusal names the owner: %s", body)
			}
		}
	}
	if n := counted.reads.Load(); n != 0 {
		t.Errorf("refused requests read the store %d times", n)
	}
	if p.model.Load() != 0 {
		t.Errorf("a refused request ran the agent")
	}
	// The card stays public.
	resp, err := hs.Client().Get(hs.URL + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the card: %d, want 200", resp.StatusCode)
	}
}

// rawPost posts body to hs at path as owner, and returns the status and
// the body of the answer.
func rawPost(t testing.TB, hs *httptest.Server, path, owner string, body []byte) (int, string) {
	t.Helper()
	r, _ := http.NewRequest("POST", hs.URL+path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if owner != "" {
		r.Header.Set(ownerHeader, owner)
	}
	resp, err := hs.Client().Do(r)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// echo is an agent that answers each input at once, counting its runs.
type echo struct{ runs atomic.Int64 }

func (e *echo) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	e.runs.Add(1)
	return agent.Output{Answer: "echo: " + in.Text, Usage: provider.Usage{Requests: 1, InputTokens: 3}}, nil
}

func (e *echo) Name() string { return "echo" }

// A body over WithMaxBodyBytes is refused with 413 and a message that
// names the limit, whatever the binding, and nothing runs.
func TestBodyOverLimit(t *testing.T) {
	t.Parallel()
	e := &echo{}
	s, err := a2a.NewServer(e, a2a.WithMaxBodyBytes(2048), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	big := strings.Repeat("x", 4096)
	for _, req := range []struct{ path, body string }{
		{"/", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"` + big + `"}]}}}`},
		{"/", `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"` + big + `"}]}}}`},
		{"/rest/message:send", `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"` + big + `"}]}}`},
		{"/rest/message:stream", `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"` + big + `"}]}}`},
	} {
		status, body := rawPost(t, hs, req.path, "", []byte(req.body))
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "2048") {
			t.Errorf("POST %s of %d bytes: %d %s; want 413 naming the limit", req.path, len(req.body), status, body)
		}
	}
	c := clientAs(t, hs, "")
	if _, err := c.SendMessage(context.Background(), &sdk.SendMessageRequest{Message: userText(big)}); err == nil {
		t.Error("the client's oversized message was taken")
	}
	if e.runs.Load() != 0 {
		t.Errorf("an oversized message ran the agent %d times", e.runs.Load())
	}
	if list, err := c.ListTasks(context.Background(), &sdk.ListTasksRequest{}); err != nil || len(list.Tasks) != 0 {
		t.Errorf("after oversized messages: %+v (%v), want no task", list, err)
	}
	// A body within the limit is served.
	if evs := stream(t, c, userText("hi")); lastStatus(t, evs).Status.State != sdk.TaskStateCompleted {
		t.Error("a small message did not complete")
	}
}

// Ids longer than the server keeps name nothing: a long contextId is
// refused before any task is made, a long taskId is no task.
func TestLongIDs(t *testing.T) {
	t.Parallel()
	e := &echo{}
	s, err := a2a.NewServer(e, a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	c := clientAs(t, hs, "")
	ctx := context.Background()

	m := userText("hi")
	m.ContextID = strings.Repeat("c", 129)
	if evs, err := tryStream(c, m); err == nil {
		t.Errorf("a contextId of 129 bytes was taken: %d events", len(evs))
	} else if !strings.Contains(err.Error(), "contextId") {
		t.Errorf("a long contextId: %v; want an error naming the contextId", err)
	}
	m = userText("hi")
	m.ContextID = strings.Repeat("c", 129)
	if _, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: m}); err == nil {
		t.Error("a contextId of 129 bytes was taken without streaming")
	}
	if e.runs.Load() != 0 {
		t.Errorf("a long contextId ran the agent")
	}
	if list, err := c.ListTasks(ctx, &sdk.ListTasksRequest{}); err != nil || len(list.Tasks) != 0 {
		t.Errorf("after long contextIds: %d tasks (%v), want none", len(list.Tasks), err)
	}

	long := sdk.TaskID(strings.Repeat("t", 129))
	m = userText("hi")
	m.TaskID = long
	if _, err := tryStream(c, m); !notFound(err) {
		t.Errorf("a message to a taskId of 129 bytes: %v, want not found", err)
	}
	if _, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: long}); !notFound(err) {
		t.Errorf("GetTask of 129 bytes: %v, want not found", err)
	}
	if _, err := c.CancelTask(ctx, &sdk.CancelTaskRequest{ID: long}); !notFound(err) {
		t.Errorf("CancelTask of 129 bytes: %v, want not found", err)
	}

	m = userText("hi")
	m.ContextID = strings.Repeat("c", 128)
	if st := lastStatus(t, stream(t, c, m)); st.Status.State != sdk.TaskStateCompleted {
		t.Errorf("a contextId of 128 bytes: %s, want completed", st.Status.State)
	}
}

// A completed task takes no more messages, and is left as it was.
func TestMessageToCompletedTask(t *testing.T) {
	t.Parallel()
	e := &echo{}
	s, err := a2a.NewServer(e, a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "")
	done := lastStatus(t, stream(t, c, userText("hi")))
	before := getTask(t, c, done.TaskID)
	if _, err := tryStream(c, reply(userText("again"), done)); err == nil {
		t.Error("a message to a completed task was taken")
	}
	after := getTask(t, c, done.TaskID)
	if e.runs.Load() != 1 || after.Status.State != sdk.TaskStateCompleted || len(after.History) != len(before.History) {
		t.Errorf("after a message to a completed task: %d runs, %s with %d messages (was %d)", e.runs.Load(), after.Status.State, len(after.History), len(before.History))
	}
}

// Messages with no parts, or parts that hold nothing, are refused or
// answered; none stops the server.
func TestMessagesWithNothingInThem(t *testing.T) {
	t.Parallel()
	e := &echo{}
	s, err := a2a.NewServer(e, a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	c := clientAs(t, hs, "")
	if _, err := tryStream(c, sdk.NewMessage(sdk.MessageRoleUser)); err == nil {
		t.Error("a message with no parts was taken")
	}
	for _, parts := range []string{`[]`, `null`, `[null]`, `[{}]`, `[{"text":""}]`, `[{"text":" \n"}]`, `[{"data":null}]`, `[{"raw":"AAAA"}]`, `[{"url":"https://example.com/a.txt"}]`} {
		for _, method := range []string{"SendMessage", "SendStreamingMessage"} {
			body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":` + parts + `}}}`
			status, got := rawPost(t, hs, "/", "", []byte(body))
			if status != http.StatusOK || !strings.Contains(got, `"error"`) || strings.Contains(got, "-32603") {
				t.Errorf("%s with parts %s: %d %s; want it refused, and not as the server's fault", method, parts, status, got)
			}
		}
	}
	if n := e.runs.Load(); n != 0 {
		t.Errorf("messages with nothing to read ran the agent %d times", n)
	}
	if list, err := c.ListTasks(context.Background(), &sdk.ListTasksRequest{}); err != nil || len(list.Tasks) != 0 {
		t.Errorf("messages with nothing to read made %d tasks (%v)", len(list.Tasks), err)
	}
	if st := lastStatus(t, stream(t, c, userText("still there?"))); st.Status.State != sdk.TaskStateCompleted {
		t.Errorf("after empty messages: %s, want completed", st.Status.State)
	}
}

// Answers that cannot be used — to a question not asked, twice to one,
// not what the question's schema wants, with a status that means
// nothing — leave the task waiting with a status that says what was
// wrong, and run nothing; the next good answer is taken.
func TestBadAnswersKeepTheTaskWaiting(t *testing.T) {
	t.Parallel()
	p := newPayer(t, idModes[0].id)
	s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	c := clientAs(t, hs, "")
	asked := lastStatus(t, stream(t, c, userText("pay 100")))
	id := interruptID(t, asked)
	models := p.model.Load()
	for _, bad := range []struct {
		name string
		msg  *sdk.Message
		says string
	}{
		{"an unknown interrupt", answersPart(map[string]any{"interruptId": "int_nope", "status": "resolved", "payload": map[string]any{"approved": true}}), "int_nope"},
		{"two answers to one interrupt", answersPart(
			map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": true}},
			map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": false}}), "one answer"},
		{"a payload off the schema", answersPart(map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": "sure"}}), "schema"},
		{"a status that means nothing", answersPart(map[string]any{"interruptId": id, "status": "maybe"}), "maybe"},
		{"an empty answers list", answersPart(), ""},
		{"text that is neither yes nor no", userText("perhaps"), "perhaps"},
	} {
		evs, err := tryStream(c, reply(bad.msg, asked))
		if err != nil {
			t.Errorf("%s: %v, want the question asked again", bad.name, err)
			continue
		}
		again := lastStatus(t, evs)
		if again.Status.State != sdk.TaskStateInputRequired {
			t.Errorf("%s: %s (%q), want input-required", bad.name, again.Status.State, textOf(again.Status.Message))
			continue
		}
		if got := textOf(again.Status.Message); !strings.Contains(got, "could not be used") || !strings.Contains(got, bad.says) {
			t.Errorf("%s: the status says %q; want what was wrong (%q)", bad.name, got, bad.says)
		}
		if got := interruptID(t, again); got != id {
			t.Errorf("%s: the task now waits on %s, want %s", bad.name, got, id)
		}
		if task := getTask(t, c, asked.TaskID); task.Status.State != sdk.TaskStateInputRequired {
			t.Errorf("%s: the stored task is %s", bad.name, task.Status.State)
		}
	}
	// A part that is null is refused before it reaches the task.
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-null","role":"ROLE_USER","taskId":%q,"contextId":%q,"parts":[null]}}}`, asked.TaskID, asked.ContextID)
	if status, got := rawPost(t, hs, "/", "", []byte(body)); status != http.StatusOK || !strings.Contains(got, "null") || !strings.Contains(got, "-32602") {
		t.Errorf("an answer with a null part: %d %s; want invalid params naming the null part", status, got)
	}
	if task := getTask(t, c, asked.TaskID); task.Status.State != sdk.TaskStateInputRequired {
		t.Errorf("after an answer with a null part the task is %s, want input-required", task.Status.State)
	}
	if p.transfers.Load() != 0 || p.model.Load() != models {
		t.Fatalf("bad answers ran the turn: %d transfers, %d model calls (was %d)", p.transfers.Load(), p.model.Load(), models)
	}
	good := answersPart(map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"approved": true}})
	done := lastStatus(t, stream(t, c, reply(good, asked)))
	if done.Status.State != sdk.TaskStateCompleted || p.transfers.Load() != 1 {
		t.Fatalf("the good answer: %s (%q) with %d transfers, want completed with 1", done.Status.State, textOf(done.Status.Message), p.transfers.Load())
	}
}

// Two answers sent at once to one waiting task approve one transfer: it
// runs once, however the two race.
func TestConcurrentAnswersRunOnce(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		p := newPayer(t, idModes[i%len(idModes)].id)
		s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		hs := startServer(t, s)
		c1, c2 := clientAs(t, hs, ""), clientAs(t, hs, "")
		asked := lastStatus(t, stream(t, c1, userText("pay 100")))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j, c := range []*a2aclient.Client{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				m := userText("yes")
				if j == 1 {
					m = sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(map[string]any{"approved": true}))
				}
				tryStream(c, reply(m, asked))
			}()
		}
		close(start)
		wg.Wait()
		if got := p.transfers.Load(); got != 1 {
			t.Errorf("round %d: %d transfers, want 1", i, got)
		}
		if task := getTask(t, c1, asked.TaskID); task.Status.State != sdk.TaskStateCompleted {
			t.Errorf("round %d: the task is %s, want completed", i, task.Status.State)
		}
	}
}

// Cancelling a running task cancels its run and everything under it: the
// sub-agent's tool sees its context end; the task ends canceled with the
// usage spent so far.
func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	b := newBlocker(t)
	s, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "")
	run := startStream(t, c, userText("wait"))
	id := run.id(t)
	b.waitStarted(t)
	task, err := c.CancelTask(context.Background(), &sdk.CancelTaskRequest{ID: id})
	if err != nil {
		t.Fatalf("CancelTask: %v", err)
	}
	if task.Status.State != sdk.TaskStateCanceled {
		t.Errorf("CancelTask answered %s, want canceled", task.Status.State)
	}
	select {
	case err := <-b.toolErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the sub-agent's tool ended with %v, want its context cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sub-agent's tool was not cancelled")
	}
	run.wait(t)
	if run.err != nil {
		t.Errorf("the cancelled stream: %v", run.err)
	} else if st := lastStatus(t, run.evs); st.Status.State != sdk.TaskStateCanceled {
		t.Errorf("the stream ended %s, want canceled", st.Status.State)
	}
	task = getTask(t, c, id)
	if task.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("the task is %s, want canceled", task.Status.State)
	}
	if req, in := usageOf(t, task.Metadata); req != 2 || in != 20 {
		t.Errorf("the cancelled task's usage: %d requests, %d input tokens; want the lead's and the sub-agent's calls (2, 20)", req, in)
	}
	// Cancelling again is answered with the cancelled task.
	if again, err := c.CancelTask(context.Background(), &sdk.CancelTaskRequest{ID: id}); err != nil || again.Status.State != sdk.TaskStateCanceled {
		t.Errorf("a second CancelTask: %v, %v", again, err)
	}
}

// Cancelling a task that waits for input ends it: the answer that comes
// after runs nothing.
func TestCancelWaitingTask(t *testing.T) {
	t.Parallel()
	p := newPayer(t, idModes[0].id)
	s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "")
	asked := lastStatus(t, stream(t, c, userText("pay 100")))
	task, err := c.CancelTask(context.Background(), &sdk.CancelTaskRequest{ID: asked.TaskID})
	if err != nil || task.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("CancelTask: %v, %v; want canceled", task, err)
	}
	if task.Metadata[a2a.InterruptsKey] != nil {
		t.Errorf("the cancelled task still lists questions: %v", task.Metadata[a2a.InterruptsKey])
	}
	if _, err := tryStream(c, reply(userText("yes"), asked)); err == nil {
		t.Error("an answer to a cancelled task was taken")
	}
	if p.transfers.Load() != 0 {
		t.Error("the answer to a cancelled task ran the transfer")
	}
}

// Close, while a run is in progress, cancels it and returns, and every
// goroutine of the server's ends.
func TestCloseDuringRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := newBlocker(t)
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithStore(st), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := a2aclient.NewFromEndpoints(context.Background(),
		[]*sdk.AgentInterface{sdk.NewAgentInterface(hs.URL, sdk.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()

	run := startStream(t, c, userText("wait"))
	id := run.id(t)
	b.waitStarted(t)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-b.toolErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the tool ended with %v, want its context cancelled", err)
		}
	default:
		t.Error("Close returned before the run ended")
	}
	run.wait(t)
	if run.err == nil {
		if last := lastStatus(t, run.evs); last.Status.State != sdk.TaskStateCanceled {
			t.Errorf("the stream ended %s (%q), want canceled", last.Status.State, textOf(last.Status.Message))
		}
	}
	// The task is kept as cancelled: a server on the same store says so.
	s2, err := a2a.NewPerTask(b.build, a2a.WithName("lead"), a2a.WithStore(st), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	hs2 := httptest.NewServer(s2)
	defer hs2.Close()
	c2, err := a2aclient.NewFromEndpoints(context.Background(),
		[]*sdk.AgentInterface{sdk.NewAgentInterface(hs2.URL, sdk.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Destroy()
	deadline := time.Now().Add(2 * time.Second)
	for {
		task, err := c2.GetTask(context.Background(), &sdk.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("GetTask after Close: %v", err)
		}
		if task.Status.State == sdk.TaskStateCanceled {
			if msg := textOf(task.Status.Message); !strings.Contains(msg, "shut") {
				t.Errorf("the task was cancelled with %q; want it to say the server shut down", msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close the task is %s (%q), want canceled", task.Status.State, textOf(task.Status.Message))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A closed server refuses new requests.
	if status, _ := rawPost(t, hs, "/", "", []byte(`{}`)); status != http.StatusServiceUnavailable {
		t.Errorf("a request after Close: %d, want 503", status)
	}
}

// panicky panics on its first run and answers after.
type panicky struct{ runs atomic.Int64 }

func (p *panicky) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	if p.runs.Add(1) == 1 {
		panic("the secret is 42")
	}
	return agent.Output{Answer: "fine"}, nil
}

func (p *panicky) Name() string { return "panicky" }

// A served agent that panics fails its task with a message that says so,
// without the panic's value; the server goes on serving.
func TestPanickingAgent(t *testing.T) {
	t.Parallel()
	a := &panicky{}
	var logged lockedBuffer
	s, err := a2a.NewServer(a, a2a.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "")
	st := lastStatus(t, stream(t, c, userText("hi")))
	if st.Status.State != sdk.TaskStateFailed {
		t.Fatalf("a panicking agent's task: %s, want failed", st.Status.State)
	}
	if msg := textOf(st.Status.Message); !strings.Contains(msg, "panic") || strings.Contains(msg, "42") {
		t.Errorf("the failed task says %q; want that the agent panicked, without what it said", msg)
	}
	if !strings.Contains(logged.String(), "the secret is 42") {
		t.Errorf("the server's log lacks the panic: %s", logged.String())
	}
	if st := lastStatus(t, stream(t, c, userText("again"))); st.Status.State != sdk.TaskStateCompleted {
		t.Errorf("after a panic: %s, want completed", st.Status.State)
	}
}

// lockedBuffer is a log's destination that goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A tool of a served agent that panics fails the call, not the server.
func TestPanickingTool(t *testing.T) {
	t.Parallel()
	boom := tool.Must(tool.New("boom", "Explodes.", func(ctx context.Context, _ struct{}) (string, error) {
		panic("kaboom")
	}))
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("the tool said: " + last.Content)}, nil
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "b1", Name: "boom", Arguments: json.RawMessage(`{}`)})}, nil
	})
	s, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("bomber"), agent.WithTools(boom))
	}, a2a.WithName("bomber"), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c := clientAs(t, startServer(t, s), "")
	st := lastStatus(t, stream(t, c, userText("hi")))
	if st.Status.State != sdk.TaskStateCompleted && st.Status.State != sdk.TaskStateFailed {
		t.Errorf("a panicking tool's task: %s", st.Status.State)
	}
	if st := lastStatus(t, stream(t, c, userText("again"))); st.Status.State == "" {
		t.Error("no status after a panicking tool")
	}
}

// ListTasks pages through an owner's tasks, its page tokens taking the
// listing on from where it stopped, filters by context, and refuses a
// token it did not give.
func TestListTasksPagesAndFilters(t *testing.T) {
	t.Parallel()
	e := &echo{}
	s, err := a2a.NewServer(e, a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	ctx := context.Background()
	made := map[sdk.TaskID]string{}
	for i := range 7 {
		m := userText(fmt.Sprint("task ", i))
		m.ContextID = "c1"
		if i >= 4 {
			m.ContextID = "c2"
		}
		st := lastStatus(t, stream(t, alice, m))
		made[st.TaskID] = m.ContextID
	}
	for range 2 {
		m := userText("bob's")
		m.ContextID = "c1"
		stream(t, bob, m)
	}

	seen := map[sdk.TaskID]bool{}
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the listing does not end")
		}
		page, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Tasks) > 3 {
			t.Fatalf("page %d has %d tasks, asked for 3", pages, len(page.Tasks))
		}
		if page.TotalSize != 7 {
			t.Errorf("page %d: totalSize %d, want 7", pages, page.TotalSize)
		}
		for _, task := range page.Tasks {
			if _, ok := made[task.ID]; !ok {
				t.Errorf("alice lists task %s, not hers", task.ID)
			}
			if seen[task.ID] {
				t.Errorf("task %s listed twice", task.ID)
			}
			seen[task.ID] = true
			if len(task.Artifacts) != 0 {
				t.Errorf("task %s listed with its artifacts, not asked for", task.ID)
			}
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	if len(seen) != len(made) {
		t.Errorf("the pages listed %d tasks, want %d", len(seen), len(made))
	}

	// A context filter fills its pages with that context's tasks.
	page, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{ContextID: "c2", PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 2 || page.TotalSize != 3 || page.NextPageToken == "" {
		t.Errorf("alice's first page of c2: %d tasks of %d, next %q; want 2 of 3 and a token", len(page.Tasks), page.TotalSize, page.NextPageToken)
	}
	n := len(page.Tasks)
	for page.NextPageToken != "" {
		page, err = alice.ListTasks(ctx, &sdk.ListTasksRequest{ContextID: "c2", PageSize: 2, PageToken: page.NextPageToken})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Tasks)
		for _, task := range page.Tasks {
			if task.ContextID != "c2" {
				t.Errorf("the c2 listing holds a task of %s", task.ContextID)
			}
		}
	}
	if n != 3 {
		t.Errorf("alice's c2 listing: %d tasks, want 3", n)
	}
	if page, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{IncludeArtifacts: true, Status: sdk.TaskStateCompleted}); err != nil || len(page.Tasks) != 7 || len(page.Tasks[0].Artifacts) != 1 {
		t.Errorf("alice's completed tasks with artifacts: %+v (%v)", page, err)
	}
	if page, err := bob.ListTasks(ctx, &sdk.ListTasksRequest{ContextID: "c1"}); err != nil || len(page.Tasks) != 2 || page.TotalSize != 2 {
		t.Errorf("bob's c1: %+v (%v), want his 2 tasks", page, err)
	}

	// A token is the server's: one made up, or another's, is refused.
	first, _ := alice.ListTasks(ctx, &sdk.ListTasksRequest{PageSize: 1})
	for _, bad := range []string{"not-a-token", "../../", strings.Repeat("z", 500), "%2F", "\x00"} {
		if _, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{PageToken: bad}); err == nil || !errors.Is(err, sdk.ErrInvalidParams) && !strings.Contains(err.Error(), "pageToken") {
			t.Errorf("page token %q: %v, want it refused", bad, err)
		}
	}
	if first == nil || first.NextPageToken == "" {
		t.Fatal("a page of 1 of 7 tasks gave no token")
	}
	if page, err := bob.ListTasks(ctx, &sdk.ListTasksRequest{PageToken: first.NextPageToken}); err == nil {
		t.Errorf("alice's page token, sent by bob, was taken: %d tasks", len(page.Tasks))
	}
	tampered := []byte(first.NextPageToken)
	tampered[0] ^= 1
	if _, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{PageToken: string(tampered)}); err == nil {
		t.Error("a damaged page token was taken")
	}
	for _, size := range []int{-1, 101} {
		if _, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{PageSize: size}); err == nil {
			t.Errorf("pageSize %d was taken", size)
		}
	}
	two := 2
	if page, err := alice.ListTasks(ctx, &sdk.ListTasksRequest{HistoryLength: &two, PageSize: 1}); err != nil || len(page.Tasks) != 1 || len(page.Tasks[0].History) > 2 {
		t.Errorf("a listing with historyLength 2: %+v (%v)", page, err)
	}
}

// A tool server serving a resident scoped per thread keeps a conversation
// per A2A context, per owner: a context's later message is sent to the
// child's model with that context's earlier ones and no other's.
func TestToolServerKeepsAConversationPerContext(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sent := map[string][]string{} // the last request's user messages, by the child's input
	newChild := func(scope string) (agent.Agent, error) {
		model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			var users []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser {
					users = append(users, taskText(m.Content))
				}
			}
			mu.Lock()
			sent[users[len(users)-1]] = users
			mu.Unlock()
			return provider.Response{Message: provider.AssistantMessage("noted"), Usage: provider.Usage{Requests: 1}}, nil
		})
		return agent.NewReact(model, agent.WithName("notes"))
	}
	expert, err := subagent.FromScoped("notes", "Keeps notes.", subagent.PerThread, newChild)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a2a.NewToolServer(expert, a2a.WithAuthorize(byHeader), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	alice, bob := clientAs(t, hs, "alice"), clientAs(t, hs, "bob")
	calls := map[string]bool{} // the tool call ids the sub-agents' events name
	say := func(c *a2aclient.Client, contextID, text string) {
		t.Helper()
		m := userText(text)
		m.ContextID = contextID
		evs := stream(t, c, m)
		if st := lastStatus(t, evs); st.Status.State != sdk.TaskStateCompleted {
			t.Fatalf("%q in %s: %s (%q)", text, contextID, st.Status.State, textOf(st.Status.Message))
		}
		for _, ev := range evs {
			if st, ok := ev.(*sdk.TaskStatusUpdateEvent); ok && st.Metadata[a2a.EventKey] != nil {
				raw, _ := json.Marshal(st.Metadata[a2a.EventKey])
				var e struct{ ParentToolCallID string }
				json.Unmarshal(raw, &e)
				if e.ParentToolCallID != "" {
					calls[e.ParentToolCallID] = true
				}
			}
		}
	}
	anon := clientAs(t, hs, "anonymous")
	say(alice, "x", "x1")
	say(alice, "y", "y1")
	say(bob, "x", "bob x1")
	say(alice, "x", "x2")
	say(alice, "y", "y2")
	say(bob, "x", "bob x2")
	// An anonymous caller (the owner "") naming, as its context, the name
	// alice's context x was kept under reaches nothing of hers.
	sum := sha256.Sum256([]byte("alice\x1fx"))
	say(anon, "a2a_"+hex.EncodeToString(sum[:16]), "anon 1")
	say(anon, "x", "anon x1")
	// Each message is a call of its own, as its sub-agent's events say.
	if len(calls) != 8 {
		t.Errorf("8 messages' sub-agents name %d tool calls: %v", len(calls), calls)
	}
	mu.Lock()
	defer mu.Unlock()
	for last, want := range map[string][]string{
		"x2":      {"x1", "x2"},
		"y2":      {"y1", "y2"},
		"bob x2":  {"bob x1", "bob x2"},
		"anon 1":  {"anon 1"},
		"anon x1": {"anon x1"},
	} {
		if got := sent[last]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("the child's model was sent %q with %q, want %q", last, got, want)
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// taskText is the task a sub-agent's child was handed: the text itself,
// or the "task" of the arguments' JSON for a child handed those.
func taskText(content string) string {
	var args struct {
		Task *string `json:"task"`
	}
	if json.Unmarshal([]byte(content), &args) == nil && args.Task != nil {
		return *args.Task
	}
	return content
}

// An answer that reaches a server as it closes leaves the task waiting,
// for a server on the same store to take it.
func TestAnswerDuringCloseKeepsTheTaskWaiting(t *testing.T) {
	t.Parallel()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := newPayer(t, idModes[0].id)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	hold := func(r *http.Request) (string, error) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
		return "alice", nil
	}
	s1, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithStore(st), a2a.WithAuthorize(hold), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs1 := startServer(t, s1)
	c1 := clientAs(t, hs1, "")
	asked := lastStatus(t, stream(t, c1, userText("pay 100")))

	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-late","role":"ROLE_USER","taskId":%q,"contextId":%q,"parts":[{"text":"yes"}]}}}`, asked.TaskID, asked.ContextID)
	answered := make(chan string, 1)
	go func() {
		r, _ := http.NewRequest("POST", hs1.URL, strings.NewReader(body))
		r.Header.Set("X-Hold", "1")
		r.Header.Set("Content-Type", "application/json")
		resp, err := hs1.Client().Do(r)
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- string(b)
	}()
	<-entered
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	got := <-answered
	if !strings.Contains(got, "shutting down") {
		t.Errorf("the late answer was told %s; want that the server is shutting down", got)
	}

	s2, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithStore(st), a2a.WithAuthorize(hold), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c2 := clientAs(t, startServer(t, s2), "")
	if task := getTask(t, c2, asked.TaskID); task.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("after an answer during Close the task is %s (%q), want input-required", task.Status.State, textOf(task.Status.Message))
	}
	done := lastStatus(t, stream(t, c2, reply(userText("yes"), asked)))
	if done.Status.State != sdk.TaskStateCompleted || p.transfers.Load() != 1 {
		t.Errorf("the answer to the next server: %s with %d transfers, want completed with 1", done.Status.State, p.transfers.Load())
	}
}

// A cancellation racing an answer leaves the task in a state that one of
// them explains: cancelled (the transfer run at most once, if the answer
// got in first), completed (the cancellation refused), when both were
// refused still waiting, or failed with nothing done (a race inside the
// SDK, rare); and never a second transfer.
func TestCancelRacesAnswer(t *testing.T) {
	t.Parallel()
	for i := range 10 {
		p := newPayer(t, idModes[i%len(idModes)].id)
		s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		c := clientAs(t, startServer(t, s), "")
		asked := lastStatus(t, stream(t, c, userText("pay 100")))
		var wg sync.WaitGroup
		var cancelErr, answerErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, cancelErr = c.CancelTask(context.Background(), &sdk.CancelTaskRequest{ID: asked.TaskID})
		}()
		go func() {
			defer wg.Done()
			_, answerErr = tryStream(c, reply(userText("yes"), asked))
		}()
		wg.Wait()
		task := getTask(t, c, asked.TaskID)
		for deadline := time.Now().Add(2 * time.Second); !task.Status.State.Terminal() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			task = getTask(t, c, asked.TaskID)
		}
		n := p.transfers.Load()
		switch st := task.Status.State; {
		case n > 1:
			t.Errorf("round %d: %d transfers", i, n)
		case st == sdk.TaskStateCanceled && cancelErr == nil:
		case st == sdk.TaskStateCompleted && n == 1 && cancelErr != nil:
		case st == sdk.TaskStateInputRequired && n == 0 && cancelErr != nil && answerErr != nil:
		case st == sdk.TaskStateFailed && n == 0 && cancelErr != nil:
			// The SDK's own race: the answer's run, started from the task
			// as it stood before the cancellation was stored, fails its
			// first write and the SDK stores the task failed. Nothing was
			// done, and the client is told.
		default:
			t.Errorf("round %d: the task is %s with %d transfers; the cancellation said %v, the answer %v", i, st, n, cancelErr, answerErr)
		}
	}
}

// Owners and contexts with bytes a store key cannot hold, or too many
// that need escaping, are kept apart and served like any other, without
// the store's errors reaching the client.
func TestOddOwnersAndContexts(t *testing.T) {
	t.Parallel()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	owners := map[string]string{"nul": "a\x00b\xff\x1f", "slashes": strings.Repeat("/", a2a.MaxOwnerBytes), "percent": strings.Repeat("%", a2a.MaxOwnerBytes)}
	odd := func(r *http.Request) (string, error) { return owners[r.Header.Get(ownerHeader)], nil }
	var mu sync.Mutex
	sent := map[string]int{} // how many user messages the child's model saw, by the last
	newChild := func(scope string) (agent.Agent, error) {
		return agent.NewReact(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			var users []string
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser {
					users = append(users, taskText(m.Content))
				}
			}
			mu.Lock()
			sent[users[len(users)-1]] = len(users)
			mu.Unlock()
			return provider.Response{Message: provider.AssistantMessage("noted")}, nil
		}), agent.WithName("notes"))
	}
	expert, err := subagent.FromScoped("notes", "Keeps notes.", subagent.PerThread, newChild, subagent.WithStore(st, "notes"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := a2a.NewToolServer(expert, a2a.WithAuthorize(odd), a2a.WithStore(st), a2a.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	hs := startServer(t, s)
	for name := range owners {
		c := clientAs(t, hs, name)
		for i, ctxID := range []string{"ctx\x00/\x1f", "ctx\x00/\x1f", "a2a_" + strings.Repeat("0", 32)} {
			m := userText(fmt.Sprint(name, " ", i))
			m.ContextID = ctxID
			evs, err := tryStream(c, m)
			if err != nil {
				t.Fatalf("owner %s, context %q: %v", name, ctxID, err)
			}
			if st := lastStatus(t, evs); st.Status.State != sdk.TaskStateCompleted {
				t.Fatalf("owner %s, context %q: %s (%q)", name, ctxID, st.Status.State, textOf(st.Status.Message))
			}
		}
		list, err := c.ListTasks(context.Background(), &sdk.ListTasksRequest{})
		if err != nil || len(list.Tasks) != 3 {
			t.Errorf("owner %s lists %v (%v), want its 3 tasks", name, list, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for name := range owners {
		// The second message in the odd context continues the first; the
		// third, in a context of its own, starts afresh.
		if sent[name+" 1"] != 2 || sent[name+" 2"] != 1 {
			t.Errorf("owner %s: the child saw %d and %d messages, want 2 and 1", name, sent[name+" 1"], sent[name+" 2"])
		}
	}
}
