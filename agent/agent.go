package agent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// Input is what an agent is asked.
type Input struct {
	// Text is the task or question, sent as a user message when not empty.
	Text string
	// Messages, when set, are appended to the conversation before Text, for
	// a caller that hands over a conversation rather than one question.
	// They must be a conversation a model API accepts: no system messages,
	// every tool call answered by a tool message with its id; except that
	// they may end with a turn left open, an assistant message whose tool
	// calls are answered in part by the tool messages after it (and no
	// Text). The run then first runs the calls left without a result, and
	// goes on from there: a turn re-run from one of its calls, the others'
	// results kept.
	Messages []provider.Message
	// ResponseSchema, when set, is the JSON Schema the run's final answer
	// should match. A ReAct agent sends it with every model call of the
	// run as provider.Request.ResponseSchema, so that a provider with
	// native structured output asks the model for that shape. It does not
	// by itself validate the answer: an agent built with OutputOf[T] does,
	// and hands back a T in Output.Value.
	ResponseSchema json.RawMessage
	// CacheKey, when set, names the conversation the run continues (a
	// thread, a resident expert) for the provider's prompt cache, instead
	// of the agent's own key (see WithCacheKey).
	CacheKey string
	// Fork, when set, makes the run a context fork of the model request
	// it holds, one a parent sent (see subagent.WithContextForks): every
	// model call of the run sends Fork's System, Tools and Model, and
	// starts with Fork's Messages byte for byte, the run's Messages and
	// Text following, so that the provider reads that prefix from its
	// cache (Request.SharedPrefix marks where it ends); its CacheKey is
	// Fork's unless CacheKey is set. The agent's own system prompt is not
	// sent, and the tools it is offered are the parent's, as the parent
	// saw them: its own registry runs the calls, and a call of a tool it
	// lacks, or may not use here, fails with an error its model reads.
	// Fork's Messages are shared, not copied, and never written to; the
	// run's conversation is its own, and goes back to nobody. The agent
	// must hold no conversation of its own (a fresh agent). Fork's
	// Messages are not compacted for passing the agent's Compaction
	// bounds, only for not fitting its context window (see Compaction).
	Fork *provider.Request
}

// Output is the outcome of one run.
type Output struct {
	// RunID identifies the run.
	RunID string
	// Answer is the agent's final text.
	Answer string
	// Messages is this run's part of the conversation, input included. It
	// may share memory with the agent's history: read it, or copy it before
	// changing it.
	Messages []provider.Message
	// Usage is what the agent's own model calls cost.
	Usage provider.Usage
	// ChildUsage is what work done inside its tools (sub-agents) cost.
	ChildUsage provider.Usage
	// Value is the answer decoded, for an agent built with OutputOf[T]: a
	// T, checked against T's schema. It is nil otherwise.
	Value any
	// Compactions is how many times the run compacted the conversation
	// the agent keeps (see Compaction).
	Compactions int
	// Partial reports that the run answered in a wrap-up turn: another
	// step would have taken it past its token limit, so its last model
	// call was made without tools, the model told to answer with what it
	// had and to say what is unfinished.
	Partial bool
	// Cost is what the run cost in US dollars, its sub-agents' included,
	// at the prices given with WithPrices (by this agent or the one that
	// started it); zero without prices. Unpriced names the models the
	// prices lack ("provider/model"), whose calls count as nothing.
	Cost     float64
	Unpriced []string
	// CacheSaved is what the prompt cache saved the run, its sub-agents'
	// included, in US dollars at the same prices: for each model call,
	// what its input would have cost with no token read from or written
	// to the cache, less what it cost (provider.Price.Saved). Cached input
	// counts at its own price (CacheRead), and cache writes at theirs
	// (CacheWrite) where a vendor charges more for them, so a run that
	// wrote more than it read saves less than nothing. Zero without
	// prices.
	CacheSaved float64
	// Queued is how many model calls of the run, its sub-agents'
	// included, waited for their provider's admission control before
	// they went (provider.Response.Queued).
	Queued int
	// Refused is how many sub-agents the run's tools, and its sub-agents',
	// refused to start for a limit: a spawn past subagent.WithMaxSpawns,
	// a child with no token budget left.
	Refused int
	// Earlier is the part of Usage plus ChildUsage, and EarlierCost the
	// part of Cost, that earlier runs of the same journaled turn spent:
	// a turn that asked a question and was resumed with its answer, or
	// was run again after its process died, reports what the whole turn
	// spent (every model answer and finished call replayed from the
	// journal counts at what it cost when it was paid for, never paid
	// again), and Earlier says how much of it came before this run. Zero
	// for a turn run once.
	Earlier     provider.Usage
	EarlierCost float64
	// Denials is what the policy binding the run (WithPolicy,
	// policy.With) denied in it and in its sub-agents, in the order
	// denied: each a tool call, a hand-off, a result or a model call, and
	// the rule that denied it (the first 64).
	Denials []*policy.Denial
}

