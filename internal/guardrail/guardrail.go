// Package guardrail runs the guardrails of one agent (policy.Guardrail)
// for the two places that guard an agent: the ReAct loop, for its own
// input and answer, and the sub-agent tools, for the task they hand down
// and the answer they bring back. It checks them, records each decision
// as an event and a span event, and words the note a corrected answer is
// sent back with.
package guardrail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Set is the guardrails of one agent, by stage. A nil Set has none.
type Set struct {
	input, output []policy.Guardrail
}

// Add returns s with gs added after its own, or an error naming what is
// wrong with one of them (where names the option, for the message).
func Add(s *Set, where string, gs []policy.Guardrail) (*Set, error) {
	out := &Set{}
	if s != nil {
		out.input, out.output = s.input, s.output
	}
	for i, g := range gs {
		switch {
		case g.Name == "":
			return nil, fmt.Errorf("%s: guardrail %d has no name: name every guardrail, so that its decisions say which made them", where, i)
		case g.Check == nil:
			return nil, fmt.Errorf("%s: guardrail %q has no Check: give it a function, or subagent.Judge for a model's judgement", where, g.Name)
		case g.Stage != policy.Input && g.Stage != policy.Output:
			return nil, fmt.Errorf("%s: guardrail %q has stage %q: use policy.Input or policy.Output", where, g.Name, g.Stage)
		case g.Stage == policy.Input && g.Retry:
			return nil, fmt.Errorf("%s: guardrail %q: an input guardrail cannot retry (no one is there to correct the input): leave Retry unset to trip, or deny the hand-off with a policy rule", where, g.Name)
		}
		for _, o := range append(out.input, out.output...) {
			if o.Name == g.Name {
				return nil, fmt.Errorf("%s: two guardrails are named %q: give each its own name", where, g.Name)
			}
		}
		if g.Stage == policy.Input {
			out.input = append(out.input[:len(out.input):len(out.input)], g)
		} else {
			out.output = append(out.output[:len(out.output):len(out.output)], g)
		}
	}
	return out, nil
}

// Has reports whether s has guardrails of stage.
func (s *Set) Has(stage policy.Stage) bool {
	if s == nil {
		return false
	}
	if stage == policy.Input {
		return len(s.input) > 0
	}
	return len(s.output) > 0
}

// Check asks s's guardrails of stage about text, in order, and returns the
// first failure (nil: all passed) and what the checks spent. who is the
// agent guarded, as its path names it below the run of ctx ("" when ctx is
// its own run). retried says the answer is already a correction: a
// guardrail with Retry that fails it now fails the agent. A failure's
// Tripwire says the run stops; otherwise, before the correction, the
// answer is sent back (Note), after it the agent fails. An error is a
// check that could not decide (or panicked): the run stops.
func (s *Set) Check(ctx context.Context, stage policy.Stage, text, who string, retried bool) (*policy.GuardrailError, provider.Usage, error) {
	gs := s.input
	if stage == policy.Output {
		gs = s.output
	}
	var spent provider.Usage
	for _, g := range gs {
		f, err := check(ctx, g, text)
		spent = spent.Add(f.Usage)
		d := decision{g: g, stage: stage, who: who}
		switch {
		case err != nil:
			d.verdict, d.problem = "error", err.Error()
			d.record(ctx)
			return nil, spent, fmt.Errorf("guardrail %q could not check %s: %w", g.Name, stage, err)
		case f.Problem == "":
			d.verdict = "pass"
			d.record(ctx)
			continue
		}
		d.problem = f.Problem
		fail := &policy.GuardrailError{Guardrail: g.Name, Stage: stage, Problem: f.Problem, Tripwire: !g.Retry}
		switch {
		case !g.Retry:
			d.verdict = "trip"
		case retried:
			d.verdict = "fail"
		default:
			d.verdict = "retry"
		}
		fail.Path = d.record(ctx)
		return fail, spent, nil
	}
	return nil, spent, nil
}

// check runs g's check; a panic is an error.
func check(ctx context.Context, g policy.Guardrail, text string) (f policy.Finding, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the check panicked: %v", p)
		}
	}()
	f, err = g.Check(ctx, text)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return f, err
}

// maxNote bounds the problem a correction note carries.
const maxNote = 4 << 10

// Note is what an agent is told when its answer is sent back for
// correction.
func Note(fail *policy.GuardrailError) string {
	p := fail.Problem
	if len(p) > maxNote {
		cut := maxNote
		for cut > 0 && !utf8.RuneStart(p[cut]) {
			cut--
		}
		p = p[:cut] + "…"
	}
	return fmt.Sprintf("Your answer was rejected by the guardrail %q: %s.\nAnswer again, with that fixed.", fail.Guardrail, p)
}

// Tripped reports whether err holds a guardrail's tripwire: it stops
// every run it passes through, up to the top.
func Tripped(err error) bool {
	var g *policy.GuardrailError
	return errors.As(err, &g) && g.Tripwire
}

// decision is one guardrail's decision, as it is recorded.
type decision struct {
	g                     policy.Guardrail
	stage                 policy.Stage
	who, verdict, problem string
}

// record emits d as a CUSTOM event and a span event, and returns the path
// of the agent guarded.
func (d decision) record(ctx context.Context) string {
	path, depth, runID, owner, thread := run.Place(ctx)
	if d.who != "" {
		depth++
		if path == "" {
			path = d.who
		} else {
			path += "/" + d.who
		}
	}
	em := event.From(ctx)
	if em.Enabled() {
		v, _ := json.Marshal(record{Guardrail: d.g.Name, Stage: d.stage, Verdict: d.verdict, Problem: d.problem, Path: path, Depth: depth, RunID: runID, Owner: owner, Thread: thread})
		em.Emit(event.Event{Type: event.Custom, Name: policy.GuardrailEvent, Value: v})
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(policy.GuardrailEvent, trace.WithAttributes(
			attribute.String("deputy.guardrail.name", d.g.Name),
			attribute.String("deputy.guardrail.stage", string(d.stage)),
			attribute.String("deputy.guardrail.verdict", d.verdict),
			attribute.String("deputy.guardrail.problem", d.problem),
			attribute.String("deputy.guardrail.path", path),
			attribute.String("deputy.guardrail.owner", owner),
			attribute.String("deputy.guardrail.thread", thread),
		))
	}
	return path
}

// record is the value of a decision's CUSTOM event.
type record struct {
	Guardrail string       `json:"guardrail"`
	Stage     policy.Stage `json:"stage"`
	Verdict   string       `json:"verdict"`
	Problem   string       `json:"problem,omitempty"`
	Path      string       `json:"path"`
	Depth     int          `json:"depth"`
	RunID     string       `json:"runId,omitempty"`
	// Owner and Thread are the run's (agent.WithOwner, WithThread), as a
	// policy decision's event names them: whose run it was made in.
	Owner  string `json:"owner,omitempty"`
	Thread string `json:"thread,omitempty"`
}
