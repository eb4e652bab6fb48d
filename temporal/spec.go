package temporal

import (
	"cmp"
	"encoding/json"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Defaults for the zero fields of a Spec.
const (
	// DefaultMaxSteps bounds the model calls of one run, as in process
	// (agent.DefaultMaxSteps).
	DefaultMaxSteps = agent.DefaultMaxSteps
	// DefaultMaxDepth lets a top-level agent delegate and its children not
	// (subagent.DefaultMaxDepth).
	DefaultMaxDepth = subagent.DefaultMaxDepth
	// DefaultMaxOutputBytes caps what a child hands its parent, as in
	// process (subagent.DefaultMaxOutputBytes).
	DefaultMaxOutputBytes = subagent.DefaultMaxOutputBytes
	// DefaultToolRetries is how many steps in a row with a failed tool call
	// a run tolerates, as in process (agent.DefaultToolRetries).
	DefaultToolRetries = agent.DefaultToolRetries
	// DefaultParallelism bounds the tool calls of one turn run at once:
	// none, as in process (tool.DefaultParallelism). A workflow started
	// before this default ran at most legacyParallelism at once, and goes
	// on doing so when it is replayed.
	DefaultParallelism = tool.DefaultParallelism
	// DefaultActivityTimeout bounds one attempt of a model or tool call.
	DefaultActivityTimeout = 2 * time.Minute
	// DefaultPayloadLimit caps a model reply or a tool result an activity
	// records: well under Temporal's 2 MB payload limit.
	DefaultPayloadLimit = 512 << 10
)

// Workflow, activity and update names, as registered by Register.
const (
	AgentWorkflowName   = "deputy.Agent"
	FactoryWorkflowName = "deputy.Factory"
	// FactoryJobWorkflowName runs a factory's agent as a background job
	// (FactoryJobWorkflow).
	FactoryJobWorkflowName = "deputy.FactoryJob"
	ResidentWorkflowName   = "deputy.Resident"
	CompleteActivityName   = "deputy.Complete"
	CallToolActivityName   = "deputy.CallTool"
	RunFactoryActivity     = "deputy.RunFactory"
	CheckActivityName      = "deputy.CheckDelegation"
	// ChecksActivityName checks a turn's hand-offs at once (Checks).
	ChecksActivityName = "deputy.CheckDelegations"
	GuardActivityName  = "deputy.Guard"
	// PublishActivityName publishes a run's job events (JobEvents), a
	// local activity of the run's workflow.
	PublishActivityName = "deputy.PublishJobEvents"
	AskUpdate           = "ask"
	CloseSignal         = "close"
	SpawnToolName       = "spawn_subagent"
)

// Spec describes an agent. It is a plain value carried in workflow inputs:
// providers, tools and factories are named here and looked up in the
// Runtime of the worker that runs the activity.
type Spec struct {
	// Name names the agent in errors and child workflow ids.
	Name string `json:"name,omitempty"`
	// Provider names the Runtime provider that answers the model calls.
	Provider string `json:"provider"`
	// Model, System, MaxTokens are sent with every model call.
	Model     string `json:"model,omitempty"`
	System    string `json:"system,omitempty"`
	MaxTokens int    `json:"max_tokens,omitempty"`
	// Tools names Runtime tools the model may call; each call is an activity.
	Tools []string `json:"tools,omitempty"`
	// SubAgents are offered as tools; each call is a child workflow.
	SubAgents []SubAgent `json:"sub_agents,omitempty"`
	// Spawn offers spawn_subagent: each call forks a child of this agent's
	// kind (same provider and tools, fresh history, no sub-agents).
	Spawn bool `json:"spawn,omitempty"`
	// Roster, with Spawn, lists the named sub-agents spawn_subagent may
	// start by its "agent" argument, as subagent.WithRoster does in
	// process: in the foreground, or with Background in the background,
	// as jobs the model acts on with subagent_jobs and a program starts
	// with StartJob (Task.Agent). A member is reached only through
	// spawn_subagent, not offered as a tool of its own; a spawn that
	// names none forks this agent, and one that names another is
	// refused with the members' names. A member is an Agent, which runs
	// as the child workflow of its Spec (in the background it takes
	// messages at its step boundaries, as a fork does), or a Factory,
	// whose agent runs in process inside one activity (in the background,
	// a FactoryJobWorkflow, it takes messages at its agent's step
	// boundaries too); a React sub-agent, which reads its system prompt
	// from its call, cannot be one. A spawn of a member counts against
	// MaxSpawns and MaxBackground as a fork's does, and the workers'
	// policy is asked about its hand-off under the member's name.
	Roster []SubAgent `json:"roster,omitempty"`
	// MaxSpawns caps spawn_subagent calls in one run; zero means no cap.
	// A call the workers' policy refuses starts no child and does not
	// count. A call past it is refused (subagent.ErrMaxSpawns), counted in
	// RunOutput.Refused and published as a deputy.refused event of reason
	// max_spawns, as subagent.WithMaxSpawns does in process.
	MaxSpawns int `json:"max_spawns,omitempty"`
	// Background, with Spawn, lets the model start forks in the
	// background (spawn_subagent with background=true) and act on them
	// with subagent_jobs, as subagent.WithBackground does in process:
	// each job a child workflow, each message a signal taken at the
	// job's next step boundary. A resident offers none.
	Background bool `json:"background,omitempty"`
	// MaxBackground bounds the jobs of one run alive at once
	// (subagent.DefaultMaxBackground when 0).
	MaxBackground int `json:"max_background,omitempty"`
	// JobsAcrossTurns, with Background, gives the jobs a top-level run
	// of a thread (agent.WithThread, through Agent) starts to the thread,
	// as subagent.WithJobsAcrossTurns does in process: they work on when
	// the turn ends, and the thread's next turn is told which ended
	// meanwhile and acts on them with subagent_jobs (see ThreadJobs).
	JobsAcrossTurns bool `json:"jobs_across_turns,omitempty"`
	// JobTime bounds the wall time of each job (subagent.DefaultJobTime
	// when 0), as subagent.JobLimits' Time: a job past it ends by itself
	// with a partial report and what it spent. A thread's job that no
	// turn collects in time, its thread never coming back, is told of to
	// the thread's next turn, which counts it. (A run's job, not a
	// thread's, is bounded so from deputy.job-limits on; before, by the
	// server at the default, with nothing it spent.)
	JobTime time.Duration `json:"job_time,omitempty"`
	// JobTokens, JobCost and JobSteps bound each job, as subagent.JobLimits'
	// Tokens, Cost and Steps do in process (subagent.WithJobLimits): its
	// tokens, its own children's included, its dollars at the workers'
	// prices, its model calls. A job is held to the lesser of such a
	// limit and its share of its run's; with none, to its share, and a
	// thread's job past an unlimited run to subagent.DefaultJobTokens and
	// DefaultJobCost; its steps are subagent.DefaultJobSteps, or the
	// Spec's MaxSteps below them, when JobSteps is 0. A job past a limit
	// ends with a partial report and what it spent, counted once.
	JobTokens int64   `json:"job_tokens,omitempty"`
	JobCost   float64 `json:"job_cost,omitempty"`
	JobSteps  int     `json:"job_steps,omitempty"`
	// MaxOwnerJobs, with JobsAcrossTurns, bounds the jobs alive at once
	// in the threads of one owner (agent.WithOwner; subagent.
	// DefaultMaxOwnerJobs when 0), as subagent.WithMaxOwnerJobs: a spawn
	// past it is refused (subagent.ErrMaxBackground, and a deputy.refused
	// event of reason max_owner_jobs). The jobs of all the owner's
	// threads on the task queue are counted by the owner's workflow, from
	// which each spawn takes its job's place before the job starts, one
	// spawn at a time, so that the cap holds across threads and
	// processes. When that workflow cannot be asked, a turn counts its
	// thread's jobs and those of the owner's other threads that Agent had
	// run on its task queue in this process when the turn started
	// (OwnerJobsActivityName; a thread that cannot be read within 5 s
	// counts none).
	MaxOwnerJobs int `json:"max_owner_jobs,omitempty"`
	// MaxSteps bounds the model calls of one run (DefaultMaxSteps when 0).
	MaxSteps int `json:"max_steps,omitempty"`
	// ToolRetries is how many steps in a row with a failed tool call the
	// run tolerates before it fails with ErrTypeToolRetries
	// (DefaultToolRetries when 0; a negative value: none, the first
	// failure ends the run), as agent.WithToolRetries in process.
	ToolRetries int `json:"tool_retries,omitempty"`
	// MaxDepth is the delegation depth cap (DefaultMaxDepth when 0).
	MaxDepth int `json:"max_depth,omitempty"`
	// MaxOutputBytes caps the answer this agent hands its parent
	// (DefaultMaxOutputBytes when 0).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// TokenLimit, when set, bounds the tokens of the run and its
	// children, as agent.WithTokenLimit in process: each model call is
	// reserved before it is made and sent with what is left as its
	// MaxTokens, a call with no room after it is a wrap-up turn (no tools,
	// answer now), a child's limit is its share of what is left, and a run
	// with no room for a reply ends with ErrTypeUsageLimit.
	TokenLimit int64 `json:"token_limit,omitempty"`
	// CostLimit, when set, bounds what the run and its children cost, in
	// US dollars at the workers' prices (Runtime.Prices), as
	// agent.WithCostLimit in process: each model call is reserved on the
	// worker before it is made (its estimated input at the model's price,
	// and what is left paying for its MaxTokens), a call with no room
	// after it is a wrap-up turn, each child's limit is its share of what
	// is left, and a run past it ends with ErrTypeUsageLimit. It spends at
	// most CostLimit plus the estimation error of one call's input at its
	// price. A call to a model the prices lack is reserved at the
	// dearest they hold; what such a model's replies cost counts nothing
	// against it.
	CostLimit float64 `json:"cost_limit,omitempty"`
	// bounds names the settings the run's limits come from when they are
	// not its own Spec's (RunInput.JobBounds), for the run's messages;
	// never serialized.
	bounds limitSettings
	// Guardrails names the Runtime.Guardrails that guard this agent, as
	// agent.WithGuardrails does in process: its input guardrails check
	// the task it is given before it starts, its output guardrails its
	// final answer (once it fits OutputSchema). A tripwire fails the run
	// with ErrTypeGuardrailTripped, which fails every run above it too; an
	// output guardrail with Retry sends the answer back once (the one
	// corrective retry a schema violation has), and fails the run with
	// ErrTypeGuardrail the second time, which its parent's model reads.
	// Each check is an activity; a judge's usage counts in ChildUsage,
	// and what it cost at the workers' prices in RunOutput.Cost.
	Guardrails []string `json:"guardrails,omitempty"`
	// Parallelism bounds the tool calls of one turn run at once (0:
	// DefaultParallelism, no bound).
	Parallelism int `json:"parallelism,omitempty"`
	// OutputSchema, when set, is the JSON Schema the final answer must
	// match; a violation asks the model again once with the error.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// ActivityTimeout bounds one attempt of a model or tool call
	// (DefaultActivityTimeout when 0). A lost worker's attempt is retried
	// elsewhere after it.
	ActivityTimeout time.Duration `json:"activity_timeout,omitempty"`
	// MaxAttempts bounds the attempts of a retryable model call (8 when 0).
	MaxAttempts int32 `json:"max_attempts,omitempty"`
}

// SubAgent is a sub-agent offered to the model as a tool. Exactly one of
// Agent, React and Factory says what a call runs.
type SubAgent struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Params is the tool's JSON Schema; a default fits the kind.
	Params json.RawMessage `json:"params,omitempty"`
	// Agent is a fixed child: each call runs it on the arguments' task.
	Agent *Spec `json:"agent,omitempty"`
	// React lets the model define the child: its system prompt is the
	// arguments' system_prompt, its input the task; provider and tools are
	// the parent's.
	React bool `json:"react,omitempty"`
	// Factory names a Runtime factory; the agent it builds runs in one
	// activity of the child workflow.
	Factory string `json:"factory,omitempty"`
}

