package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
)

// guard asks pol about call c before it runs. It returns the call to run
// (its arguments rewritten, when a rule rewrote them), or stop with the
// call's result and error: a denial the model reads, or the interrupt of
// a question to a person (an Ask the person has not answered yet), or the
// refusal of a person who said no.
//
// chk is the call's check, which checkResult reuses.
func guard(ctx context.Context, pol *policy.Policy, chk *policy.Check, c Call) (Call, Result, error, bool) {
	// chk is new: its other fields are zero.
	chk.Point, chk.Tool, chk.CallID, chk.Arguments = policy.BeforeTool, c.Name, c.ID, c.Arguments
	out := pol.Decide(ctx, chk)
	switch out.Verdict {
	case policy.Deny:
		return c, errorResult(out.Err(chk)), nil, true
	case policy.Ask:
		if err := ApprovePolicy(ctx, c, chk, out); err != nil {
			if IsCorrectable(err) {
				return c, errorResult(err), nil, true
			}
			res := Result{Err: err}
			return c, res, fmt.Errorf("tool %s: %w", c.Name, err), true
		}
		// Approved, the call goes on as the other rules left it: a
		// redactor's rewrite holds whatever the person said.
		c.Arguments = chk.Arguments
	case policy.Rewrite:
		c.Arguments = chk.Arguments
	}
	return c, Result{}, nil, false
}

// ApprovePolicy asks a person, for the call c, the question of a policy
// outcome whose verdict is Ask, as RequireApproval asks (see Ask): it
// returns nil once they approved, the *Interrupted that stops the run
// while they have not answered, and an error the model reads (marked
// Correctable) when they refused. chk is the Check that policy.Decide
// returned out for (nil: nothing is recorded): the question is recorded
// in the audit trail as it is put (policy.Asking), not again as a resumed
// run that has no answer to it puts it again, and the answer as the run
// takes it (policy.Answered), not again as a later run reads it from the
// turn's journal. The registry asks so before a call, and the sub-agent
// tools before a hand-off; code that makes its own hand-offs under a
// policy asks likewise.
func ApprovePolicy(ctx context.Context, c Call, chk *policy.Check, out policy.Outcome) error {
	payload, how, err := ask(ctx, c, Question{Reason: ApprovalReason, Message: fmt.Sprintf("Policy %q: %s", out.Rule, out.Reason), ResponseSchema: ApprovalSchema})
	answered := func(a policy.Answer) {
		// An answer the journal holds was recorded as the run before
		// took it.
		if chk != nil && how != fromJournal {
			policy.Answered(ctx, chk, out, a)
		}
	}
	var waiting *Interrupted
	switch {
	case errors.As(err, &waiting):
		// A question put again was recorded as the run before put it.
		if chk != nil && how != askedAgain {
			policy.Asking(ctx, chk, out)
		}
		return err
	case errors.Is(err, ErrCancelled):
		answered(policy.Cancelled)
		return err
	case errors.Is(err, ErrExpired):
		answered(policy.Expired)
		return err
	case err != nil:
		return err
	}
	var ap Approval
	if err := json.Unmarshal(payload, &ap); err != nil {
		answered(policy.Rejected)
		return Correctable(fmt.Errorf("%w: %s: unreadable approval: %v", ErrRejected, c.Name, err))
	}
	if !ap.Approved {
		answered(policy.Rejected)
		note := ""
		if ap.Note != "" {
			note = ": " + ap.Note
		}
		return Correctable(fmt.Errorf("%w %s%s", ErrRejected, c.Name, note))
	}
	answered(policy.Approved)
	return nil
}

// checkResult asks pol about the result of call c, which the model is to
// read: a denied result is replaced by the denial, a rewritten one by
// what the rule made of it.
func checkResult(ctx context.Context, pol *policy.Policy, chk *policy.Check, c Call, res Result) Result {
	chk.Point, chk.Tool, chk.CallID, chk.Arguments, chk.Result, chk.IsError = policy.AfterResult, c.Name, c.ID, c.Arguments, res.Content, res.IsError
	chk.Task, chk.Context, chk.Request = "", nil, nil // what a rule of the call's check may have set
	out := pol.Decide(ctx, chk)
	switch out.Verdict {
	case policy.Deny:
		u := res.Usage
		res = errorResult(out.Err(chk))
		res.Usage = u
	case policy.Rewrite:
		res.Content = chk.Result
		res.Value = nil // what was decoded may hold what was rewritten
		if res.Err != nil {
			// The error a failure's text came from says what the rule left of
			// it too: its text reaches the call's span, and the run's error
			// when failures end it.
			res.Err = &rewrittenError{text: chk.Result, err: res.Err}
		}
	}
	return res
}

// scrubbed returns err, which ends a run, with its text as the
// redactors of the policy binding ctx leave it (run.Scrub), wrapping it,
// when they change it: it is no result a rule reads, but its text goes
// where results go (the call's span, events, the run's error).
func scrubbed(ctx context.Context, err error) error {
	if b := run.BoundOf(ctx); b == nil || b.Scrub == nil {
		return err
	}
	text := err.Error()
	if s := run.Scrub(ctx, text); s != text {
		return &rewrittenError{text: s, err: err}
	}
	return err
}

// rewrittenError is the error of a failed call whose result a rule
// rewrote: its text is the result as rewritten, and it wraps the tool's
// error, which errors.Is and errors.As still find.
type rewrittenError struct {
	text string
	err  error
}

func (e *rewrittenError) Error() string { return e.text }
func (e *rewrittenError) Unwrap() error { return e.err }
