package temporal

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
)

// DefaultMaxHistoryEvents is the history length past which a resident
// continues as new (Temporal's own limit is 51,200 events).
const DefaultMaxHistoryEvents = 10_000

// MessagesQuery names the query that returns a resident's conversation.
const MessagesQuery = "messages"

// ResidentInput is the input of ResidentWorkflow; a continue-as-new carries
// the conversation and turn count over in it.
type ResidentInput struct {
	Spec Spec `json:"spec"`
	// Messages is the conversation so far.
	Messages []provider.Message `json:"messages,omitempty"`
	// Turn counts the calls answered so far.
	Turn int `json:"turn,omitempty"`
	// MaxHistoryEvents is the history length past which the workflow
	// continues as new (DefaultMaxHistoryEvents when 0).
	MaxHistoryEvents int `json:"max_history_events,omitempty"`
}

// ResidentWorkflow is a resident expert. Each call is an update named
// AskUpdate whose argument is the task and whose result is a RunOutput
// (Messages: the turn's messages). Calls run one at a time in arrival
// order; the conversation accumulates in workflow state. A call that fails
// or is cancelled leaves the conversation as it was. When the history grows
// past MaxHistoryEvents, or the server suggests it, the workflow continues
// as new with the conversation once no call is running. The CloseSignal
// ends it, returning the conversation.
func ResidentWorkflow(ctx workflow.Context, in ResidentInput) ([]provider.Message, error) {
	conv := append([]provider.Message(nil), in.Messages...)
	turn := in.Turn
	mu := workflow.NewMutex(ctx)
	closed := false
	limit := in.MaxHistoryEvents
	if limit <= 0 {
		limit = DefaultMaxHistoryEvents
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	draining := false

	if err := workflow.SetQueryHandler(ctx, MessagesQuery, func() ([]provider.Message, error) { return conv, nil }); err != nil {
		return nil, err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, AskUpdate,
		func(ctx workflow.Context, task string) (RunOutput, error) {
			if err := mu.Lock(ctx); err != nil {
				return RunOutput{}, err
			}
			defer mu.Unlock()
			turn++
			out, err := run(ctx, in.Spec, 0, conv, []provider.Message{provider.UserMessage(task)}, fmt.Sprintf("%s/t%d", id, turn))
			if err != nil {
				return RunOutput{}, err
			}
			conv = append(conv, out.Messages...)
			return out, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, task string) error {
			if strings.TrimSpace(task) == "" {
				return errors.New("empty task: ask the resident expert something")
			}
			if closed || draining {
				return errors.New("resident expert is closing or moving to a new run: ask again")
			}
			return nil
		}},
	)
	if err != nil {
		return nil, err
	}
	closeCh := workflow.GetSignalChannel(ctx, CloseSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		closeCh.Receive(ctx, nil)
		closed = true
	})
	tooLong := func() bool {
		info := workflow.GetInfo(ctx)
		return info.GetCurrentHistoryLength() > limit || info.GetContinueAsNewSuggested()
	}
	if err := workflow.Await(ctx, func() bool { return closed || tooLong() }); err != nil {
		return conv, err
	}
	draining = true
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return conv, err
	}
	if closed {
		return conv, nil
	}
	next := in
	next.Messages, next.Turn = conv, turn
	return nil, workflow.NewContinueAsNewError(ctx, ResidentWorkflowName, next)
}
