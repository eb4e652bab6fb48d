// Package subagent exposes agents to other agents as tools.
//
// A SubAgentTool is an ordinary tool.Tool whose call runs a child agent and
// returns its answer, keeping the contracts a delegation tree needs: the
// answer validated with one corrective retry, the depth capped (the tool
// disappears at the cap), what returns capped in size, the child's usage
// (a failed child's too) carried back in the tool.Result, cancellation
// passed on, a child's panic turned into an error the parent's model reads,
// and SUBAGENT_* events with a fresh sub-agent run id for every call.
//
// # Forms
//
//   - FromAgent: a resident expert, one agent whose conversation
//     accumulates across calls, which take turns (WithRefuseWhenBusy: ErrBusy
//     instead); WithStore keeps its conversation in a store.Store, for a
//     Persistent agent (an Appender writes only what each call added).
//   - FromScoped: a resident expert per Scope of the call's context
//     (PerThread; ErrNoScope), at most WithMaxScopes in memory
//     (DefaultMaxScopes).
//   - FromFactory: a fresh agent per call, built by a Factory from the
//     call's arguments.
//   - FromReact: the model writes the child's system prompt and task
//     (ReactParams), and a ReAct agent is built per call (WithReactOptions).
//
// The first three take TaskParams unless WithParams gives a schema;
// WithInputFromArgs maps the arguments to the child's input. A tool's Call,
// Definition and Available make it a tool.Tool; Rerun runs a call again
// from a point in it, ForgetScope drops a scope's memory.
//
// # Validated answers
//
// WithReport asks for a Report (ReportSchema, ReportStatus, ReportPrompt),
// WithOutputSchema for any JSON Schema, OutputOf for a Go type; the child
// is told the shape (SchemaPrompt, OutputSchema), an answer that does not
// fit is sent back once, and one with no JSON fails with ErrNoJSON.
// WithOutcome hands a Go caller each call's Outcome; WithRender makes the
// text the parent's model reads from it.
//
// WithGuardrails checks the task handed to the child and its answer with
// policy.Guardrails, in every form: a tripwire stops the parent's run, an
// answer a guardrail with Retry fails is sent back once. Judge makes a
// guardrail's check of a judge model.
//
// # Limits and errors
//
// WithMaxDepth caps the depth (DefaultMaxDepth, ErrMaxDepth),
// WithMaxOutputBytes the answer (DefaultMaxOutputBytes), WithTimeout the
// call (ErrTimeout); a child's own failure wraps ErrChildFailed. All but a
// cancellation are correctable: the parent's model reads them.
//
// # Spawning
//
// NewSpawner builds spawn_subagent (SpawnToolName), one tool with which a
// model starts many children (a Spawner): forks of itself (WithForkName,
// WithForkPrompt, WithForkTools, DefaultForkName, DefaultForkPrompt) or
// members of a roster (WithRoster), on a model chosen from a priced menu
// (WithModelMenu, ModelChoice, WithDefaultModel, ErrUnknownModel), in parallel
// (WithSpawnConcurrency), within limits per run (WithMaxSpawns,
// ErrMaxSpawns, RefusedEvent), per child (WithChildTokenBudget,
// ErrNoBudget, WithChildMaxSteps, WithChildTimeout) and a policy
// (WithSpawnPolicy, ErrDenied). WithContextForks starts children from
// their parent's conversation, read from the provider's prompt cache.
// Options configure every form and the spawn tool; SpawnOptions the spawn
// tool alone; a constructor refuses an option it would ignore.
//
// # Background children
//
// WithBackground lets the model start children as jobs and, with the tool
// of JobsTool (JobsToolName), check on them, wait for them (DefaultJobWait),
// send them messages (MaxMessageBytes, a Receipt), cancel them or list
// them; Jobs, from Spawner.Jobs, does the same for Go code (Task,
// JobStatus, WaitFor, JobResult). WithMaxBackground bounds the jobs alive
// (ErrMaxBackground); ErrUnknownJob and ErrJobEnded name bad targets. Each
// action, each message queued and delivered, and each job's end is a
// CUSTOM event (JobStartedEvent, JobMessageEvent, JobDeliveredEvent,
// JobStatusEvent, JobCancelledEvent, JobEndedEvent).
//
// # The tree of a run
//
// A Tree, given to a run as its event sink, builds a Node per invocation,
// at every depth, with its arguments, State, model, usage, cost and times.
//
// # Durability
//
// Under agent.WithJournal every invocation is journaled with the parent's
// turn: a resumed turn replays the calls that finished, a child keeps its
// run id, and one suspended by an interrupt continues where it stopped.
package subagent
