// Package subagent exposes agents to other agents as tools.
//
// A SubAgentTool's call runs a child agent and returns its answer, checked
// with one corrective retry, capped, with the child's usage and SUBAGENT_*
// events; a cancellation reaches the child and a panic becomes an error the
// parent's model reads (docs/subagents.md).
//
// # Forms and answers
//
// FromAgent (a resident expert; WithStore, Persistent, Appender), FromScoped
// (one per Scope: PerThread), FromFactory (a fresh agent per call) and
// FromReact (the model writes the child's prompt), configured by Options.
// WithReport, WithOutputSchema and OutputOf check the answer, WithOutcome
// and WithRender use it, WithGuardrails and Judge check it by policy
// (docs/policy.md); WithMaxDepth, WithMaxOutputBytes and WithTimeout bound it.
//
// # Spawning and background children
//
// NewSpawner builds the spawn_subagent tool: forks of the agent or roster
// members, within limits (docs/fanout.md), as context forks or on a model of
// a menu (docs/cost.md). WithBackground starts them as jobs, which JobsTool
// and Jobs check on, wait for, message and cancel; WithJobsAcrossTurns
// gives them to the thread, past the run, WithJobLimits and
// WithMaxOwnerJobs bound them (docs/background.md).
//
// # Trees and durability
//
// A Tree, a run's event sink, builds a Node per invocation (docs/events.md).
// Under agent.WithJournal a resumed turn replays the invocations that
// finished, and one suspended by an interrupt continues (docs/durable.md).
package subagent
