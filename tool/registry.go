package tool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/policy"
	"golang.org/x/sync/errgroup"
)

// Default limits of a Registry.
const (
	// DefaultParallelism is how many calls of one model turn run at once:
	// 0, no bound. Every call of a turn starts together, so that a fan-out
	// of a thousand sub-agents runs as one wave; what bounds the work is
	// what it calls, such as the admission control of the provider the
	// sub-agents share (provider.Admission), which lets through as many
	// model calls as the provider takes. SetParallelism sets a bound.
	DefaultParallelism = 0
	// DefaultMaxArgsBytes bounds the size of one call's arguments.
	DefaultMaxArgsBytes = 1 << 20
)

// Registry holds the tools of an agent and runs a model turn's calls.
//
// A Registry is safe for concurrent use. Registering while calls run is
// allowed; a call sees the tools registered when it started. The zero value
// is an empty registry with the default limits, ready to use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]Tool
	// list and defs hold the tools and their definitions in registration
	// order. Register replaces them rather than appending in place, so a
	// reader may keep them after unlocking.
	list        []Tool
	defs        []Definition
	conditional bool // some tool implements Conditional
	parallelism int
	maxArgs     int
}

// NewRegistry returns a registry holding tools. It fails if two tools share
// a name or a tool is nil.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: make(map[string]Tool, len(tools)), parallelism: DefaultParallelism, maxArgs: DefaultMaxArgsBytes}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds t. A second tool with the same name is an error.
func (r *Registry) Register(t Tool) error {
	if t == nil {
		return errors.New("tool: Register(nil): pass a Tool")
	}
	def := t.Definition()
	if err := toolcall.CheckName(def.Name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[def.Name]; dup {
		return fmt.Errorf("tool: a tool named %q is already registered: give each tool its own name", def.Name)
	}
	if r.tools == nil {
		r.tools = map[string]Tool{}
	}
	r.tools[def.Name] = t
	r.list = append(slices.Clip(r.list), t)
	r.defs = append(slices.Clip(r.defs), def)
	if _, ok := t.(Conditional); ok {
		r.conditional = true
	}
	return nil
}

// Remove takes the tool named name out of the registry and reports whether
// it was there. Calls already running finish; later calls to the name are
// answered as to an unknown tool. It is how a tool that went away (an MCP
// server's tool list changed) stops being offered.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[name]; !ok {
		return false
	}
	delete(r.tools, name)
	// New slices, not edits in place: a reader may hold the old ones.
	list := make([]Tool, 0, len(r.list)-1)
	defs := make([]Definition, 0, len(r.defs)-1)
	conditional := false
	for i, u := range r.list {
		if r.defs[i].Name == name {
			continue
		}
		list = append(list, u)
		defs = append(defs, r.defs[i])
		if _, ok := u.(Conditional); ok {
			conditional = true
		}
	}
	r.list, r.defs, r.conditional = list, defs, conditional
	return true
}

// SetParallelism bounds how many calls of one turn run at once (by
// default there is no bound: DefaultParallelism). n must be at least 1.
func (r *Registry) SetParallelism(n int) error {
	if n < 1 {
		return fmt.Errorf("tool: parallelism %d: use 1 or more", n)
	}
	r.mu.Lock()
	r.parallelism = n
	r.mu.Unlock()
	return nil
}

// SetMaxArgumentBytes bounds the size of one call's arguments (default
// DefaultMaxArgsBytes). A larger call is answered with an error Result.
func (r *Registry) SetMaxArgumentBytes(n int) error {
	if n < 2 {
		return fmt.Errorf("tool: max argument size %d: use at least 2 bytes ({})", n)
	}
	r.mu.Lock()
	r.maxArgs = n
	r.mu.Unlock()
	return nil
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	t, ok := r.tools[name]
	r.mu.RUnlock()
	return t, ok
}

// Tools returns the registered tools in registration order.
func (r *Registry) Tools() []Tool {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.list)
}

