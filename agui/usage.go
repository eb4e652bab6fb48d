package agui

import (
	"encoding/json"

	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
)

// usageJSON is RUN_FINISHED's usage: one TokenUsage per provider and model
// for the model calls the run made, its sub-agents' and background jobs'
// included (l, filled by every agent.React under the run's context).
func usageJSON(l *ledger.Ledger, reported provider.Usage) json.RawMessage {
	return ledger.JSON(l, reported)
}