// RunInput is the input of AgentWorkflow.
type RunInput struct {
	Spec Spec `json:"spec"`
	// Text is the task, sent as a user message when not empty.
	Text string `json:"text,omitempty"`
	// Messages, when set, come before Text.
	Messages []provider.Message `json:"messages,omitempty"`
	// Answered, set by a parent on its fork's input, is the model that
	// answered the parent's last call: the fork's calls ask what the
	// parent's asked, and are reserved under a cost limit at that model's
	// price until one of the fork's own answers, as in process (a
	// router's default model may be one no price names).
	Answered string `json:"answered,omitempty"`
	// Depth is the delegation depth of this run (0 at the top).
	Depth int `json:"depth,omitempty"`
	// Trace, set by a parent on its child's input, is where the run stands
	// in its tree, for its events (nil at the top: the run is the tree).
	Trace *Trace `json:"trace,omitempty"`
	// Job, set by a parent that starts the run as a background job, is
	// the job's id: the run takes the messages its parent sends before
	// each model call and tells its parent where it stands.
	Job string `json:"job,omitempty"`
	// Path, set by a parent on its child's input, names the agents from
	// the top-level run down to this one, joined by "/", as
	// policy.Check.Path does in process ("lead/subagent"); "" at the top,
	// where it is the Spec's Name (agent.DefaultName when it has none).
	Path string `json:"path,omitempty"`
	// Arguments, set by a parent whose workers have a policy on its
	// child's input, are the arguments of the call that started the run,
	// as the policy left them: the check of the run's corrective retry, a
	// hand-off of its own, reads them, as the check of its first hand-off
	// did.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Thread, set by Agent on a turn of a thread whose Spec has
	// JobsAcrossTurns, is what the turn knows of the thread's jobs when
	// it starts (nil: the run's jobs are its own).
	Thread *ThreadJobs `json:"thread,omitempty"`
	// JobTime, set by a run on its job's input (by every turn of a
	// thread, by other runs from deputy.job-limits on), is how long the
	// job may run: past it, the job ends with a partial report and what
	// it spent (ErrTypeJobTime).
	JobTime time.Duration `json:"job_time,omitempty"`
	// RunJob, set with JobTime by a run on its job's input, says the job
	// is the run's, not a thread's: its time bounds it, and no later turn
	// asks where it stands.
	RunJob bool `json:"run_job,omitempty"`
	// JobBounds, set by a run on its job's input, lists the job's limits
	// that are the run's bounds of a job (Spec.JobTokens, JobCost and
	// JobSteps, or their defaults) rather than its Spec's own: "tokens",
	// "cost", "steps". A job that stops at one names that setting.
	JobBounds []string `json:"job_bounds,omitempty"`
}

