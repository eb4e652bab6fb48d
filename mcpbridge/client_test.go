package mcpbridge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

func call(t *testing.T, reg *tool.Registry, name, args string) tool.Result {
	t.Helper()
	res, err := reg.Execute(context.Background(), []tool.Call{{ID: "c1", Name: name, Arguments: json.RawMessage(args)}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res[0]
}

func TestServerToolsJoinARegistry(t *testing.T) {
	c := inMemory(t, thirdPartyServer())
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	defs := map[string]tool.Definition{}
	for _, d := range reg.Definitions(context.Background()) {
		defs[d.Name] = d
	}
	if d := defs["echo"]; d.Description != "Echoes text." || !strings.Contains(string(d.Parameters), `"text"`) {
		t.Errorf("echo's definition %+v does not carry the server's description and schema", d)
	}
	if r := call(t, reg, "echo", `{"text":"hi"}`); r.IsError || r.Content != "echo: hi" {
		t.Errorf("echo: %+v", r)
	}
	r := call(t, reg, "fail", `{}`)
	if !r.IsError || !strings.Contains(r.Content, "disk quota exceeded") {
		t.Errorf("a server-side tool error: %+v, want an error result saying why", r)
	}
	r = call(t, reg, "sum", `{"a":2,"b":3}`)
	if r.IsError || !strings.Contains(r.Content, `"sum":5`) {
		t.Errorf("sum: %+v", r)
	}
	if g := jsonOf(t, r.Value); g != `{"sum":5}` {
		t.Errorf("structured content %s, want {\"sum\":5}", g)
	}
	// The server validates arguments: its refusal reaches the model.
	if r := call(t, reg, "echo", `{"text":7}`); !r.IsError {
		t.Errorf("bad arguments: %+v, want an error result", r)
	}
}

func TestAChildCallsAnMCPServersTools(t *testing.T) {
	c := inMemory(t, thirdPartyServer(), mcpbridge.WithToolFilter(func(n string) bool { return n == "echo" }))
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	model := fake.NewProvider(fake.Call("echo", `{"text":"ping"}`), fake.Text("done"))
	a, err := agent.NewReact(model, agent.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	reqs := model.Requests()
	last := reqs[len(reqs)-1].Request.Messages
	if m := last[len(last)-1]; m.Role != provider.RoleTool || m.Content != "echo: ping" {
		t.Errorf("the model read %+v, want the server's answer", m)
	}
	if n := len(reqs[0].Request.Tools); n != 1 {
		t.Errorf("the filter let %d tools through, want 1", n)
	}
}

func TestANameCollisionLeavesTheRegistryAlone(t *testing.T) {
	mine := tool.Func{Def: tool.Definition{Name: "echo", Description: "mine"}}
	reg, _ := tool.NewRegistry(mine)
	c := inMemory(t, thirdPartyServer())
	err := c.Register(reg)
	if err == nil || !strings.Contains(err.Error(), "memory") || !strings.Contains(err.Error(), "WithPrefix") {
		t.Fatalf("collision: %v, want an error naming the server and suggesting WithPrefix", err)
	}
	if reg.Len() != 1 {
		t.Errorf("the registry holds %d tools after a refused Register, want 1", reg.Len())
	}
	if tl, _ := reg.Lookup("echo"); tl.Definition().Description != "mine" {
		t.Error("the registered echo was replaced")
	}
	p := inMemory(t, thirdPartyServer(), mcpbridge.WithPrefix("tp_"))
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "tp_echo", `{"text":"x"}`); r.Content != "echo: x" {
		t.Errorf("prefixed call: %+v", r)
	}
}

func TestMalformedSchemaIsRefused(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "broken", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "weird", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":12}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	s.AddTool(&mcp.Tool{Name: "fine", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	_, err = mcpbridge.Connect(context.Background(), mcpbridge.SDKTransport("broken-server", ct))
	if err == nil || !strings.Contains(err.Error(), "broken-server") || !strings.Contains(err.Error(), `"weird"`) || !strings.Contains(err.Error(), "WithToolFilter") {
		t.Fatalf("malformed schema: %v, want an error naming the server, the tool and WithToolFilter", err)
	}
	t.Log(err)

	// Leaving the tool out makes the rest usable.
	c := inMemory(t, s, mcpbridge.WithToolFilter(func(n string) bool { return n != "weird" }))
	if n := len(c.Tools()); n != 1 {
		t.Errorf("%d tools, want 1", n)
	}
}

func TestLongResultsAreCapped(t *testing.T) {
	c := inMemory(t, thirdPartyServer(), mcpbridge.WithMaxResultBytes(1000))
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	r := call(t, reg, "big", `{"bytes":100000}`)
	if len(r.Content) > 1000 || !strings.Contains(r.Content, "[truncated") || !strings.Contains(r.Content, "memory") {
		t.Errorf("a 100 kB result came back as %d bytes: %q…", len(r.Content), r.Content[:min(80, len(r.Content))])
	}
	if !json.Valid([]byte(`"` + r.Content[:len(r.Content)-200] + `"`)) {
		t.Error("the cut is not on a UTF-8 boundary")
	}
}

func TestA50MBResultIsAClearErrorAndOtherServersGoOn(t *testing.T) {
	reg, _ := tool.NewRegistry()
	huge, err := mcpbridge.Connect(context.Background(), mcpbridge.SDKTransport("huge-server", hugeReplyServer(t, 50_000_000)), mcpbridge.WithPrefix("huge_"))
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Close()
	other := inMemory(t, thirdPartyServer(), mcpbridge.WithPrefix("other_"))
	for _, c := range []*mcpbridge.Client{huge, other} {
		if err := c.Register(reg); err != nil {
			t.Fatal(err)
		}
	}
	r := call(t, reg, "huge_big", `{}`)
	t.Log(r.Content)
	if !r.IsError || !strings.Contains(r.Content, "huge-server") {
		t.Errorf("50 MB result: error %v, %d bytes %q…, want an error result naming the server", r.IsError, len(r.Content), r.Content[:min(200, len(r.Content))])
	}
	if len(r.Content) > mcpbridge.DefaultMaxResultBytes {
		t.Errorf("the model was handed %d bytes", len(r.Content))
	}
	if r := call(t, reg, "other_echo", `{"text":"still here"}`); r.Content != "echo: still here" {
		t.Errorf("another server's tool after the failure: %+v", r)
	}
	if n := reg.Len(); n != len(huge.Tools())+len(other.Tools()) {
		t.Errorf("the registry holds %d tools", n)
	}
}

// hugeReplyServer is a minimal MCP server, speaking newline-delimited
// JSON-RPC as stdio does, whose one tool answers with a text of n bytes,
// written in one piece (an SDK server would spend seconds encoding it).
func hugeReplyServer(t *testing.T, n int) mcp.Transport {
	t.Helper()
	toServer, fromClient := io.Pipe()
	fromServer, toClient := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer toClient.Close()
		sc := bufio.NewScanner(toServer)
		for sc.Scan() {
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
				continue // a notification
			}
			reply := func(result string) string {
				return `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + "}\n"
			}
			var out string
			switch req.Method {
			case "initialize":
				out = reply(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"huge","version":"1"}}`)
			case "tools/list":
				out = reply(`{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}`)
			case "tools/call":
				out = reply(`{"content":[{"type":"text","text":"` + strings.Repeat("x", n) + `"}]}`)
			default:
				out = `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32601,"message":"method not found"}}` + "\n"
			}
			if _, err := io.WriteString(toClient, out); err != nil {
				return // the client hung up
			}
		}
	}()
	t.Cleanup(func() {
		toServer.Close()
		<-done
	})
	return &mcp.IOTransport{Reader: fromServer, Writer: fromClient}
}

