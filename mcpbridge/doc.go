// Package mcpbridge connects deputy to the Model Context Protocol, both
// ways, over the official Go SDK (github.com/modelcontextprotocol/go-sdk):
// a Server publishes deputy's tools and sub-agents to MCP clients, and a
// Client turns an MCP server's tools into tool.Tool values that any agent
// or child can call.
//
//	srv := mcpbridge.NewServer("experts", "1.0.0")
//	if err := srv.AddTool(reviewer); err != nil { ... }
//	err := srv.ServeStdio(ctx)
//
//	c, err := mcpbridge.Connect(ctx, mcpbridge.Command("npx", "@modelcontextprotocol/server-filesystem", dir))
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Register(reg)
//
// # Serving tools
//
// A Server (NewServer) publishes tool.Tool values — sub-agents of each
// form, the spawn tool, any tool — as MCP tools, so that editors, desktop
// assistants and other agent kits can consult deputy's agents. AddTool
// serves one tool, AddRegistry every tool of a registry. A Server serves
// over stdio (ServeStdio), MCP's streamable HTTP transport (Handler), or
// any transport of the SDK (Run); Server.MCP returns the SDK server
// underneath, for prompts, resources and middleware.
//
// Each call runs the tool as a model's call would run, under the MCP
// request's context: an MCP cancellation cancels the child and everything
// under it. A tool that implements OutputSchemer (a validated sub-agent)
// declares its output schema and returns its checked answer as structured
// content.
//
// # Sessions and scopes
//
// Each call runs as part of its MCP session's thread. A resident expert
// (subagent.FromAgent) keeps one conversation across all of the clients'
// calls; with subagent.WithStore it keeps it across restarts of the server
// too, since each call reads the stored conversation and writes the new one
// back. To give each client its own, scope it: subagent.FromScoped with
// subagent.PerThread keeps one conversation per MCP session, and the
// ServerOption WithCallContext lets any scope of the application's (the
// user behind a token, a tenant) read the request, or refuse the call.
//
// # Questions
//
// A served tool that asks a person (tool.Ask, tool.RequireApproval), at
// any depth of sub-agents, asks the MCP client with elicitation: a form
// whose schema is the question's response schema (one text field when it
// has none). The call runs under a journal of its own, so that the answer
// resumes it where it stopped: nothing that finished runs again, and the
// answer is used once. With a client of MCP's newest protocol the call
// returns its questions (a multi-round-trip result) and the client calls
// again with the answers and the request state it was given, which only
// the same session may use, for the same call, once, within 15 minutes (a
// stateless HTTP handler, where each request is a session of its own,
// cannot take answers: serve tools that ask with sessions); with an older client
// the questions are asked during the call. An accepted form is the answer;
// a declined approval is a refusal; any other decline, or a cancel,
// cancels the question, and the tool fails as it would over AG-UI. A
// client that does not support elicitation reads an error result saying
// what the tool wanted to ask and what its user can do. At most 1024 calls
// wait for answers at once, and one call asks at most 8 rounds.
//
// # Progress
//
// When a client asks for progress, the lifecycle events of the run —
// steps, tool calls, sub-agents starting and finishing — reach it as
// progress notifications. Progress is sent beside the call, never in its
// way: a client that stops reading loses notifications but holds no expert
// back. With the ServerOption WithLogNotifications, the same events also
// go out as MCP log notifications (notifications/message), for a client
// that shows a server's log rather than progress.
//
// # Usage metadata
//
// A served call that did model work, its sub-agents' included, reports it
// in its result's _meta under UsageMetaKey, with the names AG-UI gives the
// same counts (requests, inputTokens, outputTokens, totalTokens,
// cachedInputTokens, cacheWriteInputTokens), so that a client reads
// deputy's usage one way over both protocols.
//
// # Consuming a server's tools
//
// Connect starts a session with an MCP server and reads its tools. A
// Transport says how to reach the server: Command (or Cmd, for a prepared
// *exec.Cmd) starts a local process and speaks MCP over its standard input
// and output, HTTP reaches a streamable HTTP endpoint, and SDKTransport
// takes any transport of the SDK. The Client's tools (Tools) are tool.Tool
// values; Register adds them to a registry, all or none. When the server
// announces that its tool list changed, the list is read again: tools that
// went away stop being offered, new ones join the registries the Client
// registered into, and Err reports a re-reading that failed. Name is what
// errors call the server (its command line or URL). Close ends the session,
// the server's process and every goroutine the Client started.
//
// An Option configures a Client: WithPrefix puts a prefix before the
// server's tool names, so that two servers' tools can share a registry;
// WithToolFilter keeps only some of them; WithCallTimeout,
// WithConnectTimeout, WithMaxResultBytes and WithMaxTools change the
// limits below.
//
// # Authorization
//
// An HTTP server that wants credentials gets them through three options,
// which Connect refuses for a command: WithHeader sends a header with
// every request (an API key, a bearer token the caller has), WithHTTPClient
// sends the requests through a client of the caller's (TLS, a proxy, a
// transport that signs), and WithOAuth authorizes with OAuth 2.1 as MCP's
// authorization specification describes, through a handler of the MCP
// SDK's auth package (auth.NewAuthorizationCodeHandler: protected resource
// and authorization server metadata discovery, client ID metadata
// documents, pre-registered clients or dynamic registration, the
// authorization code flow with PKCE, step-up on insufficient scope;
// extauth.NewClientCredentialsHandler for a service without a person).
// A server that answers 401 or 403 makes Connect fail with an error that
// names it, says which of these to use, and quotes its WWW-Authenticate
// challenge.
//
// # Limits
//
// A server is as untrusted as a model, and everything it sends is bounded:
// a call ends after DefaultCallTimeout and connecting after
// DefaultConnectTimeout; a result's text reaching the model is cut at
// DefaultMaxResultBytes on a UTF-8 boundary, with a visible marker; a
// server listing more than DefaultMaxTools tools is refused; a tool's
// description is cut at 4 KiB; an input schema larger than
// jsonschema.MaxUntrustedBytes, or one deputy would not compile from a
// model, is refused; one reply of a Command or HTTP server is at most
// 16 MiB. On the serving side, arguments are checked against the tool's
// schema and size limit before it runs, and at most 64 progress
// notifications wait to be sent for one call; later ones are dropped.
//
// # Errors
//
// Serving, every failure of a call — bad arguments, a failed or cancelled
// child, a panic, a refusal by WithCallContext — is an MCP tool error
// result the client can read, never a protocol error. AddTool refuses a
// nil tool, a tool whose parameters are not an object schema, and a second
// tool of the same name.
//
// Consuming, every way a server can fail during a call — an error result,
// a refusal, a crash, a hang, a reply too large — is an error tool.Result
// that names the server, which the model reads while the run goes on; its
// Err keeps the cause for Go callers (errors.As finds a *jsonrpc.Error).
// Arguments that are not JSON are tool.ErrInvalidArguments, which a
// registry turns into a result the model can correct; only the end of the
// call's context is a Go error that ends the run, wrapping its cause.
// Connect and Register return Go errors that name the server and say what
// to do (a tool name already registered, a malformed tool, an option's bad
// value); a failed Connect leaves nothing running.
package mcpbridge
