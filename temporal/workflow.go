package temporal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/exactkeys"
	drun "github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Error types of the failures a run ends with.
const (
	ErrTypeMaxSteps = "deputy.max_steps"
	// ErrTypeJobTime: a thread's job ran past its time (Spec.JobTime).
	ErrTypeJobTime    = "deputy.job_time"
	ErrTypeUsageLimit = "deputy.usage_limit"
	// ErrTypeToolRetries: more steps in a row than Spec.ToolRetries
	// allows had a failed tool call.
	ErrTypeToolRetries = "deputy.tool_retries"
	ErrTypeBadSpec     = "deputy.bad_spec"
	// ErrTypeCompaction: a resident's conversation had to be compacted and
	// its summary could not be made.
	ErrTypeCompaction = "deputy.compaction_failed"
	// ErrTypeFactory: a factory (Runtime.Factories) failed to build a
	// call's agent with an error the model cannot correct (not
	// tool.Correctable), which ends the calling run, as in process.
	ErrTypeFactory = "deputy.factory_failed"
)

// AgentWorkflow runs a ReAct agent: model calls and tool calls are
// activities, sub-agent calls child workflows. A run that fails after doing
// work carries its usage as the application error's details.
func AgentWorkflow(ctx workflow.Context, in RunInput) (RunOutput, error) {
	input := append([]provider.Message(nil), in.Messages...)
	if in.Text != "" {
		input = append(input, provider.UserMessage(in.Text))
	}
	if len(input) == 0 {
		return RunOutput{}, sdktemporal.NewNonRetryableApplicationError("agent run has neither Text nor Messages: give it a task", ErrTypeBadSpec, nil)
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	trace := in.Trace
	if trace == nil {
		// The run is the tree: it keeps the turn of the tree's model calls
		// that may pass their runs' limits.
		trace = &Trace{Tree: id, TreeRun: workflow.GetInfo(ctx).WorkflowExecution.RunID}
		turn, err := keepTreeTurn(ctx)
		if err != nil {
			return RunOutput{}, err
		}
		defer turn.endTurns()
	}
	q, err := newQuestions(ctx, trace)
	if err != nil {
		return RunOutput{}, err
	}
	var thread *ThreadJobs
	if in.Depth == 0 && in.Spec.Background && in.Spec.JobsAcrossTurns {
		thread = in.Thread
		if thread == nil {
			thread = &ThreadJobs{} // a thread's first turn, started without Agent
		}
	}
	rctx, late := ctx, false
	if in.Job != "" && in.JobTime > 0 {
		// A thread's job bounds its own time, so that it ends with what
		// it spent, not killed by the server with none of it.
		var stop workflow.CancelFunc
		rctx, stop = workflow.WithCancel(ctx)
		workflow.Go(ctx, func(gctx workflow.Context) {
			if workflow.NewTimer(gctx, in.JobTime).Get(gctx, nil) == nil {
				late = true
				stop()
			}
		})
	}
	ib := newInbox(rctx, in.Job)
	if ib != nil && in.JobTime > 0 && !in.RunJob {
		// A thread's job: its next turns ask where it stands, and what it
		// asks a person waits for them, and what its descendants ask
		// (relayChange).
		q.kept = true
		if workflow.GetVersion(ctx, relayChange, workflow.DefaultVersion, 1) >= 1 {
			t := *trace
			t.Job = id
			trace = &t
			q.relay(ctx)
			// It keeps a turn of its own for the model calls of its runs
			// that may pass their limits, which they take once the
			// tree's workflow, the turn that started the job, has ended
			// (Reserve.Job).
			turn, err := keepTreeTurn(ctx)
			if err != nil {
				return RunOutput{}, err
			}
			defer turn.endTurns()
		}
		if err := ib.answerHellos(ctx, q); err != nil {
			return RunOutput{}, err
		}
	}
	out, err := run(rctx, in.Spec.withBounds(in.JobBounds), in.Depth, nil, input, id, trace, q, cmp.Or(in.Path, cmp.Or(in.Spec.Name, agent.DefaultName)), ib, in.Arguments, thread, RunOutput{}, in.Answered)
	if late && err != nil && sdktemporal.IsCanceledError(err) {
		u, c, m := out.TotalUsage(), out.Cost, out.Model
		ms, e, r := out.Models, out.Earlier, out.Refused
		if d := usageOf(err); !d.IsZero() {
			u, c, m = d, costOf(err), modelOf(err)
			ms, e = modelsOf(err)
			r = refusedOf(err)
		}
		err = sdktemporal.NewNonRetryableApplicationError(fmt.Sprintf("the job ran past its time of %v (Spec.JobTime): raise Spec.JobTime or give a smaller task", in.JobTime), ErrTypeJobTime, nil, u, c, m, ms, e, r)
	}
	if in.Depth > 0 {
		// A child's transcript stays in its own history; only the answer
		// and usage go back to the parent.
		out.Messages = nil
	}
	return out, err
}

// FactoryWorkflow runs the agent a Runtime factory builds, in one activity.
func FactoryWorkflow(ctx workflow.Context, in FactoryCall) (ToolResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Minute,
		HeartbeatTimeout:    HeartbeatTimeout,
		RetryPolicy:         &sdktemporal.RetryPolicy{MaximumAttempts: 3},
	})
	paidFor, err := keepFactoryJournal(ctx)
	if err != nil {
		return ToolResult{}, err
	}
	var res ToolResult
	err = workflow.ExecuteActivity(ctx, RunFactoryActivity, in).Get(ctx, &res)
	switch {
	case err == nil:
		return res, nil
	case sdktemporal.IsCanceledError(err):
		if usageOf(err).IsZero() && costOf(err) == 0 {
			// No attempt ran to hand back what it spent (cancelled as
			// the next waited for a worker): what the journal says the
			// attempts before paid for.
			return res, sdktemporal.NewCanceledError(spent(paidFor())...)
		}
		return res, err
	}
	// Out of attempts (each lost its worker), or failed: what they paid
	// for, as the journal says, unless the error says it already.
	return res, withUsage(paidFor(), err)
}