// Notifiers returns the registered tools that are Notifiers, in
// registration order; nil, without allocating, when there are none, as
// for most agents, which ask before every top-level run.
func (r *Registry) Notifiers() []Notifier {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Notifier
	for _, t := range r.list {
		if nf, ok := t.(Notifier); ok {
			out = append(out, nf)
		}
	}
	return out
}

// Len returns the number of registered tools.
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.list)
}

// Filter returns a new registry with the tools for which keep reports true,
// with the same limits. It is how a child gets a narrower scope than its
// parent.
func (r *Registry) Filter(keep func(Tool) bool) *Registry {
	out := &Registry{tools: map[string]Tool{}, parallelism: DefaultParallelism, maxArgs: DefaultMaxArgsBytes}
	if r == nil {
		return out
	}
	out.parallelism, out.maxArgs = r.limits()
	for _, t := range r.Tools() {
		if keep(t) {
			_ = out.Register(t) // names are already unique
		}
	}
	return out
}

// Definitions returns the definitions to send to a model under ctx: every
// tool's, in registration order, less those whose Available(ctx) is false.
// The caller must not modify the slice.
func (r *Registry) Definitions(ctx context.Context) []Definition {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	list, defs, conditional := r.list, r.defs, r.conditional
	r.mu.RUnlock()
	if !conditional {
		return defs
	}
	// Copy only from the first tool that is not available: in the common
	// case every tool is, and the cached slice serves as it is.
	for i := range defs {
		if !available(ctx, list[i]) {
			out := make([]Definition, i, len(defs)-1)
			copy(out, defs[:i])
			for j := i + 1; j < len(defs); j++ {
				if available(ctx, list[j]) {
					out = append(out, defs[j])
				}
			}
			return out
		}
	}
	return defs
}

func available(ctx context.Context, t Tool) bool {
	c, ok := t.(Conditional)
	return !ok || c.Available(ctx)
}