func TestListChangedRereadsTheTools(t *testing.T) {
	s := thirdPartyServer()
	c := inMemory(t, s)
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	mcp.AddTool(s, &mcp.Tool{Name: "late", Description: "Added later."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late answer"}}}, nil, nil
		})
	eventually(t, "the new tool in the registry", func() bool { _, ok := reg.Lookup("late"); return ok })
	if r := call(t, reg, "late", `{}`); r.Content != "late answer" {
		t.Errorf("late: %+v", r)
	}
	s.RemoveTools("echo")
	eventually(t, "echo gone from the registry", func() bool { _, ok := reg.Lookup("echo"); return !ok })
	for _, d := range reg.Definitions(context.Background()) {
		if d.Name == "echo" {
			t.Error("echo still offered")
		}
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}
}

func TestServerThatExitsDuringInit(t *testing.T) {
	cmd := serverCmd(t, "exit-during-init")
	start := time.Now()
	_, err := mcpbridge.Connect(context.Background(), mcpbridge.Cmd(cmd))
	if err == nil {
		t.Fatal("connected to a server that exited")
	}
	t.Log(err)
	for _, want := range []string{cmd.Path, "configuration file missing", "check that it is an MCP server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	if cmd.ProcessState == nil {
		t.Error("the process was not waited for")
	}
}

