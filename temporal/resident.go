package temporal

import (
	"cmp"
	"encoding/json"
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

// residentDepth is the depth of a resident's runs (residentPolicyChange)
// and its compaction's model calls, as a policy (Runtime.Policy) sees
// them, when the call does not name its caller (residentCallerChange): a
// resident is always consulted as a sub-agent.
const residentDepth = 1

// residentPolicyChange names the workflow version from which a
// resident's call is checked by the workers' policy as a hand-off to a
// sub-agent is (its task before it runs, its answer after), and its run
// is a sub-agent's, at residentDepth (its model calls and tool calls
// checked, and redacted, as a child's; its depth cap and budget counted as
// a child's). A resident recorded before it replays as it ran.
const residentPolicyChange = "deputy.resident-policy"

// residentCallerChange names the workflow version from which a call that
// names its caller (AskUpdate's second argument: the caller's path in its
// tree, "lead/researcher") is checked at the caller's path and depth, and
// the resident's run stands under it ("lead/researcher/expert", one level
// deeper), as a call to a resident (subagent.FromAgent) is in process;
// before it, the caller's path was "" whatever the call said.
const residentCallerChange = "deputy.resident-caller"

// maxCallerBytes bounds the caller's path a call names.
const maxCallerBytes = 1024

// residentPlace is where a call of the resident spec from caller (its path
// in its tree; "": not named) stands: the caller's depth, and the path
// and depth of the resident's run under it. A path names one agent a
// level ("lead/researcher" is at depth 1), as in process. A call that
// names no caller is made from outside any run, as a resident's tool
// called outside one is in process: the caller at "" and depth 0, the
// resident's run at its name and depth 1.
func residentPlace(spec Spec, caller string) (callerDepth int, path string, depth int) {
	name := cmp.Or(spec.Name, agent.DefaultName)
	if caller == "" {
		return residentDepth - 1, name, residentDepth
	}
	callerDepth = strings.Count(caller, "/")
	return callerDepth, caller + "/" + name, callerDepth + 1
}

// callerError says what is wrong with the caller's path a call names, or
// is nil.
func callerError(caller string) error {
	switch {
	case caller == "":
		return nil
	case len(caller) > maxCallerBytes:
		return fmt.Errorf("the caller's path is %d bytes, over %d: name the agents from the top of the tree down to the caller, joined by \"/\"", len(caller), maxCallerBytes)
	case strings.HasPrefix(caller, "/") || strings.HasSuffix(caller, "/") || strings.Contains(caller, "//"):
		return fmt.Errorf("the caller's path %q has an empty name in it: name the agents from the top of the tree down to the caller, joined by \"/\" (\"lead/researcher\"), or pass \"\" from outside any agent", caller)
	}
	return nil
}

// handOff asks the workers' policy about a call of the resident spec from
// caller (residentPlace), which hands it task, and returns the task to go on with (rewritten, when
// a rule rewrote it). A denial fails the call (ErrTypePolicy) before the
// resident runs; so does a rule that asks, which no one can answer for a
// resident.
func handOff(ctx workflow.Context, spec Spec, caller, task string) (string, error) {
	var v Delegated
	in := residentCheck(spec, caller, task)
	in.Retry, in.Task = true, task
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, spec), CheckActivityName, in).Get(ctx, &v); err != nil {
		return "", err
	}
	switch {
	case v.Refused != "":
		return "", sdktemporal.NewNonRetryableApplicationError(v.Refused, ErrTypePolicy, nil)
	case len(v.Asked) > 0:
		return "", sdktemporal.NewNonRetryableApplicationError(fmt.Sprintf("policy: a rule asks a person before the hand-off to %s, and a resident's calls cannot ask: do the work another way", in.Call.Name), ErrTypePolicy, nil)
	case v.Task != "":
		return v.Task, nil
	}
	return task, nil
}

// answered asks the workers' policy about the answer out of a call of the
// resident spec from caller given task, and returns out with the answer as
// the policy left it; a denial fails the call (ErrTypePolicy).
func answered(ctx workflow.Context, spec Spec, caller, task string, out RunOutput) (RunOutput, error) {
	in := residentCheck(spec, caller, task)
	in.After, in.Result = true, out.Answer
	var v Delegated
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, spec), CheckActivityName, in).Get(ctx, &v); err != nil {
		return RunOutput{Usage: out.Usage}, err
	}
	if v.IsError {
		return RunOutput{Usage: out.Usage}, sdktemporal.NewNonRetryableApplicationError(v.Result, ErrTypePolicy, nil, out.Usage)
	}
	out.Answer = v.Result
	return out, nil
}

