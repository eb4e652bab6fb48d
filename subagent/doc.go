// Package subagent exposes agents to other agents as tools.
//
// A SubAgentTool is a tool.Tool whose call runs a child agent and returns its
// answer, validated with one corrective retry; the depth and what returns are
// capped, the child's usage comes back in the tool.Result, cancellation
// reaches the child, a panic becomes an error the parent's model reads, and
// every call emits SUBAGENT_* events under a fresh run id (docs/subagents.md).
//
// # Forms
//
//   - FromAgent: a resident expert whose conversation accumulates across
//     calls, which take turns (WithRefuseWhenBusy, ErrBusy); WithStore keeps
//     it in a store.Store (Persistent, Appender).
//   - FromScoped: a resident expert per Scope of the call's context
//     (PerThread, ErrNoScope, WithMaxScopes, DefaultMaxScopes, ForgetScope).
//   - FromFactory: a fresh agent per call, built by a Factory.
//   - FromReact: the model writes the child's system prompt and task
//     (ReactParams, WithReactOptions).
//
// The others take TaskParams unless WithParams gives a schema;
// WithInputFromArgs maps arguments to the child's input. Options configure
// every form and the spawn tool; a constructor refuses one it would ignore.
// Call, Definition and Available make a tool.Tool; Rerun runs a call again
// from a point in it.
//
// # Validated answers
//
// WithReport (Report, ReportSchema, ReportStatus, ReportPrompt),
// WithOutputSchema and OutputOf check the answer; the child is told the shape
// (SchemaPrompt, OutputSchema), a rejected answer sent back once
// (ValidationEvent); no JSON fails with ErrNoJSON. WithOutcome hands
// a Go caller each call's Outcome, WithRender makes the result text from it.
// WithGuardrails checks the child's task and answer, Judge by a judge model
// (docs/policy.md).
//
// # Limits and errors
//
// WithMaxDepth (DefaultMaxDepth, ErrMaxDepth), WithMaxOutputBytes
// (DefaultMaxOutputBytes), WithTimeout (ErrTimeout); a child's failure wraps
// ErrChildFailed. All but a cancellation are correctable.
//
// # Spawning
//
// NewSpawner builds the Spawner, spawn_subagent (SpawnToolName): the model
// starts forks of its agent (WithForkName, WithForkPrompt, WithForkTools,
// DefaultForkName, DefaultForkPrompt) or roster members (WithRoster), in
// parallel (WithSpawnConcurrency), within limits (WithMaxSpawns, ErrMaxSpawns,
// RefusedEvent, WithChildTokenBudget, ErrNoBudget, WithChildMaxSteps,
// WithChildTimeout, WithSpawnPolicy, ErrDenied) (docs/fanout.md); as context
// forks (WithContextForks), on a model of a menu (WithModelMenu, ModelChoice,
// WithDefaultModel, ErrUnknownModel) (docs/cost.md). SpawnOptions configure
// the spawn tool alone.
//
// # Background children
//
// WithBackground starts children as jobs the model checks on, waits for
// (DefaultJobWait), messages (MaxMessageBytes, Receipt), cancels and lists
// with JobsTool (JobsToolName); Jobs (Spawner.Jobs, Task, JobStatus, WaitFor,
// JobResult) does the same for Go code. WithMaxBackground (ErrMaxBackground);
// ErrUnknownJob, ErrJobEnded. Each action, message and job's end is a CUSTOM
// event (JobStartedEvent, JobMessageEvent, JobDeliveredEvent, JobStatusEvent,
// JobCancelledEvent, JobEndedEvent) (docs/background.md).
// WithJobsAcrossTurns gives a top-level run's jobs to its thread, past
// the run; its next run is told of those that ended (DefaultJobNote; the
// spawner is a tool.Notifier: Notes, Noted); Close ends them.
//
// # The tree of a run
//
// A Tree (NewTree), a run's event sink, builds a Node per invocation with its
// State, model, usage, cost, validator retries and times (docs/events.md).
//
// # Durability
//
// Under agent.WithJournal a resumed turn replays the invocations that
// finished, and one suspended by an interrupt continues (docs/durable.md).
package subagent