func TestStdioServerCrashAndHangAreErrorResults(t *testing.T) {
	cmd := serverCmd(t, "tools")
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.Cmd(cmd), mcpbridge.WithCallTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "echo", `{"text":"over stdio"}`); r.Content != "echo: over stdio" {
		t.Errorf("echo: %+v", r)
	}
	r := call(t, reg, "hang", `{}`)
	if !r.IsError || !strings.Contains(r.Content, "did not answer") || !strings.Contains(r.Content, cmd.Path) {
		t.Errorf("hung call: %+v", r)
	}
	t.Log(r.Content)
	r = call(t, reg, "crash", `{}`)
	t.Log(r.Content)
	if !r.IsError || !strings.Contains(r.Content, cmd.Path) {
		t.Errorf("crashed server: %+v", r)
	}
	if r := call(t, reg, "echo", `{"text":"x"}`); !r.IsError {
		t.Errorf("a call after the crash: %+v", r)
	}
	if err := c.Close(); err != nil {
		t.Logf("Close after a crash: %v", err)
	}
	if cmd.ProcessState == nil {
		t.Error("the process was not waited for")
	}
}

func TestCloseEndsTheServerProcess(t *testing.T) {
	cmd := serverCmd(t, "tools")
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.Cmd(cmd))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
		t.Errorf("process state after Close: %v", cmd.ProcessState)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if got := c.Tools()[0].(tool.Conditional).Available(context.Background()); got {
		t.Error("a closed client's tool is still offered")
	}
}

func TestHTTPEndpointAnsweringHTML(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>Welcome to our website</body></html>")
	}))
	defer hs.Close()
	_, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL), mcpbridge.WithConnectTimeout(5*time.Second))
	if err == nil || !strings.Contains(err.Error(), hs.URL) || !strings.Contains(err.Error(), "streamable HTTP endpoint") {
		t.Fatalf("HTML endpoint: %v, want an error naming the URL and what it should be", err)
	}
	t.Log(err)
	hs.CloseClientConnections()
}

func TestConsumeOverHTTP(t *testing.T) {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return thirdPartyServer() }, nil))
	defer hs.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "echo", `{"text":"web"}`); r.Content != "echo: web" {
		t.Errorf("echo over HTTP: %+v", r)
	}
}

func TestConnectRefusesBadOptions(t *testing.T) {
	for _, o := range []mcpbridge.Option{
		mcpbridge.WithCallTimeout(0), mcpbridge.WithConnectTimeout(-1), mcpbridge.WithMaxResultBytes(10),
		mcpbridge.WithMaxTools(0), mcpbridge.WithToolFilter(nil), mcpbridge.WithPrefix("bad prefix"),
	} {
		if _, err := mcpbridge.Connect(context.Background(), mcpbridge.Command("true"), o); err == nil {
			t.Error("an invalid option was accepted")
		}
	}
	if _, err := mcpbridge.Connect(context.Background(), mcpbridge.Transport{}); err == nil {
		t.Error("the zero Transport was accepted")
	}
}

func TestTooManyTools(t *testing.T) {
	_, err := connectErr(thirdPartyServer(), mcpbridge.WithMaxTools(2))
	if err == nil || !strings.Contains(err.Error(), "more than 2 tools") {
		t.Fatalf("too many tools: %v", err)
	}
}

func connectErr(s *mcp.Server, opts ...mcpbridge.Option) (*mcpbridge.Client, error) {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.SDKTransport("memory", ct), opts...)
	if err == nil {
		c.Close()
		return nil, errors.New("connected")
	}
	return c, err
}

func TestLongDescriptionsAreCapped(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "wordy", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "wordy", Description: strings.Repeat("very ", 100_000), InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	c := inMemory(t, s)
	d := c.Tools()[0].Definition().Description
	if len(d) > 4<<10 || !strings.Contains(d, "[truncated") {
		t.Errorf("a 500 kB description became %d bytes", len(d))
	}
}

