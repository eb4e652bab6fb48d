package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/mcpbridge"
)

// serveForTest is the test binary acting as an MCP server over stdio.
func serveForTest(mode string) int {
	switch mode {
	case "exit-during-init":
		fmt.Fprintln(os.Stderr, "test server: configuration file missing, giving up")
		return 3
	case "tools":
		if err := thirdPartyServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown MCPBRIDGE_TEST_SERVER", mode)
	return 2
}

// serverCmd starts this test binary as an MCP server of the given kind.
func serverCmd(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "MCPBRIDGE_TEST_SERVER="+mode)
	return cmd
}

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type sizeIn struct {
	Bytes int `json:"bytes"`
}

type sumOut struct {
	Sum int `json:"sum"`
}

// thirdPartyServer is an MCP server written with the SDK alone, standing
// for someone else's server.
func thirdPartyServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "third-party", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("disk quota exceeded")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sum", Description: "Adds two numbers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			A int `json:"a"`
			B int `json:"b"`
		}) (*mcp.CallToolResult, sumOut, error) {
			return nil, sumOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Returns a text of the given size."},
		func(_ context.Context, _ *mcp.CallToolRequest, in sizeIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("é", in.Bytes/2)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Never answers."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			select {} // ignores cancellation, as a hung server does
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Ends the server's process."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			os.Exit(7)
			return nil, nil, nil
		})
	return s
}

// inMemory connects a Client to srv in this process; both end with the
// test.
func inMemory(t *testing.T, srv *mcp.Server, opts ...mcpbridge.Option) *mcpbridge.Client {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mcpbridge.Connect(ctx, mcpbridge.SDKTransport("memory", ct), opts...)
	if err != nil {
		cancel()
		_ = ss.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = ss.Close()
		_ = ss.Wait()
		cancel()
	})
	return c
}

// sdkClient connects the SDK's own client to a deputy Server in this
// process.
func sdkClient(t *testing.T, s *mcpbridge.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// text returns the text of a result's content.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content %T, want text", c)
		}
		b.WriteString(tc.Text)
	}
	return b.String()
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