// RunOutput is the outcome of a run.
type RunOutput struct {
	// Answer is the final text, capped at the Spec's MaxOutputBytes.
	Answer string `json:"answer"`
	// Value is the validated JSON of the answer when the Spec has an
	// OutputSchema and the answer matched it.
	Value json.RawMessage `json:"value,omitempty"`
	// Invalid is the validation error left after the corrective retry.
	Invalid string `json:"invalid,omitempty"`
	// Messages is this run's part of the conversation.
	Messages []provider.Message `json:"messages,omitempty"`
	// Usage is what this agent's own model calls cost; ChildUsage what its
	// tools and children cost.
	Usage      provider.Usage `json:"usage"`
	ChildUsage provider.Usage `json:"child_usage"`
	// Cost is what the run and its children cost in US dollars, at the
	// workers' prices (Runtime.Prices; 0 without them).
	Cost float64 `json:"cost,omitempty"`
	// Model is the model that answered the run's first model call ("":
	// none answered), which a failed child's SUBAGENT_ERROR names, as in
	// process.
	Model string `json:"model,omitempty"`
	// Models is what the run and its children spent per provider and
	// model, each with its cost: the entries of RUN_FINISHED's and
	// SUBAGENT_FINISHED's usage. What no model accounts for (a factory's
	// agent, a guardrail, a job) is in Usage, ChildUsage and Cost only.
	Models []provider.ModelUsage `json:"models,omitempty"`
	// Earlier is the part of Models spent before the last answer a person
	// gave the run's tree took effect in it (the tree waits idle between
	// the question and its answer): what agent.Output.Earlier is in
	// process, the part of a journaled turn its earlier runs spent.
	Earlier []provider.ModelUsage `json:"earlier,omitempty"`
	// Refused counts the spawns a limit refused (Spec.MaxSpawns,
	// MaxBackground, MaxOwnerJobs) in the run and in the children and
	// jobs it read the outcomes of, as agent.Output.Refused in process.
	Refused int `json:"refused,omitempty"`
}