// run is the ReAct loop. prior is conversation before this run (a resident's
// earlier turns), input this run's new messages; the output's Messages are
// input plus what the run added. idPrefix makes child workflow ids unique.
//
// trace, when set, places the run in its tree for the events its
// activities publish, and q takes the questions its tools ask (a
// resident's runs have neither); path is the run's path in its tree.
// A run that can ask (q set) offers background jobs when spec has them,
// and ib, for a run that is a background job, takes the messages its
// parent sends it. callArgs are the arguments of the call that started
// a child (RunInput.Arguments), which the check of its corrective retry
// reads. thread, for a turn of a thread, is what it knows of the
// thread's jobs (nil: the run's jobs are its own). paid is what the run
// paid for before its loop (a resident's summary): its usage, cost and
// models count as the run's own from its start, under its limits. model,
// for a fork, is the model that answered its parent's last call, which
// its calls ask too (RunInput.Answered): they are reserved at its price
// until one of the run's own answers.
func run(ctx workflow.Context, spec Spec, depth int, prior, input []provider.Message, idPrefix string, trace *Trace, q *questions, path string, ib *inbox, callArgs json.RawMessage, thread *ThreadJobs, paid RunOutput, model string) (out RunOutput, err error) {
	out.Usage, out.Cost, out.Models = paid.Usage, paid.Cost, slices.Clone(paid.Models)
	var jb *jobs
	spawns := 0
	if spec.Background && q != nil {
		jb = newJobs(ctx, spec, trace)
		jb.q = q
		jb.depth, jb.path, jb.idPrefix, jb.out, jb.spawns = depth, path, idPrefix, &out, &spawns
		if thread != nil {
			jb.inherit(thread)
		}
		if err := jb.serve(ctx); err != nil {
			return out, err
		}
		defer func() {
			// Jobs still running end with the run; what they spent, and
			// what no wait collected, counts in its ChildUsage, as what
			// the jobs a program collected spent (fold).
			u, c, ms := jb.settle()
			g := jb.takeFromGo()
			u, c, ms = u.Add(g.Usage), c+g.Cost, addModels(ms, g.Models...)
			out.Refused += g.Refused
			if u.IsZero() && c == 0 && g.Refused == 0 {
				return
			}
			out.ChildUsage, out.Cost = out.ChildUsage.Add(u), out.Cost+c
			out.Models = addModels(out.Models, ms...)
			err = withSettled(out, err)
		}()
	}
	if jb == nil && q != nil {
		// A program's start or wait is refused, saying why.
		if err := refuseGoJobs(ctx); err != nil {
			return out, err
		}
	}
	open := 0 // the step whose model call was made last, for its end
	defer func() {
		if err != nil && open > 0 && trace != nil {
			closeStep(ctx, trace, open)
		}
	}()
	var schema *jsonschema.Schema
	system := spec.System
	if len(spec.OutputSchema) > 0 {
		s, err := jsonschema.Compile(spec.OutputSchema)
		if err != nil {
			return out, sdktemporal.NewNonRetryableApplicationError("Spec.OutputSchema does not compile: "+err.Error(), ErrTypeBadSpec, err)
		}
		schema = s
		system = strings.TrimSpace(system + "\n\n" + subagent.SchemaPrompt(spec.OutputSchema))
	}
	actx := activityContext(ctx, spec)
	defs := toolDefs(spec, depth, jb.offered())
	conv := append([]provider.Message(nil), input...)
	corrected := false
	failures := 0
	var ended []EndedCall // the previous step's calls whose results no activity published
	// callSettleChange, asked at the first model call.
	settles, settleAsked := false, false
	pastLimit, pastAsked := false, false // answerPastLimitChange, asked at the first model call under a limit
	b := newBudget(ctx, spec, depth)
	inPrice, outPrice := 0.0, 0.0 // the prices of an input and an output token of the model that answered last
	answered := model             // the model that answered last, at whose price the next call is reserved
	// From unpaidChange on, a run under a limit bounds a call that offers
	// tools so that the next can read its reply again, and runs only the
	// calls of a reply whose results it can pay to read, as in process.
	cuts := (b.on || spec.CostLimit > 0) && workflow.GetVersion(ctx, unpaidChange, workflow.DefaultVersion, 1) >= 1
	// From unstartedLineChange on, a run counts for the answer of a child
	// too small to start the line it reads.
	refusal := legacyRefusalBytes
	if (b.on || spec.CostLimit > 0) && workflow.GetVersion(ctx, unstartedLineChange, workflow.DefaultVersion, 1) >= 1 {
		refusal = len(unstartedLine)
	}
	// From treeTurnChange on, a call whose worst case what its run has
	// left cannot pay for takes its tree's turn, as in process.
	treeTurn := (b.on || spec.CostLimit > 0) && trace != nil && trace.TreeRun != "" &&
		workflow.GetVersion(ctx, treeTurnChange, workflow.DefaultVersion, 1) >= 1
	unpaid := false // the last reply's calls were cut: the next call is the wrap-up
	// From distinctIDsChange on, a reply's call whose model gave it the id
	// of a call of the conversation gets an id of its own.
	distinct := workflow.GetVersion(ctx, distinctIDsChange, workflow.DefaultVersion, 1) >= 1
	guards := len(spec.Guardrails) > 0
	if guards {
		// The input guardrails check the task before the run starts.
		var task string
		for _, m := range input {
			if m.Role == provider.RoleUser {
				task = m.Content
			}
		}
		g, err := guard(ctx, actx, spec, depth, path, trace, policy.Input, task, false, "")
		out.ChildUsage = out.ChildUsage.Add(g.Usage)
		out.Cost += guardCost(ctx, g)
		out.Models = addModels(out.Models, guardModels(ctx, g)...)
		switch {
		case err != nil:
			out.Messages = conv
			return out, withSettled(out, err) // the run's spending with the checks'
		case g.Failed:
			out.Messages = conv
			return out, failure(out, ErrTypeGuardrailTripped, g.Message)
		}
	}
	if err := jb.checkNotes(ctx, depth, path, trace); err != nil {
		out.Messages = conv
		return out, withSettled(out, err)
	}
	if m, u, c, ms, ok := jb.threadNotes(ctx); ok {
		// The jobs of the thread that ended since its last turn, before
		// the first model call, as in process: what they spent counts here,
		// under their models.
		conv = append(conv, m)
		out.ChildUsage = out.ChildUsage.Add(u)
		if c != 0 && workflow.GetVersion(ctx, noteCostChange, workflow.DefaultVersion, 1) >= 1 {
			out.Cost += c
		} else {
			ms = withoutCost(ms)
		}
		out.Models = addModels(out.Models, ms...)
	}
	jb.greet(ctx)
	for step := 0; ; step++ {
		if step >= spec.maxSteps() {
			out.Messages = conv
			return out, failure(out, ErrTypeMaxSteps, fmt.Sprintf("agent %q used its %d steps (%s) without a final answer: raise %[3]s or simplify the task", spec.Name, spec.maxSteps(), spec.stepSetting()))
		}
		var delivered []subagent.Receipt
		var links []MessageLink
		unretried := "" // why this step's answer cannot be corrected, if it cannot
		if m, taken, ls, ok := ib.take(ctx, step+1, out, conv); ok {
			// The messages sent meanwhile, at the step boundary.
			conv = append(conv, m)
			delivered, links = taken, ls
		}
		req := provider.Request{
			Model: spec.Model, System: system, MaxTokens: spec.MaxTokens, Tools: defs,
			Messages: append(append([]provider.Message(nil), prior...), conv...), ResponseSchema: spec.OutputSchema,
		}
		// What the jobs a program collected spent counts from here.
		jb.fold(&out)
		// What the run's jobs may still spend of their shares is held
		// back from its own calls and later children (none without jobs).
		heldTokens, heldCost := jb.held()
		req, wrapUp, err := b.plan(spec, req, out.TotalUsage().Tokens()+heldTokens)
		if err != nil {
			out.Messages = conv
			return out, failure(out, ErrTypeUsageLimit, err.Error())
		}
		if unpaid && !wrapUp {
			wrapUp = true
			req.Tools = nil
			note := wrapUpNote
			if b.on {
				note = tokenNote(out.TotalUsage().Tokens()+heldTokens, spec.TokenLimit)
			}
			req.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)], provider.UserMessage(note))
		}
		if !pastAsked && (spec.TokenLimit > 0 || spec.CostLimit > 0) {
			pastAsked = true
			pastLimit = workflow.GetVersion(ctx, answerPastLimitChange, workflow.DefaultVersion, 1) >= 1
		}
		mc := ModelCall{Provider: spec.Provider, Request: req, Depth: depth, Path: path, DistinctIDs: distinct, Links: links}
		if b.on || spec.CostLimit > 0 {
			// The worker reserves the call with what only it knows: the
			// plain tools' definitions and the model's price.
			r := &Reserve{Estimate: b.estimate(req), Named: b.reported == 0 && len(spec.Tools) > 0, ReadBack: depth > 0,
				LastOut: b.lastOut, WrapUp: wrapUp, Ceiling: cmp0(spec.MaxTokens, replyCeiling)}
			if cuts {
				r.Follow = wrapUpNoteTokens(spec)
			}
			if b.on {
				r.Tokens = max(spec.TokenLimit-out.TotalUsage().Tokens()-heldTokens, 0)
			}
			if spec.CostLimit > 0 {
				r.Cost, r.Dollars, r.Model = true, spec.CostLimit-out.Cost-heldCost, answered
			}
			r.TokenSetting, r.CostSetting = spec.bounds.tokens, spec.bounds.cost
			if treeTurn {
				r.Worst, r.Tree, r.TreeRun, r.Job = b.worst(req), trace.Tree, trace.TreeRun, trace.Job
			}
			mc.Reserve = r
		}
		if trace != nil {
			t := *trace
			t.Step, t.Ended, t.Corrected, t.Spent, t.TokenLimit, t.MaxOutput = step+1, ended, corrected, out.TotalUsage(), spec.TokenLimit, spec.maxOutput()
			t.Guarded, t.SpentCost, t.CostLimit, t.PastLimit = guards, out.Cost, spec.CostLimit, pastLimit
			t.Models, t.Earlier = slices.Clone(out.Models), slices.Clone(out.Earlier)
			t.Delivered = delivered
			mc.Trace = &t
		}
		if !settleAsked {
			settleAsked = true
			settles = workflow.GetVersion(ctx, callSettleChange, workflow.DefaultVersion, 1) >= 1
		}
		mctx := ib.modelContext(actx)
		if settles {
			if ctx.Err() != nil {
				// Cancelled between calls: no step starts.
				out.Messages = conv
				return out, withUsage(out, sdktemporal.NewCanceledError())
			}
			mctx = workflow.WithWaitForCancellation(mctx, true)
		}
		var resp ModelReply
		open = step + 1
		if err := workflow.ExecuteActivity(mctx, CompleteActivityName, mc).Get(ctx, &resp); err != nil {
			if settles && ctx.Err() != nil && !sdktemporal.IsCanceledError(err) {
				err = sdktemporal.NewCanceledError() // (its worker was lost meanwhile)
			}
			out.Messages = conv
			return out, withUsage(out, err)
		}
		out.Usage = out.Usage.Add(resp.Usage)
		out.Cost += resp.Cost
		out.Model = cmp.Or(out.Model, resp.Model)
		if jb != nil {
			// The messages this step's calls send name its span.
			jb.sender = MessageLink{TraceID: resp.TraceID, SpanID: resp.SpanID}
		}
		out.Models = addModels(out.Models, provider.ModelUsage{Provider: resp.ProviderName, Model: resp.Model, Usage: resp.Usage, Cost: resp.Cost})
		if resp.InputPrice > 0 {
			inPrice, outPrice = resp.InputPrice, resp.OutputPrice
		}
		answered = cmp.Or(resp.Model, answered)
		b.noteReply(req, resp.Response)
		wrapUp = wrapUp || resp.WrapUp // made so by the worker's reservation
		msg := resp.Message
		msg.Role = provider.RoleAssistant
		if wrapUp {
			// No tools were offered: the reply's text is the answer.
			msg.ToolCalls = nil
			if strings.TrimSpace(msg.Content) == "" {
				conv = append(conv, msg)
				out.Messages = conv
				if spec.TokenLimit == 0 { // wrapped up by the cost limit alone
					return out, failure(out, ErrTypeUsageLimit, fmt.Sprintf("agent %q cost $%.6f, and the last reply, asked to wrap up before it passed its cost limit (%s), had no answer: raise %[3]s or give a smaller task", spec.Name, out.Cost, spec.costSetting()))
				}
				return out, failure(out, ErrTypeUsageLimit, fmt.Sprintf("agent %q used %d tokens, its limit is %d (%s), and the last reply, asked to wrap up, had no answer: raise %[4]s or give a smaller task", spec.Name, out.TotalUsage().Tokens(), spec.TokenLimit, spec.tokenSetting()))
			}
			if !corrected {
				unretried = "it was the run's last reply, asked to wrap up at its limit"
			}
			corrected = true // no budget for a corrective retry
		}
		conv = append(conv, msg)
		ib.reached(ctx, step+1, out, conv)
		over := overLimit(ctx, spec, out)
		if over != nil && !(pastLimit && answers(schema, msg, corrected)) {
			out.Messages = conv
			return out, over
		}
		if len(msg.ToolCalls) == 0 {
			answer := msg.Content
			if schema != nil {
				value, verr := validate(schema, answer)
				if verr != nil && !corrected {
					corrected = true
					note := runtime.CorrectionPrompt(spec.OutputSchema, verr)
					// A child's retry is a hand-off of its own, checked by
					// the policy (asked only here, so that histories
					// recorded before it replay).
					if trace != nil && trace.Subagent != "" && depth > 0 && workflow.GetVersion(ctx, retryCheckChange, workflow.DefaultVersion, 1) >= 1 {
						v, err := checkRetry(ctx, spec, q, retryCheck(trace, path, depth, note, callArgs))
						if err != nil {
							out.Messages = conv
							return out, withUsage(out, err)
						}
						if v.Refused != "" {
							// Not handed down: the answer stands, marked
							// as failing its schema, with why.
							out.Invalid = capText(verr.Error()+"; the corrective retry was not made: "+v.Refused, 2048)
							out.Answer = capText(answer, spec.maxOutput())
							out.Messages = conv
							return out, nil
						}
						note = v.Task
					}
					conv = append(conv, provider.UserMessage(note))
					continue
				}
				if verr != nil {
					out.Invalid = capText(verr.Error(), 2048)
				} else {
					out.Value = value
				}
			}
			if guards {
				// The output guardrails check the answer, once it fits
				// the schema, under the same one-retry rule.
				text := capText(childContent(RunOutput{Answer: capText(answer, spec.maxOutput()), Invalid: out.Invalid}), spec.maxOutput())
				var t *Trace
				if trace != nil {
					tt := *trace
					tt.Spent, tt.SpentCost = out.TotalUsage(), out.Cost
					tt.Models, tt.Earlier = slices.Clone(out.Models), slices.Clone(out.Earlier)
					tt.Step = step + 1 // the step an answer that passes ends
					t = &tt
				}
				if over != nil && !corrected && unretried == "" && workflow.GetVersion(ctx, guardPastLimitChange, workflow.DefaultVersion, 1) >= 1 {
					unretried = "the run is past its limit and cannot pay for another call"
				}
				g, err := guard(ctx, actx, spec, depth, path, t, policy.Output, text, corrected || unretried != "", unretried)
				out.ChildUsage = out.ChildUsage.Add(g.Usage)
				out.Cost += guardCost(ctx, g)
				out.Models = addModels(out.Models, guardModels(ctx, g)...)
				switch {
				case err != nil:
					out.Messages = conv
					return out, withSettled(out, err) // the run's spending with the checks'
				case g.Failed && g.Tripwire:
					out.Messages = conv
					return out, failure(out, ErrTypeGuardrailTripped, g.Message)
				case g.Failed && (corrected || unretried != ""):
					out.Messages = conv
					return out, failure(out, ErrTypeGuardrail, g.Message)
				case g.Failed:
					corrected = true
					conv = append(conv, provider.UserMessage(g.Note))
					continue
				}
			}
			out.Answer = capText(answer, spec.maxOutput())
			out.Messages = conv
			return out, nil
		}
		var results []ToolResult
		// Under a limit, each child's is its share of what is left (0: none).
		keep := b.estimate(provider.Request{System: system, Tools: defs,
			Messages: append(append([]provider.Message(nil), prior...), conv...), ResponseSchema: spec.OutputSchema})
		jb.fold(&out)
		heldTokens, heldCost = jb.held()
		// From shareFloorChange on, the run keeps back its wrap-up note
		// under a token limit too, and a share pays at least for reading
		// the answer of a child too small to start, as in process.
		floored := (b.on || spec.CostLimit > 0) && workflow.GetVersion(ctx, shareFloorChange, workflow.DefaultVersion, 1) >= 1
		var floor int64
		tokenKeep := keep
		if floored {
			floor = shareFloor(msg.ToolCalls, refusal)
			tokenKeep += wrapUpNoteTokens(spec)
		}
		calls, refused := msg.ToolCalls, []provider.ToolCall(nil)
		var unpaidEnded []EndedCall // the calls cut, whose results no activity publishes
		if cuts {
			// The calls whose results what is left cannot pay to read are
			// not run, as in process; the next call is the wrap-up.
			kept := keep + wrapUpNoteTokens(spec)
			reply := int64(1)
			if depth > 0 {
				reply = 2
			}
			avail := int64(math.MaxInt64)
			if b.on {
				avail = spec.TokenLimit - out.TotalUsage().Tokens() - heldTokens - kept - reply
			}
			if spec.CostLimit > 0 && inPrice > 0 {
				rest := spec.CostLimit - out.Cost - heldCost - float64(kept)*inPrice - outPrice
				if depth > 0 {
					rest -= inPrice
				}
				avail = min(avail, int64(math.Floor(rest/inPrice)))
			}
			if runs, unread := drun.Readable(avail, calls, refusal, len(unpaidResult)); runs < len(calls) {
				if trace != nil {
					// Their starts were published with the reply: the next
					// call publishes their results, as in process.
					for _, c := range calls[runs:] {
						unpaidEnded = append(unpaidEnded, EndedCall{CallID: c.ID, Content: unpaidResult})
					}
				}
				read := len(calls) - unread
				calls, refused = calls[:runs:runs], calls[runs:read:read]
				unpaid = true
				m := msg
				m.ToolCalls = msg.ToolCalls[:read:read]
				if m.Content == "" && read == 0 {
					conv = conv[:len(conv)-1]
				} else {
					conv[len(conv)-1] = m
				}
				msg.ToolCalls = calls
				if len(calls) == 0 {
					for _, c := range refused {
						conv = append(conv, provider.ToolMessage(c.ID, unpaidResult, false))
					}
					ended = unpaidEnded
					continue
				}
			}
		}
		childLimit := b.share(out.TotalUsage().Tokens()+heldTokens, tokenKeep, len(msg.ToolCalls), floor)
		costShare := 0.0
		if spec.CostLimit > 0 {
			// Each child's is its share of what is left after the next
			// call's input, as in process (run.WithShares).
			kept := keep
			if workflow.GetVersion(ctx, wrapUpReserveChange, workflow.DefaultVersion, 1) >= 1 {
				// Its next call may be its wrap-up, whose note it reads too.
				kept += wrapUpNoteTokens(spec)
			}
			n := float64(len(msg.ToolCalls))
			rest := spec.CostLimit - out.Cost - heldCost - float64(kept)*inPrice
			costShare = rest / (n + 1)
			if f := float64(floor) * inPrice; costShare < f && rest-n*f > 0 {
				// Only while what is left after the floors pays for a
				// token of the run's reply, as in process.
				if rest-n*f >= outPrice || workflow.GetVersion(ctx, shareFloorOutputChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
					costShare = f
				}
			}
			costShare = max(costShare, 1e-12)
		}
		results, ended, err = runTools(ctx, actx, turn{spec: spec, depth: depth, path: path, childLimit: childLimit, costShare: costShare, floored: floored, trace: stepTrace(trace, step+1), q: q, jobs: jb, answered: answered, refused: &out.Refused},
			fmt.Sprintf("%s/%d", idPrefix, step), msg.ToolCalls, &spawns)
		failedStep := false
		before := slices.Clone(out.Models) // what the run spent before the step's results
		for i, r := range results {
			out.ChildUsage = out.ChildUsage.Add(r.Usage)
			out.Cost += r.Cost
			out.Refused += r.Refused
			out.Models = addModels(out.Models, r.Models...)
			conv = append(conv, provider.ToolMessage(msg.ToolCalls[i].ID, r.Content, r.IsError))
			failedStep = failedStep || r.IsError
		}
		if e, ok := earlierPart(before, results); ok {
			out.Earlier = e
		}
		for _, c := range refused {
			conv = append(conv, provider.ToolMessage(c.ID, unpaidResult, false))
		}
		ended = append(ended, unpaidEnded...)
		if err != nil {
			out.Messages = conv
			if tripped(err) {
				// A child's tripwire stops this run too, with all it spent.
				return out, failure(out, ErrTypeGuardrailTripped, messageOf(err))
			}
			return out, withUsage(out, err)
		}
		if i := slices.IndexFunc(results, func(r ToolResult) bool { return r.Unbuilt }); i >= 0 &&
			workflow.GetVersion(ctx, factoryBuildChange, workflow.DefaultVersion, 1) >= 1 {
			// A factory that could not build its agent ends the run, as in
			// process: its model cannot correct it.
			out.Messages = conv
			publishEnded(ctx, stepTrace(trace, step+1), ended, conv)
			return out, failure(out, ErrTypeFactory, fmt.Sprintf("subagent %q: building the agent: %s", msg.ToolCalls[i].Name, results[i].Content))
		}
		if failedStep {
			failures++
		} else {
			failures = 0
		}
		// The version is asked for only where the loop takes the new
		// path, so that workflows that ran before it replay as they ran.
		if failures > spec.toolRetries() && workflow.GetVersion(ctx, toolRetriesChange, workflow.DefaultVersion, 1) >= 1 {
			out.Messages = conv
			return out, failure(out, ErrTypeToolRetries, fmt.Sprintf("agent %q had a failed tool call in %d steps in a row: raise Spec.ToolRetries or fix the tools", spec.Name, failures))
		}
		if err := overLimit(ctx, spec, out); err != nil {
			out.Messages = conv
			return out, err
		}
	}
}

