// Package a2a connects deputy to A2A, the Agent2Agent protocol (1.0), both
// ways, over the protocol's official Go SDK (github.com/a2aproject/a2a-go/v2):
// a Server serves any deputy agent, or any tool, as an A2A agent, and a
// Remote makes an A2A agent that lives in another service a sub-agent of a
// deputy tree. It is a module of its own, so that a program that does not
// import it compiles neither the SDK nor gRPC.
//
//	srv, err := a2a.NewPerTask(func(ctx context.Context, t a2a.Task) (agent.Agent, error) {
//		return agent.NewReact(p, agent.WithTools(lookup))
//	}, a2a.WithName("billing"), a2a.WithDescription("Answers billing questions."))
//	http.ListenAndServe(addr, srv)
//
//	remote, err := a2a.Connect(ctx, "https://billing.example.com")
//	defer remote.Close()
//	billing, err := remote.Tool()
//	lead, err := agent.NewReact(p, agent.WithTools(billing))
//
// # Serving
//
// A Server is an http.Handler. It serves the agent card at
// /.well-known/agent-card.json, built from the agent's name and
// description and its tools as skills (WithName, WithDescription,
// WithSkills, WithCard change it), the JSON-RPC binding at its root, and
// the HTTP+JSON binding under /rest. Its interfaces are at WithURL, or at
// the host each request names. The card may be cached (CardMaxAge, an
// ETag, 304 Not Modified). The server speaks A2A 1.0, and 0.3 to older
// clients (the SDK's compatibility handlers, at the same URLs): the
// A2A-Version header says which, and a version it does not speak is
// refused with VersionNotSupportedError. A message part the agent cannot
// read (a file; text or data of another media type) is refused with
// ContentTypeNotSupportedError, never dropped.
//
// Each message starts a task, and the task is one run of the agent (for
// NewToolServer, one call of the tool) with the message's text as its
// input. NewPerTask builds the agent for each task, so that nothing one
// task's agent keeps reaches another task, owner or context; NewServer
// serves one agent to every task, and refuses one that keeps a
// conversation between runs (a *agent.React). The run's thread is the
// task's context, per owner, so that a resident sub-agent scoped with
// subagent.PerThread keeps a conversation per A2A context, and no other's:
// served with NewToolServer, it is the form for a conversation that goes
// on across the tasks of a context. The run acts for the owner WithAuthorize
// named (agent.WithOwner), which a policy of the served agent reads
// (policy.Check.Owner, Thread). A failure of the store reaches a
// client in plain words; its keys are logged, never sent. While it works, the task's status updates carry the run's
// sub-agents starting and finishing and its tool calls (metadata EventKey,
// the event's AG-UI JSON), and the answer's text streams into the artifact
// AnswerArtifact, which ends holding the answer: text, or, for a validated
// answer, a data part. The task's metadata holds the usage of the run under
// UsageKey, whatever way the task ends. tasks/cancel cancels the run and
// everything under it.
//
// A question the run asks, at any depth (tool.Ask, tool.RequireApproval),
// suspends it: the task is input-required, its status message says the
// question in words and lists the questions as data ({"interrupts":[…]},
// tool.Interrupt in AG-UI's form; also in the metadata under
// InterruptsKey). The client's next message on the same task (its taskId
// and contextId) answers: "yes" or "no" for one approval, text or a data
// part holding the payload for one question, or a data part
// {"answers":[{"interruptId":…,"status":"resolved","payload":…}]} for
// several. The run then continues from its journal (agent.WithJournal):
// what it did before the question is replayed, not done again, and its
// sub-agents keep their ids. An answer that cannot be used leaves the task
// waiting, its status message saying why.
//
// Tasks, their questions and journals are kept in deputy's store
// (WithStore; in memory by default), so a task waiting for an answer
// survives a restart of the server and can be answered by another server on
// the same database. WithAuthorize names the owner of each request before
// any state is read; tasks are kept per owner, and one owner's tasks do not
// exist for another.
//
// # Delegating
//
// Connect reads a remote agent's card. Its Run sends the task and follows
// the remote task through its stream (or, for an agent whose card says it
// does not stream, by reading the task until it ends); Tool makes it a
// sub-agent tool (subagent.FromFactory), so what it answers is validated
// and capped like any child's, it is journaled and replayed like any
// child, and it may join a spawn tool's roster. What the remote task
// streams reaches the caller's events as the child's own: its text, and
// the sub-agents and tool calls of a remote deputy agent, under ids
// prefixed with the child's. Usage that a remote deputy agent reports is
// counted as the child's, and so is its cost: the remote's own figure, at
// its prices, which the caller's prices do not replace.
//
// A policy the caller runs under (agent.WithPolicy, policy.With) binds
// the edge to the remote agent as it binds any child's: it sees the call
// of the tool, the hand-off (the task, which is all that is sent) and the
// answer that comes back, and may deny, ask a person about, or redact
// each; a task it denies or has not had approved is never sent. The text
// the remote streams to the caller's events is held until it ends and
// passes the same check as the answer, so a secret it redacts from the
// answer does not reach the event sink either. It does
// not cross to the remote side: the remote agent's own tools and model
// calls are its server's to govern, with a policy of its own.
//
// A remote task that asks for input suspends the caller's run with the
// question, asked where the child stands in the tree (a remote deputy
// agent's questions keep their reason and response schema, so an approval
// stays an approval). The resumed run sends the answer on the same task and
// context, and the remote task goes on: under a journal each message to the
// remote agent is sent once per turn (tool.Once), so the resumed run finds
// the task the first one started instead of starting another. A message
// on its way when the caller's process died is sent again on resume under
// the same messageId, and a deputy Server answers it with the task it
// started, for the same owner, instead of starting another (see Server).
// A cancelled caller cancels the remote task.
//
// # Limits
//
// A remote agent is as untrusted as a model. Its card is bounded in size
// (DefaultMaxCardBytes) and in skills (DefaultMaxSkills); every response,
// a stream included, is bounded in bytes (DefaultMaxStreamBytes), in events
// per message (DefaultMaxEvents) and in time without a byte
// (DefaultIdleTimeout); the answer is bounded too (DefaultMaxAnswerBytes).
// The interfaces the card names must be on the card's own origin, or on one
// allowed with WithAllowedOrigins; no request follows a redirect to another
// origin, nor more than five redirects, and no URL may carry credentials.
// Each breach is an error wrapping ErrRemote or ErrOrigin that names the
// remote agent; the caller's run reads it as its child's failure.
//
// Authentication is the application's: WithHTTPClient sends through its
// client (mTLS, proxies, cookies), WithHeader adds a header to every
// request, and WithCredential gives the credential for a security scheme
// the card declares, which the SDK sends as the scheme says (API key,
// HTTP bearer, OAuth2 or OpenID Connect access token).
package a2a
