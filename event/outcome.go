package event

import (
	"encoding/json"
	"slices"
)

// Outcomes of RUN_FINISHED and SUBAGENT_FINISHED, as AG-UI 1.0 writes them
// in the events' "outcome" field. An event without an Outcome finished
// with success.
var (
	// OutcomeSuccess: the run or invocation completed.
	OutcomeSuccess = json.RawMessage(`{"type":"success"}`)
	// OutcomeCancelled: whoever ran the run stopped it (RUN_FINISHED).
	OutcomeCancelled = json.RawMessage(`{"type":"cancelled"}`)
)

// InterruptOutcome returns RUN_FINISHED's outcome for a run that waits for
// answers: interrupts is the JSON array of AG-UI Interrupts.
func InterruptOutcome(interrupts json.RawMessage) json.RawMessage {
	b := append([]byte(`{"type":"interrupt","interrupts":`), interrupts...)
	return append(b, '}')
}

// SuspendedOutcome returns SUBAGENT_FINISHED's outcome for a sub-agent
// invocation suspended until interrupts are answered: ids are those its own
// tools raised (none when only a descendant's did).
func SuspendedOutcome(ids []string) json.RawMessage {
	v := struct {
		Type         string   `json:"type"`
		InterruptIDs []string `json:"interruptIds,omitempty"`
	}{"suspended", slices.Clip(ids)}
	b, _ := json.Marshal(v) // strings only: it cannot fail
	return b
}
