package agent

import (
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// account adds what one model call spent to the run's ledger, under the
// provider's name and the model that answered (the one asked for, when the
// reply does not say).
func (s *runState) account(req provider.Request, resp provider.Response) provider.ModelUsage {
	if resp.Queued > 0 {
		run.Count(s.ctx, run.Queued)
	}
	if resp.Usage.IsZero() {
		return provider.ModelUsage{}
	}
	name, model := s.r.spanIdentity()
	if resp.Model != "" {
		model = resp.Model
	} else if req.Model != "" {
		model = req.Model
	}
	return s.spend(name, model, resp.Usage)
}

// price is what resp cost at the run's prices, and what the prompt
// cache saved on it; ok is false when they do not price it.
func (s *runState) price(req provider.Request, resp provider.Response) (dollars, saved float64, ok bool) {
	name, model := s.r.spanIdentity()
	if resp.Model != "" {
		model = resp.Model
	} else if req.Model != "" {
		model = req.Model
	}
	p, ok := run.PriceOf(s.ctx, name, model)
	if !ok {
		return 0, 0, false
	}
	return p.Cost(resp.Usage), p.Saved(resp.Usage), true
}

// spend adds u, spent by one call to model of providerName, to the run's
// ledger, priced at the run's prices, and to its cost, and returns it as
// the ledger counted it, with what it cost (0 when unpriced).
func (s *runState) spend(providerName, model string, u provider.Usage) provider.ModelUsage {
	return s.count(providerName, model, u, false)
}

// count is spend; earlier marks u as spent by an earlier run of the turn
// (see respendAnswer).
func (s *runState) count(providerName, model string, u provider.Usage, earlier bool) provider.ModelUsage {
	var dollars, saved float64
	p, priced := run.PriceOf(s.ctx, providerName, model)
	if priced {
		dollars, saved = p.Cost(u), p.Saved(u)
	}
	unpriced := ""
	if !priced && run.Priced(s.ctx) {
		unpriced = model
		if providerName != "" {
			unpriced = providerName + "/" + model
		}
	}
	m := provider.ModelUsage{Provider: providerName, Model: model, Usage: u, Cost: dollars, CacheSaved: saved}
	ledger.Charge(s.ctx, m, unpriced, priced || unpriced != "", earlier)
	if earlier {
		run.AddEarlier(s.ctx, u, dollars)
	} else if s.events {
		s.em.Emit(event.Event{Type: event.Custom, Name: UsageEvent, Value: ledger.CallJSON(m)})
	}
	return m
}

// UsageEvent names the CUSTOM event a run emits after each model call it
// pays for (a summary too, not a replayed answer), valued {"usage":[…]}: the
// call's TokenUsage as RUN_FINISHED gives it, so a UI shows spending climb.
const UsageEvent = "deputy.usage"

// The ledger of a journaled turn. A turn that runs more than once — it
// asked a question and was resumed with the answer, or its process died
// and it was run again — reports what the whole turn spent, not what the
// last run of it spent: each answer and each finished tool call replayed
// from the journal counts again, at what it cost when it was paid for, in
// the run's Usage (or ChildUsage), its Cost, its ledger (what RUN_FINISHED
// and SUBAGENT_FINISHED report) and its token and cost limits, and
// run.AddEarlier marks it as spent by an earlier run (Output.Earlier).
// Nothing replayed is paid for again: the provider is not asked.

// respendAnswer counts a model answer replayed from the journal, which
// the run's model gave an earlier run of the turn, as the run's own.
func (s *runState) respendAnswer(resp provider.Response) {
	s.usage = s.usage.Add(resp.Usage)
	s.ownEarlier = s.ownEarlier.Add(resp.Usage)
	if resp.Usage.IsZero() {
		return
	}
	name, model := s.r.spanIdentity()
	if resp.Model != "" {
		model = resp.Model
	}
	s.count(name, model, resp.Usage, true)
}

// respendSummary counts a compaction's summary replayed from the journal
// as the run's own, under the provider and the model (as recorded) that
// summarize counted it under when it was made.
func (s *runState) respendSummary(resp provider.Response) {
	s.usage = s.usage.Add(resp.Usage)
	s.ownEarlier = s.ownEarlier.Add(resp.Usage)
	if resp.Usage.IsZero() {
		return
	}
	p := s.r.p
	if c := s.r.compaction; c != nil && c.Summarizer != nil {
		p = c.Summarizer
	}
	name := ""
	if n, ok := p.(provider.Namer); ok {
		name = n.Name()
	}
	s.count(name, resp.Model, resp.Usage, true)
}

// respendUnread counts what an earlier run of the turn recorded that this
// run went past, or stopped before, without replaying it: a run that paid
// for it and was then stopped (cancelled, or it asked a question) paid for
// it, and the run that goes on with the turn may not get as far (it is
// cancelled in turn, or a sibling's question ends it first), or may not
// read it (a resident expert built afresh holds no history to compact).
// What was paid is counted once in the whole turn's report, as spent
// before: the summaries of the steps it went through that it did not
// replay; of the steps after the last it reached, the model's recorded
// answers; and of the calls it did not begin, in those steps and the last
// it reached, the results recorded, or what the call had paid for when it
// stopped unfinished (callRecorder.recordSpent).
//
// An earlier run numbers its summaries in step order from 1, so the
// summary it made at a step is numbered at most one more than those it
// made before: the walk probes each step up to that.
func (s *runState) respendUnread() {
	if s.journal == nil {
		return
	}
	found := 0
	for step := 0; ; step++ {
		stepKey := s.journal.stepKey(step)
		for k := 1; k <= found+1; k++ {
			key := journal.SummaryKey(stepKey, k)
			resp, ok := s.journal.answer(key)
			if !ok {
				continue
			}
			found = max(found, k)
			if !s.summariesRead[key] {
				s.summariesRead[key] = true
				s.respendSummary(resp)
			}
		}
		resp, ok := s.journal.answer(stepKey)
		if !ok {
			if step > s.steps {
				return
			}
			continue
		}
		if step > s.answered {
			s.respendAnswer(resp)
		}
		if step < s.called {
			continue
		}
		for i := range resp.Message.ToolCalls {
			if step == s.called && s.callsRun[i] {
				continue
			}
			key := callKey(stepKey, i)
			e, ok := s.journal.scope.J.Lookup(key)
			if !ok {
				// Stopped unfinished: what it paid for (a background
				// job's too, under the call that spawned it).
				e, ok = s.journal.scope.Paid(key)
			}
			if ok {
				ledger.Replay(s.ctx, e.Usage, e.Models)
				s.child = s.child.Add(e.Usage)
			}
		}
	}
}
