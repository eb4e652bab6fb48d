// Package subagent exposes agents to other agents as tools: a call runs a
// child agent and returns its checked, capped answer (docs/subagents.md).
//
// FromAgent (a resident; WithStore, Persistent, Appender), FromScoped,
// FromFactory (fresh per call) and FromReact (the model writes the prompt).
// WithReport, OutputOf and WithOutputSchema check answers, WithGuardrails and
// Judge apply policy (docs/policy.md), a Tree holds a Node per call
// (docs/events.md). NewSpawner builds spawn_subagent: forks or roster
// members within limits (docs/fanout.md), context forks, a menu's models
// (docs/cost.md). WithBackground makes jobs (JobsTool, Jobs), bounded by
// WithJobLimits, kept by WithJobsAcrossTurns and WithJobStore, swept by
// WithJobTTL (docs/background.md).
package subagent