// TotalUsage returns Usage plus ChildUsage.
func (o Output) TotalUsage() provider.Usage { return o.Usage.Add(o.ChildUsage) }

// Agent is anything that can be run.
//
// Run must honour ctx: once ctx is done it returns promptly with an error
// that wraps ctx.Err(). When Run fails it still reports in the Output the
// usage spent, so that no token goes uncounted. Implementations say whether
// they are safe for concurrent use.
type Agent interface {
	Run(ctx context.Context, in Input) (Output, error)
}

// Func adapts a function to Agent.
type Func func(ctx context.Context, in Input) (Output, error)

// Run calls f(ctx, in).
func (f Func) Run(ctx context.Context, in Input) (Output, error) { return f(ctx, in) }

// Errors a run, NewReact or Restore can end with. Each is wrapped with the
// agent's name and what to do about it; test for them with errors.Is.
var (
	// ErrMaxSteps: the model made WithMaxSteps calls without answering.
	ErrMaxSteps = errcode.New("max_steps", "agent: max steps exceeded")
	// ErrToolRetries: more steps in a row than WithToolRetries allows had a
	// failed tool call.
	ErrToolRetries = errcode.New("tool_retries", "agent: tool error retries exhausted")
	// ErrUsageLimit: the run used more tokens than WithTokenLimit allows.
	ErrUsageLimit = errcode.New("usage_limit", "agent: usage limit exceeded")
	// ErrEmptyReply: the model answered with neither text nor tool calls.
	ErrEmptyReply = errcode.New("empty_reply", "agent: model reply has neither text nor tool calls")
	// ErrBadSnapshot: Restore was given something Snapshot did not make,
	// or a conversation a model API would refuse.
	ErrBadSnapshot = errors.New("agent: invalid conversation snapshot")
	// ErrBadMessages: Input.Messages is a conversation a model API would
	// refuse; the message says which message and why.
	ErrBadMessages = errors.New("agent: invalid input messages")
	// ErrNilProvider: NewReact was given no provider.
	ErrNilProvider = errors.New("agent: nil provider")
	// ErrInvalidOption: an option given to NewReact has a bad value, or one
	// NewReact would ignore (WithParallelism on an agent without tools).
	ErrInvalidOption = errors.New("agent: invalid option")
	// ErrProviderPanic: the provider panicked during a model call. It is a
	// bug in the provider; the run fails instead of the program.
	ErrProviderPanic = errors.New("agent: provider panicked")
)

// RunID returns the id of the run ctx belongs to, or "" outside a run.
func RunID(ctx context.Context) string { return run.ID(ctx) }

// ParentRunID returns the id of the run that started the run of ctx, or "".
func ParentRunID(ctx context.Context) string { return run.Parent(ctx) }

// Name returns the name of the agent whose run ctx belongs to, or "".
func Name(ctx context.Context) string { return run.Name(ctx) }

// Depth returns how deep in a delegation tree ctx is: 0 for a top-level
// agent, 1 for its sub-agents, and so on.
func Depth(ctx context.Context) int { return run.Depth(ctx) }