// factoryBuildChange names the workflow version from which a run whose
// call a factory could not build the agent of, with an error its model
// cannot correct (ToolResult.Unbuilt), fails with ErrTypeFactory, as in
// process, where before its model read the error. Asked only where a
// result is so marked, which no result recorded before it is.
const factoryBuildChange = "deputy.factory-build-fails-run"

// publishEnded publishes, for a run that fails once its step's calls
// ended, what its next model call would have published of them (ended,
// their results read from conv): each failed child's end and each
// result. trace is the run's at the step.
func publishEnded(ctx workflow.Context, trace *Trace, ended []EndedCall, conv []provider.Message) {
	if trace == nil || len(ended) == 0 {
		return
	}
	key := cmp.Or(trace.Subagent, trace.Tree)
	var evs []event.Event
	for _, c := range ended {
		content := cmp.Or(c.Content, resultOf(conv, c.CallID))
		if c.Subagent != "" && c.IsError {
			evs = append(evs, event.Event{Type: event.SubagentError, SubagentRunID: c.Subagent, Message: content, Code: cmp.Or(c.Code, "error"), Usage: usageJSON(c.Models, c.Earlier, c.Usage, c.Cost), Model: c.Model})
		}
		evs = append(evs, event.Event{Type: event.ToolCallResult, MessageID: key + "/step-" + strconv.Itoa(trace.Step) + "/result-" + c.CallID,
			ToolCallID: c.CallID, Content: content, Role: "tool"})
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
	_ = workflow.ExecuteLocalActivity(lctx, PublishActivityName, jobEvents(ctx, &Trace{Tree: trace.Tree, Subagent: trace.Subagent}, evs)).Get(ctx, nil)
}

// guardPastLimitChange names the workflow version from which an answer
// past the run's limit (answerPastLimitChange) that an output guardrail
// with Retry rejects fails the run with the guardrail's error, saying it
// was not corrected, as in process: the run cannot pay for a corrected
// answer, and went on to a model call that failed for want of room.
// Asked only for such an answer.
const guardPastLimitChange = "deputy.guard-past-limit"

// answerPastLimitChange names the workflow version from which a reply
// that ends its run with its answer (answers) ends it so though its call
// took the run past its token or cost limit, by what its estimate
// undercounted, as in process, where only a reply with calls still to run
// fails the run there: a child whose wrap-up passed its share by a token
// failed, and its parent, reading each such child's long failure where it
// had kept back enough to read an answer, failed too. Asked at the first
// model call of a run under a limit, which tells the call's activity
// (Trace.PastLimit), so that it publishes the run's end with the answer.
const answerPastLimitChange = "deputy.answer-past-limit"

// answers reports whether msg, a reply with text and no tool calls, ends
// its run with its answer: a wrap-up's (corrected), one with no schema to
// fit, or one that fits it.
func answers(schema *jsonschema.Schema, msg provider.Message, corrected bool) bool {
	if len(msg.ToolCalls) > 0 {
		return false
	}
	if strings.TrimSpace(msg.Content) == "" {
		return false
	}
	if schema == nil || corrected {
		return true
	}
	_, verr := validate(schema, msg.Content)
	return verr == nil
}

// callSettleChange names the workflow version from which a run cancelled
// during a model call waits for the call to end, as a job does
// (jobSettleChange), and goes on from its reply as it would have: its
// model activity either published the end of the step with the answer
// (the run ends with it, cancelled too late) or did not (the run ends
// cancelled, and closeStep ends the step), so that the step ends once.
// Before it, the run ended at once, and a reply that came back after
// ended the step a second time, after the run's end. Asked at a run's
// first model call.
const callSettleChange = "deputy.cancel-settles-model-call"

// stepCloseChange names the workflow version from which a run with a
// trace that fails, or is cancelled, publishes the end of the step it was
// in (its model call published the start), as a run in process ends its
// step however it ends; asked only there.
const stepCloseChange = "deputy.failed-run-closes-step"

// closeStep publishes the end of step of the run of trace, which fails.
func closeStep(ctx workflow.Context, trace *Trace, step int) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if workflow.GetVersion(dctx, stepCloseChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	key := cmp.Or(trace.Subagent, trace.Tree)
	at := &Trace{Tree: trace.Tree, Subagent: trace.Subagent}
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
	_ = workflow.ExecuteLocalActivity(lctx, PublishActivityName, jobEvents(ctx, at, []event.Event{
		{Type: event.StepFinished, StepName: key + "/step-" + strconv.Itoa(step)}})).Get(dctx, nil)
}

// withUsage returns err carrying what the run spent (its children's
// included) as its details, so that the run's parent, or the client that
// started it, counts every model call that succeeded however the run
// failed (UsageOf). An application error keeps its type and message; one
// that carries details already (a limit's) and a cancellation are
// returned as they are.
func withUsage(out RunOutput, err error) error {
	u := out.TotalUsage()
	if err == nil || u.IsZero() {
		return err
	}
	if sdktemporal.IsCanceledError(err) {
		// A cancellation carries the usage too, as its details.
		return sdktemporal.NewCanceledError(spent(out)...)
	}
	typ, msg := "deputy.failed", err.Error()
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) {
		if app.HasDetails() {
			return err
		}
		typ, msg = app.Type(), app.Message()
	}
	return sdktemporal.NewNonRetryableApplicationError(msg, typ, err, spent(out)...)
}

