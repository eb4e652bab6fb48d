package agui

import (
	"encoding/json"

	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
)

// tokenUsage is AG-UI's TokenUsage: the counts of one provider and model.
// Input tokens include the cached ones, as deputy counts them too.
type tokenUsage struct {
	Provider    string `json:"provider,omitempty"`
	Model       string `json:"model,omitempty"`
	Input       int64  `json:"inputTokens"`
	Output      int64  `json:"outputTokens"`
	Total       int64  `json:"totalTokens"`
	CachedInput int64  `json:"cachedInputTokens,omitempty"`
	CacheWrite  int64  `json:"cacheWriteInputTokens,omitempty"`
}

func newTokenUsage(providerName, model string, u provider.Usage) tokenUsage {
	return tokenUsage{Provider: providerName, Model: model, Input: u.InputTokens, Output: u.OutputTokens,
		Total: u.InputTokens + u.OutputTokens, CachedInput: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens}
}

// usageJSON is RUN_FINISHED's usage: one TokenUsage per provider and model
// for the model calls the run made, its sub-agents' and background jobs'
// included (l, filled by every agent.React under the run's context), and
// calls replayed from a journal left out. Usage the agent reported that no
// call in l accounts for (an agent that calls its model itself) is one
// more entry, without provider and model. Nil when nothing was spent.
func usageJSON(l *ledger.Ledger, reported provider.Usage) json.RawMessage {
	var out []tokenUsage
	var seen provider.Usage
	if l != nil {
		for _, e := range l.Entries() {
			out = append(out, newTokenUsage(e.Provider, e.Model, e.Usage))
		}
		seen = l.Total()
	}
	rest := provider.Usage{
		InputTokens:      max(reported.InputTokens-seen.InputTokens, 0),
		OutputTokens:     max(reported.OutputTokens-seen.OutputTokens, 0),
		CacheReadTokens:  max(reported.CacheReadTokens-seen.CacheReadTokens, 0),
		CacheWriteTokens: max(reported.CacheWriteTokens-seen.CacheWriteTokens, 0),
	}
	if rest.Tokens() > 0 {
		out = append(out, newTokenUsage("", "", rest))
	}
	if len(out) == 0 {
		return nil
	}
	b, _ := json.Marshal(out) // strings and numbers only: it cannot fail
	return b
}
