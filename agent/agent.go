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
	// Messages are appended before Text: a conversation a model API accepts
	// (ErrBadMessages), or one whose last turn's calls are answered in part.
	Messages []provider.Message
	// ResponseSchema is the answer's JSON Schema, sent with every call
	// (provider.Request.ResponseSchema); OutputOf validates. CacheKey replaces
	// the agent's prompt cache key (WithCacheKey) for the run.
	ResponseSchema json.RawMessage
	CacheKey       string
	// Fork, when set, makes a fresh agent's run a context fork of a parent's
	// request (subagent.WithContextForks): each call sends Fork's System, Tools,
	// Model and Messages (shared, never written) first, read from the provider's
	// cache; the agent's registry runs the tools, refusing one it lacks.
	Fork *provider.Request
}

// Output is the outcome of one run.
type Output struct {
	// RunID identifies the run; Answer is its final text; Messages its part of
	// the conversation, input included (it may share memory with the history:
	// copy it before changing it).
	RunID    string
	Answer   string
	Messages []provider.Message
	// Usage is what the agent's own model calls cost, ChildUsage its
	// sub-agents'.
	Usage      provider.Usage
	ChildUsage provider.Usage
	// Value is the answer as a T, under OutputOf[T]; Compactions counts the
	// run's compactions; Partial reports an answer made in a wrap-up call,
	// because another step would have passed the budget.
	Value       any
	Compactions int
	Partial     bool
	// Cost is the run's cost in US dollars, sub-agents included, at the prices
	// of WithPrices; Unpriced names the models ("provider/model") they lack.
	Cost     float64
	Unpriced []string
	// CacheSaved is what the prompt cache saved, at the same prices
	// (provider.Price.Saved; negative when writes cost more than reads saved).
	CacheSaved float64
	// Queued counts the calls, sub-agents' included, that waited for admission
	// (provider.Response.Queued); Refused the sub-agents a limit refused.
	Queued  int
	Refused int
	// Earlier and EarlierCost are the part of TotalUsage and Cost that earlier
	// runs of the same journaled turn spent: every run reports the whole turn.
	Earlier     provider.Usage
	EarlierCost float64
	// Denials are what the run's policy (WithPolicy, policy.With) denied in it
	// and below it, in order, each with its rule (the first 64).
	Denials []*policy.Denial
}

// TotalUsage returns Usage plus ChildUsage.
func (o Output) TotalUsage() provider.Usage { return o.Usage.Add(o.ChildUsage) }

// Agent is anything that can be run. Run returns promptly once ctx is done,
// with an error wrapping ctx.Err(), and reports the usage spent even when it
// fails. Implementations say whether they are safe for concurrent use.
type Agent interface {
	Run(ctx context.Context, in Input) (Output, error)
}

// Func adapts a function to Agent.
type Func func(ctx context.Context, in Input) (Output, error)

// Run calls f(ctx, in).
func (f Func) Run(ctx context.Context, in Input) (Output, error) { return f(ctx, in) }

// Errors a run, NewReact or Restore can end with, wrapped with the agent's
// name and what to do; test for them with errors.Is. A panicking provider
// is a bug in it: the run fails instead of the program.
var (
	ErrMaxSteps      = errcode.New("max_steps", "agent: max steps exceeded")                            // WithMaxSteps calls, no answer
	ErrToolRetries   = errcode.New("tool_retries", "agent: tool error retries exhausted")               // WithToolRetries failed steps in a row
	ErrUsageLimit    = errcode.New("usage_limit", "agent: usage limit exceeded")                        // WithTokenLimit or WithCostLimit spent
	ErrEmptyReply    = errcode.New("empty_reply", "agent: model reply has neither text nor tool calls") // neither text nor tool calls
	ErrBadSnapshot   = errors.New("agent: invalid conversation snapshot")                               // not Snapshot's, or refused by a model API
	ErrBadMessages   = errors.New("agent: invalid input messages")                                      // Input.Messages a model API would refuse
	ErrNilProvider   = errors.New("agent: nil provider")                                                // NewReact without a provider
	ErrInvalidOption = errors.New("agent: invalid option")                                              // a bad value, or an option NewReact would ignore
	ErrProviderPanic = errors.New("agent: provider panicked")                                           // the provider panicked
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
