package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/provider"
)

// A Stage is what a Guardrail checks.
type Stage string

// The two stages of a guardrail.
const (
	// Input: what goes into the agent, before it starts: the input text of
	// a top-level run; the task a sub-agent is handed.
	Input Stage = "input"
	// Output: the agent's final answer: a top-level run's, before its
	// caller gets it; a sub-agent's, before its parent's model reads it.
	Output Stage = "output"
)

// A Guardrail checks what goes into one agent or what comes out of it,
// with a Go function or a model's judgement (subagent.Judge). It is given
// to the agent it guards (agent.WithGuardrails) or to the sub-agent tool
// that hands the agent its work (subagent.WithGuardrails), and guards
// that agent alone: unlike a Policy it is not inherited by the agents
// below.
//
// A check that fails either stops the run (a tripwire: the run ends with
// a *GuardrailError whose Tripwire is set, and the text that failed goes
// no further: no model reads a tripped answer) or, for an Output
// guardrail with Retry, sends the answer back once for correction, as a
// schema violation is: the agent is told what was wrong and answers
// again; a second failure fails the agent (for a sub-agent, its parent's
// model reads that it failed, not the answer).
type Guardrail struct {
	// Name names the guardrail in events, spans and errors.
	Name string
	// Stage is what it checks: Input or Output.
	Stage Stage
	// Retry makes a failed Output check send the answer back once for
	// correction, instead of tripping. An Input guardrail cannot retry:
	// to let a parent's model hand down a better task, deny the hand-off
	// with a policy rule (BeforeDelegation) instead.
	Retry bool
	// Check checks text: a Finding with a Problem fails it. An error (a
	// judge's model call that failed) fails the agent guarded, as its own
	// model's failure would: a top-level run ends with it, a sub-agent's
	// parent reads that the child failed. Check is called from many
	// goroutines at once.
	Check func(ctx context.Context, text string) (Finding, error)
}

// A Finding is what a guardrail's check found.
type Finding struct {
	// Problem says what is wrong with the text, in words the agent can
	// act on; "" passes it.
	Problem string
	// Usage is what the check spent on model calls (a judge's). The agent
	// guarded adds it to its own (agent.Output.ChildUsage, a sub-agent
	// call's usage). A check whose model call is made by an agent.React
	// (subagent.Judge) is priced and counted in the tree's ledger too.
	Usage provider.Usage
}

// ErrGuardrail is what every *GuardrailError matches with errors.Is.
var ErrGuardrail = errors.New("policy: guardrail failed")

// GuardrailError is the error of a run a guardrail stopped: a tripwire
// (Tripwire set), or an Output guardrail with Retry whose second answer
// failed too, or whose first could not be sent back (Unretried). A Go caller finds it with errors.As in the error of the
// run, or of the sub-agent call, it stopped.
type GuardrailError struct {
	Guardrail string
	Stage     Stage
	// Problem is what the check found.
	Problem string
	// Path names the agent guarded, as Check.Path does ("lead/researcher").
	Path string
	// Tripwire: the guardrail stops the run on its first failure.
	Tripwire bool
	// Unretried says why a failure that a correction could have fixed was
	// not sent back: the answer was the run's last (a wrap-up at its
	// limit), or the run was past its token or cost limit and could not
	// pay for another call. "" for a tripwire, or a second failure.
	Unretried string
}

func (e *GuardrailError) Error() string {
	what := "the input of " + e.Path
	if e.Stage == Output {
		what = "the answer of " + e.Path
	}
	if e.Tripwire {
		return fmt.Sprintf("policy: guardrail %q tripped on %s: %s", e.Guardrail, what, e.Problem)
	}
	if e.Unretried != "" {
		return fmt.Sprintf("policy: guardrail %q rejected %s, which was not sent back for correction (%s): %s", e.Guardrail, what, e.Unretried, e.Problem)
	}
	return fmt.Sprintf("policy: guardrail %q rejected %s again after one correction: %s", e.Guardrail, what, e.Problem)
}

// Is reports that e is ErrGuardrail.
func (e *GuardrailError) Is(target error) bool { return target == ErrGuardrail }

// GuardrailEvent is the Name of the CUSTOM event each guardrail decision
// is recorded by, and of the span event on the span it was made in. Its
// value is a JSON object with "guardrail", "stage", "verdict" ("pass",
// "retry", "trip", "fail" for a second failure, or "error"), "problem",
// "path", "depth" and "runId".
const GuardrailEvent = "deputy.guardrail"