func TestCapWithALongServerName(t *testing.T) {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := thirdPartyServer().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Wait()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.SDKTransport(strings.Repeat("server", 100), ct), mcpbridge.WithMaxResultBytes(256))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if r := call(t, reg, "big", `{"bytes":1000}`); len(r.Content) > 256 || !strings.HasSuffix(r.Content, "[truncated]") {
		t.Errorf("capped to %d bytes: %q", len(r.Content), r.Content)
	}
}

// An HTTP server's 50 MB JSON reply is cut off at the bound, not read
// whole, and the call is a clear error result.
func TestA50MBReplyOverHTTP(t *testing.T) {
	hs := hugeReplyHTTP(50_000_000)
	defer hs.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	r := call(t, reg, "echo", `{"text":"x"}`)
	t.Log(r.Content)
	if !r.IsError || !strings.Contains(r.Content, hs.URL) || !strings.Contains(r.Content, "larger than") {
		t.Errorf("50 MB over HTTP: error %v, %d bytes %q…", r.IsError, len(r.Content), r.Content[:min(200, len(r.Content))])
	}
}

// hugeReplyHTTP serves thirdPartyServer over HTTP, but answers every
// tool call with a JSON reply of more than n bytes.
func hugeReplyHTTP(n int) *httptest.Server {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return thirdPartyServer() }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(body, &req) == nil && req.Method == "tools/call" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`, req.ID, strings.Repeat("x", n))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sdk.ServeHTTP(w, r)
	}))
}

func TestListChangedOverHTTP(t *testing.T) {
	s := thirdPartyServer()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer hs.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	mcp.AddTool(s, &mcp.Tool{Name: "late", Description: "Added later."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late answer"}}}, nil, nil
		})
	eventually(t, "the new tool in the registry", func() bool { _, ok := reg.Lookup("late"); return ok })
}

func TestHugeSchemaIsRefused(t *testing.T) {
	props := map[string]any{}
	for i := range 5000 {
		props[fmt.Sprintf("field_%d", i)] = map[string]any{"type": "string", "description": "a field"}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "huge", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "everything", InputSchema: map[string]any{"type": "object", "properties": props}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	_, err := connectErr(s)
	if err == nil || !strings.Contains(err.Error(), `"everything"`) || !strings.Contains(err.Error(), "WithToolFilter") {
		t.Fatalf("a 200 kB schema: %v", err)
	}
}

// A server's input schema is as untrusted as a model's: one within the
// size bound but built to make checking a value run away (nesting past the
// depth bound, a reference out of the schema, allOf branches past the
// weight bound) is refused, naming the tool, and the server's other tools
// stay usable without it.
func TestHostileSchemaIsRefused(t *testing.T) {
	deep := `{"type":"object"}`
	for range 40 {
		deep = `{"type":"object","properties":{"x":` + deep + `}}`
	}
	// Each level checks the value twice through the next: 2^12 checks of
	// one place in a few hundred bytes.
	defs := `"l12":{"type":"object"}`
	for i := range 12 {
		defs += fmt.Sprintf(`,"l%d":{"allOf":[{"$ref":"#/$defs/l%d"},{"$ref":"#/$defs/l%d"}]}`, i, i+1, i+1)
	}
	wide := `{"type":"object","$ref":"#/$defs/l0","$defs":{` + defs + `}}`
	for name, schema := range map[string]string{
		"deep":     deep,
		"external": `{"type":"object","properties":{"x":{"$ref":"https://example.invalid/schema.json"}}}`,
		"weighty":  wide,
	} {
		t.Run(name, func(t *testing.T) {
			if len(schema) > jsonschema.MaxUntrustedBytes {
				t.Fatalf("the %s schema is %d bytes: it must pass the size bound to test the others", name, len(schema))
			}
			s := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "1"}, nil)
			s.AddTool(&mcp.Tool{Name: "trap", InputSchema: json.RawMessage(schema)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{}, nil
				})
			s.AddTool(&mcp.Tool{Name: "fine", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{}, nil
				})
			_, err := connectErr(s)
			if err == nil || !strings.Contains(err.Error(), `"trap"`) || !strings.Contains(err.Error(), "WithToolFilter") {
				t.Fatalf("a hostile schema: %v, want an error naming the tool and WithToolFilter", err)
			}
			c := inMemory(t, s, mcpbridge.WithToolFilter(func(n string) bool { return n != "trap" }))
			if n := len(c.Tools()); n != 1 {
				t.Errorf("%d tools, want 1", n)
			}
		})
	}
}
