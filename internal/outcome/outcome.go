// Package outcome builds the "outcome" objects of RUN_FINISHED and
// SUBAGENT_FINISHED events, as AG-UI 1.0 writes them.
package outcome

import (
	"encoding/json"
	"slices"
)

// Outcomes without parameters. An event without an outcome finished with
// success.
var (
	// Success: the run or invocation completed.
	Success = json.RawMessage(`{"type":"success"}`)
	// Cancelled: whoever ran the run stopped it (RUN_FINISHED).
	Cancelled = json.RawMessage(`{"type":"cancelled"}`)
)

// Interrupt returns RUN_FINISHED's outcome for a run that waits for
// answers: interrupts is the JSON array of AG-UI Interrupts.
func Interrupt(interrupts json.RawMessage) json.RawMessage {
	b := append([]byte(`{"type":"interrupt","interrupts":`), interrupts...)
	return append(b, '}')
}

// Suspended returns SUBAGENT_FINISHED's outcome for a sub-agent
// invocation suspended until interrupts are answered: ids are those its own
// tools raised (none when only a descendant's did).
func Suspended(ids []string) json.RawMessage {
	v := struct {
		Type         string   `json:"type"`
		InterruptIDs []string `json:"interruptIds,omitempty"`
	}{"suspended", slices.Clip(ids)}
	b, _ := json.Marshal(v) // strings only: it cannot fail
	return b
}
