package agent

import (
	"fmt"
	"math"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Defaults of a ReAct agent.
const (
	DefaultMaxSteps    = 10
	DefaultToolRetries = 3
	DefaultName        = "agent"
)

// Option configures a ReAct agent. NewReact reports an option's bad value
// as an error wrapping ErrInvalidOption; a nil Option is ignored.
type Option func(*React) error

// WithName names the agent. The name appears in errors and events, and the
// fake provider routes scripted replies by it.
func WithName(name string) Option {
	return func(r *React) error {
		if name == "" {
			return fmt.Errorf("%w: empty name: give the agent a name or leave the option out", ErrInvalidOption)
		}
		r.name = name
		return nil
	}
}

// WithSystemPrompt sets the system prompt sent with every model call.
func WithSystemPrompt(prompt string) Option {
	return func(r *React) error { r.system = prompt; return nil }
}

// WithTools gives the agent these tools, in a registry of its own.
func WithTools(tools ...tool.Tool) Option {
	return func(r *React) error {
		reg, err := tool.NewRegistry(tools...)
		if err != nil {
			return fmt.Errorf("%w: WithTools: %w", ErrInvalidOption, err)
		}
		r.tools = reg
		return nil
	}
}

// WithRegistry gives the agent a registry that may be shared with other
// agents. A nil registry means no tools.
func WithRegistry(reg *tool.Registry) Option {
	return func(r *React) error { r.tools = reg; return nil }
}

// WithParallelism bounds how many tool calls of one model turn run at once
// (by default there is no bound: tool.DefaultParallelism). It sets the limit of the agent's
// registry, so with WithRegistry every agent sharing that registry gets it
// too. n must be at least 1, and the agent must have tools (WithTools or
// WithRegistry), in any order of the options.
func WithParallelism(n int) Option {
	return func(r *React) error {
		if n < 1 {
			return fmt.Errorf("%w: parallelism %d: use 1 or more", ErrInvalidOption, n)
		}
		r.parallelism = n
		return nil
	}
}

// WithMaxSteps bounds the model calls of one run (default DefaultMaxSteps).
func WithMaxSteps(n int) Option {
	return func(r *React) error {
		if n < 1 {
			return fmt.Errorf("%w: max steps %d: use 1 or more", ErrInvalidOption, n)
		}
		r.maxSteps = n
		return nil
	}
}

// WithToolRetries sets how many consecutive steps with a failed tool call the
// run tolerates before it ends with ErrToolRetries (default
// DefaultToolRetries). Zero ends the run at the first failure.
func WithToolRetries(n int) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: tool retries %d: use 0 or more", ErrInvalidOption, n)
		}
		r.toolRetries = n
		return nil
	}
}

// WithTokenLimit bounds the tokens of a run at n, its sub-agents'
// included. Zero means no limit.
//
// Every model call is reserved before it is made: it goes only if its
// estimated input and the output it may produce fit what is left, and
// what it may produce is sent as its output bound
// (provider.Request.MaxTokens, at most WithMaxTokens, or 4,096 when that
// is not set), so that no reply passes it. A call after which another like
// it would not fit is the run's last: it is made without tools, with a
// note that asks the model to answer with what it has and to say what is
// unfinished, and its answer, or a reply cut at its bound, ends the run
// with Output.Partial set. A run with no room left for a reply makes no
// call and ends with ErrUsageLimit. A compaction's summary is reserved the
// same way.
//
// The sub-agents the run's tools start share what it has left: before the
// tool calls of a step start, the run keeps back what its next call will
// read before their results, and splits the rest in equal shares, one a
// call and one for its own next reply. A sub-agent gets its call's share as
// its limit (the lower of that and its agent's own), given back to the
// run, less what it spent, when it ends; a background job keeps its share
// until it is collected, less what the run spends on the job's receipt and
// collection. A sub-agent's answer, which its parent reads again, is paid
// out of its share: it reserves each reply twice. A corrective retry of a
// validated answer gets what the first run left of the share, and is not
// made when that cannot pay for it.
//
// The estimate of a call's input is what the provider counted for the
// conversation up to the last reply (its input and output tokens), plus a
// token per four bytes of what was added since (tool results, new text,
// the budget note); for a run's first call, a token per four bytes of the
// whole request (system prompt, tool definitions, response schema,
// messages). No call is made to count tokens. Against a tokenizer that
// counts t tokens a byte the estimate of a call is short by at most
// e = (t − 1/4)·b, b the bytes it estimated: about nothing for English
// prose (t ≈ 1/4), b/4 for code or JSON (t ≈ 1/2), 3b/4 at worst (one token
// a byte). The bound is
//
//	spent ≤ n + Σ e
//
// the sum over the runs of the tree spending at the same time (the run
// alone, or each of the sub-agents of one step) of the shortfall e of the
// last call each makes: a call's shortfall is counted, as reported, before
// the next call is reserved, so a run's shortfalls do not add up.
// The bound rests on the provider stopping a reply at the request's
// MaxTokens, as the vendors' APIs do: a provider that replies past it
// can spend up to one whole reply more.
func WithTokenLimit(n int64) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: token limit %d: use 0 (no limit) or more", ErrInvalidOption, n)
		}
		r.tokenLimit = n
		return nil
	}
}

