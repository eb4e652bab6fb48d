package mcpbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func mustAdd(t *testing.T, s *mcpbridge.Server, tools ...tool.Tool) {
	t.Helper()
	for _, tl := range tools {
		if err := s.AddTool(tl); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServedToolsKeepTheirSchemas(t *testing.T) {
	model := fake.NewProvider()
	reviewer, err := subagent.FromReact("reviewer", "Reviews a change.", model, nil, subagent.WithReport())
	if err != nil {
		t.Fatal(err)
	}
	params := json.RawMessage(`{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`)
	plain, err := subagent.FromFactory("plain", "Answers in prose.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return nil, errors.New("not called")
	}, subagent.WithParams(params))
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, reviewer, plain)
	cs := sdkClient(t, s, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
	}
	if len(got) != 2 {
		t.Fatalf("listed %d tools, want 2", len(got))
	}
	if g, w := jsonOf(t, got["plain"].InputSchema), jsonOf(t, mapOf(t, params)); g != w {
		t.Errorf("input schema %s, want %s", g, w)
	}
	if got["plain"].OutputSchema != nil {
		t.Errorf("a tool whose answer is not validated declares output schema %v", got["plain"].OutputSchema)
	}
	if g, w := jsonOf(t, got["reviewer"].OutputSchema), jsonOf(t, mapOf(t, json.RawMessage(subagent.ReportSchema))); g != w {
		t.Errorf("output schema %s, want ReportSchema %s", g, w)
	}
}

func mapOf(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestValidatedSubagentReturnsStructuredContent(t *testing.T) {
	model := fake.NewProvider(fake.Text(`{"status":"success","summary":"looks right","findings":null}`).For("reviewer"))
	reviewer, err := subagent.FromReact("reviewer", "Reviews a change.", model, nil, subagent.WithReport())
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, reviewer)
	cs := sdkClient(t, s, nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "reviewer", Arguments: map[string]any{"task": "review"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("error result: %s", text(t, res))
	}
	want := `{"findings":null,"status":"success","summary":"looks right"}`
	if g := jsonOf(t, res.StructuredContent); g != want {
		t.Errorf("structured content %s, want %s", g, want)
	}
}

func TestResidentExpertKeepsItsConversationAcrossClientCalls(t *testing.T) {
	model := fake.NewProvider(fake.Text("Paris.").For("expert"), fake.Text("About 2.1 million.").For("expert"))
	expert, err := agent.NewReact(model, agent.WithName("expert"))
	if err != nil {
		t.Fatal(err)
	}
	consult, err := subagent.FromAgent("expert", "Answers geography questions.", expert, subagent.WithInputFromArgs(func(args json.RawMessage) (agent.Input, error) {
		var a struct{ Task string }
		err := json.Unmarshal(args, &a)
		return agent.Input{Text: a.Task}, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, consult)
	cs := sdkClient(t, s, nil)
	for _, q := range []string{"Capital of France?", "Its population?"} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "expert", Arguments: map[string]any{"task": q}})
		if err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
	}
	if n := len(expert.History()); n != 4 {
		t.Errorf("the expert remembers %d messages, want 4 (two questions, two answers)", n)
	}
	reqs := model.RequestsFor("expert")
	if len(reqs) != 2 || len(reqs[1].Messages) < 3 {
		t.Fatalf("the second call's request did not carry the first exchange: %+v", reqs)
	}
}

func TestToolFailuresAreToolErrorResults(t *testing.T) {
	correctable := tool.Func{Def: tool.Definition{Name: "bad_args", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{}, tool.Correctable(errors.New("the date must be in the past"))
		}}
	outage := tool.Func{Def: tool.Definition{Name: "outage", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{}, errors.New("database unreachable")
		}}
	panics := tool.Func{Def: tool.Definition{Name: "panics", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { panic("boom") }}
	typed := tool.Must(tool.New("typed", "Needs a number.", func(_ context.Context, in struct {
		N int `json:"n"`
	}) (string, error) {
		return "ok", nil
	}))
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, correctable, outage, panics, typed)
	cs := sdkClient(t, s, nil)
	for _, tc := range []struct {
		name string
		args any
		want string
	}{
		{"bad_args", map[string]any{}, "the date must be in the past"},
		{"outage", map[string]any{}, "database unreachable"},
		{"panics", map[string]any{}, "panicked: boom"},
		{"typed", map[string]any{"n": "seven"}, "invalid arguments"},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.name, Arguments: tc.args})
		if err != nil {
			t.Errorf("%s: protocol error %v, want a tool error result", tc.name, err)
			continue
		}
		if !res.IsError || !strings.Contains(text(t, res), tc.want) {
			t.Errorf("%s: result %q (error %v), want an error result saying %q", tc.name, text(t, res), res.IsError, tc.want)
		}
	}
}

