package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/deputy-go/deputy/internal/delegates"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// guardModel asks the run's policy about req before it is sent: it
// returns the request to send (rewritten, when a rule redacted it), or the
// *policy.Denial that fails the run.
//
// The run's model calls share one check, and the request it holds, taken
// from modelChecks at the first and given back cleared when the run ends
// (releaseModelCheck): a policy costs a model call no allocation for
// them, and what the check keeps from one call to the next (what it
// looked up in the run's context, what a redactor found clean) is not
// worked out again.
func (s *runState) guardModel(req provider.Request) (provider.Request, error) {
	mc := s.modelCheck
	if mc == nil {
		mc = modelChecks.Get().(*modelCheck)
		s.modelCheck = mc
	}
	mc.req = req
	// The check's fields are set one by one: a literal assigned whole is
	// built apart and copied in whole (in a CPU profile of
	// BenchmarkDelegationPolicy, such a copy in the registry cost more than
	// the five rules it was made for). Those a rule may have set at the
	// last call are cleared.
	c := &mc.check
	c.Point, c.Request = policy.BeforeModel, &mc.req
	c.Tool, c.CallID, c.Arguments, c.Task, c.Context, c.Result, c.IsError = "", "", nil, "", nil, "", false
	out := s.policy.Decide(s.ctx, c)
	req = mc.req
	if out.Verdict == policy.Deny {
		return req, out.Err(c)
	}
	return req, nil
}

// releaseModelCheck gives the run's model check back to modelChecks,
// cleared: nothing of the run is kept in the pool.
func (s *runState) releaseModelCheck() {
	if mc := s.modelCheck; mc != nil {
		s.modelCheck = nil
		*mc = modelCheck{}
		modelChecks.Put(mc)
	}
}

// modelCheck is the check of a run's model calls, and the request it
// points to.
type modelCheck struct {
	check policy.Check
	req   provider.Request
}

// modelChecks holds the *modelCheck of runs not under way, cleared. The
// check outlives each model call (what it keeps for the next), so it
// lives in the run, not on a call's stack as a tool call's does; without
// a pool each run would allocate one. The pools of the registry's and the
// hand-off's checks, before those moved to the stack, took
// BenchmarkDelegationPolicy with five rules from 56 to 52 allocs/op and
// from 6,757 to 5,321 B/op, this one among them.
var modelChecks = sync.Pool{New: func() any { return new(modelCheck) }}

// denials returns what the policy denied in the run of ctx and under it.
func denials(ctx context.Context) []*policy.Denial {
	errs := run.Denials(ctx)
	if len(errs) == 0 {
		return nil
	}
	out := make([]*policy.Denial, 0, len(errs))
	for _, err := range errs {
		var d *policy.Denial
		if errors.As(err, &d) {
			out = append(out, d)
		}
	}
	return out
}

// WithGuardrails checks each run's input and answer with gs, the agent's
// own (see policy.Guardrail): a tripwire fails the run, a failed answer
// with Retry is sent back once; checks' usage counts in ChildUsage.
func WithGuardrails(gs ...policy.Guardrail) Option {
	return func(r *React) error {
		set, err := guardrail.Add(r.guards, "WithGuardrails", gs)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		r.guards = set
		return nil
	}
}

// inputText is what a run's input guardrails check: its Text, or, for a
// run given a conversation without one, the last user message in it.
func inputText(in Input) string {
	if in.Text != "" {
		return in.Text
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == provider.RoleUser {
			return in.Messages[i].Content
		}
	}
	return ""
}

// checkGuards checks text with the run's guardrails of stage; under a
// journal each decision is recorded under its place in the run, and a
// turn run again replays it (guardrail.Set.Journaled).
func (s *runState) checkGuards(stage policy.Stage, text string, retried bool) (*policy.GuardrailError, provider.Usage, error) {
	if s.journal == nil {
		return s.r.guards.Check(s.ctx, stage, text, "", retried)
	}
	s.guards++
	return s.r.guards.Journaled(s.ctx, s.journal.scope, s.journal.key+"/g"+strconv.Itoa(s.guards), stage, text, "", retried)
}

