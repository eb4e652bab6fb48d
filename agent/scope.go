package agent

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/deputy-go/deputy/provider"
)

// scope is the state a run shares with the tools it calls: values kept for
// the run's length, work to finish when it ends, and its token budget.
type scope struct {
	ctx    context.Context // the run's own context
	mu     sync.Mutex
	values map[any]any
	onEnd  []func() provider.Usage
	done   bool
	limit  int64        // token limit, 0 for none
	used   atomic.Int64 // tokens used so far, children's included
	// reserved is the part of the budget set aside for work running inside
	// tool calls (ReserveTokens); it is changed under mu.
	reserved atomic.Int64
}

// RunLocal returns the value stored under key for the run of ctx, calling
// init to create and store it on the first call; later calls in the same run
// return that same value. Tools use it for state that lives as long as one
// run of the agent calling them, such as a count of the sub-agents it has
// started. The result is what init returned, as an any: assert it back to
// init's type. Use a key of a type unexported in the caller's package, as
// for context.WithValue, so that no other package reaches the value.
// Outside a run nothing is stored and it returns a fresh init().
func RunLocal(ctx context.Context, key any, init func() any) any {
	sc := info(ctx).scope
	if sc == nil {
		return init()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if v, ok := sc.values[key]; ok {
		return v
	}
	if sc.values == nil {
		sc.values = map[any]any{}
	}
	v := init()
	sc.values[key] = v
	return v
}

// RunContext returns the context of the run ctx belongs to, which lives as
// long as the run (the context a tool call receives may end with the call).
// Work a tool leaves running after its call returns derives its context
// from it. Outside a run it returns ctx.
func RunContext(ctx context.Context) context.Context {
	if sc := info(ctx).scope; sc != nil {
		return sc.ctx
	}
	return ctx
}

// OnRunEnd registers fn to run when the run of ctx ends, before the run
// reports its outcome. fn must stop and wait for whatever work the run left
// behind; the usage it returns is added to the run's ChildUsage. It reports
// false, and does not register fn, outside a run or once the run has ended.
func OnRunEnd(ctx context.Context, fn func() provider.Usage) bool {
	sc := info(ctx).scope
	if sc == nil {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done {
		return false
	}
	sc.onEnd = append(sc.onEnd, fn)
	return true
}

// Finish ends the run of ctx: it calls the functions registered with
// OnRunEnd, the latest first, waiting for each (they stop and wait for work
// the run's tools left running), and returns the sum of the usage they
// report, for the run's ChildUsage. Once it returns, OnRunEnd refuses new
// functions. An agent that starts its runs with WithRun calls Finish once,
// at the end of Run, before reporting the outcome; *React does. Outside a
// run it does nothing.
func Finish(ctx context.Context) provider.Usage {
	sc := info(ctx).scope
	if sc == nil {
		return provider.Usage{}
	}
	var total provider.Usage
	for {
		sc.mu.Lock()
		sc.done = len(sc.onEnd) == 0
		if sc.done {
			sc.mu.Unlock()
			return total
		}
		fn := sc.onEnd[len(sc.onEnd)-1]
		sc.onEnd = sc.onEnd[:len(sc.onEnd)-1]
		sc.mu.Unlock()
		total = total.Add(fn())
	}
}

// TokensLeft returns how many tokens the run of ctx may still use, and
// whether it has a limit at all. Sub-agent tools use it to give a child a
// budget taken from what its parent has left.
func TokensLeft(ctx context.Context) (n int64, limited bool) {
	sc := info(ctx).scope
	if sc == nil || sc.limit == 0 {
		return 0, false
	}
	return max(sc.limit-sc.used.Load()-sc.reserved.Load(), 0), true
}

// ReserveTokens sets aside up to n tokens of the token budget of the run of
// ctx for work done inside one of its tool calls, such as a sub-agent, so
// that work started beside it — the other calls of a parallel step — is not
// promised the same tokens. It returns how many it set aside: n, or what is
// left when that is less. When the run has no token limit it sets nothing
// aside and returns n, false.
//
// settle ends the reservation; call it once the work has ended, with the
// tokens it spent, from the tool call that made the reservation (or from
// work registered with OnRunEnd). Those tokens count as used from then on,
// so that a call that starts later in the same step sees them before the
// run folds the call's Result. Calls of settle after the first do nothing.
func ReserveTokens(ctx context.Context, n int64) (granted int64, limited bool, settle func(spent int64)) {
	sc := info(ctx).scope
	if sc == nil || sc.limit == 0 {
		return n, false, func(int64) {}
	}
	sc.mu.Lock()
	granted = min(max(n, 0), max(sc.limit-sc.used.Load()-sc.reserved.Load(), 0))
	sc.reserved.Add(granted)
	sc.mu.Unlock()
	var once sync.Once
	return granted, true, func(spent int64) {
		once.Do(func() {
			sc.mu.Lock()
			sc.reserved.Add(-granted)
			sc.used.Add(spent)
			sc.mu.Unlock()
		})
	}
}
