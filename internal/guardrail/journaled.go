package guardrail

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// Journaled is Check under a journaled turn (js nil: Check itself): the
// decision is recorded under key in js, with what its check spent, and a
// run of the turn that finds it there replays it — the check is not made,
// nor its decision reported, again, and what it spent counts as spent
// before. A judge the check asks journals its own run under the
// decision's key, so that the decisions replayed do not shift the keys of
// those made anew. A check that could not decide is not recorded.
//
// The ReAct loop keys an agent's own decisions by its run and their
// order; a sub-agent tool, by its invocation and theirs.
func (s *Set) Journaled(ctx context.Context, js *journal.Scope, key string, stage policy.Stage, text, who string, retried bool) (*policy.GuardrailError, provider.Usage, error) {
	if js == nil {
		return s.Check(ctx, stage, text, who, retried)
	}
	if e, ok := js.J.Lookup(key); ok {
		var fail *policy.GuardrailError
		if err := json.Unmarshal(e.Value, &fail); err == nil {
			ledger.Replay(ctx, e.Usage, e.Models)
			return fail, e.Usage, nil
		}
	}
	cctx, spent := ledger.With(journal.With(ctx, js.Child(key)))
	fail, u, err := s.Check(cctx, stage, text, who, retried)
	if err != nil {
		return fail, u, err
	}
	value, _ := json.Marshal(fail) // strings and a bool: it cannot fail
	if rerr := js.J.Record(context.WithoutCancel(ctx), key, journal.Entry{Value: value, Usage: u, Models: spent.Entries()}); rerr != nil {
		return fail, u, fmt.Errorf("recording a guardrail's decision in the journal: %w: resume the turn when the store is back", rerr)
	}
	return fail, u, nil
}
