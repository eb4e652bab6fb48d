package agent

import (
	"context"
	"errors"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// guardModel asks the run's policy about req before it is sent: it
// returns the request to send (rewritten, when a rule redacted it), or the
// *policy.Denial that fails the run.
func (s *runState) guardModel(req provider.Request) (provider.Request, error) {
	chk := &policy.Check{Point: policy.BeforeModel, Request: req}
	out := s.policy.Decide(s.ctx, chk)
	switch out.Verdict {
	case policy.Deny:
		return req, out.Err(chk)
	case policy.Rewrite:
		return chk.Request, nil
	}
	return req, nil
}

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