// withSettled is err, when the run failed, carrying what it spent once
// its jobs were settled.
func withSettled(out RunOutput, err error) error {
	if err == nil || sdktemporal.IsCanceledError(err) {
		if err != nil {
			return sdktemporal.NewCanceledError(spent(out)...)
		}
		return err
	}
	typ, msg := "deputy.failed", err.Error()
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) {
		typ, msg = app.Type(), app.Message()
	}
	return sdktemporal.NewNonRetryableApplicationError(msg, typ, err, spent(out)...)
}

// UsageOf returns the usage a failed agent workflow reports with its error:
// what its model calls, and its children's, spent before it failed. It is
// zero for an error that carries none.
func UsageOf(err error) provider.Usage { return usageOf(err) }

// activityContext is ctx with the options of spec's activities.
func activityContext(ctx workflow.Context, spec Spec) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: spec.activityTimeout(),
		HeartbeatTimeout:    HeartbeatTimeout,
		RetryPolicy: &sdktemporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    cmp.Or(max(spec.MaxAttempts, 0), 8),
		},
	})
}

func failure(out RunOutput, typ, msg string) error {
	return sdktemporal.NewNonRetryableApplicationError(msg, typ, nil, spent(out)...)
}

// toolRetriesChange names the workflow version from which a run fails
// after Spec.ToolRetries steps in a row with a failed tool call, and a
// run that used exactly its token limit goes on, as in process.
const toolRetriesChange = "deputy.tool-retries"