// TotalUsage is Usage plus ChildUsage.
func (o RunOutput) TotalUsage() provider.Usage { return o.Usage.Add(o.ChildUsage) }

// ModelCall is the input of the model activity.
type ModelCall struct {
	Provider string           `json:"provider"`
	Request  provider.Request `json:"request"`
	// Depth is the delegation depth of the run that makes the call (0 at
	// the top), and Path its path in the tree, which a policy reads
	// (Runtime.Policy).
	Depth int    `json:"depth,omitempty"`
	Path  string `json:"path,omitempty"`
	// Trace places the call in its tree, for its events (nil: none).
	Trace *Trace `json:"trace,omitempty"`
	// Reserve, for a run under a limit, is what it has left: the worker
	// reserves the call against it (nil: no limit).
	Reserve *Reserve `json:"reserve,omitempty"`
	// DistinctIDs: a call of the reply whose id names a call of the
	// request's conversation gets an id of its own, as one with none does.
	DistinctIDs bool `json:"distinct_ids,omitempty"`
	// Links are the messages the call's step took from its job's
	// mailbox, which the call's span links to the span of the model call
	// whose reply sent each.
	Links []MessageLink `json:"links,omitempty"`
}

// MessageLink is a message a background job's step took, by its id, and
// the span (trace and span id, in hex) of the model call of the step that
// sent it, as its ModelReply named it: the span of the call of the step
// that took it links to it, as a span in process links to the send.
type MessageLink struct {
	ID      string `json:"id"`
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// Reserve is what a run under a token or cost limit has left as it makes
// a model call. The worker reserves the call against it with what only
// the worker knows — the plain tools' definitions, which the workflow
// names only, and the model's price: the call goes only if its estimated
// input and the output it may produce fit, what it may produce is sent as
// its MaxTokens, and it is made the run's wrap-up turn (no tools, answer
// now) when a second call like it would not fit after it.
type Reserve struct {
	// Tokens is what is left of the token limit (0: none).
	Tokens int64 `json:"tokens,omitempty"`
	// Estimate is the workflow's estimate of the tokens the request
	// reads; Named says it counted the plain tools by their names only.
	Estimate int64 `json:"estimate"`
	Named    bool  `json:"named,omitempty"`
	// Cost says a cost limit bounds the run, and Dollars what is left of it.
	Cost    bool    `json:"cost,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
	// Model is the model that answered the run's last call ("" before
	// any did): the call is reserved at its price when the workers'
	// prices hold it, as in process, where the model the request names,
	// or the provider's default, may be another (a router's).
	Model string `json:"model,omitempty"`
	// TokenSetting and CostSetting name the settings the limits come
	// from, for the error of a call with no room ("": Spec.TokenLimit and
	// Spec.CostLimit).
	TokenSetting string `json:"token_setting,omitempty"`
	CostSetting  string `json:"cost_setting,omitempty"`
	// ReadBack: the run's answer is read again by its parent, out of the
	// same budget, so a reply gets half of what is left after its input.
	ReadBack bool `json:"read_back,omitempty"`
	// LastOut is the last reply's output tokens; WrapUp says the call is
	// the run's wrap-up turn already; Ceiling bounds MaxTokens.
	LastOut int64 `json:"last_out,omitempty"`
	WrapUp  bool  `json:"wrap_up,omitempty"`
	Ceiling int   `json:"ceiling"`
	// Follow, when above 0, is what the note of the run's wrap-up weighs,
	// in tokens: a call that offers tools is bounded so that the next
	// call can read its reply again with that note and write a token,
	// and is the wrap-up when no tool call it could write fits that
	// (unpaidChange).
	Follow int64 `json:"follow,omitempty"`
	// Worst is the most the request may read, as the workflow counts it:
	// what the provider counted for the conversation so far, and a token
	// a byte of what was added since (Estimate counts a token per four).
	Worst int64 `json:"worst,omitempty"`
	// Tree and TreeRun, set from treeTurnChange on, name the workflow of
	// the run's tree, its top-level run: a call whose worst case (Worst,
	// and its output bound) what is left cannot pay for takes the tree's
	// turn from it (the update deputy.overdraft) on a worker of a server, and goes
	// with what the tree's calls passed their runs' limits by so far
	// taken off what is left.
	Tree    string `json:"tree,omitempty"`
	TreeRun string `json:"tree_run,omitempty"`
	// Job, set with Tree, is the workflow of the thread's job the run
	// works under (Trace.Job), which keeps a turn of its own: a call
	// whose tree's workflow has ended (the job outlived the turn that
	// started it) takes the job's turn instead, and a call that takes the
	// tree's turn holds the job's as well, and tells it what it passed
	// its run's limits by, so that the job passes its own limit by at
	// most one call's error, a call in flight as the tree's workflow ends
	// included.
	Job string `json:"job,omitempty"`
}

// GuardCall is the input of the guardrail activity: the text an agent's
// guardrails of Stage check.
type GuardCall struct {
	Guardrails []string     `json:"guardrails"`
	Stage      policy.Stage `json:"stage"`
	Text       string       `json:"text"`
	// Retried says an answer is a correction already, or will not be
	// corrected: Unretried says why (policy.GuardrailError.Unretried).
	Retried   bool   `json:"retried,omitempty"`
	Unretried string `json:"unretried,omitempty"`
	// Depth and Path are the agent's, for the decisions' events.
	Depth int    `json:"depth"`
	Path  string `json:"path,omitempty"`
	// Trace places the agent in its tree, for the decisions' events and,
	// for a child's answer that passes, its SUBAGENT_FINISHED.
	Trace *Trace `json:"trace,omitempty"`
}

// Guarded is what the guardrail activity found: nothing (Failed unset),
// or the guardrail that failed the text and how.
type Guarded struct {
	Failed    bool   `json:"failed,omitempty"`
	Guardrail string `json:"guardrail,omitempty"`
	Tripwire  bool   `json:"tripwire,omitempty"`
	// Message is the failure's policy.GuardrailError text; Note what the
	// agent is told when its answer is sent back.
	Message string `json:"message,omitempty"`
	Note    string `json:"note,omitempty"`
	// Usage is what the checks spent (a judge's model calls), and Cost
	// what that cost in US dollars at the worker's prices.
	Usage provider.Usage `json:"usage"`
	Cost  float64        `json:"cost,omitempty"`
	// Models is Usage and Cost per provider and model, as the judges'
	// model calls were counted (nil in a check recorded before it).
	Models []provider.ModelUsage `json:"models,omitempty"`
}

// ModelReply is what the model activity records: the provider's
// response, what it cost at the worker's prices (Runtime.Prices), and
// whether the call, reserved on the worker against the run's limits, was
// made its run's wrap-up turn there (no tools, answer now).
type ModelReply struct {
	provider.Response
	Cost float64 `json:"deputy_cost,omitempty"`
	// InputPrice is the price of one input token of the model that
	// answered, in US dollars (0: unpriced), which the run keeps back for
	// its next call when it shares a cost limit out.
	InputPrice float64 `json:"deputy_input_price,omitempty"`
	// OutputPrice is the price of one of its output tokens: a child's
	// share is raised to the floor only when what is left after the
	// floors pays for one of them (shareFloorOutputChange).
	OutputPrice float64 `json:"deputy_output_price,omitempty"`
	WrapUp      bool    `json:"deputy_wrap_up,omitempty"`
	// Model is the model that answered, as the worker names it in the
	// call's usage ("" in a reply recorded before replies carried it).
	Model string `json:"deputy_model,omitempty"`
	// ProviderName is the provider's name (provider.Namer) under which
	// the call's usage is counted ("" for none, or in a reply recorded
	// before replies carried it).
	ProviderName string `json:"deputy_provider,omitempty"`
	// TraceID and SpanID name the call's span, in hex, where the worker
	// traced it ("" where it did not): a message its step sends a job
	// carries them, for the span of the call that takes it to link to.
	TraceID string `json:"deputy_trace_id,omitempty"`
	SpanID  string `json:"deputy_span_id,omitempty"`
}

// ToolCall is the input of the tool activity.
type ToolCall struct {
	Call           provider.ToolCall `json:"call"`
	Depth          int               `json:"depth"`
	MaxOutputBytes int               `json:"max_output_bytes"`
	// Path is the path of the run that makes the call, which a policy
	// reads.
	Path string `json:"path,omitempty"`
	// Trace places the call in its tree, for its result's event.
	Trace *Trace `json:"trace,omitempty"`
	// Asked and Answers: the questions the call's first run asked
	// (tool.Ask), and the answers a person gave, with which it runs again.
	Asked   []tool.Interrupt `json:"asked,omitempty"`
	Answers []tool.Answer    `json:"answers,omitempty"`
}

// ToolResult is what the tool activity records.
type ToolResult struct {
	Content string         `json:"content"`
	IsError bool           `json:"is_error,omitempty"`
	Usage   provider.Usage `json:"usage"`
	// Cost is what a child cost, in US dollars (Runtime.Prices).
	Cost float64 `json:"cost,omitempty"`
	// Asked are the questions the call asked a person (tool.Ask,
	// tool.RequireApproval) instead of finishing: the workflow waits for
	// their answers and runs the call again with them.
	Asked []tool.Interrupt `json:"asked,omitempty"`
	// Models and Earlier are a child's RunOutput.Models and Earlier.
	Models  []provider.ModelUsage `json:"models,omitempty"`
	Earlier []provider.ModelUsage `json:"earlier,omitempty"`
	// Code and Model, for a child whose failure is the result, are its
	// failure's code and the model that answered its first call, which
	// its SUBAGENT_ERROR has, as in process ("" in a factory's result
	// recorded before results carried them).
	Code  string `json:"deputy_code,omitempty"`
	Model string `json:"deputy_model,omitempty"`
	// Unbuilt, on a factory's result, says its factory failed to build
	// the agent with an error the model cannot correct (not
	// tool.Correctable): the caller's run fails with it, as in process
	// (factoryBuildChange).
	Unbuilt bool `json:"deputy_unbuilt,omitempty"`
	// Refused is a child's RunOutput.Refused.
	Refused int `json:"deputy_refused,omitempty"`

	// answered: the call asked a person and ran again with the answer
	// (the workflow's own, never recorded).
	answered bool
}

// FactoryCall is the input of FactoryWorkflow and of its activity.
type FactoryCall struct {
	Factory string `json:"factory"`
	// Tool is the name the model called the sub-agent by, which a policy
	// reads (Runtime.Policy); Factory when empty.
	Tool           string          `json:"tool,omitempty"`
	Arguments      json.RawMessage `json:"arguments"`
	Depth          int             `json:"depth"`
	MaxOutputBytes int             `json:"max_output_bytes"`
	// Path is the path of the run that calls the factory; the agent it
	// builds runs as its child, as in process.
	Path string `json:"path,omitempty"`
	// Checked says the caller's workflow asked the policy about the call
	// and its hand-off already (CheckActivityName), and Task is the task
	// the child is handed, as the policy left it.
	Checked bool   `json:"checked,omitempty"`
	Task    string `json:"task,omitempty"`
	// TokenLimit, when set, is the child's share of its caller's token
	// limit (Spec.TokenLimit), and CostLimit of its cost limit.
	TokenLimit int64   `json:"token_limit,omitempty"`
	CostLimit  float64 `json:"cost_limit,omitempty"`
	// Trace places the child in its tree, for its events.
	Trace *Trace `json:"trace,omitempty"`
	// Job, for FactoryJobWorkflow, is the id of the background job the
	// agent runs as (Spec.Background); JobTime bounds its run, as
	// Spec.JobTime bounds an agent's job; Thread says the job is a
	// thread's (Spec.JobsAcrossTurns), which outlives the turn that
	// started it.
	Job     string        `json:"job,omitempty"`
	JobTime time.Duration `json:"job_time,omitempty"`
	Thread  bool          `json:"thread,omitempty"`
	// JobDeadline, set by the job's workflow from its start and JobTime,
	// is when the agent's run ends, whichever attempt of its activity
	// runs it.
	JobDeadline time.Time `json:"job_deadline,omitempty"`
}

// Delegation is the input of the activity that asks a worker's policy
// (Runtime.Policy) about a sub-agent call its workflow makes: before it,
// the call and the hand-off, as the registry and a sub-agent tool ask in
// process; after it (After), the child's answer, before the model reads
// it.
type Delegation struct {
	Call provider.ToolCall `json:"call"`
	// Factory says the arguments are the task (a SubAgent.Factory call);
	// else the task is read from them as the sub-agent tools read it
	// (Spawn: a spawned fork's, its context first).
	Factory bool `json:"factory,omitempty"`
	Spawn   bool `json:"spawn,omitempty"`
	// Member names the roster member a spawn starts (Spec.Roster), the
	// name the policy is asked about the hand-off under, as in process;
	// "" for a fork.
	Member string `json:"member,omitempty"`
	// Tasked says a factory's task is the "task" of its arguments, as
	// for the other sub-agents (a workflow from deputy.factory-task on).
	Tasked bool `json:"tasked,omitempty"`
	// Depth and Path are the caller's.
	Depth int    `json:"depth"`
	Path  string `json:"path,omitempty"`
	// Asked and Answers: the questions the check asked a person (a rule
	// that asks), and the answers given, with which it runs again.
	Asked   []tool.Interrupt `json:"asked,omitempty"`
	Answers []tool.Answer    `json:"answers,omitempty"`
	// After, Result and IsError: the check of what the child answered.
	After   bool   `json:"after,omitempty"`
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Trace places the caller in its tree, for the events of the
	// policy's decisions.
	Trace *Trace `json:"trace,omitempty"`
	// Retry and Task: the check of a hand-off alone
	// (policy.BeforeDelegation), of Task: a child's corrective retry (its
	// answer failed its output schema), as in process, or a call of a
	// resident (ResidentWorkflow).
	Retry bool   `json:"retry,omitempty"`
	Task  string `json:"task,omitempty"`
	// Plain: the check of a call the workflow answers itself, which hands
	// nothing off (subagent_jobs: a background job's answer is its
	// result): before it, the call alone (policy.BeforeTool).
	Plain bool `json:"plain,omitempty"`
}

// Delegated is what the delegation check decided.
type Delegated struct {
	// Arguments and Task are the call's arguments and the child's task
	// to go on with, as the policy left them (rewritten, when a rule
	// rewrote them).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Task      string          `json:"task,omitempty"`
	// Refused, when set, is what the model reads in place of a result:
	// the call does not go on (a denial, a person's refusal).
	Refused string `json:"refused,omitempty"`
	// Asked are the questions a rule asks a person before the call goes
	// on: the workflow waits for their answers and checks again with them.
	Asked []tool.Interrupt `json:"asked,omitempty"`
	// Result and IsError, after the child, are what the model reads.
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
}

// Checks is what the policy decided about a turn's hand-offs, checked at
// once before any starts (ChecksActivityName, whose input is one
// Delegation a call).
type Checks struct {
	// Policy says the worker that checked has a policy: without one, every
	// hand-off goes on as the model made it (Decided is empty), and the
	// children's answers are not checked either.
	Policy bool `json:"policy,omitempty"`
	// Decided holds one Delegated a call, in order. To keep the marker
	// the decisions are recorded in small, Arguments is empty where the
	// policy left the call's arguments as they were, and Task where the
	// task is the one read from the arguments.
	Decided []Delegated `json:"decided,omitempty"`
}

// limitSettings name the settings a run's token, cost and step limits
// come from ("": its Spec's TokenLimit, CostLimit and MaxSteps).
type limitSettings struct{ tokens, cost, steps string }

// The bounds of a job named in RunInput.JobBounds.
const (
	jobBoundTokens = "tokens"
	jobBoundCost   = "cost"
	jobBoundSteps  = "steps"
)

// withBounds returns s with the settings its limits come from, as its
// job's input names them (RunInput.JobBounds).
func (s Spec) withBounds(bounds []string) Spec {
	for _, b := range bounds {
		switch b {
		case jobBoundTokens:
			s.bounds.tokens = "Spec.JobTokens"
		case jobBoundCost:
			s.bounds.cost = "Spec.JobCost"
		case jobBoundSteps:
			s.bounds.steps = "Spec.JobSteps"
		}
	}
	return s
}

// tokenSetting, costSetting and stepSetting name the settings the run's
// token, cost and step limits come from: the Spec's own, or, for a job
// held to its run's bounds of a job, that run's Spec.JobTokens, JobCost or
// JobSteps.
func (s Spec) tokenSetting() string { return cmp.Or(s.bounds.tokens, "Spec.TokenLimit") }
func (s Spec) costSetting() string  { return cmp.Or(s.bounds.cost, "Spec.CostLimit") }
func (s Spec) stepSetting() string  { return cmp.Or(s.bounds.steps, "Spec.MaxSteps") }

func (s Spec) maxSteps() int  { return cmp.Or(max(s.MaxSteps, 0), DefaultMaxSteps) }
func (s Spec) maxDepth() int  { return cmp.Or(max(s.MaxDepth, 0), DefaultMaxDepth) }
func (s Spec) maxOutput() int { return cmp.Or(max(s.MaxOutputBytes, 0), DefaultMaxOutputBytes) }
func (s Spec) jobTime() time.Duration {
	if s.JobTime > 0 {
		return s.JobTime
	}
	return subagent.DefaultJobTime
}

// within cuts the Spec's token and cost limits to tokens and dollars,
// each where it is set (over 0) and the Spec has no lower limit of its
// own.
func (s *Spec) within(tokens int64, dollars float64) {
	if tokens > 0 && (s.TokenLimit == 0 || s.TokenLimit > tokens) {
		s.TokenLimit = tokens
	}
	if dollars > 0 && (s.CostLimit == 0 || s.CostLimit > dollars) {
		s.CostLimit = dollars
	}
}

func (s Spec) maxOwnerJobs() int {
	return cmp.Or(max(s.MaxOwnerJobs, 0), subagent.DefaultMaxOwnerJobs)
}

// jobLimited reports whether the Spec bounds its jobs beyond the
// defaults (jobLimitsChange).
func (s Spec) jobLimited() bool { return s.JobTokens > 0 || s.JobCost > 0 || s.JobSteps > 0 }

func (s Spec) maxBackground() int {
	return cmp.Or(max(s.MaxBackground, 0), subagent.DefaultMaxBackground)
}
func (s Spec) parallelism() int { return cmp.Or(max(s.Parallelism, 0), DefaultParallelism) }

// toolRetries is ToolRetries, DefaultToolRetries when 0, none when below.
func (s Spec) toolRetries() int {
	if s.ToolRetries < 0 {
		return 0
	}
	return cmp.Or(s.ToolRetries, DefaultToolRetries)
}
func (s Spec) activityTimeout() time.Duration {
	if s.ActivityTimeout > 0 {
		return s.ActivityTimeout
	}
	return DefaultActivityTimeout
}
