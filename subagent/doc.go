// Package subagent exposes agents to other agents as tools: a SubAgentTool's
// call runs a child agent and returns its checked, capped answer and usage
// (docs/subagents.md).
//
// # Forms and answers
//
// FromAgent (a resident expert; WithStore, Persistent, Appender), FromScoped
// (one per Scope), FromFactory (a fresh agent per call) and FromReact (the
// model writes the child's prompt), configured by Options. WithReport,
// WithOutputSchema and OutputOf check the answer; WithGuardrails and Judge
// check it by policy (docs/policy.md).
//
// # Spawning and background children
//
// NewSpawner builds the spawn_subagent tool: forks or roster members, within
// limits (docs/fanout.md), as context forks or on a model of a menu
// (docs/cost.md). WithBackground starts them as jobs, which JobsTool and Jobs
// act on; WithJobsAcrossTurns, WithJobLimits and WithMaxOwnerJobs
// (docs/background.md).
//
// # Trees and durability
//
// A Tree builds a Node per invocation (docs/events.md). Under
// agent.WithJournal a resumed turn replays what finished (docs/durable.md).
package subagent