// overLimit fails a run past its token limit, as the core does; a run of
// a workflow started before toolRetriesChange fails at it, as it did.
func overLimit(ctx workflow.Context, spec Spec, out RunOutput) error {
	if spec.CostLimit > 0 && out.Cost > spec.CostLimit {
		return failure(out, ErrTypeUsageLimit, fmt.Sprintf("agent %q cost $%.6f, past its cost limit of $%.6f (%s)", spec.Name, out.Cost, spec.CostLimit, spec.costSetting()))
	}
	used := out.TotalUsage().Tokens()
	if spec.TokenLimit > 0 && (used > spec.TokenLimit ||
		used == spec.TokenLimit && workflow.GetVersion(ctx, toolRetriesChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion) {
		return failure(out, ErrTypeUsageLimit, fmt.Sprintf("agent %q used %d tokens, its limit is %d (%s)", spec.Name, out.TotalUsage().Tokens(), spec.TokenLimit, spec.tokenSetting()))
	}
	return nil
}

// validate reads an answer as the core's sub-agents do
// (runtime.CheckAnswer): the JSON it holds, checked against schema.
func validate(schema *jsonschema.Schema, answer string) (json.RawMessage, error) {
	found, problem, err := runtime.CheckAnswer(context.Background(), schema, answer)
	if err != nil {
		return nil, err
	}
	if problem != nil {
		return nil, problem
	}
	return found, nil
}

// toolDefs lists what the model is offered: the plain tools by name (their
// definitions come from the worker, so the model activity fills them in),
// and, below the depth cap, the sub-agents and the spawn tool.
func toolDefs(spec Spec, depth int, background bool) []provider.ToolDef {
	var defs []provider.ToolDef
	for _, name := range spec.Tools {
		defs = append(defs, provider.ToolDef{Name: name})
	}
	if depth >= spec.maxDepth() {
		return defs
	}
	for _, sa := range spec.SubAgents {
		defs = append(defs, provider.ToolDef{Name: sa.Name, Description: sa.Description, Parameters: sa.params()})
	}
	switch {
	case spec.Spawn && len(spec.Roster) > 0:
		defs = append(defs, rosterSpawn(spec.Roster, background))
		if background {
			defs = append(defs, runtime.JobsTool())
		}
	case spec.Spawn && background:
		defs = append(defs, provider.ToolDef{Name: SpawnToolName, Description: "Hand a self-contained task to a fresh sub-agent of your own kind and get its answer. " +
			"With background=true you get a job id at once. A job id is not a result: collect each job with " + subagent.JobsToolName +
			" (wait), or cancel it, before you answer; jobs still running when you answer are cancelled.", Parameters: json.RawMessage(spawnBackgroundParams)},
			runtime.JobsTool())
	case spec.Spawn:
		defs = append(defs, provider.ToolDef{Name: SpawnToolName, Description: "Hand a self-contained task to a fresh sub-agent of your own kind and get its answer.", Parameters: json.RawMessage(spawnParams)})
	}
	return defs
}

// rosterSpawn is spawn_subagent of a run whose Spec has a Roster: its
// "agent" argument names a member, or is left out to fork.
func rosterSpawn(roster []SubAgent, background bool) provider.ToolDef {
	names := make([]string, len(roster))
	var b strings.Builder
	b.WriteString("Hand a self-contained task to a sub-agent and get its answer: a named one, with agent, or, without it, a fresh sub-agent of your own kind. The named sub-agents:\n")
	for i, m := range roster {
		names[i] = m.Name
		fmt.Fprintf(&b, "- %s: %s\n", m.Name, m.Description)
	}
	props := map[string]any{
		"task":    map[string]any{"type": "string", "description": "The task, with everything the sub-agent needs to know."},
		"context": map[string]any{"type": "string", "description": "Background the sub-agent should read first."},
		"agent": map[string]any{"type": "string", "enum": names,
			"description": "Optional: the named sub-agent to use. Leave it out to fork yourself."},
	}
	if background {
		props["background"] = map[string]any{"type": "boolean", "description": "Start the sub-agent in the background and get a job id at once."}
		b.WriteString("With background=true you get a job id at once. A job id is not a result: collect each job with " + subagent.JobsToolName +
			" (wait), or cancel it, before you answer; jobs still running when you answer are cancelled.")
	}
	params, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": []string{"task"}})
	return provider.ToolDef{Name: SpawnToolName, Description: strings.TrimSpace(b.String()), Parameters: params}
}

const spawnParams = `{"type":"object","properties":{"task":{"type":"string","description":"The task, with everything the sub-agent needs to know."},"context":{"type":"string","description":"Background the sub-agent should read first."}},"required":["task"]}`

const spawnBackgroundParams = `{"type":"object","properties":{"task":{"type":"string","description":"The task, with everything the sub-agent needs to know."},"context":{"type":"string","description":"Background the sub-agent should read first."},"background":{"type":"boolean","description":"Start the sub-agent in the background and get a job id at once."}},"required":["task"]}`

func (sa SubAgent) params() json.RawMessage {
	switch {
	case len(sa.Params) > 0:
		return sa.Params
	case sa.React:
		return json.RawMessage(subagent.ReactParams)
	default:
		return json.RawMessage(subagent.TaskParams)
	}
}

// parallelismChange names the workflow version from which a turn's tool
// calls are not bounded by default; before it, at most legacyParallelism
// ran at once.
const parallelismChange = "deputy.parallelism"

const legacyParallelism = 64

// parallelism is how many of a turn's n calls run at once. The version is
// asked only where the answer matters (a turn of more calls than the old
// bound, with no bound of the user's), so that histories recorded before
// it replay as they ran.
func parallelism(ctx workflow.Context, spec Spec, n int) int {
	if p := spec.parallelism(); p > 0 {
		return p
	}
	if n > legacyParallelism && workflow.GetVersion(ctx, parallelismChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return legacyParallelism
	}
	return max(n, 1)
}

// turn is what a step's tool calls run under: the run's spec, depth and
// path; each child's share of the run's token limit (0: none); trace,
// when set, places the step in its tree; q takes the questions its calls
// ask (nil: none can be asked).
type turn struct {
	spec       Spec
	depth      int
	path       string
	childLimit int64
	costShare  float64 // each child's share of the run's cost limit (0: none)
	// floored: the shares pay for reading a short answer of a child too
	// small to start, which it gets (shareFloorChange).
	floored bool
	trace   *Trace
	q       *questions
	jobs    *jobs // the run's background jobs (nil: none offered)
	// answered is the model that answered the run's last call: a fork's
	// calls ask what the run's asked, and are reserved at its price until
	// one of the fork's own answers (RunInput.Answered).
	answered string
	// refused counts the spawns a limit refused (RunOutput.Refused).
	refused *int
}

// refuse counts a spawn a limit refused.
func (tn turn) refuse() {
	if tn.refused != nil {
		*tn.refused++
	}
}

// delegationChange names the workflow version from which a sub-agent
// call run as a child workflow (or by a factory) is checked by the
// worker's policy in the caller's workflow (CheckActivityName): its call,
// its hand-off and, for a child workflow, its answer. A workflow started
// before it runs its children unchecked, as it did.
const delegationChange = "deputy.delegation-policy"

// factoryTaskChange names the workflow version from which the agent a
// Runtime factory builds is handed its call's task, the "task" of its
// arguments, as subagent.FromFactory hands it in process, and a call
// without one is refused; a workflow started before it hands the agent
// the arguments whole, as it did.
const factoryTaskChange = "deputy.factory-task"

// readsTask reports whether d's factory's agent is handed the call's task
// (factoryTaskChange); it asks the version only of a factory's call with
// the default parameters (a factory with its own Params is handed the
// arguments, as FromFactory with WithParams is in process).
func (d *delegation) readsTask(ctx workflow.Context) bool {
	return d.factory() && len(d.sub.Params) == 0 && workflow.GetVersion(ctx, factoryTaskChange, workflow.DefaultVersion, 1) >= 1
}

// runTools runs one turn's tool calls, at most spec.Parallelism at once (by
// default all of them), and returns one result per call in order. It
// returns an error only when the run was cancelled.
//
// With a trace, its plain tool calls publish their results, its children
// their events; ended lists the calls whose results no activity
// published, for the next model call to.
func runTools(ctx, actx workflow.Context, tn turn, idPrefix string, calls []provider.ToolCall, spawns *int) (results []ToolResult, ended []EndedCall, err error) {
	if workflow.GetVersion(ctx, fanOutChange, workflow.DefaultVersion, 1) >= 1 {
		return runCalls(ctx, actx, tn, idPrefix, calls, spawns)
	}
	spec, depth, trace := tn.spec, tn.depth, tn.trace
	results = make([]ToolResult, len(calls))
	errs := make([]error, len(calls))
	published := make([]bool, len(calls))  // by a tool activity
	children := make([]string, len(calls)) // the sub-agent run each call started
	sem := workflow.NewSemaphore(ctx, int64(parallelism(ctx, spec, len(calls))))
	wg := workflow.NewWaitGroup(ctx)
	checked, asked := false, false // whether the step's hand-offs are checked (delegationChange)
	for i, call := range calls {
		isSpawn := call.Name == SpawnToolName && spec.Spawn
		sub, isSub := findSub(spec, call.Name)
		var body func(gctx workflow.Context)
		switch {
		case call.Name == subagent.JobsToolName && tn.jobs.offered() && depth < spec.maxDepth():
			body = func(gctx workflow.Context) { results[i] = tn.jobs.act(gctx, call) }
		case contains(spec.Tools, call.Name):
			published[i] = trace != nil
			body = func(gctx workflow.Context) {
				errs[i] = workflow.ExecuteActivity(withCtx(actx, gctx), CallToolActivityName, ToolCall{Call: call, Depth: depth, Path: tn.path, MaxOutputBytes: spec.maxOutput(), Trace: trace}).Get(gctx, &results[i])
				errs[i] = askAndRunAgain(gctx, actx, tn, call, &results[i], errs[i])
			}
		case (isSub || isSpawn) && depth >= spec.maxDepth():
			results[i] = ToolResult{Content: fmt.Sprintf("%v: %q cannot delegate further", subagent.ErrMaxDepth, call.Name), IsError: true}
			continue
		case isSpawn && spec.MaxSpawns > 0 && *spawns >= spec.MaxSpawns:
			results[i] = maxSpawnsResult(spec)
			tn.refuse()
			continue
		case isSub || isSpawn:
			if isSpawn {
				*spawns++
			}
			if !asked {
				// Asked once a step, where the step has a child, so that
				// workflows that ran before it replay as they ran.
				asked = true
				checked = workflow.GetVersion(ctx, delegationChange, workflow.DefaultVersion, 1) >= 1
			}
			if bad := foldedKeys(ctx, sub, isSpawn, call); bad != "" {
				results[i] = ToolResult{Content: bad, IsError: true}
				continue
			}
			d := &delegation{tn: tn, call: call, sub: sub, isSpawn: isSpawn, id: fmt.Sprintf("%s.%d-%s", idPrefix, i, call.Name)}
			d.tasked = checked && d.readsTask(ctx)
			d.background = isSpawn && backgroundAsked(call) && tn.jobs.offered() && tn.jobs.enabled(ctx)
			if bad := d.pickMember(ctx); bad != "" {
				results[i] = ToolResult{Content: bad, IsError: true}
				continue
			}
			if d.background && tn.jobs.threaded() {
				tn.jobs.number(ctx, d)
			}
			if !checked {
				// As before delegationChange: bad arguments are refused
				// before anything is scheduled.
				if bad := d.prepare(); bad != "" {
					results[i] = ToolResult{Content: bad, IsError: true}
					continue
				}
			}
			body = func(gctx workflow.Context) {
				results[i], errs[i] = d.run(gctx, checked)
				children[i] = d.started
			}
		default:
			results[i] = ToolResult{Content: fmt.Sprintf("%v: %q; the tools are the ones listed in this request", tool.ErrUnknownTool, call.Name), IsError: true}
			continue
		}
		wg.Add(1)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer wg.Done()
			if err := sem.Acquire(gctx, 1); err != nil {
				errs[i] = err
				return
			}
			defer sem.Release(1)
			body(gctx)
			if errs[i] != nil {
				results[i] = ToolResult{Content: capText(failedText(gctx, call.Name, errs[i]), spec.maxOutput()), IsError: true, Usage: usageOf(errs[i]), Cost: costOf(errs[i]), Refused: refusedOf(errs[i])}
				results[i].Models, results[i].Earlier = modelsOf(errs[i])
			}
			results[i].Content = capText(results[i].Content, spec.maxOutput())
		})
	}
	wg.Wait(ctx)
	ended, err = endTurn(ctx, trace, calls, results, errs, published, children)
	return results, ended, err
}

// endTurn is the end of a turn whose calls ran: a tripwire's error, or
// the run's cancellation, or none; with a trace, the calls whose results
// no activity published (ended).
func endTurn(ctx workflow.Context, trace *Trace, calls []provider.ToolCall, results []ToolResult, errs []error, published []bool, children []string) (ended []EndedCall, err error) {
	for _, err := range errs {
		if tripped(err) {
			return nil, err
		}
	}
	if trace != nil {
		for i, call := range calls {
			if !published[i] || errs[i] != nil {
				e := EndedCall{CallID: call.ID, Subagent: children[i], IsError: results[i].IsError}
				if e.Subagent != "" && e.IsError {
					e.Code, e.Usage, e.Cost, e.Model = failCode(results[i], errs[i]), results[i].Usage, results[i].Cost, failModel(results[i], errs[i])
					e.Models, e.Earlier = results[i].Models, results[i].Earlier
				}
				ended = append(ended, e)
			}
		}
	}
	if ctx.Err() != nil {
		endCancelled(ctx, trace, calls, results, errs, published, children)
		for _, err := range errs {
			if sdktemporal.IsCanceledError(err) {
				return ended, err
			}
		}
		return ended, sdktemporal.NewCanceledError()
	}
	return ended, nil
}

// endCancelled publishes, for a run cancelled as its step's calls ran,
// what its next model call would have published of them, since none
// follows: each child's end (SUBAGENT_ERROR, code "cancelled" for one
// cancelled with the run, with what it spent, as in process) and each
// result no activity published, before the run's step ends (closeStep).
func endCancelled(ctx workflow.Context, trace *Trace, calls []provider.ToolCall, results []ToolResult, errs []error, published []bool, children []string) {
	if trace == nil || !slices.ContainsFunc(children, func(c string) bool { return c != "" }) {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if workflow.GetVersion(dctx, cancelEndsChildrenChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	key := cmp.Or(trace.Subagent, trace.Tree)
	var evs []event.Event
	for i, call := range calls {
		if published[i] {
			continue // a tool activity's, which publishes its result as it ends
		}
		r := results[i]
		if children[i] != "" && r.IsError {
			evs = append(evs, event.Event{Type: event.SubagentError, SubagentRunID: children[i], Message: r.Content, Code: failCode(r, errs[i]), Usage: usageJSON(r.Models, r.Earlier, r.Usage, r.Cost), Model: failModel(r, errs[i])})
		}
		evs = append(evs, event.Event{Type: event.ToolCallResult, MessageID: key + "/step-" + strconv.Itoa(trace.Step) + "/result-" + call.ID,
			ToolCallID: call.ID, Content: r.Content, Role: "tool"})
	}
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 1}})
	_ = workflow.ExecuteLocalActivity(lctx, PublishActivityName, jobEvents(ctx, &Trace{Tree: trace.Tree, Subagent: trace.Subagent}, evs)).Get(dctx, nil)
}

// delegation is one sub-agent call of a step: a child workflow (a fixed
// or react child, a spawned fork) or a factory's.
type delegation struct {
	tn      turn
	call    provider.ToolCall
	sub     SubAgent
	isSpawn bool
	// member is the roster member a spawn starts (Spec.Roster); nil
	// for a fork.
	member *SubAgent
	id     string // the child workflow's id
	jobID  string // a thread's job's id, numbered in the thread
	// numberLate: a thread's background spawn that takes its job's
	// number as its job starts (jobNumberChange).
	numberLate bool

	wfName  string
	arg     any    // RunInput or FactoryCall
	started string // the child's sub-agent run id, once it started with a trace
	// background: a spawn that starts a job (Spec.Background) and
	// returns its id at once.
	background bool
	// policed: the workers have a policy (Checks.Policy), which checks
	// the child's corrective retry with the call's arguments; receipt:
	// and a background job's receipt, as the call's result
	// (jobsPolicyChange).
	policed, receipt bool
	// tasked: a factory's agent is handed the call's task, not its
	// arguments (factoryTaskChange).
	tasked bool
	// job is the job a background spawn started.
	job *bgJob
}

