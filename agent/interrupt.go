package agent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/outcome"
	"github.com/deputy-go/deputy/tool"
)

// failedRunEvent is the event that ends a top-level run that returned err:
// RUN_FINISHED with AG-UI's interrupt outcome when tools asked for input
// (the run is paused, not failed), with the cancelled outcome when whoever
// ran it cancelled its context, else RUN_ERROR.
func failedRunEvent(runID string, err error) event.Event {
	var in *tool.Interrupted
	if errors.As(err, &in) {
		b, _ := json.Marshal(in.Interrupts) // strings, times and valid JSON only
		return event.Event{Type: event.RunFinished, RunID: runID, Outcome: outcome.Interrupt(b)}
	}
	if errors.Is(err, context.Canceled) {
		return event.Event{Type: event.RunFinished, RunID: runID, Outcome: outcome.Cancelled}
	}
	return event.Event{Type: event.RunError, RunID: runID, Message: err.Error(), Code: errcode.Of(err)}
}
