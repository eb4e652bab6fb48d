package agent

import (
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// account adds what one model call spent to the run's ledger, under the
// provider's name and the model that answered (the one asked for, when the
// reply does not say).
func (s *runState) account(req provider.Request, resp provider.Response) {
	if resp.Queued > 0 {
		run.Count(s.ctx, run.Queued)
	}
	if resp.Usage.IsZero() {
		return
	}
	name, model := s.r.spanIdentity()
	if resp.Model != "" {
		model = resp.Model
	} else if req.Model != "" {
		model = req.Model
	}
	ledger.Add(s.ctx, name, model, resp.Usage)
}
