package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A validated one-shot reviewer served over MCP, called by the SDK's own
// client: the answer comes back as text and as structured content.
func ExampleServer() {
	model := fake.NewProvider(fake.Text(`{"status":"success","summary":"no problems","findings":null}`))
	reviewer, err := subagent.FromReact("reviewer", "Reviews a text.", model, nil, subagent.WithReport())
	if err != nil {
		log.Fatal(err)
	}
	srv := mcpbridge.NewServer("experts", "1.0.0")
	if err := srv.AddTool(reviewer); err != nil {
		log.Fatal(err)
	}

	// In a program: srv.ServeStdio(ctx), or srv.Handler(nil) for HTTP.
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		log.Fatal(err)
	}
	client, err := mcp.NewClient(&mcp.Implementation{Name: "editor", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { client.Close(); ss.Wait() }()

	res, err := client.CallTool(ctx, &mcp.CallToolParams{Name: "reviewer", Arguments: map[string]any{"task": "Review: hello"}})
	if err != nil {
		log.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	fmt.Println("error:", res.IsError)
	fmt.Println("structured:", string(b))
	// Output:
	// error: false
	// structured: {"findings":null,"status":"success","summary":"no problems"}
}

// An agent calls an MCP server's tool like any other.
func ExampleConnect() {
	// Someone else's MCP server; in a program, Command or HTTP reaches it.
	server := mcp.NewServer(&mcp.Implementation{Name: "weather", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "forecast", Description: "Tomorrow's weather for a city."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			City string `json:"city"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Sunny in " + in.City}}}, nil, nil
		})
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		log.Fatal(err)
	}

	weather, err := mcpbridge.Connect(ctx, mcpbridge.SDKTransport("weather", ct), mcpbridge.WithPrefix("weather_"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { weather.Close(); ss.Wait() }()
	reg, _ := tool.NewRegistry()
	if err := weather.Register(reg); err != nil {
		log.Fatal(err)
	}

	model := fake.NewProvider(fake.Call("weather_forecast", `{"city":"Lyon"}`), fake.Text("Take sunglasses."))
	a, _ := agent.NewReact(model, agent.WithRegistry(reg))
	out, err := a.Run(ctx, agent.Input{Text: "What should I pack for Lyon?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tool said:", out.Messages[len(out.Messages)-2].Content)
	fmt.Println("answer:", out.Answer)
	// Output:
	// tool said: Sunny in Lyon
	// answer: Take sunglasses.
}
