package subagent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
	"golang.org/x/sync/semaphore"
)

// Scope names whose conversation a resident keeps (docs/serving.md).
type Scope func(ctx context.Context) (string, error)

// PerThread scopes a resident to the call's thread (agent.Thread).
func PerThread(ctx context.Context) (string, error) {
	if th := agent.Thread(ctx); th != "" {
		return th, nil
	}
	return "", fmt.Errorf("%w: PerThread: the call is not part of a thread: serve the agent through agui, mark the run with agent.WithThread, or scope by something else", ErrNoScope)
}

// WithMaxScopes bounds the scopes a FromScoped tool keeps in memory.
func WithMaxScopes(n int) Option {
	return usedBy(formScoped, "WithMaxScopes bounds the scopes of a FromScoped expert", func(c *config) error {
		if n < 1 {
			return fmt.Errorf("WithMaxScopes(%d): keep at least 1", n)
		}
		c.maxScopes = n
		return nil
	})
}

// FromScoped returns a resident per scope; its run refuses a wider policy.
func FromScoped(name, description string, scope Scope, newAgent func(scope string) (agent.Agent, error), opts ...Option) (*SubAgentTool, error) {
	if scope == nil {
		return nil, fmt.Errorf("subagent %q: nil scope: pass subagent.PerThread or a function naming the call's scope", name)
	}
	if newAgent == nil {
		return nil, fmt.Errorf("subagent %q: nil newAgent: pass a function that builds a scope's agent", name)
	}
	t, err := build(name, description, taskParams, formScoped, opts)
	if err != nil {
		return nil, err
	}
	t.defaultToTask()
	limit := t.cfg.maxScopes
	if limit == 0 {
		limit = DefaultMaxScopes
	}
	// A scope's agent is built by newAgent at its scope's first call, so
	// no constructor sees its policy: one wider than the call inherits is
	// refused when it runs (a *policy.Widening), as FromFactory's is.
	t.scoped = &scopes{proto: t, of: scope, build: newAgent, limit: limit, live: map[string]*scopeEntry{}}
	return t, nil
}

// scopes are a FromScoped tool's residents, by scope.
type scopes struct {
	proto *SubAgentTool // the tool whose settings each resident has
	of    Scope
	build func(scope string) (agent.Agent, error)
	limit int

	mu    sync.Mutex
	live  map[string]*scopeEntry
	clock uint64
}

type scopeEntry struct {
	t     *SubAgentTool
	calls int    // in progress
	used  uint64 // the clock at its last call
}

// call runs the call in its scope's resident.
func (s *scopes) call(ctx context.Context, call tool.Call) (tool.Result, error) {
	name := s.proto.def.Name
	key, err := s.of(ctx)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: the scope function named none", ErrNoScope)
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("subagent %q: %w", name, err)
	}
	e, err := s.enter(key)
	if err != nil {
		return tool.Result{}, err
	}
	defer s.leave(e)
	return e.t.Call(ctx, call)
}

// enter returns the resident of scope key, building it if needed, with
// its call counted.
func (s *scopes) enter(key string) (*scopeEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	if e, ok := s.live[key]; ok {
		e.calls++
		e.used = s.clock
		return e, nil
	}
	p := s.proto
	var a agent.Agent
	err := guarded(p.def.Name, func() (err error) { a, err = s.build(key); return err })
	if err == nil && a == nil {
		err = errors.New("build returned no agent")
	}
	if err != nil {
		return nil, fmt.Errorf("subagent %q: building the agent of scope %q: %w", p.def.Name, key, err)
	}
	t := &SubAgentTool{def: p.def, params: p.params, cfg: p.cfg, resident: a, turn: semaphore.NewWeighted(1), pause: &residentPause{}, shapeTold: p.shapeTold}
	if d := p.cfg.durable; d != nil {
		if _, ok := a.(Persistent); !ok {
			return nil, fmt.Errorf("subagent %q: WithStore: the agent of scope %q (%T) cannot save its conversation: build an *agent.React or implement subagent.Persistent", p.def.Name, key, a)
		}
		t.cfg.durable = &durable{st: d.st, key: store.ScopeKey(key, d.key), hold: store.ScopeKey(key, "expert-suspended/"+d.key)}
	}
	e := &scopeEntry{t: t, calls: 1, used: s.clock}
	s.live[key] = e
	s.evict()
	return e, nil
}

func (s *scopes) leave(e *scopeEntry) {
	s.mu.Lock()
	e.calls--
	s.mu.Unlock()
}

// evict forgets the least recently used idle scopes past the limit.
func (s *scopes) evict() {
	for len(s.live) > s.limit {
		var oldest string
		var at uint64
		for k, e := range s.live {
			if e.calls > 0 || e.t.pause.freedChan() != nil {
				continue // in a call, or held for a suspended one
			}
			if oldest == "" || e.used < at {
				oldest, at = k, e.used
			}
		}
		if oldest == "" {
			return // every scope is busy: keep them until one is idle
		}
		delete(s.live, oldest)
	}
}

// ForgetScope drops what a FromScoped tool holds in memory for scope.
func (t *SubAgentTool) ForgetScope(scope string) {
	if t.scoped == nil {
		return
	}
	t.scoped.mu.Lock()
	delete(t.scoped.live, scope)
	t.scoped.mu.Unlock()
}