func TestAddToolRefusesWhatMCPCannotServe(t *testing.T) {
	s := mcpbridge.NewServer("test", "1")
	arr := tool.Func{Def: tool.Definition{Name: "arr", Parameters: json.RawMessage(`{"type":"array"}`)}}
	if err := s.AddTool(arr); err == nil || !strings.Contains(err.Error(), "object schema") {
		t.Errorf("array schema: %v, want an error asking for an object schema", err)
	}
	if err := s.AddTool(nil); err == nil {
		t.Error("AddTool(nil) succeeded")
	}
	ok := tool.Func{Def: tool.Definition{Name: "ok"}}
	if err := s.AddTool(ok); err != nil {
		t.Fatalf("a tool without parameters: %v", err)
	}
	if err := s.AddTool(ok); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("second tool named ok: %v", err)
	}
}

// progressRecorder collects the progress notifications a client receives.
type progressRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progressRecorder) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.mu.Unlock()
}

func (p *progressRecorder) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.msgs...)
}

func TestProgressReachesAClientThatAsked(t *testing.T) {
	model := fake.NewProvider(
		fake.Call("lookup", `{}`).For("researcher"),
		fake.Text("found it").For("researcher"),
	)
	lookup := tool.Func{Def: tool.Definition{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{Content: "42"}, nil }}
	reg, _ := tool.NewRegistry(lookup)
	researcher, err := subagent.FromReact("researcher", "Looks things up.", model, reg)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, researcher)
	rec := &progressRecorder{}
	cs := sdkClient(t, s, &mcp.ClientOptions{ProgressNotificationHandler: rec.handle})

	params := &mcp.CallToolParams{Name: "researcher", Arguments: map[string]any{"task": "find it"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	// Notifications travel beside the result; wait for the last one.
	eventually(t, "the sub-agent's finish as progress", func() bool {
		m := rec.all()
		return len(m) > 0 && m[len(m)-1] == "sub-agent finished"
	})
	got := strings.Join(rec.all(), " | ")
	for _, want := range []string{"sub-agent researcher started", "calling lookup"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress %q lacks %q", got, want)
		}
	}

	// Without a token, no notifications.
	before := len(rec.all())
	model.Add(fake.Text("again").For("researcher"))
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "researcher", Arguments: map[string]any{"task": "x"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(rec.all()); n != before {
		t.Errorf("a call without a progress token got %d notifications", n-before)
	}
}

func TestMCPCancellationCancelsTheChild(t *testing.T) {
	started := make(chan struct{})
	childErr := make(chan error, 1)
	slow := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		close(started)
		<-ctx.Done()
		childErr <- ctx.Err()
		return agent.Output{}, ctx.Err()
	})
	consult, err := subagent.FromFactory("slow", "Takes forever.", func(context.Context, json.RawMessage) (agent.Agent, error) { return slow, nil })
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, consult)
	cs := sdkClient(t, s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"task": "x"}})
		done <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not end")
	}
	select {
	case err := <-childErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("child ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the MCP cancellation did not reach the child")
	}
}

