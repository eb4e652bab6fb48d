package mcpbridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// noter is an expert's model that answers "noted" and keeps what it was
// sent.
type noter struct {
	mu   sync.Mutex
	reqs [][]provider.Message
}

func (n *noter) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	n.mu.Lock()
	n.reqs = append(n.reqs, req.Messages)
	n.mu.Unlock()
	return provider.Response{Message: provider.AssistantMessage("noted"), StopReason: provider.StopEndTurn}, nil
}

func (n *noter) requests() [][]provider.Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([][]provider.Message(nil), n.reqs...)
}

var secretOf = regexp.MustCompile(`secret-(\w+)-(\d)`)

// checkOneOwner fails when a conversation held the secrets of two owners.
func checkOneOwner(t *testing.T, reqs [][]provider.Message) {
	t.Helper()
	for _, msgs := range reqs {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Content)
		}
		found := secretOf.FindAllStringSubmatch(b.String(), -1)
		for i, f := range found {
			if f[1] != found[0][1] || f[2] != fmt.Sprint(i) {
				t.Fatalf("one conversation holds %v: want one owner's secrets, all of them, in order", found)
			}
		}
	}
}

// An expert scoped PerThread keeps one conversation per MCP session.
func TestExpertScopedPerSession(t *testing.T) {
	m := &noter{}
	expert, err := subagent.FromScoped("notes", "Keeps notes.", subagent.PerThread, func(string) (agent.Agent, error) { return agent.NewReact(m) })
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, expert)
	var wg sync.WaitGroup
	for c := range 8 {
		cs := sdkClient(t, s, nil)
		wg.Go(func() {
			for i := range 3 {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "notes", Arguments: map[string]any{"task": fmt.Sprintf("secret-s%d-%d", c, i)}})
				if err != nil || res.IsError {
					t.Errorf("session %d call %d: %v %+v", c, i, err, res)
					return
				}
			}
		})
	}
	wg.Wait()
	reqs := m.requests()
	checkOneOwner(t, reqs)
	if n := len(reqs); n != 24 || len(reqs[23]) != 5 && len(reqs[0]) != 1 {
		t.Fatalf("%d expert requests", n)
	}
}

type tenantKey struct{}

// WithCallContext gives scopes what the request says: here one
// conversation per tenant, across sessions, and a call without a tenant is
// refused before the tool runs.
func TestExpertScopedByCallContext(t *testing.T) {
	m := &noter{}
	byTenant := func(ctx context.Context) (string, error) { return ctx.Value(tenantKey{}).(string), nil }
	expert, err := subagent.FromScoped("notes", "Keeps notes.", byTenant, func(string) (agent.Agent, error) { return agent.NewReact(m) })
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1", mcpbridge.WithCallContext(func(ctx context.Context, req *mcp.CallToolRequest) (context.Context, error) {
		// A real server reads req.Extra.TokenInfo; the test names the
		// tenant in the call's _meta.
		tenant, _ := req.Params.GetMeta()["tenant"].(string)
		if tenant == "" {
			return nil, errors.New("no tenant: sign in")
		}
		return context.WithValue(ctx, tenantKey{}, tenant), nil
	}))
	mustAdd(t, s, expert)
	call := func(cs *mcp.ClientSession, tenant, task string) *mcp.CallToolResult {
		t.Helper()
		p := &mcp.CallToolParams{Name: "notes", Arguments: map[string]any{"task": task}}
		if tenant != "" {
			p.Meta = mcp.Meta{"tenant": tenant}
		}
		res, err := cs.CallTool(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := sdkClient(t, s, nil), sdkClient(t, s, nil)
	call(a, "acme", "secret-acme-0")
	call(b, "acme", "secret-acme-1") // another session, the same tenant
	call(b, "initech", "secret-initech-0")
	if res := call(a, "", "secret-none-0"); !res.IsError || !strings.Contains(text(t, res), "sign in") {
		t.Fatalf("a call without a tenant: %+v", res)
	}
	reqs := m.requests()
	checkOneOwner(t, reqs)
	if len(reqs) != 3 || len(reqs[1]) != 3 {
		t.Fatalf("the expert's requests %v: want acme's second call to see acme's first", reqs)
	}
}

// A client that asks for progress and then reads nothing more does not
// hold a shared expert: its call ends, and other clients are served.
func TestStalledProgressReaderDoesNotHoldTheExpert(t *testing.T) {
	m := &noter{}
	r, err := agent.NewReact(m, agent.WithName("expert"))
	if err != nil {
		t.Fatal(err)
	}
	expert, err := subagent.FromAgent("expert", "Answers.", r)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpbridge.NewServer("test", "1")
	mustAdd(t, s, expert)

	// The stalled client speaks JSON-RPC on pipes it stops reading.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss, err := s.MCP().Connect(context.Background(), &mcp.IOTransport{Reader: inR, Writer: outW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		outR.Close() // the stalled writes fail; the session ends
		inW.Close()
		_ = ss.Wait()
	}()
	lines := bufio.NewReader(outR)
	send := func(msg string) {
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stalled","version":"1"}}}`)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"expert","arguments":{"task":"first"},"_meta":{"progressToken":"p"}}}`)
	// From here on nothing is read. Its call runs and its progress has
	// nowhere to go.
	deadline := time.Now().Add(10 * time.Second)
	for len(m.requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}

	cs := sdkClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: "expert", Arguments: map[string]any{"task": "second"}}
	p.SetProgressToken("q")
	res, err := cs.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("another client's call while a stalled one asked for progress: %v %+v", err, res)
	}
	if n := len(m.requests()); n != 2 {
		t.Fatalf("the expert answered %d calls, want 2", n)
	}
}
