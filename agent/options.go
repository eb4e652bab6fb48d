package agent

import (
	"context"
	"fmt"
	"math"

	"github.com/deputy-go/deputy/internal/run"
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

// WithName names the agent, in errors and events; the fake provider routes
// scripted replies by it.
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

// WithParallelism bounds the tool calls of one turn run at once (default
// none, tool.DefaultParallelism) through the agent's registry, shared with
// its other agents. n must be at least 1, and the agent must have tools.
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

// WithToolRetries sets how many steps in a row with a failed tool call end a
// run with ErrToolRetries (DefaultToolRetries; zero: the first).
func WithToolRetries(n int) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: tool retries %d: use 0 or more", ErrInvalidOption, n)
		}
		r.toolRetries = n
		return nil
	}
}

// WithTokenLimit bounds the tokens of a run at n, its sub-agents' included
// (zero: no limit). Each model call is reserved first, its estimated input
// and output bound (at most WithMaxTokens, else 4,096) within what is left;
// the call after which another would not fit is made without tools, to
// answer with what the run has (Output.Partial), and a run with no room for
// a reply ends with ErrUsageLimit. Before a step's tool calls, the run keeps
// back its next input and shares the rest equally among the calls and its
// own reply: a sub-agent's share is its limit, given back less what it spent.
// The estimate (what the provider counted so far, plus a token per four bytes
// added) can fall short by e per call; the calls whose worst case what is
// left cannot pay for take turns across the tree, each with what such calls
// passed their limits by so far taken off, so a tree spends at most n + e, e
// the largest shortfall of one call: under a journal, over all the runs of
// its turn too, as each such call's excess is journaled with it. The guide
// docs/fanout.md works it through.
func WithTokenLimit(n int64) Option {
	return func(r *React) error {
		if n < 0 {
			return fmt.Errorf("%w: token limit %d: use 0 (no limit) or more", ErrInvalidOption, n)
		}
		r.tokenLimit = n
		return nil
	}
}

// WithoutStreaming makes the agent call Complete even when it could stream
// (a sink listens and the provider is a provider.Streamer): each reply is
// then announced whole.
func WithoutStreaming() Option {
	return func(r *React) error {
		r.streamer = nil
		return nil
	}
}

// WithHistoryLimit keeps about n messages between runs, cut where a user
// turn starts (zero: no bound).
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

// WithMaxTokens caps each reply (provider.Request.MaxTokens; zero: the
// provider's default, or 4,096 under a budget, which may lower it).
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

// WithCacheKey sets the provider's prompt cache key of the agent's calls
// (provider.Request.CacheKey); the default is the agent's name, and
// Input.CacheKey overrides it for one run.
func WithCacheKey(key string) Option {
	return func(r *React) error {
		if key == "" {
			return fmt.Errorf("%w: empty cache key: give a key or leave the option out to use the agent's name", ErrInvalidOption)
		}
		r.cacheKey = key
		return nil
	}
}

// WithPrices prices the model calls of the run and of the sub-agents it
// starts (unless they have their own), in Output.Cost, AttrCost and "costUsd"
// in the usage of RUN_FINISHED and SUBAGENT_* events; unpriced models cost
// nothing (Output.Unpriced). prices must not be nil.
func WithPrices(prices *provider.Prices) Option {
	return func(r *React) error {
		if prices == nil {
			return fmt.Errorf("%w: WithPrices(nil): pass a price table (provider.NewPrices, provider.ReadPrices) or leave the option out", ErrInvalidOption)
		}
		r.prices = prices
		return nil
	}
}

// WithCostLimit bounds what a run may cost in US dollars, its sub-agents'
// included, at the prices of WithPrices; calls are reserved and shared as
// under WithTokenLimit (before any answer, at provider.Prices.Dearest), and it
// spends at most dollars + e·input price. A call to a model the prices
// lack is reserved at the dearest price; what it spends counts nothing
// against the limit. dollars must be positive.
func WithCostLimit(dollars float64) Option {
	return func(r *React) error {
		if !(dollars > 0) || math.IsInf(dollars, 0) {
			return fmt.Errorf("%w: cost limit %v: give a positive number of US dollars", ErrInvalidOption, dollars)
		}
		r.costLimit = dollars
		return nil
	}
}

// WithPolicy binds every run of the agent and all it starts by p (package
// policy), added to any policy its context carries. p must not be nil, and
// may only narrow its parent's (policy.Narrow): a wider one (*policy.Widening)
// is refused by NewReact when it sees both, else by the run.
func WithPolicy(p *policy.Policy) Option {
	return func(r *React) error {
		if p == nil {
			return fmt.Errorf("%w: WithPolicy(nil): pass a policy made with policy.New, or leave the option out", ErrInvalidOption)
		}
		r.policy = p
		c, _ := policy.With(context.Background(), p) // none to widen
		r.bound = run.BoundOf(c)                     // see bind
		return nil
	}
}
