package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// React is the ReAct loop: it calls the model, runs the tools it asks for (in
// parallel), and repeats until the model answers with text. It keeps its
// conversation across runs; a failed run leaves it as it was. It is safe for
// concurrent use: runs take turns, a waiting caller giving up with its ctx.
type React struct {
	p            provider.Provider
	streamer     provider.Streamer // p, when it streams
	name         string
	system       string
	model        string
	tools        *tool.Registry
	maxSteps     int
	toolRetries  int
	output       *output // OutputOf
	tokenLimit   int64
	prices       *provider.Prices // set by WithPrices
	costLimit    float64          // set by WithCostLimit
	policy       *policy.Policy   // set by WithPolicy
	bound        *run.Bound       // how policy binds a run (bind)
	guards       *guardrail.Set   // set by WithGuardrails; nil: none
	historyLimit int
	maxTokens    int
	temperature  *float64
	cacheKey     string       // set by WithCacheKey; else the name
	tracer       trace.Tracer // set by WithTracerProvider
	parallelism  int          // set by WithParallelism; 0 leaves the registry's
	logger       *slog.Logger // set by WithLogger; nil logs nothing
	compaction   *Compaction  // with defaults; nil: WithoutCompaction
	window       int64        // set by WithContextWindow; 0: unknown

	turn   *semaphore.Weighted // held for a whole run
	mu     sync.Mutex          // guards kept and epochs
	kept   kept
	epochs uint64 // the last epoch given (newEpoch)
}

// kept is the conversation a React keeps between runs. It is a value:
// a checkpoint is a copy, and restoring one puts the copy back.
type kept struct {
	msgs  []provider.Message
	bytes int64 // compact.MsgsBytes(msgs)
	// spare reports that no one wrote past the end of msgs in its array,
	// so that the next run may append in place instead of copying the
	// whole history (a checkpoint or a failed run may have: then the run
	// copies).
	spare bool
	// reported is the input plus output tokens the provider reported for
	// the last reply of the conversation, which covered its first
	// reportedBytes bytes; zero when none did.
	reported, reportedBytes int64
	// epoch changes whenever the conversation changes other than by
	// messages added at its end (Mark).
	epoch uint64
}

// newEpoch returns an epoch no conversation of r had. Call it with r.mu
// held.
func (r *React) newEpoch() uint64 {
	r.epochs++
	return r.epochs
}

// NewReact returns a ReAct agent over p. It fails on a nil provider or a bad
// option value, saying which.
func NewReact(p provider.Provider, opts ...Option) (*React, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: pass a provider, such as fake.NewProvider(...) or openai.New()", ErrNilProvider)
	}
	st, _ := p.(provider.Streamer)
	r := &React{
		p:           p,
		streamer:    st,
		name:        DefaultName,
		maxSteps:    DefaultMaxSteps,
		toolRetries: DefaultToolRetries,
		compaction:  &defaultCompaction,
		turn:        semaphore.NewWeighted(1),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.parallelism > 0 {
		if r.tools == nil {
			return nil, fmt.Errorf("%w: WithParallelism(%d) on an agent without tools: give it tools (WithTools or WithRegistry) or leave the option out", ErrInvalidOption, r.parallelism)
		}
		if err := r.tools.SetParallelism(r.parallelism); err != nil {
			return nil, err
		}
	}
	if err := r.narrowsBelow(); err != nil {
		return nil, err
	}
	return r, nil
}

// Name returns the agent's name.
func (r *React) Name() string { return r.name }

// Tools returns the agent's tool registry (nil when it has no tools).
func (r *React) Tools() *tool.Registry { return r.tools }

// Provider returns the agent's provider.
func (r *React) Provider() provider.Provider { return r.p }

// SystemPrompt returns the agent's system prompt.
func (r *React) SystemPrompt() string { return r.system }

// Run asks the agent in and returns its answer; a failed run's Output holds
// its id, messages and usage. Under an event sink (event.WithSink) it emits
// AG-UI events, RUN_STARTED to RUN_FINISHED or RUN_ERROR, with a step per
// model call, its reply (streamed) and its tool calls, closing all it opens.
func (r *React) Run(ctx context.Context, in Input) (out Output, err error) {
	if len(in.Messages) > 0 {
		open, err := conversation.CheckOpen(in.Messages)
		if err == nil && len(open) > 0 && in.Text != "" {
			err = errors.New("the conversation ends with tool calls left without a result, and Text would follow them: leave Text empty to run those calls")
		}
		if err != nil {
			return Output{}, fmt.Errorf("agent %q: %w: %v", r.name, ErrBadMessages, err)
		}
	}
	if f := in.Fork; f != nil {
		if open, err := conversation.CheckOpen(f.Messages); err != nil || len(open) > 0 || len(f.Messages) == 0 {
			return Output{}, fmt.Errorf("agent %q: %w: Input.Fork holds no conversation a fork can go on from (%d messages, %d calls without a result, %v): give it the request a parent sent",
				r.name, ErrBadMessages, len(f.Messages), len(open), err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Output{}, fmt.Errorf("agent %q: not started: %w", r.name, err)
	}
	if err := r.narrowsInherited(ctx); err != nil {
		return Output{}, err
	}
	if t, ok := ctx.Value(heldKey{}).(*Turn); ok && t != nil && t.r == r && !t.released {
		// The caller holds the turn (Hold). The run's tools do not.
		return r.run(context.WithValue(ctx, heldKey{}, (*Turn)(nil)), in)
	}
	if err := r.turn.Acquire(ctx, 1); err != nil {
		return Output{}, fmt.Errorf("agent %q: waiting for the previous run to end: %w", r.name, err)
	}
	defer r.turn.Release(1)
	return r.run(ctx, in)
}