// guardInput checks the run's input text with its input guardrails.
func (s *runState) guardInput(text string) error {
	fail, spent, err := s.checkGuards(policy.Input, text, false)
	s.child = s.child.Add(spent)
	if err != nil {
		return err
	}
	if fail != nil {
		return fail
	}
	return nil
}

// guardAnswer checks the run's final answer with its output guardrails.
// It reports done when the answer passed; a failure that may be corrected,
// the first in the run, is put to the model, and the run goes on (not
// done); any other failure is the run's error. last, when not "", says
// why the answer cannot be corrected (a wrap-up's is the run's last); a
// run past its limit cannot pay for a correction either.
func (s *runState) guardAnswer(answer, last string) (done bool, err error) {
	if last == "" && !s.corrected && s.checkLimit() != nil {
		last = "the run is past its limit and cannot pay for another call"
	}
	fail, spent, err := s.checkGuards(policy.Output, answer, s.corrected || last != "")
	s.child = s.child.Add(spent)
	switch {
	case err != nil:
		return true, err
	case fail == nil:
		return true, nil
	case fail.Tripwire:
		return true, fail
	case last != "":
		fail.Unretried = last
		return true, fail
	case s.corrected:
		return true, fail
	}
	s.corrected = true
	s.add(provider.UserMessage(guardrail.Note(fail)))
	return false, nil
}

// bind binds the run of ctx, its own context as run.Start returned it, by
// the agent's policy added to the one it inherited, and returns the
// policy that binds it (nil: none). The policy is the run's, as its
// sink and span are (run.Observe), not a context layer of its own under
// the run, through which every look-up of anything else in the run and
// the runs under it would walk: that layer cost a delegation under five
// rules an allocation and was a part of its CPU in
// BenchmarkDelegationPolicyRatio.
func (r *React) bind(ctx context.Context) *policy.Policy {
	if r.policy == nil {
		return policy.From(ctx) // inherited, as run.Start passed it on
	}
	b := r.bound // the agent's own, when it inherited none
	if policy.From(ctx) != nil {
		// With adds the agent's rules the inherited policy lacks, in a
		// layer whose Bound the run takes. It cannot refuse them here:
		// narrowsInherited refused a wider policy before the run began.
		c, _ := policy.With(ctx, r.policy)
		b = run.BoundOf(c)
	}
	run.Bind(ctx, b)
	return policy.From(ctx)
}

// narrowsInherited returns an error, before the run of ctx starts, when
// the agent's own policy would allow what the policy the run inherits
// forbids (*policy.Widening): a child's policy may only narrow its
// parent's, and a wider one is refused rather than silently narrowed.
func (r *React) narrowsInherited(ctx context.Context) error {
	b := run.BoundOf(ctx)
	if r.policy == nil || b == nil || b == r.bound || b.Narrows == nil {
		return nil
	}
	if err := b.Narrows(r.policy); err != nil {
		return fmt.Errorf("agent %q: WithPolicy: %w", r.name, err)
	}
	return nil
}

// narrowsBelow returns an error when an agent the agent's tools hand work
// to, known when it is built (a resident, a FromReact child, a roster
// member, and theirs in turn), has a policy of its own that would allow
// what the agent's policy forbids. A child built for each call, or one a
// registry is given later, is checked when it runs (narrowsInherited).
func (r *React) narrowsBelow() error {
	if r.policy == nil || r.tools == nil || delegates.Of == nil {
		return nil
	}
	seen := map[*React]bool{r: true}
	var walk func(reg *tool.Registry) error
	walk = func(reg *tool.Registry) error {
		for _, t := range reg.Tools() {
			for _, a := range delegates.Of(t) {
				c, ok := a.(*React)
				if !ok || seen[c] {
					continue
				}
				seen[c] = true
				if c.policy != nil {
					if err := r.bound.Narrows(c.policy); err != nil {
						return fmt.Errorf("%w: WithPolicy: the sub-agent %q (tool %q) has a policy of its own: %w", ErrInvalidOption, c.name, t.Definition().Name, err)
					}
				}
				if c.tools != nil {
					if err := walk(c.tools); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return walk(r.tools)
}