// WithoutStreaming makes the agent call its provider's Complete even when
// the provider streams and a sink listens, for a server whose streaming is
// broken or slower than one answer. Events still flow: each reply is
// announced whole once it has arrived, as for a provider that cannot
// stream. By default the agent streams exactly when a sink listens
// (event.WithSink) and the provider implements provider.Streamer.
func WithoutStreaming() Option {
	return func(r *React) error {
		r.streamer = nil
		return nil
	}
}

// WithHistoryLimit bounds the conversation kept between runs to about n
// messages. The cut is made at the start of a user turn, so a tool call is
// never separated from its result; a single turn longer than n is kept whole.
// Zero means no bound.
func WithHistoryLimit(n int) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: history limit %d: use 0 (no limit) or more", ErrInvalidOption, n)
		}
		r.historyLimit = n
		return nil
	}
}

// WithModel names the model; empty means the provider's default.
func WithModel(model string) Option {
	return func(r *React) error { r.model = model; return nil }
}

// WithMaxTokens caps each reply's length, sent as the request's output
// bound (provider.Request.MaxTokens); zero means the provider's default.
// Under WithTokenLimit or WithCostLimit every call is sent a bound, the
// lower of what the budget leaves for its reply and n, or, when n is zero,
// 4,096 (the most some models write, and the largest bound some APIs
// accept): set n higher to let a budgeted run write longer replies.
func WithMaxTokens(n int) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: max tokens %d: use 0 (provider default) or more", ErrInvalidOption, n)
		}
		r.maxTokens = n
		return nil
	}
}

// WithTemperature sets the sampling temperature.
func WithTemperature(t float64) Option {
	return func(r *React) error {
		if t < 0 || t > 2 {
			return fmt.Errorf("%w: temperature %v: use a value from 0 to 2", ErrInvalidOption, t)
		}
		r.temperature = &t
		return nil
	}
}

// WithCacheKey sets the key the agent's model calls give the provider's
// prompt cache (provider.Request.CacheKey), so that calls repeating the same
// conversation are looked up in the same place. The default is the agent's
// name; Input.CacheKey overrides it for one run (a thread's id, say).
func WithCacheKey(key string) Option {
	return func(r *React) error {
		if key == "" {
			return fmt.Errorf("%w: empty cache key: give a key or leave the option out to use the agent's name", ErrInvalidOption)
		}
		r.cacheKey = key
		return nil
	}
}

// WithPrices prices the run's model calls, and those of the sub-agents it
// starts (which inherit the prices unless they have their own): the cost
// appears as Output.Cost, on the run's and each model call's span
// (AttrCost), and, per provider and model, as "costUsd" beside the token
// counts of the usage AG-UI events carry (RUN_FINISHED, SUBAGENT_*). A
// model the table has no price for costs nothing and is named in
// Output.Unpriced. prices must not be nil.
func WithPrices(prices *provider.Prices) Option {
	return func(r *React) error {
		if prices == nil {
			return fmt.Errorf("%w: WithPrices(nil): pass a price table (provider.NewPrices, provider.ReadPrices) or leave the option out", ErrInvalidOption)
		}
		r.prices = prices
		return nil
	}
}

// WithCostLimit bounds what a run may cost, in US dollars, its sub-agents'
// included, at the prices given with WithPrices (to this agent or to the
// one that started it). Every call is reserved as under WithTokenLimit: it
// goes only if its estimated input, at the price of the model that
// answered last (or the agent's), and the output it may produce fit what
// the run, and every run it is inside, may still spend, and that output is
// its bound; the sub-agents of a step share what is left, after the run
// keeps back the price of its next call's input, as under WithTokenLimit.
// A sub-agent reserves the price of its answer twice: once as its output,
// once as input at its own model's input price (its parent reads it
// again). The bound is
//
//	cost ≤ dollars + Σ e·Input
//
// e each spending run's last shortfall (WithTokenLimit) and Input the input
// price of its model. A call before any model has answered, by an agent
// that names none (WithModel), is reserved at the dearest prices the table
// holds (provider.Prices.Dearest). Calls of a model the prices lack cost
// nothing against it. dollars must be positive.
func WithCostLimit(dollars float64) Option {
	return func(r *React) error {
		if !(dollars > 0) || math.IsInf(dollars, 0) {
			return fmt.Errorf("%w: cost limit %v: give a positive number of US dollars", ErrInvalidOption, dollars)
		}
		r.costLimit = dollars
		return nil
	}
}

// WithPolicy binds every run of the agent, and all it starts, by p: each
// tool call, hand-off to a sub-agent, result and model call of the whole
// tree below it is checked by p's rules (see package policy). A run
// started under a context that already carries a policy keeps that one
// and adds p's rules to it: an agent can narrow the policy it runs under,
// never loosen it. A nil p is an error: there is nothing to bind by.
func WithPolicy(p *policy.Policy) Option {
	return func(r *React) error {
		if p == nil {
			return fmt.Errorf("%w: WithPolicy(nil): pass a policy made with policy.New, or leave the option out", ErrInvalidOption)
		}
		r.policy = p
		return nil
	}
}
