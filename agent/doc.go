// Package agent defines what an agent is — anything with a Run method — and
// provides React, the ReAct loop: the agent that calls a model, runs the
// tools it asks for, and repeats until the model answers.
//
//	a, err := agent.NewReact(p, agent.WithName("helper"), agent.WithTools(lookup))
//	out, err := a.Run(ctx, agent.Input{Text: "What changed?"})
//
// # The ReAct loop
//
// NewReact builds a React over a provider.Provider; its Options name it
// (WithName, DefaultName) and set its system prompt, model, temperature,
// tools (WithTools, WithRegistry), the calls of a turn run at once
// (WithParallelism), the length of a reply (WithMaxTokens), its prompt
// cache key (WithCacheKey) and whether it streams (WithoutStreaming).
// OutputOf[T] makes its answer a checked T. Name, Provider, SystemPrompt
// and Tools read it back.
//
// # Agents and runs
//
// An Agent runs an Input and returns an Output: the answer, the run's
// messages, what its own calls cost (Usage) and its sub-agents' (ChildUsage).
// Func makes an Agent of a function; Stream runs one and yields its events.
// A run's identity rides its context: RunID, ParentRunID, Depth and Name;
// WithThread and Thread name its conversation, WithOwner and Owner whom it
// acts for.
//
// # Limits, cost and policy
//
// WithMaxSteps (DefaultMaxSteps) and WithToolRetries (DefaultToolRetries)
// bound a run's model calls and failed tool steps; WithTokenLimit and
// WithCostLimit bound what it and all it starts may spend, at the prices
// of WithPrices; WithPolicy binds the tree below it by a policy.
//
// # Memory
//
// A React keeps its conversation across runs: History returns it, Reset
// forgets it, WithHistoryLimit bounds it, Snapshot and Restore move it
// through bytes, and Mark, SnapshotFrom, RestoreParts and AppendParts a
// part at a time, for a store that writes only what each run added.
// Checkpoint puts it back as it was; Hold and its Turn make several runs one
// call that no other run interleaves with.
//
// # Compaction
//
// Before each model call a React compacts a conversation grown past a
// bound: the older turns become a summary, the latest stay word for word
// (Compaction and its defaults, DefaultCompactTokens to
// DefaultSummaryPrompt). WithCompaction chooses the bounds and summarizer,
// WithoutCompaction turns it off, WithContextWindow gives the model's
// window.
//
// # Observability and durability
//
// WithTracerProvider traces runs, model calls and tool calls with
// OpenTelemetry (TracerName, the Attr keys); WithLogger logs them.
// WithJournal records a turn in a store.Journal, so that the turn run again
// (after a crash, or with a person's answers) replays what finished.
//
// # Errors
//
// A run ends with ErrMaxSteps, ErrToolRetries, ErrUsageLimit, ErrEmptyReply,
// ErrProviderPanic, ErrBadMessages, ErrInvalidOutput, ErrCompaction or
// ErrContextWindow; NewReact with ErrNilProvider or ErrInvalidOption;
// Restore with ErrBadSnapshot.
package agent
