package temporal

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/provider"
)

// DefaultMaxHistoryEvents is the history length past which a resident
// continues as new (Temporal's own limit is 51,200 events).
const DefaultMaxHistoryEvents = 10_000

// residentDepth is the depth a resident's model calls are checked at by
// a policy (Runtime.Policy): a resident is always consulted as a
// sub-agent, and its workflow does not know by whom.
const residentDepth = 1

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
	// Compaction keeps the conversation bounded, as an agent.React's is;
	// its zero value is agent's default policy.
	Compaction Compaction `json:"compaction,omitempty"`
}

// Compaction is agent.Compaction for a resident workflow: before a call,
// a conversation past a bound has its older turns replaced by a summary
// that a model activity writes (the spec's provider; SummaryModel, or the
// spec's model), so that every request, and the conversation a
// continue-as-new carries, stays bounded: by MaxBytes (half of
// MaxConversationBytes when 0 or more than that) plus one turn. A call
// whose own turn would carry the conversation past MaxConversationBytes
// (one answer of more than half of it, or any with Off set) fails with
// ErrTypeTooLarge and leaves the conversation as it was. A summary that
// cannot be made fails the call with ErrTypeCompaction, the conversation
// as it was; what a summary costs counts in the call's usage.
type Compaction struct {
	MaxTokens       int64  `json:"max_tokens,omitempty"`
	MaxMessages     int    `json:"max_messages,omitempty"`
	MaxBytes        int64  `json:"max_bytes,omitempty"`
	KeepTurns       int    `json:"keep_turns,omitempty"`
	SummaryModel    string `json:"summary_model,omitempty"`
	SummaryPrompt   string `json:"summary_prompt,omitempty"`
	MaxSummaryBytes int    `json:"max_summary_bytes,omitempty"`
	// Window is the model's context window in tokens (0: unknown).
	Window int64 `json:"window,omitempty"`
	// Off keeps the whole conversation, however long it grows.
	Off bool `json:"off,omitempty"`
}

// MaxConversationBytes bounds the conversation a resident carries over a
// continue-as-new, well inside the server's 2 MB payload limit. Compaction
// keeps a conversation under half of it (Compaction.MaxBytes is at most
// that), so that one call's turn can never carry it past.
const MaxConversationBytes = 1536 << 10

// compactionChange names the workflow change that added compaction.
const compactionChange = "deputy.compaction"

func (c Compaction) core() agent.Compaction {
	maxBytes := c.MaxBytes
	if maxBytes <= 0 || maxBytes > MaxConversationBytes/2 {
		maxBytes = MaxConversationBytes / 2
	}
	return agent.Compaction{MaxTokens: c.MaxTokens, MaxMessages: c.MaxMessages, MaxBytes: maxBytes, KeepTurns: c.KeepTurns,
		SummaryModel: c.SummaryModel, SummaryPrompt: c.SummaryPrompt, MaxSummaryBytes: c.MaxSummaryBytes}
}

// compact returns conv with its older turns replaced by a summary when it
// passes a bound of c, and what the summary cost.
func compact(ctx workflow.Context, spec Spec, c Compaction, conv []provider.Message) ([]provider.Message, provider.Usage, error) {
	cc := runtime.NewCompactor(c.core())
	if c.Off || !cc.Due(conv, c.Window) {
		return conv, provider.Usage{}, nil
	}
	cut := cc.Plan(conv, c.Window)
	if cut == 0 {
		return conv, provider.Usage{}, nil
	}
	req := cc.SummaryRequest(conv[:cut], cmp.Or(c.SummaryModel, spec.Model), c.Window)
	var resp provider.Response
	if err := workflow.ExecuteActivity(activityContext(ctx, spec), CompleteActivityName, ModelCall{Provider: spec.Provider, Request: req, Depth: residentDepth, Path: cmp.Or(spec.Name, agent.DefaultName)}).Get(ctx, &resp); err != nil {
		return conv, usageOf(err), sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("resident %q: compacting its conversation (%d messages folded into a summary) failed: %v; the conversation is as it was", spec.Name, cut, err), ErrTypeCompaction, err)
	}
	summary := strings.TrimSpace(resp.Message.Content)
	if summary == "" {
		return conv, resp.Usage, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("resident %q: the summary of its conversation came back empty (stop reason %q): check the summary model and prompt; the conversation is as it was", spec.Name, resp.StopReason), ErrTypeCompaction, nil, resp.Usage)
	}
	return cc.Apply(conv, cut, summary), resp.Usage, nil
}

// conversationBytes is what conv weighs when carried over.
func conversationBytes(conv []provider.Message) int {
	n := 0
	for _, m := range conv {
		n += len(m.Content) + len(m.ToolCallID) + 32
		for _, c := range m.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments) + 32
		}
	}
	return n
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
			prior, spent := conv, provider.Usage{}
			// A resident started before compaction existed replays without
			// the summary activities its history lacks.
			if workflow.GetVersion(ctx, compactionChange, workflow.DefaultVersion, 1) == 1 {
				var err error
				if prior, spent, err = compact(ctx, in.Spec, in.Compaction, conv); err != nil {
					return RunOutput{Usage: spent}, err
				}
			}
			out, err := run(ctx, in.Spec, 0, prior, []provider.Message{provider.UserMessage(task)}, fmt.Sprintf("%s/t%d", id, turn), nil, nil, cmp.Or(in.Spec.Name, agent.DefaultName), nil, nil, nil)
			out.Usage = out.Usage.Add(spent)
			if err != nil {
				return RunOutput{Usage: out.Usage}, err
			}
			next := append(prior[:len(prior):len(prior)], out.Messages...)
			if n := conversationBytes(next); n > MaxConversationBytes {
				return RunOutput{Usage: out.Usage}, sdktemporal.NewNonRetryableApplicationError(
					fmt.Sprintf("resident %q: this call would make its conversation %d bytes, over the %d a continue-as-new may carry: ask something with a shorter answer, or compact sooner (Compaction.MaxBytes); the conversation is as it was", in.Spec.Name, n, MaxConversationBytes), ErrTypeTooLarge, nil, out.Usage)
			}
			conv = next
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
