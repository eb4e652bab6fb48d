// Package temporal runs deputy agents and their sub-agents on Temporal, so
// that a delegation tree spreads over worker processes and survives losing
// one.
//
// An agent is described by a [Spec], a plain value that travels in workflow
// inputs. [AgentWorkflow] runs the ReAct loop in workflow code: every model
// call is an activity ([Activities.Complete]), every plain tool call is an
// activity ([Activities.CallTool]), and every sub-agent invocation (a fixed
// child, a react child defined by the model's arguments, a spawned fork, or a
// Go factory) is a child workflow. [ResidentWorkflow] is a resident expert:
// one long-lived workflow whose calls arrive as updates, run one at a time,
// and whose conversation lives in its history, carried over by
// continue-as-new when that history grows. It compacts that conversation as
// an agent.React does ([Compaction], with the core's pieces from package
// agent/runtime: the summary is a model activity), so that what
// continue-as-new carries stays under [MaxConversationBytes].
//
// Providers, tools and factories are Go values, so they live on the worker:
// [Register] puts the workflows and the activities of a [Runtime] on a
// worker, and a Spec names them.
//
// The meaning of the core's limits is kept: depth (a sub-agent tool is not
// offered at the cap, and a direct call fails), usage (a child's usage folds
// into the parent's ChildUsage), token and cost limits (Spec.TokenLimit,
// Spec.CostLimit at Runtime.Prices: each model call reserved on the worker,
// where the tools' definitions and the model's price are known, and each
// child, a factory's included, given its share of what is left), the output cap (applied in the activity or
// child before anything is recorded in history), validation with one
// corrective retry, and cancellation (cancelling a workflow cancels its
// activities and child workflows; a model call in flight is waited for,
// and a reply that comes back goes on as it would have, counted: an
// answer ends the run with it).
//
// # Events
//
// A tree on Temporal reports the AG-UI events an in-process tree reports —
// steps, text, tool calls and their results, SUBAGENT_* with their
// attribution, each model call's usage and cost as it ends
// (agent.UsageEvent, priced at Runtime.Prices) — published by the activities it runs anyway, to the
// worker's Runtime.Events (none is built without it): an activity is
// outside the workflow's deterministic code, so publishing from it cannot
// change a decision or be repeated by a replay, and costs no activity.
// A Hub hands a tree's events to subscribers in the worker's process; an
// [Agent] runs a Spec as a workflow behind the agent.Agent interface, so
// the AG-UI handler serves it and its client watches the tree as any
// other. A child's end is published by its last model call, when that call
// can tell the run ends there, and a result the workflow made itself (a
// failed child, a refused call) by its parent's next model call: a run that
// fails between them leaves that end unpublished. A run cancelled while its
// children run waits for them and publishes their ends itself, cancelled,
// with what each spent, as in process. RUN_FINISHED and a child's
// SUBAGENT_FINISHED carry its usage as in process: one entry per provider
// and model of its subtree with its cost (RunOutput.Models), and, in a
// turn that asked a person, the part spent before the answer as each
// entry's "earlier" (RunOutput.Earlier, agent.Output.Earlier).
//
// # Background children
//
// A Spec with Background (and Spawn) lets its model start forks in the
// background and act on them, as subagent.WithBackground does in process,
// by the same tool names, arguments and results: spawn_subagent with
// background=true starts a child workflow and returns its job id at
// once; subagent_jobs reads a job's status, lists them, waits for all,
// any or named jobs on a durable timer, sends a job a message (a signal
// its workflow takes before its next model call, never during one, in
// order, each once, with a receipt) and cancels one (its own child
// workflows too; a partial report and its usage come back). Jobs still
// running when the run answers are cancelled, and what every job spent
// counts once in ChildUsage. Spec.JobTokens, JobCost, JobSteps and
// JobTime bound each job, and MaxBackground and MaxOwnerJobs the jobs
// alive, as subagent.WithJobLimits and WithMaxOwnerJobs do in process: a
// job past a limit hands back a partial report, a spawn past a cap (or
// past Spec.MaxSpawns) is refused with a deputy.refused event. From
// outside, [Jobs] lists a run's jobs, [SendToJob] sends one a message (an
// update), [CancelJob] cancels one, [StartJob] starts one and [WaitJobs]
// collects those that ended, as subagent.Jobs does in process; what a
// job spent counts once in the run's output, whoever collects it.
//
// The actions on jobs are the deputy.job_* events an in-process run emits
// (subagent.JobStartedEvent and the others), with the same values and
// attribution: the run's workflow publishes what it decides — a job's
// SUBAGENT_STARTED and start before the job runs, a message queued, a
// status asked by the model, a cancel, a job's end — through a local
// activity (PublishActivityName), which a replay does not run again, and a
// job's model call publishes the messages it took before its step. A
// status read from Go through the Jobs query publishes nothing.
//
// # Asking a person
//
// A tool anywhere in the tree may ask a person (tool.Ask,
// tool.RequireApproval): its activity ends with the question instead of a
// result, and the workflow that called it waits for the answer, durably —
// through worker restarts, for days — then runs the call again with it. The
// tree's top-level workflow lists every question the tree waits on
// ([Pending], the [InterruptsQuery]; a child's names the child's workflow
// in SubagentRunID) and takes the answers ([Answer], the [AnswerUpdate]),
// refusing what tool.Resume refuses in process: an unknown or already
// answered question, a second answer to one, a payload that fails the
// question's schema. Each answer is taken once, and the call that asked
// runs again once with it. An [Agent] run in a journaled turn (the AG-UI
// handler's, on a stored thread) ends with the tree's questions as a
// *tool.Interrupted, and resumed with the answers, hands them to the same
// workflow and waits on.
//
// A background job that asks, or whose own child asks, waits the same
// way, and its status says JobSuspended with the questions. The run at
// the top of the tree, which knows every question, waits with it when its
// model waits for the job, as a wait in process suspends with a suspended
// job: however long the person takes, the wait ends with the job's
// outcome once the person has answered, not with the job still running.
// A job started by a child of the tree's top is not seen asking: its
// parent's wait ends at its timeout, as before.
//
// # Policy
//
// A policy set on the worker ([Runtime].Policy) binds every run whose
// activities the worker runs, as agent.WithPolicy binds a tree in
// process: model calls, plain tool calls and their results, and every
// sub-agent call — its call, its hand-off and its answer, checked by a
// local activity of the caller's workflow (the delegation check) for a child
// workflow, and in process for a factory's agent, whose whole run is
// bound. A background job is checked as in process: its spawn, its
// hand-off and its receipt, and each subagent_jobs call and its result,
// which holds the job's answer when it collects one. A child's corrective
// retry is a hand-off of its own, checked with the task it hands down and
// the arguments of the call that started the child. A resident's call
// (ResidentWorkflow) is a hand-off too, made at the path of the caller
// the call names (AskUpdate's second argument): its task is checked
// before the resident runs, its answer before the caller reads it, and
// its run as that caller's sub-agent's. A rule that asks,
// before a plain call or a hand-off, waits for the person, durably, as a
// tool.RequireApproval call does. Each check carries the path and depth
// of the agent that makes it, as in process ("lead/subagent" for a
// spawned fork).
//
// Guardrails (policy.Guardrail, on the worker's Runtime.Guardrails) guard
// the agents whose Spec names them, as agent.WithGuardrails does in
// process: the task before the run starts, the final answer before its
// parent's model reads it, each check an activity (a judge's model calls
// included), a tripwire stopping every run above it
// (ErrTypeGuardrailTripped), a Retry sending the answer back once.
//
// Model failures are retried by Temporal according to the provider's error
// kind: a rate limit or a transient failure retries with backoff; a bad
// request, an authentication failure, a context-window overflow, a malformed
// or oversized reply does not.
package temporal