// Execute runs calls, all at once or at most the registry's parallelism
// at a time, and
// returns one Result per call in call order.
//
// Correctable failures — an unknown or unavailable tool, arguments that are
// too large or invalid, an error marked Correctable, a panic — become error
// Results. Any other error from a tool is returned (the first one, with the
// tool's name), the calls still running are cancelled and those not yet
// started are not started; the Results are complete even then (a call not
// run has an error Result saying so), so that no usage is lost. A call
// that returns an *Interrupted (see Ask) does not stop the others: once
// all have ended, Execute returns one *Interrupted with the interrupts of
// every call, in call order. Once ctx is
// done, no call is started and its error is returned. The calls of a
// Sequencer that asks for it run one at a time, in call order.
//
// Under a context carrying a CallHook (WithCallHook), each call passes
// through the hook, with a context of its own. Under a context bound by a
// policy (policy.With), each call is checked before it runs, and its
// result before it is returned: a denied call does not run and its
// Result is the denial (Err a *policy.Denial); a call the policy asks
// about waits, as a tool.RequireApproval tool's does, for a person.
func (r *Registry) Execute(ctx context.Context, calls []Call) ([]Result, error) {
	results := make([]Result, len(calls))
	if len(calls) == 1 {
		var err error
		results[0], err = r.call(ctx, calls[0])
		return results, err
	}
	limit, _ := r.limits()
	g, gctx := errgroup.WithContext(ctx)
	if limit > 0 {
		g.SetLimit(limit)
	}
	// A call that asks for outside input does not stop its siblings: they
	// finish, and every interrupt of the turn is returned together.
	asked := &interruptSet{got: make([]*Interrupted, len(calls))}
	one := func(i int) error {
		var err error
		results[i], err = r.call(gctx, calls[i])
		if asked.keep(i, err) {
			return nil
		}
		return err
	}
	// The calls that must keep their order (Sequencer) run one after the
	// other, in one goroutine.
	var inOrder []int
	for i := range calls {
		if r.inOrder(calls[i]) {
			inOrder = append(inOrder, i)
			continue
		}
		g.Go(func() error { return one(i) })
	}
	if len(inOrder) > 0 {
		g.Go(func() error {
			for _, i := range inOrder {
				if err := one(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return results, err
	}
	return results, asked.err()
}

// inOrder reports whether c is a call that keeps its place among the
// step's calls of the same kind (Sequencer).
func (r *Registry) inOrder(c Call) bool {
	t, _ := r.lookup(c.Name)
	sq, ok := t.(Sequencer)
	return ok && sq.InOrder(c)
}

// limits returns the parallelism and the maximum argument size, the
// defaults for a nil or zero registry.
func (r *Registry) limits() (parallelism, maxArgs int) {
	parallelism, maxArgs = DefaultParallelism, DefaultMaxArgsBytes
	if r == nil {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.parallelism > 0 {
		parallelism = r.parallelism
	}
	if r.maxArgs > 0 {
		maxArgs = r.maxArgs
	}
	return
}

// call runs one call and sorts its failure into the model's channel or the
// program's.
func (r *Registry) call(ctx context.Context, c Call) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		// The turn is over (cancelled, or another call failed): a call
		// not yet started is not started.
		return Result{Content: fmt.Sprintf("tool %s was not run: %v", c.Name, context.Cause(ctx)), IsError: true}, err
	}
	ctx = run.AtCall(ctx, c.ID)
	callCtx := ctx
	if h := hookFrom(ctx); h != nil {
		var done func(Result, error)
		ctx, done = h(ctx, c)
		defer func() { done(res, err) }() // after the recover below
	}
	// The call counts at least what the model calls made under it spent:
	// a tool that runs sub-agents itself may leave Usage empty. (Before
	// the hook's done, which records the Result; after the recover.)
	defer func() { res.Usage = run.AtLeastSpent(callCtx, res.Usage) }()
	if pol := policy.From(ctx); pol != nil {
		var stop bool
		var chk policy.Check // one for the call and its result, on the stack
		if c, res, err, stop = guard(ctx, pol, &chk, c); stop {
			return res, err
		}
		defer func() {
			if err == nil {
				res = checkResult(ctx, pol, &chk, c, res)
			}
		}() // after the recover below, before the hook's done
	}
	t, max := r.lookup(c.Name)
	if t == nil || !available(ctx, t) {
		return errorResult(fmt.Errorf("%w %q: call one of: %s", ErrUnknownTool, c.Name, r.names(ctx))), nil
	}
	if len(c.Arguments) > max {
		return errorResult(fmt.Errorf("%w for %s: the arguments are %d bytes, more than the limit of %d: send less, or pass a reference instead of the content",
			ErrInvalidArguments, c.Name, len(c.Arguments), max)), nil
	}
	defer func() {
		if p := recover(); p != nil {
			res = errorResult(toolcall.Panicked(c.Name, p))
			err = nil
		}
	}()
	res, err = t.Call(ctx, c)
	if err != nil && IsCorrectable(err) {
		u := res.Usage
		res = errorResult(err)
		res.Usage = u
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("tool %s: %w", c.Name, err)
		var in *Interrupted
		if errors.As(err, &in) {
			// The call waits for an answer: its Result is no result, and
			// says so to whoever reads the Results.
			res.Err = err
		} else {
			err = scrubbed(ctx, err)
		}
	}
	return res, err
}

// lookup returns the tool named name, or nil, and the maximum argument
// size, under one lock.
func (r *Registry) lookup(name string) (Tool, int) {
	if r == nil {
		return nil, DefaultMaxArgsBytes
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	max := r.maxArgs
	if max <= 0 {
		max = DefaultMaxArgsBytes
	}
	return r.tools[name], max
}

func errorResult(err error) Result { return Result{Content: err.Error(), IsError: true, Err: err} }

func (r *Registry) names(ctx context.Context) string {
	defs := r.Definitions(ctx)
	if len(defs) == 0 {
		return "(no tools are available: answer without tools)"
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