// residentCheck is the check of a call of the resident spec given task,
// made by its caller, one level up, at the caller's path (residentPlace).
func residentCheck(spec Spec, caller, task string) Delegation {
	args, _ := json.Marshal(map[string]string{"task": task})
	depth, _, _ := residentPlace(spec, caller)
	return Delegation{Call: provider.ToolCall{Name: cmp.Or(spec.Name, agent.DefaultName), Arguments: args}, Depth: depth, Path: caller}
}

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
// as it was; what a summary costs counts in the call's RunOutput (or its
// error's details): in its usage, and in its cost and models at the
// worker's prices under the model that answered it. Under the Spec's
// TokenLimit or CostLimit, the summary is reserved as a call of the run
// is, and counts against them with the run's calls.
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

// summaryLimitsChange names the workflow change from which a resident's
// summary is reserved under its Spec's limits, as in process, and the run
// of the call that made it counts what it cost as its own from its start,
// so that the call spends no more than its limits with the summary.
const summaryLimitsChange = "deputy.summary-limits"

func (c Compaction) core() agent.Compaction {
	maxBytes := c.MaxBytes
	if maxBytes <= 0 || maxBytes > MaxConversationBytes/2 {
		maxBytes = MaxConversationBytes / 2
	}
	return agent.Compaction{MaxTokens: c.MaxTokens, MaxMessages: c.MaxMessages, MaxBytes: maxBytes, KeepTurns: c.KeepTurns,
		SummaryModel: c.SummaryModel, SummaryPrompt: c.SummaryPrompt, MaxSummaryBytes: c.MaxSummaryBytes}
}

