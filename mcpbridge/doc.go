// Package mcpbridge connects deputy to the Model Context Protocol, both
// ways, over the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// Serving: a Server publishes tool.Tool values — sub-agents of each form,
// the spawn tool, any tool — as MCP tools, over stdio (ServeStdio) or the
// streamable HTTP transport (Handler), so that editors, desktop assistants
// and other agent kits can consult deputy's agents. A validated sub-agent
// declares its output schema and returns structured content; progress
// reaches clients that ask for it; an MCP cancellation cancels the child.
// A resident expert (subagent.FromAgent) keeps one conversation across all
// of the clients' calls; with subagent.WithStore it keeps it across restarts
// of the server too, since each call reads the stored conversation and
// writes the new one back. To give each client its own, scope it:
// subagent.FromScoped with subagent.PerThread keeps one conversation per
// MCP session, and with WithCallContext any scope of the application's
// (the user behind a token, a tenant) can read the request. Progress is
// sent beside the call, never in its way: a client that stops reading
// loses notifications but holds no expert back.
//
//	srv := mcpbridge.NewServer("experts", "1.0.0")
//	if err := srv.AddTool(reviewer); err != nil { ... }
//	err := srv.ServeStdio(ctx)
//
// Consuming: Connect reaches an MCP server (Command for a local process,
// HTTP for a URL) and its tools become tool.Tool values, registered with
// Client.Register, so that any agent or child can call them. Every way a
// server can fail — an error result, a crash, a hang, a reply too large —
// reaches the model as an error result naming the server, and the run goes
// on.
//
//	c, err := mcpbridge.Connect(ctx, mcpbridge.Command("npx", "@modelcontextprotocol/server-filesystem", dir))
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Register(reg)
package mcpbridge
