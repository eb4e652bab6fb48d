package mcpbridge_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/tool"
)

// The benchmarks make one tool call at a time through an in-memory
// transport, which frames JSON-RPC as newline-delimited JSON over a pipe,
// exactly as stdio does, with both ends in this process. The tool echoes
// its argument. Comparing them gives the cost deputy adds to the SDK:
//
//	SDK:    SDK client   -> SDK server (a raw ToolHandler)
//	Client: deputy Client (tool.Registry.Execute) -> SDK server
//	Server: SDK client   -> deputy Server (a tool.Tool)
//	Bridge: deputy Client -> deputy Server, deputy on both sides

const benchArgs = `{"text":"hello"}`

func rawEchoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	return s
}

func deputyEchoServer(b *testing.B) *mcp.Server {
	s := mcpbridge.NewServer("bench", "1")
	echo := tool.Func{
		Def: tool.Definition{Name: "echo", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: string(c.Arguments)}, nil
		},
	}
	if err := s.AddTool(echo); err != nil {
		b.Fatal(err)
	}
	return s.MCP()
}

func connectSDK(b *testing.B, s *mcp.Server) *mcp.ClientSession {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

func connectDeputy(b *testing.B, s *mcp.Server) *tool.Registry {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		b.Fatal(err)
	}
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.SDKTransport("bench", ct))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(); _ = ss.Wait() })
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		b.Fatal(err)
	}
	return reg
}

func benchSDK(b *testing.B, cs *mcp.ClientSession) {
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(benchArgs)}
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

func benchDeputy(b *testing.B, reg *tool.Registry) {
	ctx := context.Background()
	calls := []tool.Call{{ID: "c", Name: "echo", Arguments: json.RawMessage(benchArgs)}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := reg.Execute(ctx, calls)
		if err != nil || res[0].IsError {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkCallSDK(b *testing.B)    { benchSDK(b, connectSDK(b, rawEchoServer())) }
func BenchmarkCallClient(b *testing.B) { benchDeputy(b, connectDeputy(b, rawEchoServer())) }
func BenchmarkCallServer(b *testing.B) { benchSDK(b, connectSDK(b, deputyEchoServer(b))) }
func BenchmarkCallBridge(b *testing.B) { benchDeputy(b, connectDeputy(b, deputyEchoServer(b))) }
