// Package agent defines what an agent is — anything with a Run method — and
// provides React, the ReAct loop: the agent that calls a model, runs the
// tools it asks for, and repeats until the model answers.
//
//	a, err := agent.NewReact(p, agent.WithName("helper"), agent.WithTools(lookup))
//	out, err := a.Run(ctx, agent.Input{Text: "What changed?"})
//
// # The ReAct loop
//
// NewReact builds a React over a provider.Provider. Its Options set its name
// (WithName, DefaultName), system prompt, model, temperature, tools
// (WithTools, WithRegistry, WithParallelism), reply length (WithMaxTokens),
// prompt cache key (WithCacheKey) and streaming (WithoutStreaming);
// OutputOf[T] makes its answer a checked T. Name, Provider, SystemPrompt
// and Tools read it back.
//
// # Agents and runs
//
// An Agent runs an Input and returns an Output; Func makes one of a
// function, Stream runs one and yields its events. A run's identity rides
// its context: RunID, ParentRunID, Depth, Name, WithThread and Thread,
// WithOwner and Owner.
//
// # Limits, cost and policy
//
// WithMaxSteps (DefaultMaxSteps), WithToolRetries (DefaultToolRetries),
// WithTokenLimit and WithCostLimit bound a run, the last two with all it
// starts, at the prices of WithPrices; WithPolicy binds the tree below
// it, WithGuardrails the agent's own input and answer.
//
// # Memory and compaction
//
// A React keeps its conversation across runs: History, Reset,
// WithHistoryLimit, Snapshot and Restore (subagent.WithStore stores it a
// part at a time); Checkpoint, and Hold with its Turn. Compaction (WithCompaction,
// WithoutCompaction, WithContextWindow, DefaultCompactTokens and the other
// defaults) folds its older turns into a summary past a bound.
//
// # Observability and durability
//
// WithTracerProvider traces with OpenTelemetry (TracerName, the Attr keys),
// WithLogger logs, UsageEvent reports each call's cost, and WithJournal records a turn so that running it again
// replays what finished.
//
// # Errors
//
// A run ends with ErrMaxSteps, ErrToolRetries, ErrUsageLimit, ErrEmptyReply,
// ErrProviderPanic, ErrBadMessages, ErrInvalidOutput, ErrCompaction or
// ErrContextWindow; NewReact with ErrNilProvider or ErrInvalidOption;
// Restore with ErrBadSnapshot.
package agent