// backgroundAsked reports whether a spawn's arguments ask for a job.
func backgroundAsked(call provider.ToolCall) bool {
	var a struct {
		Background bool `json:"background"`
	}
	return json.Unmarshal(call.Arguments, &a) == nil && a.Background
}

func (d *delegation) factory() bool { return !d.isSpawn && d.sub.Factory != "" }

// runsFactory reports whether d's child is a factory's agent, run in one
// activity of a FactoryWorkflow: a factory sub-agent's, or a roster
// member's that is a factory.
func (d *delegation) runsFactory() bool {
	return d.factory() || d.member != nil && d.member.Factory != ""
}

// name is the name of d's child in its events and its path: a fork's,
// a roster member's, or the sub-agent's.
func (d *delegation) name() string {
	switch {
	case d.member != nil:
		return d.member.Name
	case d.isSpawn:
		return forkName
	}
	return d.sub.Name
}

// pickMember sets up a spawn of a run whose Spec has a Roster to start
// the member its "agent" argument names (none: a fork), or returns what
// the model reads when it names none of them, or one that cannot be
// started so.
func (d *delegation) pickMember(ctx workflow.Context) string {
	roster := d.tn.spec.Roster
	if !d.isSpawn || len(roster) == 0 {
		return ""
	}
	var a struct {
		Agent string `json:"agent"`
	}
	if json.Unmarshal(d.call.Arguments, &a) != nil || a.Agent == "" {
		return ""
	}
	m, bad := rosterMember(roster, a.Agent)
	if bad == "" && d.background && m.Agent == nil {
		bad = d.tn.jobs.refuseFactory(ctx, m.Name)
	}
	d.member = m
	return bad
}

// rosterMember returns the member of roster named name, or what the
// model reads when there is none, or it cannot be started.
func rosterMember(roster []SubAgent, name string) (*SubAgent, string) {
	i := slices.IndexFunc(roster, func(m SubAgent) bool { return m.Name == name })
	if i < 0 {
		return nil, fmt.Sprintf("%v for %s: no sub-agent named %q: %s", tool.ErrInvalidArguments, SpawnToolName, name, rosterNames(roster))
	}
	m := roster[i]
	switch {
	case m.React || m.Agent == nil && m.Factory == "":
		return nil, fmt.Sprintf("roster member %q is neither an Agent nor a Factory (a React sub-agent reads its system prompt from its call, which a spawn does not give): fix the Spec's Roster", m.Name)
	}
	return &m, ""
}

// rosterNames says which members a spawn may name.
func rosterNames(roster []SubAgent) string {
	names := make([]string, len(roster))
	for i, m := range roster {
		names[i] = strconv.Quote(m.Name)
	}
	return "name one of " + strings.Join(names, ", ") + ", or leave agent out to fork yourself"
}

// prepare builds the child's workflow and input from the call, or returns
// what the model reads when the arguments cannot make one.
func (d *delegation) prepare() string {
	tn := d.tn
	if d.tasked {
		// Its arguments are read as a FromFactory tool's are in process.
		if err := exactkeys.Check(string(d.call.Arguments), taskKeys); exactkeys.Problem(err) {
			return fmt.Sprintf("%v for %s: %v", tool.ErrInvalidArguments, d.call.Name, err)
		}
		if _, ok := delegatedTask(false, false, d.call.Arguments); !ok {
			return badTask(d.call)
		}
	}
	child, wfName, arg, bad := childRun(tn.spec, d.sub, d.isSpawn, d.call, tn.depth)
	if d.member != nil {
		child, wfName, arg, bad = memberRun(tn.spec, *d.member, d.call, tn.depth)
	}
	if bad != "" {
		return bad
	}
	switch a := arg.(type) {
	case RunInput:
		// The child spends its share of what the run has left.
		a.Spec.within(tn.childLimit, tn.costShare)
		name := cmp.Or(child.Name, d.sub.Name)
		if d.isSpawn {
			name = d.name()
		}
		if d.isSpawn && d.member == nil {
			// A fork asks the run's model.
			a.Answered = tn.answered
		}
		a.Path = tn.path + "/" + name
		arg = a
	case FactoryCall:
		// The factory's agent spends its shares of the run's limits.
		a.Path, a.TokenLimit, a.CostLimit = tn.path, tn.childLimit, tn.costShare
		arg = a
	}
	if t := tn.trace; t != nil {
		ct := &Trace{Tree: t.Tree, TreeRun: t.TreeRun, Subagent: d.id, Name: d.call.Name, Description: d.sub.Description, Parent: t.Subagent, ParentToolCall: d.call.ID, Job: t.Job}
		switch {
		case d.member != nil:
			ct.Name, ct.Description = d.member.Name, d.member.Description
		case d.isSpawn:
			ct.Name, ct.Description = forkName, ""
		}
		switch a := arg.(type) {
		case RunInput:
			a.Trace = ct
			arg = a
		case FactoryCall:
			a.Trace = ct
			arg = a
		}
	}
	d.wfName, d.arg = wfName, arg
	return ""
}

// run runs the call: checked (delegationChange), it asks the worker's
// policy about the call and its hand-off first, waiting for a person when
// a rule asks, and about a child workflow's answer after it.
func (d *delegation) run(ctx workflow.Context, checked bool) (ToolResult, error) {
	if checked {
		in := d.checkInput()
		var v Delegated
		if err := d.check(ctx, in, &v); err != nil {
			return ToolResult{}, err
		}
		if res, done := d.handOff(v); done {
			return res, nil
		}
	}
	return d.rest(ctx, checked)
}

// rest starts the child and reads its answer, checked by the policy
// when checked, once the hand-off was decided; a background spawn starts
// its job and returns its id.
func (d *delegation) rest(ctx workflow.Context, checked bool) (ToolResult, error) {
	if d.background {
		if d.tn.trace != nil {
			d.started = d.id
		}
		res, err := d.tn.jobs.start(ctx, d)
		if err != nil || !d.receipt || !d.policed {
			return res, err
		}
		// Its receipt is the call's result, as in process.
		return checkResult(ctx, d.tn, d.call, res)
	}
	res, after, err := d.answer(ctx, d.start(ctx), checked)
	if after == nil {
		return res, err
	}
	var v Delegated
	if cerr := workflow.ExecuteLocalActivity(checkContext(ctx, d.tn.spec), CheckActivityName, *after).Get(ctx, &v); cerr != nil {
		return res, cerr
	}
	res.Content, res.IsError = v.Result, v.IsError
	return res, nil
}

// checkInput is what the policy is asked before the hand-off.
func (d *delegation) checkInput() Delegation {
	in := Delegation{Call: d.call, Factory: d.factory(), Tasked: d.tasked, Spawn: d.isSpawn, Depth: d.tn.depth, Path: d.tn.path, Trace: d.tn.trace}
	if d.member != nil {
		in.Member = d.member.Name
	}
	return in
}

// handOff applies what the check decided to the call: done, with the
// result the model reads, when the call does not go on (refused, or its
// arguments, as the policy left them, make no child).
func (d *delegation) handOff(v Delegated) (res ToolResult, done bool) {
	if v.Refused != "" {
		return ToolResult{Content: v.Refused, IsError: true}, true
	}
	d.call.Arguments = v.Arguments
	if bad := d.prepare(); bad != "" {
		return ToolResult{Content: bad, IsError: true}, true
	}
	switch a := d.arg.(type) {
	case RunInput:
		a.Text = v.Task
		if d.policed {
			// Its corrective retry's check reads them.
			a.Arguments = v.Arguments
		}
		d.arg = a
	case FactoryCall:
		a.Checked, a.Task = true, v.Task
		d.arg = a
	}
	return ToolResult{}, false
}

// start starts the child workflow.
func (d *delegation) start(ctx workflow.Context) workflow.ChildWorkflowFuture {
	if d.tn.trace != nil {
		d.started = d.id
	}
	opts := workflow.ChildWorkflowOptions{WorkflowID: d.id}
	if d.tn.trace != nil && workflow.GetVersion(ctx, cancelEndsChildrenChange, workflow.DefaultVersion, 1) >= 1 {
		// Cancelled, the run waits for its child to end, and publishes
		// its end with what it spent (endTurn).
		opts.WaitForCancellation = true
	}
	cctx := workflow.WithChildOptions(ctx, opts)
	return workflow.ExecuteChildWorkflow(cctx, d.wfName, d.arg)
}

// cancelEndsChildrenChange names the workflow version from which a run
// with a trace that is cancelled while its step's children run waits for
// each child to end, as a run in process waits for its sub-agents, and
// publishes each one's end, cancelled, with what it spent, and each
// call's result (endTurn), as its next model call would have: a client
// watching the tree saw its sub-agents start and never end. Asked as a
// child starts, and again where a cancelled step's ends are published.
const cancelEndsChildrenChange = "deputy.cancel-ends-children"

// answer reads what the child f answered (waiting for it), and, checked,
// what the policy must be asked about the answer (after; nil when
// nothing: a factory's activity checks its answer itself, and a cancelled
// run or a tripwire goes up as it is).
func (d *delegation) answer(ctx workflow.Context, f workflow.Future, checked bool) (res ToolResult, after *Delegation, err error) {
	if d.runsFactory() {
		err := f.Get(ctx, &res)
		return res, nil, err
	}
	var o RunOutput
	err = f.Get(ctx, &o)
	res = ToolResult{Content: childContent(o), Usage: o.TotalUsage(), Cost: o.Cost, Models: o.Models, Earlier: o.Earlier, Refused: o.Refused}
	if err != nil && d.tn.floored && unstarted(err) {
		// Its share could not pay for its first model call: it says so in
		// a line its share pays to read, as in process.
		res, err = ToolResult{Content: unstartedLine}, nil
	}
	if !checked || ctx.Err() != nil || tripped(err) {
		return res, nil, err
	}
	if err != nil {
		res = ToolResult{Content: capText(failedText(ctx, d.call.Name, err), d.tn.spec.maxOutput()), IsError: true, Usage: usageOf(err), Cost: costOf(err), Code: codeOf(err), Model: modelOf(err), Refused: refusedOf(err)}
		res.Models, res.Earlier = modelsOf(err)
	}
	return res, &Delegation{Call: d.call, Depth: d.tn.depth, Path: d.tn.path, After: true, Result: res.Content, IsError: res.IsError, Trace: d.tn.trace}, nil
}

