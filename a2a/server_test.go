package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// idModes are the ways real providers name tool calls: afresh on every
// request, not at all, or from call_0 again in every response.
var idModes = []struct {
	name string
	id   func(n int64) string
}{
	{"fresh ids", func(n int64) string { return "call_" + strconv.FormatInt(1000+n, 10) }},
	{"no ids", func(int64) string { return "" }},
	{"ids restarting at call_0", func(int64) string { return "call_0" }},
}

// payer is a lead whose model asks for one approved transfer and then
// answers with its result; it counts model calls and transfers.
type payer struct {
	build     a2a.Builder // a fresh lead for each task
	model     atomic.Int64
	transfers atomic.Int64
}

func newPayer(t testing.TB, id func(int64) string) *payer {
	t.Helper()
	p := &payer{}
	transfer := tool.RequireApproval(tool.Must(tool.New("transfer", "Moves money.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		p.transfers.Add(1)
		return "moved " + strconv.Itoa(in.Amount), nil
	})), "moves money", 0)
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := p.model.Add(1)
		usage := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done: " + last.Content), Usage: usage}, nil
		}
		call := provider.ToolCall{ID: id(n), Name: "transfer", Arguments: json.RawMessage(`{"amount":100}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
	p.build = func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("payer"), agent.WithTools(transfer))
	}
	return p
}

func sqliteStore(t testing.TB) *store.Store {
	t.Helper()
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serve starts s on a local server and returns a client of the SDK made
// from the card it serves, speaking the binding asked for.
func serve(t testing.TB, s *a2a.Server, binding sdk.TransportProtocol) (*a2aclient.Client, *httptest.Server) {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	card, err := agentcard.DefaultResolver.Resolve(context.Background(), hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	var iface *sdk.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == binding && iface == nil {
			iface = i
		}
	}
	if iface == nil {
		t.Fatalf("the card lists no %s interface: %+v", binding, card.SupportedInterfaces)
	}
	c, err := a2aclient.NewFromEndpoints(context.Background(), []*sdk.AgentInterface{iface})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() })
	return c, hs
}

func userText(text string) *sdk.Message {
	return sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart(text))
}

// stream sends m and gathers the events until the stream ends.
func stream(t testing.TB, c *a2aclient.Client, m *sdk.Message) []sdk.Event {
	t.Helper()
	var evs []sdk.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &sdk.SendMessageRequest{Message: m}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func lastStatus(t testing.TB, evs []sdk.Event) *sdk.TaskStatusUpdateEvent {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if s, ok := evs[i].(*sdk.TaskStatusUpdateEvent); ok {
			return s
		}
	}
	t.Fatalf("no status update in %d events", len(evs))
	return nil
}

func textOf(m *sdk.Message) string {
	if m == nil {
		return ""
	}
	var s string
	for _, p := range m.Parts {
		s += p.Text()
	}
	return s
}

// An approval asked by a served agent becomes input-required; the
// client's "yes" on the same task continues the run from its journal:
// the model is not asked again for the step it answered, the transfer
// runs once, and the task completes with the answer and its usage —
// whatever ids the model gives its calls, over both bindings.
func TestInputRequiredAndContinue(t *testing.T) {
	for _, binding := range []sdk.TransportProtocol{sdk.TransportProtocolJSONRPC, sdk.TransportProtocolHTTPJSON} {
		for _, mode := range idModes {
			t.Run(string(binding)+"/"+mode.name, func(t *testing.T) {
				p := newPayer(t, mode.id)
				s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithDescription("Pays."))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				c, _ := serve(t, s, binding)

				evs := stream(t, c, userText("pay 100"))
				st := lastStatus(t, evs)
				if st.Status.State != sdk.TaskStateInputRequired {
					t.Fatalf("first message ended %s (%q), want input-required", st.Status.State, textOf(st.Status.Message))
				}
				if q := textOf(st.Status.Message); q == "" {
					t.Fatal("input-required with no question")
				}
				if p.transfers.Load() != 0 {
					t.Fatal("the transfer ran before it was approved")
				}
				var sawTool bool
				for _, ev := range evs {
					if s, ok := ev.(*sdk.TaskStatusUpdateEvent); ok && s.Metadata[a2a.EventKey] != nil {
						sawTool = true
					}
				}
				if !sawTool {
					t.Error("no deputy event reached the client while the run worked")
				}

				answer := userText("yes")
				answer.TaskID, answer.ContextID = st.TaskID, st.ContextID
				evs = stream(t, c, answer)
				done := lastStatus(t, evs)
				if done.Status.State != sdk.TaskStateCompleted {
					t.Fatalf("the answer ended %s (%q), want completed", done.Status.State, textOf(done.Status.Message))
				}
				if got := p.transfers.Load(); got != 1 {
					t.Errorf("%d transfers, want 1", got)
				}
				if got := p.model.Load(); got != 2 {
					t.Errorf("%d model calls, want 2: the step answered before the question was asked again", got)
				}
				task, err := c.GetTask(context.Background(), &sdk.GetTaskRequest{ID: st.TaskID})
				if err != nil {
					t.Fatal(err)
				}
				if task.Status.State != sdk.TaskStateCompleted || len(task.Artifacts) != 1 {
					t.Fatalf("task %s with %d artifacts, want completed with the answer", task.Status.State, len(task.Artifacts))
				}
				if got := task.Artifacts[0].Parts[0].Text(); got != "done: moved 100" {
					t.Errorf("answer %q, want %q", got, "done: moved 100")
				}
				u, _ := json.Marshal(task.Metadata[a2a.UsageKey])
				var usage struct {
					Requests, InputTokens int64
					Earlier               struct{ Requests, InputTokens int64 }
				}
				json.Unmarshal(u, &usage)
				// The task's whole work, both model calls, the one made
				// before the question marked (replayed, not paid again).
				if usage.Requests != 2 || usage.InputTokens != 20 || usage.Earlier.Requests != 1 || usage.Earlier.InputTokens != 10 {
					t.Errorf("usage of the answered task %s, want 2 requests and 20 input tokens, 1 and 10 of them earlier", u)
				}
			})
		}
	}
}

// A task waits on a durable store: a second server on the same store
// (the first one gone) takes the answer and finishes the task.
func TestTaskSurvivesRestart(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := sqliteStore(t)
			p := newPayer(t, mode.id)
			s1, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			c1, hs1 := serve(t, s1, sdk.TransportProtocolJSONRPC)
			asked := lastStatus(t, stream(t, c1, userText("pay 100")))
			hs1.Close()
			s1.Close()

			p2 := newPayer(t, mode.id)
			p2.model.Store(p.model.Load())
			s2, err := a2a.NewPerTask(p2.build, a2a.WithName("payer"), a2a.WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			c2, _ := serve(t, s2, sdk.TransportProtocolJSONRPC)
			answer := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(map[string]any{"approved": true}))
			answer.TaskID, answer.ContextID = asked.TaskID, asked.ContextID
			done := lastStatus(t, stream(t, c2, answer))
			if done.Status.State != sdk.TaskStateCompleted {
				t.Fatalf("after the restart: %s (%q), want completed", done.Status.State, textOf(done.Status.Message))
			}
			if got := p.transfers.Load() + p2.transfers.Load(); got != 1 {
				t.Errorf("%d transfers, want 1", got)
			}
			if got := p2.model.Load() - p.model.Load(); got != 1 {
				t.Errorf("the restarted server asked the model %d times, want 1", got)
			}
		})
	}
}

// A bad answer leaves the task waiting, and says why.
func TestBadAnswerAsksAgain(t *testing.T) {
	p := newPayer(t, idModes[0].id)
	s, err := a2a.NewPerTask(p.build, a2a.WithName("payer"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serve(t, s, sdk.TransportProtocolJSONRPC)
	asked := lastStatus(t, stream(t, c, userText("pay 100")))
	m := userText("perhaps")
	m.TaskID, m.ContextID = asked.TaskID, asked.ContextID
	again := lastStatus(t, stream(t, c, m))
	if again.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("after a bad answer: %s, want input-required again", again.Status.State)
	}
	if got := textOf(again.Status.Message); !containsAll(got, "perhaps", "yes or no") {
		t.Errorf("the status says %q; want it to name the answer and what to send", got)
	}
	m = userText("no")
	m.TaskID, m.ContextID = asked.TaskID, asked.ContextID
	done := lastStatus(t, stream(t, c, m))
	if done.Status.State != sdk.TaskStateCompleted || p.transfers.Load() != 0 {
		t.Fatalf("a rejected transfer: %s with %d transfers, want completed with none", done.Status.State, p.transfers.Load())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

var _ = errors.New
