package mcpbridge_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
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

// protocols are the MCP versions a client may speak: the newest, where a
// call asks by returning its questions and the client calls again with
// the answers, and the one before, where the server asks during the call.
var protocols = []string{"", "2025-11-25"}

// bank serves a sub-agent, "payer", whose model asks for one transfer that
// needs a person's approval, then answers with its result, and a bare
// "transfer" tool that needs approval; it counts model calls and transfers.
type bank struct {
	srv       *mcpbridge.Server
	model     atomic.Int64
	transfers atomic.Int64
}

func newBank(t *testing.T, id func(int64) string, opts ...mcpbridge.ServerOption) *bank {
	t.Helper()
	b := &bank{srv: mcpbridge.NewServer("bank", "1", opts...)}
	transfer := tool.RequireApproval(tool.Must(tool.New("transfer", "Moves money.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		b.transfers.Add(1)
		return "moved " + strconv.Itoa(in.Amount), nil
	})), "moves money", 0)
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := b.model.Add(1)
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("done: " + last.Content), Usage: provider.Usage{Requests: 1, InputTokens: 20, OutputTokens: 3}}, nil
		}
		call := provider.ToolCall{ID: id(n), Name: "transfer", Arguments: json.RawMessage(`{"amount":100}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: provider.Usage{Requests: 1, InputTokens: 10, OutputTokens: 2}}, nil
	})
	payer, err := subagent.FromFactory("payer", "Pays what it is asked to.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model, agent.WithName("payer"), agent.WithTools(transfer))
	})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, b.srv, payer, transfer)
	return b
}

// asker connects an SDK client speaking version (empty: the newest) to s,
// whose elicitation handler, when answer is not nil, answers with it and
// counts the questions.
type asker struct {
	cs    *mcp.ClientSession
	asked atomic.Int64
	mu    sync.Mutex
	last  *mcp.ElicitParams
}

func newAsker(t *testing.T, s *mcpbridge.Server, version string, answer *mcp.ElicitResult, opts *mcp.ClientOptions) *asker {
	t.Helper()
	a := &asker{}
	if opts == nil {
		opts = &mcp.ClientOptions{}
	}
	if answer != nil {
		opts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			a.asked.Add(1)
			a.mu.Lock()
			a.last = req.Params
			a.mu.Unlock()
			return answer, nil
		}
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	a.cs = cs
	return a
}

func protocolName(v string) string {
	if v == "" {
		return "newest protocol"
	}
	return v
}

func TestAnApprovalIsAskedThroughElicitationAndRunsOnce(t *testing.T) {
	approve := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true}}
	for _, version := range protocols {
		for _, mode := range idModes {
			t.Run(protocolName(version)+"/"+mode.name, func(t *testing.T) {
				b := newBank(t, mode.id)
				a := newAsker(t, b.srv, version, approve, nil)
				res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "payer", Arguments: map[string]any{"task": "pay 100"}})
				if err != nil {
					t.Fatal(err)
				}
				if got := text(t, res); res.IsError || !strings.Contains(got, "moved 100") {
					t.Errorf("the approved call answered %q (error %v), want the transfer's result", got, res.IsError)
				}
				if n := b.transfers.Load(); n != 1 {
					t.Errorf("%d transfers, want 1", n)
				}
				if n := a.asked.Load(); n != 1 {
					t.Errorf("the client was asked %d times, want 1", n)
				}
				// The first run asked the model once and stopped at the
				// question; the resumed run replays that answer and asks
				// the model once more, after the transfer.
				if n := b.model.Load(); n != 2 {
					t.Errorf("%d model calls, want 2", n)
				}
				// What the call spent, both rounds, is reported once.
				var usage map[string]float64
				if err := json.Unmarshal([]byte(jsonOf(t, res.Meta[mcpbridge.UsageMetaKey])), &usage); err != nil {
					t.Fatal(err)
				}
				if want := map[string]float64{"requests": 2, "inputTokens": 30, "outputTokens": 5, "totalTokens": 35}; !maps.Equal(usage, want) {
					t.Errorf("the call reports usage %v, want %v: both model calls, once", usage, want)
				}
				a.mu.Lock()
				defer a.mu.Unlock()
				if a.last != nil && !strings.Contains(a.last.Message, "moves money") || !strings.Contains(jsonOf(t, a.last.RequestedSchema), `"approved"`) {
					t.Errorf("the question %q with schema %s does not say what it asks", a.last.Message, jsonOf(t, a.last.RequestedSchema))
				}
			})
		}
	}
}

func TestABareApprovalToolIsAskedToo(t *testing.T) {
	for _, version := range protocols {
		t.Run(protocolName(version), func(t *testing.T) {
			b := newBank(t, idModes[0].id)
			a := newAsker(t, b.srv, version, &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true}}, nil)
			res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "transfer", Arguments: map[string]any{"amount": 7}})
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); res.IsError || got != "moved 7" {
				t.Errorf("the approved call answered %q (error %v)", got, res.IsError)
			}
			if n := b.transfers.Load(); n != 1 {
				t.Errorf("%d transfers, want 1", n)
			}
		})
	}
}

func TestADeclinedApprovalRunsNothing(t *testing.T) {
	for _, version := range protocols {
		for _, action := range []string{"decline", "cancel"} {
			t.Run(protocolName(version)+"/"+action, func(t *testing.T) {
				b := newBank(t, idModes[0].id)
				a := newAsker(t, b.srv, version, &mcp.ElicitResult{Action: action}, nil)
				res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "transfer", Arguments: map[string]any{"amount": 7}})
				if err != nil {
					t.Fatal(err)
				}
				if got := text(t, res); !res.IsError || !strings.Contains(got, "transfer") {
					t.Errorf("a %sd approval answered %q (error %v), want an error result", action, got, res.IsError)
				}
				if n := b.transfers.Load(); n != 0 {
					t.Errorf("%d transfers after the person said no", n)
				}
			})
		}
	}
}

func TestAClientThatCannotBeAskedReadsWhatToDo(t *testing.T) {
	for _, version := range protocols {
		t.Run(protocolName(version), func(t *testing.T) {
			b := newBank(t, idModes[0].id)
			a := newAsker(t, b.srv, version, nil, nil)
			for _, name := range []string{"payer", "transfer"} {
				res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"task": "pay", "amount": 1}})
				if err != nil {
					t.Fatal(err)
				}
				got := text(t, res)
				if !res.IsError || !strings.Contains(got, "approval") || !strings.Contains(got, "supports elicitation") || !strings.Contains(got, "moves money") {
					t.Errorf("%s: %q, want an error result saying what the tool needs and what to do", name, got)
				}
				if strings.Contains(got, "tool.Resume") || strings.Contains(got, "run the same turn") {
					t.Errorf("%s: %q gives Go advice an MCP client cannot follow", name, got)
				}
			}
			if n := b.transfers.Load(); n != 0 {
				t.Errorf("%d transfers without approval", n)
			}
		})
	}
}

// TestAnAnswerIsUsedOnce plays a client that answers by hand: it calls,
// reads the question, calls again with the answer, and then tries the
// same answer again, and from another session.
func TestAnAnswerIsUsedOnce(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			b := newBank(t, mode.id)
			manual := func() *asker {
				return newAsker(t, b.srv, "", nil, &mcp.ClientOptions{
					Capabilities:   &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}},
					MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
				})
			}
			a := manual()
			ctx := context.Background()
			args := map[string]any{"task": "pay 100"}
			first, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "payer", Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			if !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
				t.Fatalf("the first call answered %s, want one question", jsonOf(t, first))
			}
			answers := mcp.InputResponseMap{}
			for id := range first.InputRequests {
				answers[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true}}
			}
			retry := &mcp.CallToolParams{Name: "payer", Arguments: args, InputResponses: answers, RequestState: first.RequestState}
			if other := manual(); true {
				res, err := other.cs.CallTool(ctx, retry)
				if err != nil {
					t.Fatal(err)
				}
				if !res.IsError || b.transfers.Load() != 0 {
					t.Errorf("another session's use of the answer: %s, %d transfers; want it refused", jsonOf(t, res), b.transfers.Load())
				}
			}
			res, err := a.cs.CallTool(ctx, retry)
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); res.IsError || !strings.Contains(got, "moved 100") {
				t.Errorf("the answered call: %q", got)
			}
			again, err := a.cs.CallTool(ctx, retry)
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, again); !again.IsError || !strings.Contains(got, "call the tool again") {
				t.Errorf("the same answer twice: %q, want an error result", got)
			}
			if n := b.transfers.Load(); n != 1 {
				t.Errorf("%d transfers, want 1", n)
			}
		})
	}
}

func TestProgressGoesOutAsLogNotifications(t *testing.T) {
	b := newBank(t, idModes[0].id, mcpbridge.WithLogNotifications())
	var mu sync.Mutex
	var logs []string
	a := newAsker(t, b.srv, "2025-11-25", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true}}, &mcp.ClientOptions{
		//lint:ignore SA1019 the log notifications under test
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, req.Params.Logger+": "+jsonOf(t, req.Params.Data))
		},
	})
	ctx := context.Background()
	//lint:ignore SA1019 the log notifications under test
	if err := a.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "payer", Arguments: map[string]any{"task": "pay"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sub-agent's end logged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(logs, "\n"), "sub-agent finished")
	})
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(logs, "\n")
	for _, want := range []string{`payer: "sub-agent payer started"`, `payer: "calling transfer"`} {
		if !strings.Contains(all, want) {
			t.Errorf("the logs do not say %s:\n%s", want, all)
		}
	}
}

func TestAnApprovalOverStreamableHTTP(t *testing.T) {
	for _, version := range protocols {
		t.Run(protocolName(version), func(t *testing.T) {
			b := newBank(t, idModes[2].id)
			hs := httptest.NewServer(b.srv.Handler(nil))
			defer hs.Close()
			var asked atomic.Int64
			c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked.Add(1)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true}}, nil
				},
			})
			cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "payer", Arguments: map[string]any{"task": "pay 100"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); res.IsError || !strings.Contains(got, "moved 100") {
				t.Errorf("the approved call over HTTP answered %q", got)
			}
			if b.transfers.Load() != 1 || asked.Load() != 1 {
				t.Errorf("%d transfers after %d questions, want 1 and 1", b.transfers.Load(), asked.Load())
			}
		})
	}
}

// nagger asks a person again and again, each answer bringing a new
// question.
type nagger struct{}

func (nagger) Definition() tool.Definition {
	return tool.Definition{Name: "nag", Description: "Asks forever.", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (nagger) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	for {
		if _, err := tool.Ask(ctx, call, tool.Question{Message: "once more?"}); err != nil {
			return tool.Result{}, err
		}
	}
}

func TestAToolThatNeverStopsAskingIsStopped(t *testing.T) {
	for _, version := range protocols {
		t.Run(protocolName(version), func(t *testing.T) {
			s := mcpbridge.NewServer("nag", "1")
			mustAdd(t, s, nagger{})
			a := newAsker(t, s, version, &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil)
			res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nag", Arguments: map[string]any{}})
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); !res.IsError || !strings.Contains(got, "rounds of questions") {
				t.Errorf("a tool asking for ever: %q, want an error result saying it was stopped", got)
			}
			if n := a.asked.Load(); n != 8 {
				t.Errorf("the client was asked %d times, want 8", n)
			}
		})
	}
}
