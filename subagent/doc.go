// Package subagent exposes agents to other agents as tools.
//
// A SubAgentTool is an ordinary tool.Tool whose call runs a child agent and
// returns its answer. Around each call it keeps the contracts a delegation
// tree needs: the answer can be validated against a JSON Schema with one
// corrective retry; delegation depth is capped (the tool disappears at the
// cap); what returns to the parent is capped in size; the child's usage, a
// failed child's too, travels back in the tool.Result; cancellation
// reaches the child; a panicking child becomes an error the parent's model
// can read; and every call emits SUBAGENT_* events with a fresh sub-agent
// run id.
//
// # Forms
//
//   - FromAgent: a resident expert, one agent kept for the life of the
//     tool, whose conversation accumulates across calls. Its calls take
//     turns (WithRefuseWhenBusy refuses a call with ErrBusy instead), and
//     WithStore keeps its conversation in a store.Store, for an agent that
//     is Persistent; one that is also an Appender (*agent.React) has each
//     call write only what it added.
//   - FromScoped: a resident expert per scope (PerThread: per AG-UI
//     thread), named by a Scope from the call's context; ErrNoScope when
//     the context names none; at most WithMaxScopes in memory
//     (DefaultMaxScopes).
//   - FromFactory: one-shot delegation, a fresh agent per call, built by a
//     Factory from the call's arguments.
//   - FromReact: the model defines the child itself, its system prompt and
//     task (ReactParams), and a ReAct agent is built for each call
//     (WithReactOptions configures it).
//
// FromAgent, FromScoped and FromFactory take TaskParams unless WithParams
// gives a schema of their own; with TaskParams the child is handed the
// task's text, with other parameters their JSON text. WithInputFromArgs
// maps the arguments to the child's input instead.
//
// # Validated answers
//
// WithReport asks the child for a Report (ReportSchema: a ReportStatus, a
// summary, findings; ReportPrompt is the instruction it is given);
// WithOutputSchema for any JSON Schema; OutputOf for a Go type. The child
// is told the shape on its first try (SchemaPrompt), and through the
// provider's native structured output where it has one; an answer that
// does not fit is sent back once with what is wrong. An answer with no
// JSON at all fails with ErrNoJSON.
//
// # What a Go caller gets
//
// WithOutcome hands over each call's Outcome: the sub-agent run id, the
// call's arguments, the child's last agent.Output, the usage of all its
// runs, per provider and model, and the validated value (a Report, a T
// under OutputOf[T]). WithRender turns the Outcome into the text the
// parent's model reads. A Tree, given to a run as its event sink, builds
// the tree of everything the run delegated, at every depth: a Node per
// invocation with its arguments, State, model, usage per model and wall
// time. On the wire, SUBAGENT_FINISHED and SUBAGENT_ERROR carry the same
// usage and model in their metadata.
//
// # Limits
//
// WithMaxDepth caps delegation depth (DefaultMaxDepth: children do not
// delegate further; a call past it fails with ErrMaxDepth),
// WithMaxOutputBytes what returns to the parent (DefaultMaxOutputBytes),
// and WithTimeout each call (ErrTimeout). A child's own failure wraps
// ErrChildFailed. These errors, all but a cancellation, are correctable:
// the parent's model reads them and may try another way.
//
// # Spawning
//
// NewSpawner builds spawn_subagent (SpawnToolName) on the same machinery:
// one tool with which a model starts many children, forks of itself
// (WithForkName, WithForkPrompt, WithForkTools) or members of a roster
// (WithRoster), in parallel (WithSpawnConcurrency), within limits on
// spawns per run (WithMaxSpawns, ErrMaxSpawns), tokens per child
// (WithChildTokenBudget, ErrNoBudget) and a policy (WithSpawnPolicy,
// ErrDenied).
//
// # Context forks
//
// WithContextForks makes children start from their parent's conversation,
// byte for byte, which the provider then reads from its prompt cache: the
// spawn tool's forks, FromFactory's and FromReact's children, and roster
// members built with it. A resident expert (FromAgent, FromScoped)
// refuses it.
//
// # Background children
//
// WithBackground lets the model start children in the background and get
// a job id at once; with subagent_jobs (JobsToolName) it checks on a job
// (status: state, step, last words, usage and cost so far, questions),
// waits for all, any or named jobs with a timeout (DefaultJobWait), sends
// a job a message that its sub-agent reads at its next step boundary
// (with a Receipt: queued, then delivered and the step), cancels a job
// with its own children (a partial report and its usage come back), or
// lists them. Jobs, from (*Spawner).Jobs, is the same for Go code. At
// most WithMaxBackground jobs of one run are alive at once
// (ErrMaxBackground); ErrUnknownJob names a job that does not exist,
// ErrJobEnded one that takes no more messages.
//
// Options are of two types. An Option configures the four forms, and the
// spawn tool too; a SpawnOption configures the spawn tool alone. A
// constructor refuses an Option it would ignore, such as
// WithRefuseWhenBusy anywhere but a resident expert, with an error that
// names the option and the constructor.
//
// # Durability
//
// Under agent.WithJournal every invocation is journaled with the parent's
// turn: a resumed turn replays the calls that finished, each child's run
// id is the same on every run of the turn, and a child suspended by an
// interrupt continues where it stopped (see package tool, Interrupts).
package subagent
