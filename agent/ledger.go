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
	s.spend(name, model, resp.Usage)
}

// price is what resp cost at the run's prices, -1 when they do not
// price it.
func (s *runState) price(req provider.Request, resp provider.Response) float64 {
	name, model := s.r.spanIdentity()
	if resp.Model != "" {
		model = resp.Model
	} else if req.Model != "" {
		model = req.Model
	}
	if d, ok := run.Price(s.ctx, name, model, resp.Usage); ok {
		return d
	}
	return -1
}

// spend adds u, spent by one call to model of providerName, to the run's
// ledger, priced at the run's prices, and to its cost.
func (s *runState) spend(providerName, model string, u provider.Usage) {
	dollars, priced := run.Price(s.ctx, providerName, model, u)
	unpriced := ""
	if !priced && run.Priced(s.ctx) {
		unpriced = model
		if providerName != "" {
			unpriced = providerName + "/" + model
		}
	}
	if priced || unpriced != "" {
		run.AddCost(s.ctx, dollars, unpriced)
	}
	ledger.Add(s.ctx, providerName, model, u, dollars)
}