func TestServeOverStreamableHTTP(t *testing.T) {
	model := fake.NewProvider(fake.Text("over HTTP").For("helper"))
	consult, err := subagent.FromReact("helper", "Helps.", model, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, consult)
	hs := httptest.NewServer(s.Handler(nil))
	defer hs.Close()
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "helper", Arguments: map[string]any{"task": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := text(t, res); g != "over HTTP" {
		t.Errorf("result %q", g)
	}
}

func TestServeTheSpawnTool(t *testing.T) {
	model := fake.NewProvider(fake.Text("forked and done").For("subagent"))
	reg, _ := tool.NewRegistry()
	spawner, err := subagent.NewSpawner(model, reg)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, spawner)
	cs := sdkClient(t, s, nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: subagent.SpawnToolName, Arguments: map[string]any{"task": "do it"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(t, res), "forked and done") {
		t.Errorf("spawn over MCP: %q (error %v)", text(t, res), res.IsError)
	}
}

func TestAnAnswerThatMissesTheSchemaIsAnErrorResult(t *testing.T) {
	model := fake.NewProvider(fake.Text("no JSON here").For("counter"), fake.Text("still none").For("counter"))
	counter, err := subagent.FromReact("counter", "Counts.", model, nil,
		subagent.WithOutputSchema(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, counter)
	cs := sdkClient(t, s, nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "counter", Arguments: map[string]any{"task": "count"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.StructuredContent != nil || !strings.Contains(text(t, res), "validation failed") {
		t.Errorf("result %q (error %v, structured %v), want an error result saying the validation failed", text(t, res), res.IsError, res.StructuredContent)
	}
}

func TestUsageTravelsInMeta(t *testing.T) {
	model := fake.NewProvider(fake.Text("fine").For("helper"))
	helper, err := subagent.FromReact("helper", "Helps.", model, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := tool.Func{Def: tool.Definition{Name: "plain"}, Fn: func(context.Context, tool.Call) (tool.Result, error) {
		return tool.Result{Content: "no model here"}, nil
	}}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, helper, plain)
	cs := sdkClient(t, s, nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "helper", Arguments: map[string]any{"task": "help"}})
	if err != nil {
		t.Fatal(err)
	}
	u, ok := res.Meta[mcpbridge.UsageMetaKey].(map[string]any)
	if !ok || u["requests"] != float64(1) || !(u["outputTokens"].(float64) > 0) ||
		u["totalTokens"] != u["inputTokens"].(float64)+u["outputTokens"].(float64) {
		t.Errorf("_meta %v, want the child's usage under %q", res.Meta, mcpbridge.UsageMetaKey)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Meta[mcpbridge.UsageMetaKey]; ok {
		t.Errorf("a call that used no model reports usage: %v", res.Meta)
	}
}

// The usage in _meta has the names of AG-UI's TokenUsage, every count
// included, the cache counts only when not zero.
func TestUsageMetaHasAGUINames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		usage provider.Usage
		want  map[string]any
	}{
		{
			name:  "no cache",
			usage: provider.Usage{InputTokens: 12, OutputTokens: 5, Requests: 1},
			want:  map[string]any{"requests": 1.0, "inputTokens": 12.0, "outputTokens": 5.0, "totalTokens": 17.0},
		},
		{
			name:  "cache read and written",
			usage: provider.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000, CacheWriteTokens: 150, Requests: 2},
			want: map[string]any{"requests": 2.0, "inputTokens": 1200.0, "outputTokens": 80.0, "totalTokens": 1280.0,
				"cachedInputTokens": 1000.0, "cacheWriteInputTokens": 150.0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spent := tool.Func{Def: tool.Definition{Name: "spent"}, Fn: func(context.Context, tool.Call) (tool.Result, error) {
				return tool.Result{Content: "done", Usage: tc.usage}, nil
			}}
			s := mcpbridge.NewServer("test", "1")
			mustAdd(t, s, spent)
			res, err := sdkClient(t, s, nil).CallTool(context.Background(), &mcp.CallToolParams{Name: "spent"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Meta[mcpbridge.UsageMetaKey]); diff != "" {
				t.Errorf("_meta[%q] (-want +got):\n%s", mcpbridge.UsageMetaKey, diff)
			}
		})
	}
}

// A resident expert with a durable store keeps its conversation across a
// restart of the server: a new server, a new agent and a new store on the
// same file carry on the conversation the first one had with the client.
func TestResidentExpertKeepsItsConversationAcrossServerRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "expert.db")
	// serve builds the whole server side from nothing but the file, as a
	// restarted process would, and returns the model it answers with.
	serve := func(answer string) (*fake.Provider, *mcp.ClientSession, func()) {
		t.Helper()
		b, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(b)
		if err != nil {
			t.Fatal(err)
		}
		model := fake.NewProvider(fake.Text(answer).For("expert"))
		expert, err := agent.NewReact(model, agent.WithName("expert"))
		if err != nil {
			t.Fatal(err)
		}
		consult, err := subagent.FromAgent("expert", "Answers geography questions.", expert,
			subagent.WithStore(st, "geography"),
			subagent.WithInputFromArgs(func(args json.RawMessage) (agent.Input, error) {
				var a struct{ Task string }
				err := json.Unmarshal(args, &a)
				return agent.Input{Text: a.Task}, err
			}))
		if err != nil {
			t.Fatal(err)
		}
		s := mcpbridge.NewServer("test", "1")
		mustAdd(t, s, consult)
		ct, stt := mcp.NewInMemoryTransports()
		ctx := context.Background()
		ss, err := s.MCP().Connect(ctx, stt, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		return model, cs, func() {
			_ = cs.Close()
			_ = ss.Wait()
			if err := st.Close(); err != nil {
				t.Errorf("closing the store: %v", err)
			}
		}
	}
	ask := func(cs *mcp.ClientSession, q string) string {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "expert", Arguments: map[string]any{"task": q}})
		if err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
		return text(t, res)
	}

	_, cs, stop := serve("Paris.")
	if got := ask(cs, "Capital of France?"); got != "Paris." {
		t.Errorf("first answer %q", got)
	}
	stop()

	model, cs, stop := serve("About 2.1 million.")
	defer stop()
	if got := ask(cs, "Its population?"); got != "About 2.1 million." {
		t.Errorf("second answer %q", got)
	}
	reqs := model.RequestsFor("expert")
	if len(reqs) != 1 {
		t.Fatalf("the restarted expert made %d model requests, want 1", len(reqs))
	}
	var got []string
	for _, m := range reqs[0].Messages {
		if m.Role == provider.RoleSystem {
			continue
		}
		got = append(got, string(m.Role)+": "+m.Content)
	}
	want := []string{"user: Capital of France?", "assistant: Paris.", "user: Its population?"}
	if !slices.Equal(got, want) {
		t.Errorf("after the restart the model received %q, want the earlier exchange first: %q", got, want)
	}
}
