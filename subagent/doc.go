// Package subagent exposes agents to other agents as tools: a call runs a
// child agent and returns its checked, capped answer (docs/subagents.md).
//
// # Forms, answers and trees
//
// FromAgent (a resident expert; WithStore, Persistent, Appender), FromScoped
// (one per Scope), FromFactory (a fresh agent per call) and FromReact (the
// model writes the child's prompt), with Options. WithReport, OutputOf and
// WithOutputSchema check the answer, WithGuardrails and Judge by policy
// (docs/policy.md). A Tree builds a Node per invocation (docs/events.md);
// under agent.WithJournal a resumed turn replays what finished
// (docs/durable.md).
//
// # Spawning and background children
//
// NewSpawner builds the spawn_subagent tool: forks or roster members within
// limits (docs/fanout.md), context forks or a menu's models (docs/cost.md).
// WithBackground starts jobs, which JobsTool and Jobs act on, bounded by
// WithJobLimits and kept across turns by WithJobsAcrossTurns
// (docs/background.md).
package subagent
