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
	// Messages, when set, are appended to the conversation before Text. They
	// must be a conversation a model API accepts (ErrBadMessages), except that
	// they may end with a turn whose tool calls are answered in part: the run
	// first runs the calls left without a result (a turn re-run from a call).
	Messages []provider.Message
	// ResponseSchema, when set, is the JSON Schema the answer should match,
	// sent with every model call (provider.Request.ResponseSchema). It does not
	// validate: OutputOf does.
	ResponseSchema json.RawMessage
	// CacheKey, when set, replaces the agent's prompt cache key (WithCacheKey)
	// for the run.
	CacheKey string
	// Fork, when set, makes the run a context fork of a parent's request
	// (subagent.WithContextForks): every call sends Fork's System, Tools and
	// Model and starts with its Messages byte for byte (shared, never written),
	// so the provider reads them from its cache; the CacheKey is Fork's unless
	// set. The agent's own system prompt is not sent; its registry runs the
	// parent's tools, and a call of one it lacks fails with an error its model
	// reads. The agent must be fresh, holding no conversation.
	Fork *provider.Request
}

// Output is the outcome of one run.
type Output struct {
	// RunID identifies the run.
	RunID string
	// Answer is the agent's final text.
	Answer string
	// Messages is this run's part of the conversation, input included; it may
	// share memory with the agent's history: copy it before changing it.
	Messages []provider.Message
	// Usage is what the agent's own model calls cost.
	Usage provider.Usage
	// ChildUsage is what its tools' sub-agents cost.
	ChildUsage provider.Usage
	// Value is the answer as a T, under OutputOf[T]; nil otherwise.
	Value any
	// Compactions counts the run's compactions (see Compaction).
	Compactions int
	// Partial reports that the run answered in a wrap-up call, made without
	// tools, because another step would have passed its budget.
	Partial bool
	// Cost is what the run cost in US dollars, sub-agents included, at the
	// prices of WithPrices (zero without); Unpriced names the models
	// ("provider/model") the prices lack.
	Cost     float64
	Unpriced []string
	// CacheSaved is what the prompt cache saved the run at the same prices
	// (provider.Price.Saved): negative when cache writes cost more than reads
	// saved.
	CacheSaved float64
	// Queued counts the model calls, sub-agents' included, that waited for
	// their provider's admission control (provider.Response.Queued).
	Queued int
	// Refused counts the sub-agents a limit refused to start, in the run and
	// below it (subagent.WithMaxSpawns, a child budget).
	Refused int
	// Earlier is the part of TotalUsage, and EarlierCost of Cost, that
	// earlier runs of the same journaled turn spent (before a resume or a
	// restart): every run reports the whole turn, replayed work counted at what
	// it cost when paid for. Zero for a turn run once.
	Earlier     provider.Usage
	EarlierCost float64
	// Denials are what the run's policy (WithPolicy, policy.With) denied in it
	// and below it, in order, each with its rule (the first 64).
	Denials []*policy.Denial
}

// TotalUsage returns Usage plus ChildUsage.
func (o Output) TotalUsage() provider.Usage { return o.Usage.Add(o.ChildUsage) }

// Agent is anything that can be run. Run must return promptly, with an error
// wrapping ctx.Err(), once ctx is done, and report the usage spent even when
// it fails. Implementations say whether they are safe for concurrent use.
type Agent interface {
	Run(ctx context.Context, in Input) (Output, error)
}

// Func adapts a function to Agent.
type Func func(ctx context.Context, in Input) (Output, error)

// Run calls f(ctx, in).
func (f Func) Run(ctx context.Context, in Input) (Output, error) { return f(ctx, in) }

// Errors a run, NewReact or Restore can end with, wrapped with the agent's
// name and what to do; test for them with errors.Is.
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
