// Package agent defines what an agent is — anything with a Run method — and
// provides React, the ReAct loop: the agent that calls a model, runs the
// tools it asks for, and repeats until the model answers.
//
// # Agents and runs
//
// An Agent runs an Input (a task's text, or a conversation of
// provider.Messages, and optionally the JSON Schema the answer should
// match) and returns an Output: the answer, this run's messages, what its
// own model calls cost (Usage) and what its tools' sub-agents cost
// (ChildUsage). Func makes an Agent of a function. Stream runs an agent and
// yields its events (package event) as they happen.
//
// A run's identity — its id, its parent's id, its depth in a delegation
// tree, the agent's name — rides the context.Context and is read with
// RunID, ParentRunID, Depth and Name; WithThread and Thread name the
// conversation (an AG-UI thread) a run belongs to.
//
// # The ReAct loop
//
// NewReact builds a React over a provider.Provider, configured by Options:
// its name (WithName, DefaultName), system prompt, model, tools
// (WithTools, WithRegistry) and how many of a turn's calls run at once
// (WithParallelism); its limits: model calls per run (WithMaxSteps,
// DefaultMaxSteps, ErrMaxSteps), failed tool steps in a row
// (WithToolRetries, DefaultToolRetries, ErrToolRetries), tokens per run
// (WithTokenLimit, ErrUsageLimit), tokens per reply (WithMaxTokens) and
// the temperature; its prompt cache key (WithCacheKey); and whether it
// streams replies when a sink listens (WithoutStreaming turns it off for a
// server whose streaming is broken). OutputOf[T] makes the answer a value
// of type T, checked against T's schema, in Output.Value (ErrInvalidOutput
// when it does not fit). A reply with neither text nor tool calls fails
// with ErrEmptyReply, a provider's panic with ErrProviderPanic; a bad
// option with ErrInvalidOption, a missing provider with ErrNilProvider.
//
// # Memory
//
// A React keeps its conversation across runs, which a resident expert
// needs: a second question builds on the first answer. History returns it,
// Reset forgets it, WithHistoryLimit bounds it, Snapshot and Restore move
// it through bytes (ErrBadSnapshot for bytes Snapshot did not make); Mark,
// SnapshotFrom, RestoreParts and AppendParts move it a part at a time, so
// that a store writes only what each run added, and a process reads only
// what another added.
// Checkpoint puts the conversation back as it was; Hold, with its Turn,
// lets a caller make several runs one logical call that no other run
// interleaves with, and roll back its own runs alone. Input.Messages must be a conversation
// a model API accepts (ErrBadMessages says which message is not).
//
// # Compaction
//
// A conversation kept for ever would outgrow any model's window. Before
// each model call a React estimates the request and, past a bound,
// compacts: the older turns, whole, become a summary, and the latest
// turns stay word for word (Compaction; DefaultCompactTokens,
// DefaultCompactMessages, DefaultCompactBytes, DefaultKeepTurns,
// DefaultMaxSummaryBytes, DefaultSummaryPrompt). Every React does so by
// default, summarizing with its own model; WithCompaction sets the
// bounds and who writes the summary, WithoutCompaction turns it off.
// Between compactions the request's prefix does not change, so the
// provider's prompt cache keeps serving it. WithContextWindow gives the
// model's window: a request that cannot be brought inside it fails with
// ErrContextWindow before it is sent. A summary that cannot be made fails
// the run with ErrCompaction and leaves the conversation as it was;
// Output.Compactions counts a run's compactions. A run appends to the
// conversation in place, so a call's cost does not grow with the history.
//
// # Observability
//
// WithTracerProvider traces runs, model calls and tool calls with
// OpenTelemetry (TracerName, AttrRunID and the other deputy.* attributes
// beside the gen_ai conventions); WithLogger logs them to a slog.Logger.
//
// # Durability
//
// WithJournal records a turn in a store.Journal, so that the same turn run
// again — after a crash, or with a person's answers (tool.Resume) —
// replays the model's answers and the tool calls that finished instead of
// asking and running them again, at any depth of the delegation tree.
package agent