// check runs the delegation check until it decides, asking the person
// each round of questions a rule asks.
func (d *delegation) check(ctx workflow.Context, in Delegation, v *Delegated) error {
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, d.tn.spec), CheckActivityName, in).Get(ctx, v); err != nil {
		return err
	}
	return d.askRounds(ctx, in, v)
}

// askRounds goes on with a check that asked a person (v.Asked): it
// waits for the answers and checks again with them, until it decides.
func (d *delegation) askRounds(ctx workflow.Context, in Delegation, v *Delegated) error {
	for round := 0; len(v.Asked) > 0; round++ {
		if d.tn.q == nil || round >= maxAskRounds {
			*v = Delegated{Refused: fmt.Sprintf("policy: a rule asks a person before %s, %d times or where no one can answer (a resident's calls cannot ask): do the work another way", d.call.Name, round)}
			return nil
		}
		answers, err := d.tn.q.ask(ctx, v.Asked)
		if err != nil {
			return err
		}
		in.Asked, in.Answers = v.Asked, answers
		*v = Delegated{}
		if err := workflow.ExecuteLocalActivity(checkContext(ctx, d.tn.spec), CheckActivityName, in).Get(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// askAndRunAgain waits, for a tool call that asked a person instead of
// finishing, for the answers, and runs the call again with them, until it
// finishes.
func askAndRunAgain(ctx, actx workflow.Context, tn turn, call provider.ToolCall, res *ToolResult, err error) error {
	q, spec := tn.q, tn.spec
	for round := 0; err == nil && len(res.Asked) > 0; round++ {
		if q == nil || round >= maxAskRounds {
			*res = ToolResult{Content: fmt.Sprintf("%s asked a person %d times, or where no one can answer: a resident's tools cannot ask", call.Name, round), IsError: true}
			return nil
		}
		asked := res.Asked
		answers, aerr := q.ask(ctx, asked)
		if aerr != nil {
			return aerr
		}
		*res = ToolResult{}
		err = workflow.ExecuteActivity(withCtx(actx, ctx), CallToolActivityName,
			ToolCall{Call: call, Depth: tn.depth, Path: tn.path, MaxOutputBytes: spec.maxOutput(), Trace: tn.trace, Asked: asked, Answers: answers}).Get(ctx, res)
		res.answered = true
	}
	return err
}

// earlierPart is what a run spent before the last answer a person gave
// its tree, once a step's results are in (before: what it spent before
// them), when one of them ran again with an answer or is a child's that
// spent some before one (ok false: none did, the run's Earlier stands).
// The tree is idle between a question and its answer, so a call of the
// step that neither asked nor waited on a child that asked ended before
// the question: all it spent is earlier; a child that asked brings its
// own earlier part; a call that asked spent what it did after the answer.
func earlierPart(before []provider.ModelUsage, results []ToolResult) ([]provider.ModelUsage, bool) {
	if !slices.ContainsFunc(results, func(r ToolResult) bool { return r.answered || len(r.Earlier) > 0 }) {
		return nil, false
	}
	e := before
	for _, r := range results {
		switch {
		case len(r.Earlier) > 0:
			e = addModels(e, r.Earlier...)
		case !r.answered:
			e = addModels(e, r.Models...)
		}
	}
	return e, true
}

// stepTrace is trace at step (nil: none).
func stepTrace(trace *Trace, step int) *Trace {
	if trace == nil {
		return nil
	}
	t := *trace
	t.Step, t.Ended = step, nil
	return &t
}

func childContent(o RunOutput) string {
	if o.Invalid != "" {
		return o.Answer + "\n[validation failed: " + o.Invalid + "]"
	}
	return o.Answer
}

// usageOf reads the usage a failed or cancelled child carried in its
// error's details.
func usageOf(err error) provider.Usage {
	var u provider.Usage
	detailsOf(err, &u)
	return u
}

// detailsOf reads the details of err, a failed or cancelled run's, into
// ptrs, the first of them in the order spent gives them; it leaves those
// the error does not carry as they are.
func detailsOf(err error, ptrs ...any) {
	// Details of another shape are not a run's: the SDK's own cancellation
	// of an Await carries its message, which the SDK would not assign to
	// ptrs but panic on, failing the workflow task for good.
	defer func() { _ = recover() }()
	var app *sdktemporal.ApplicationError
	var cancelled *sdktemporal.CanceledError
	switch {
	case errors.As(err, &app) && app.HasDetails():
		_ = app.Details(ptrs...)
	case errors.As(err, &cancelled) && cancelled.HasDetails():
		_ = cancelled.Details(ptrs...)
	}
}

// checkContext is ctx with the options of the delegation check: a local
// activity, run by the worker that runs the workflow (its Runtime.Policy
// decides), quick, and recorded in the history as a marker, so that a
// tree whose workers have no policy pays no activity for it.
func checkContext(ctx workflow.Context, spec Spec) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: spec.activityTimeout(),
		RetryPolicy:            &sdktemporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 3},
	})
}

// guard runs the guardrail activity on text. A check that could not
// decide returns, with its error, what the checks spent before it.
func guard(ctx, actx workflow.Context, spec Spec, depth int, path string, trace *Trace, stage policy.Stage, text string, retried bool, unretried string) (Guarded, error) {
	var g Guarded
	err := workflow.ExecuteActivity(actx, GuardActivityName, GuardCall{Guardrails: spec.Guardrails, Stage: stage, Text: text, Retried: retried, Unretried: unretried,
		Depth: depth, Path: path, Trace: trace}).Get(ctx, &g)
	if err != nil {
		g = Guarded{Usage: usageOf(err), Cost: costOf(err)}
	}
	return g, err
}

// guardCostChange names the workflow version from which what a run's
// guardrail checks cost (a judge's model calls, priced on the worker)
// counts in its RunOutput.Cost and against its cost limit, as their
// usage counts in its ChildUsage. It is asked only where a check cost
// something, so that histories recorded before it replay as they ran; a
// check recorded in the history counts once however often it replays.
const guardCostChange = "deputy.guard-cost"

// guardCost is what g's checks cost, as the run counts it.
func guardCost(ctx workflow.Context, g Guarded) float64 {
	if g.Cost == 0 || workflow.GetVersion(ctx, guardCostChange, workflow.DefaultVersion, 1) < 1 {
		return 0
	}
	return g.Cost
}

// guardModels is what g's checks spent per provider and model, as the
// run counts it: their dollars only where it counts them (guardCost).
func guardModels(ctx workflow.Context, g Guarded) []provider.ModelUsage {
	if g.Cost == 0 || guardCost(ctx, g) != 0 {
		return g.Models
	}
	return withoutCost(g.Models)
}

// withoutCost is ms with no dollars: what a run that does not count their
// cost counts of them.
func withoutCost(ms []provider.ModelUsage) []provider.ModelUsage {
	ms = slices.Clone(ms)
	for i := range ms {
		ms[i].Cost, ms[i].CacheSaved = 0, 0
	}
	return ms
}

// tripped reports whether err is a guardrail's tripwire, which stops
// every run above the one it tripped in.
func tripped(err error) bool {
	var app *sdktemporal.ApplicationError
	return errors.As(err, &app) && app.Type() == ErrTypeGuardrailTripped
}

// messageOf is the message of the application error err holds.
func messageOf(err error) string {
	var app *sdktemporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	return err.Error()
}

// failureLineChange names the workflow version from which the model reads
// a call that failed (a child workflow's, an activity's) as the line of
// its cause (failureLine), as in process, where it read the server's
// account of the failure too: the child workflow's ids and event ids, and
// the activity's, about 600 bytes it paid to read for one line of news.
const failureLineChange = "deputy.failure-line"

// failedText is what the model reads of call name that failed with err:
// the cause in a line from failureLineChange on, the error's whole text
// before it.
func failedText(ctx workflow.Context, name string, err error) string {
	if workflow.GetVersion(ctx, failureLineChange, workflow.DefaultVersion, 1) >= 1 {
		return name + " failed: " + failureLine(err)
	}
	return fmt.Sprintf("%s failed: %v", name, err)
}

// failureLine is the cause of a failed call in a line: that it timed out
// or was cancelled, or the message of the application error it holds (a
// child's or an activity's, without the server's ids: messageOf).
func failureLine(err error) string {
	// A timeout first: an activity's wraps the last attempt's error, an
	// older one.
	var timeout *sdktemporal.TimeoutError
	switch {
	case errors.As(err, &timeout):
		// StartToClose: "start to close".
		var kind strings.Builder
		for i, r := range timeout.TimeoutType().String() {
			if i > 0 && unicode.IsUpper(r) {
				kind.WriteByte(' ')
			}
			kind.WriteRune(unicode.ToLower(r))
		}
		return "timed out (" + kind.String() + ")"
	case sdktemporal.IsCanceledError(err):
		return "cancelled"
	}
	return messageOf(err)
}

// codeOf names a failed sub-agent's error err as the code its
// SUBAGENT_ERROR has in process (errcode's): "cancelled", "timeout", a
// limit's or a provider's code, or "error" (also for nil: a call that
// failed without an error).
func codeOf(err error) string {
	var app *sdktemporal.ApplicationError
	var timeout *sdktemporal.TimeoutError
	switch {
	case err == nil:
		return "error"
	case sdktemporal.IsCanceledError(err):
		return "cancelled"
	case errors.As(err, &app):
		typ := app.Type()
		if strings.HasPrefix(typ, ErrTypeProvider) {
			return "provider_error"
		}
		if i := slices.IndexFunc(typeCodes, func(tc typeCode) bool { return tc.typ == typ }); i >= 0 {
			return typeCodes[i].code
		}
		if errors.As(err, &timeout) {
			// A timeout that carries what the run spent (withUsage).
			return "timeout"
		}
	case errors.As(err, &timeout):
		return "timeout"
	}
	return "error"
}

// typeCode pairs the type of a run's failure (its ApplicationError's)
// with the code its SUBAGENT_ERROR has, as in process.
type typeCode struct{ typ, code string }

// typeCodes are the failures codeOf names by their type, and
// factoryOutcome reads back (the first type of a code).
var typeCodes = []typeCode{
	{ErrTypeMaxSteps, "max_steps"},
	{ErrTypeUsageLimit, "usage_limit"},
	{ErrTypeToolRetries, "tool_retries"},
	{ErrTypeCompaction, "compaction_failed"},
	{ErrTypePanic, "panic"},
	{ErrTypeGuardrail, "guardrail"},
	{ErrTypeGuardrailTripped, "guardrail"},
	{ErrTypeJobTime, "timeout"}, // a job past its time: its context's deadline, in process
}