// compact returns conv with its older turns replaced by a summary when it
// passes a bound of c, and what the summary cost: its usage, and its
// price at the worker's prices under the model that answered it, as the
// model activity counted it; the summary's model call is checked at
// depth and path, the resident's run's. Under limited, the summary is
// reserved under the spec's limits as a call of the run is: what it may
// write is what they leave after its input.
func compact(ctx workflow.Context, spec Spec, c Compaction, conv []provider.Message, depth int, path string, limited bool) ([]provider.Message, RunOutput, error) {
	cc := runtime.NewCompactor(c.core())
	if c.Off || !cc.Due(conv, c.Window) {
		return conv, RunOutput{}, nil
	}
	cut := cc.Plan(conv, c.Window)
	if cut == 0 {
		return conv, RunOutput{}, nil
	}
	req := cc.SummaryRequest(conv[:cut], cmp.Or(c.SummaryModel, spec.Model), c.Window)
	mc := ModelCall{Provider: spec.Provider, Request: req, Depth: depth, Path: path}
	if limited {
		// Its reply is the summary: it is no turn a wrap-up replaces.
		r := &Reserve{Estimate: (requestBytes(req) + 3) / 4, WrapUp: true, Ceiling: cmp0(req.MaxTokens, replyCeiling),
			Tokens: max(spec.TokenLimit, 0), TokenSetting: spec.bounds.tokens, CostSetting: spec.bounds.cost}
		if spec.CostLimit > 0 {
			r.Cost, r.Dollars = true, spec.CostLimit
		}
		mc.Reserve = r
	}
	var resp ModelReply
	if err := workflow.ExecuteActivity(activityContext(ctx, spec), CompleteActivityName, mc).Get(ctx, &resp); err != nil {
		return conv, RunOutput{Usage: usageOf(err)}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("resident %q: compacting its conversation (%d messages folded into a summary) failed: %v; the conversation is as it was", spec.Name, cut, err), ErrTypeCompaction, err)
	}
	paid := RunOutput{Usage: resp.Usage, Cost: resp.Cost, Model: resp.Model,
		Models: addModels(nil, provider.ModelUsage{Provider: resp.ProviderName, Model: resp.Model, Usage: resp.Usage, Cost: resp.Cost})}
	summary := strings.TrimSpace(resp.Message.Content)
	if summary == "" {
		return conv, paid, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("resident %q: the summary of its conversation came back empty (stop reason %q): check the summary model and prompt; the conversation is as it was", spec.Name, resp.StopReason), ErrTypeCompaction, nil, spent(paid)...)
	}
	return cc.Apply(conv, cut, summary), paid, nil
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
// AskUpdate whose arguments are the task and, optionally, the caller's
// path in its tree ("lead/researcher": the agent that consults the
// resident; none or "" from outside any agent), and whose result is a
// RunOutput (Messages: the turn's messages). Calls run one at a time in arrival
// order; the conversation accumulates in workflow state. A call that fails
// or is cancelled leaves the conversation as it was. When the history grows
// past MaxHistoryEvents, or the server suggests it, the workflow continues
// as new with the conversation once no call is running. The CloseSignal
// ends it, returning the conversation. Its runs are a sub-agent's, as a
// resident's are in process: the workers' policy checks each call as a
// hand-off made at the caller's path and depth, and the resident's run
// as its child's ("lead/researcher/expert" at depth 2; "expert" at depth
// 1 for a call that names no caller), whose own sub-agents need a
// Spec.MaxDepth one more than that depth.
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
		func(ctx workflow.Context, task, caller string) (RunOutput, error) {
			if err := mu.Lock(ctx); err != nil {
				return RunOutput{}, err
			}
			defer mu.Unlock()
			turn++
			// From residentPolicyChange on, the call is a hand-off the
			// policy checks, and the resident's run a sub-agent's; from
			// residentCallerChange on, made at the caller's place.
			depth, path := 0, cmp.Or(in.Spec.Name, agent.DefaultName)
			checked := workflow.GetVersion(ctx, residentPolicyChange, workflow.DefaultVersion, 1) == 1
			if checked {
				if workflow.GetVersion(ctx, residentCallerChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
					caller = ""
				}
				_, path, depth = residentPlace(in.Spec, caller)
				var err error
				if task, err = handOff(ctx, in.Spec, caller, task); err != nil {
					return RunOutput{}, err
				}
			}
			prior, spent := conv, RunOutput{}
			var paid RunOutput // what the run counts as its own from its start
			// A resident started before compaction existed replays without
			// the summary activities its history lacks.
			if workflow.GetVersion(ctx, compactionChange, workflow.DefaultVersion, 1) == 1 {
				var err error
				cdepth, cpath := residentDepth, cmp.Or(in.Spec.Name, agent.DefaultName)
				if checked {
					cdepth, cpath = depth, path
				}
				limited := (in.Spec.TokenLimit > 0 || in.Spec.CostLimit > 0) &&
					workflow.GetVersion(ctx, summaryLimitsChange, workflow.DefaultVersion, 1) == 1
				if prior, spent, err = compact(ctx, in.Spec, in.Compaction, conv, cdepth, cpath, limited); err != nil {
					return spent, err
				}
				if limited {
					// The run counts what the summary cost as its own from
					// its start, under its limits.
					paid, spent = spent, RunOutput{}
				}
			}
			out, err := run(ctx, in.Spec, depth, prior, []provider.Message{provider.UserMessage(task)}, fmt.Sprintf("%s/t%d", id, turn), nil, nil, path, nil, nil, nil, paid, "")
			// The summary is paid for by the call that made it: its usage,
			// its cost and its model count in the call's answer, or in its
			// error's details when the run fails.
			out.Usage = out.Usage.Add(spent.Usage)
			out.Cost += spent.Cost
			out.Models = addModels(spent.Models, out.Models...)
			if err != nil {
				if !spent.Usage.IsZero() || spent.Cost != 0 {
					err = withSettled(out, err)
				}
				return RunOutput{Usage: out.Usage}, err
			}
			next := append(prior[:len(prior):len(prior)], out.Messages...)
			if n := conversationBytes(next); n > MaxConversationBytes {
				return RunOutput{Usage: out.Usage}, sdktemporal.NewNonRetryableApplicationError(
					fmt.Sprintf("resident %q: this call would make its conversation %d bytes, over the %d a continue-as-new may carry: ask something with a shorter answer, or compact sooner (Compaction.MaxBytes); the conversation is as it was", in.Spec.Name, n, MaxConversationBytes), ErrTypeTooLarge, nil, out.Usage)
			}
			conv = next
			if checked {
				// What the caller reads of the answer is checked as a
				// child's answer is; the resident keeps what it said.
				return answered(ctx, in.Spec, caller, task, out)
			}
			return out, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, task, caller string) error {
			if strings.TrimSpace(task) == "" {
				return errors.New("empty task: ask the resident expert something")
			}
			if err := callerError(caller); err != nil {
				return err
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