// failCode is the code of a call's failure: err's, or, for a child whose
// error its parent read as the call's result (delegation.answer, or a
// factory's agent's, RunFactory), that error's.
func failCode(r ToolResult, err error) string {
	if err == nil && r.Code != "" {
		return r.Code
	}
	return codeOf(err)
}

// failModel is the model of a call's failed child, as failCode is its
// code.
func failModel(r ToolResult, err error) string {
	if err == nil && r.Model != "" {
		return r.Model
	}
	return modelOf(err)
}

// costOf reads what a failed or cancelled child cost, in US dollars, from
// its error's details (after its usage; none from a run recorded before
// runs carried it).
func costOf(err error) float64 {
	var u provider.Usage
	var c float64
	detailsOf(err, &u, &c)
	return c
}

// modelOf reads the model that answered a failed or cancelled child's
// first call from its error's details (after its usage and cost; "" from
// a run recorded before runs carried it, or one no model answered).
func modelOf(err error) string {
	var u provider.Usage
	var c float64
	var m string
	detailsOf(err, &u, &c, &m)
	return m
}

// spent is what a failed or cancelled run carries in its error's
// details: its usage, cost and first model, then its usage per provider
// and model and the part of it spent before the last answer (modelsOf),
// then the spawns it had refused (refusedOf).
func spent(out RunOutput) []any {
	return []any{out.TotalUsage(), out.Cost, out.Model, out.Models, out.Earlier, out.Refused}
}

// refusedOf reads how many spawns a failed or cancelled child had
// refused (RunOutput.Refused) from its error's details (0 from a run
// recorded before runs carried it).
func refusedOf(err error) int {
	var u provider.Usage
	var c float64
	var m string
	var models, earlier []provider.ModelUsage
	var n int
	detailsOf(err, &u, &c, &m, &models, &earlier, &n)
	return n
}

// modelsOf reads what a failed or cancelled child spent per provider and
// model, and the part of it spent before the last answer, from its
// error's details (after its model; none from a run recorded before runs
// carried them).
func modelsOf(err error) (models, earlier []provider.ModelUsage) {
	var u provider.Usage
	var c float64
	var m string
	detailsOf(err, &u, &c, &m, &models, &earlier)
	return models, earlier
}

// withCtx gives the coroutine's context the activity options of actx.
func withCtx(actx, gctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(gctx, workflow.GetActivityOptions(actx))
}

// exactKeysChange names the workflow version from which a sub-agent
// call whose arguments hold a key that is one of its own only when case
// is ignored ("TASK" beside "task") is refused, as in process, where
// encoding/json read the task from either. A workflow that ran before it
// asks the version only for such a call, which it started a child for.
const exactKeysChange = "deputy.exact-task-keys"

// The keys each kind of sub-agent call reads (exactkeys): a spawn's, a
// React child's, and any other's.
var (
	spawnKeys = reflect.TypeFor[struct {
		Task           string          `json:"task"`
		Context        string          `json:"context"`
		Agent          string          `json:"agent"`
		OutputSchema   json.RawMessage `json:"output_schema"`
		Background     bool            `json:"background"`
		InheritContext *bool           `json:"inherit_context"`
		Model          string          `json:"model"`
	}]()
	reactKeys = reflect.TypeFor[struct {
		Task         string `json:"task"`
		SystemPrompt string `json:"system_prompt"`
	}]()
	taskKeys = reflect.TypeFor[struct {
		Task string `json:"task"`
	}]()
)

// foldedKeys returns what the model reads of a sub-agent call whose
// arguments hold a key that is one the call reads only when case is
// ignored, or a key it reads twice; "" for any other (a factory's
// arguments are the task itself, read whole).
func foldedKeys(ctx workflow.Context, sub SubAgent, isSpawn bool, call provider.ToolCall) string {
	keys := taskKeys
	switch {
	case isSpawn:
		keys = spawnKeys
	case sub.Factory != "":
		return ""
	case sub.React:
		keys = reactKeys
	}
	err := exactkeys.Check(string(call.Arguments), keys)
	if !exactkeys.Problem(err) || workflow.GetVersion(ctx, exactKeysChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ""
	}
	return fmt.Sprintf("%v for %s: %v", tool.ErrInvalidArguments, call.Name, err)
}

type childArgs struct {
	Task         string `json:"task"`
	SystemPrompt string `json:"system_prompt"`
	Context      string `json:"context"`
}

// delegatedTask is the task a sub-agent call hands its child, read from
// its arguments as the sub-agent tools read them: a factory's are the
// task itself; a child's "task", after its "context" for a spawned fork.
// It reports false for arguments that hold no task.
func delegatedTask(factory, spawn bool, args json.RawMessage) (string, bool) {
	if factory {
		if len(args) == 0 {
			return "", true
		}
		return string(args), true
	}
	var a childArgs
	if err := json.Unmarshal(args, &a); err != nil || strings.TrimSpace(a.Task) == "" {
		return "", false
	}
	if spawn && a.Context != "" {
		return "Context:\n" + a.Context + "\n\nTask:\n" + a.Task, true
	}
	return a.Task, true
}

// badTask is what the model reads of a sub-agent call whose arguments
// hold no task.
func badTask(call provider.ToolCall) string {
	var a childArgs
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return fmt.Sprintf("%v: %q takes a JSON object with a \"task\": %v", tool.ErrInvalidArguments, call.Name, err)
	}
	return fmt.Sprintf("%v: %q needs a non-empty \"task\"", tool.ErrInvalidArguments, call.Name)
}

// childRun builds a sub-agent call's child workflow and its input; bad is a
// message for the model when the arguments cannot make one.
func childRun(spec Spec, sub SubAgent, isSpawn bool, call provider.ToolCall, depth int) (child Spec, wfName string, arg any, bad string) {
	if !isSpawn && sub.Factory != "" {
		return Spec{}, FactoryWorkflowName, FactoryCall{Factory: sub.Factory, Tool: call.Name, Arguments: call.Arguments, Depth: depth + 1, MaxOutputBytes: spec.maxOutput()}, ""
	}
	task, ok := delegatedTask(false, isSpawn, call.Arguments)
	if !ok {
		return Spec{}, "", nil, badTask(call)
	}
	var a childArgs
	_ = json.Unmarshal(call.Arguments, &a) // read by delegatedTask already
	switch {
	case isSpawn:
		child = spec
		child.Name = spec.Name + "/" + SpawnToolName
	case sub.React:
		child = Spec{Name: sub.Name, Provider: spec.Provider, Model: spec.Model, Tools: spec.Tools, System: a.SystemPrompt,
			MaxTokens: spec.MaxTokens, ActivityTimeout: spec.ActivityTimeout, MaxAttempts: spec.MaxAttempts}
	case sub.Agent != nil:
		child = *sub.Agent
	default:
		return Spec{}, "", nil, fmt.Sprintf("sub-agent %q has no Agent, React or Factory: fix the Spec", sub.Name)
	}
	if child.MaxDepth == 0 {
		child.MaxDepth = spec.maxDepth()
	}
	child.MaxOutputBytes = min(child.maxOutput(), spec.maxOutput())
	return child, AgentWorkflowName, RunInput{Spec: child, Text: task, Depth: depth + 1}, ""
}

// memberRun builds the child workflow and input of a spawn of the roster
// member m (pickMember checked its kind), handed the spawn's task, after
// its context, as in process.
func memberRun(spec Spec, m SubAgent, call provider.ToolCall, depth int) (child Spec, wfName string, arg any, bad string) {
	task, ok := delegatedTask(false, true, call.Arguments)
	if !ok {
		return Spec{}, "", nil, badTask(call)
	}
	if m.Agent == nil {
		// Its task is handed as the policy left it (handOff), the call's
		// as it is when no policy was asked.
		return Spec{}, FactoryWorkflowName, FactoryCall{Factory: m.Factory, Tool: SpawnToolName, Arguments: call.Arguments, Checked: true, Task: task, Depth: depth + 1, MaxOutputBytes: spec.maxOutput()}, ""
	}
	child = *m.Agent
	if child.MaxDepth == 0 {
		child.MaxDepth = spec.maxDepth()
	}
	child.MaxOutputBytes = min(child.maxOutput(), spec.maxOutput())
	return child, AgentWorkflowName, RunInput{Spec: child, Text: task, Depth: depth + 1}, ""
}

func findSub(spec Spec, name string) (SubAgent, bool) {
	for _, sa := range spec.SubAgents {
		if sa.Name == name {
			return sa, true
		}
	}
	return SubAgent{}, false
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// retryCheckChange names the workflow version from which a child's
// corrective retry is checked by the policy as a hand-off of its own.
const retryCheckChange = "deputy.retry-policy"

// retryCheck is the check of a child's corrective retry, handing it task:
// made by its caller (one level up, at its path), of the call that
// started the child, with that call's arguments (args).
func retryCheck(trace *Trace, path string, depth int, task string, args json.RawMessage) Delegation {
	name := trace.Name
	if name == forkName {
		name = SpawnToolName
	}
	caller := path
	if i := strings.LastIndex(path, "/"); i >= 0 {
		caller = path[:i]
	}
	return Delegation{Call: provider.ToolCall{ID: trace.ParentToolCall, Name: name, Arguments: args}, Depth: depth - 1, Path: caller, Retry: true, Task: task,
		Trace: &Trace{Tree: trace.Tree, Subagent: trace.Parent}}
}

// checkRetry asks the policy about a corrective retry, asking the person
// each round of questions a rule asks, until it decides.
func checkRetry(ctx workflow.Context, spec Spec, q *questions, in Delegation) (Delegated, error) {
	var v Delegated
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, spec), CheckActivityName, in).Get(ctx, &v); err != nil {
		return v, err
	}
	for round := 0; len(v.Asked) > 0; round++ {
		if q == nil || round >= maxAskRounds {
			return Delegated{Refused: fmt.Sprintf("policy: a rule asks a person before the corrective retry of %s, %d times or where no one can answer", in.Call.Name, round)}, nil
		}
		answers, err := q.ask(ctx, v.Asked)
		if err != nil {
			return v, err
		}
		in.Asked, in.Answers = v.Asked, answers
		v = Delegated{}
		if err := workflow.ExecuteLocalActivity(checkContext(ctx, spec), CheckActivityName, in).Get(ctx, &v); err != nil {
			return v, err
		}
	}
	return v, nil
}
