package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// loop is the ReAct loop: it runs the calls the input left open, then
// makes model calls (step) until one answers with text, the steps run out or
// the run fails. Budgets and the wrap-up turn are in budget.go, what calls
// cost in ledger.go, compaction in compact.go, the journal in journal.go,
// a background child's mailbox in inbox.go, one model call in model.go.
func (s *runState) loop() (string, error) {
	if s.r.costLimit > 0 && !run.Priced(s.ctx) {
		return "", fmt.Errorf("%w: WithCostLimit without prices: give this agent, or the one that starts it, WithPrices", ErrInvalidOption)
	}
	failures := 0
	if len(s.open) > 0 {
		if err := s.runOpen(); err != nil {
			return "", err
		}
	}
	for step := 1; ; step++ {
		if step > s.r.maxSteps {
			return "", fmt.Errorf("%w: no answer after %d model calls: raise WithMaxSteps or give a narrower task", ErrMaxSteps, s.r.maxSteps)
		}
		if err := s.ctx.Err(); err != nil {
			return "", err
		}
		s.steps = step
		if err := s.deliver(step); err != nil {
			return "", err
		}
		var stepName, firstResult string
		if s.events {
			stepName, firstResult = s.stepNames(step)
			s.em.Emit(event.Event{Type: event.StepStarted, StepName: stepName})
		}
		answer, done, err := s.step(step, stepName, firstResult, &failures)
		if s.events {
			s.em.Emit(event.Event{Type: event.StepFinished, StepName: stepName})
		}
		s.reached(step)
		if err != nil || done {
			return answer, err
		}
	}
}

// step makes one model call and runs the tools it asks for. It reports
// done with the answer when the model answered with text. With events on,
// stepName names the step (loop emits its STEP_* events), and is the
// message id of the reply; firstResult is the message id of the first
// tool result.
func (s *runState) step(step int, stepName, firstResult string, failures *int) (answer string, done bool, err error) {
	r := s.r
	msgID := stepName
	tools := s.tools()
	fixed := int64(len(s.system())+len(s.schema)) + toolsBytes(tools)
	if err := s.fit(step, fixed, false); err != nil {
		return "", false, err
	}
	var stepKey string
	var resp provider.Response
	replayed := false
	if s.journal != nil {
		stepKey = s.journal.stepKey(step)
		if resp, replayed = s.journal.answer(stepKey); replayed {
			s.respendAnswer(resp)
			// The run that recorded the answer may have had the provider
			// refuse the request as too long first, and compacted: so
			// does this one, with the summary it recorded.
			if s.journal.has(s.summaryKey(step)) {
				if err := s.fit(step, fixed, true); err != nil {
					return "", false, err
				}
			}
		}
	}
	// The call's tokens and dollars are reserved before it is made (plan);
	// a call after which another would not fit is the run's last: the
	// model gets no tools and is asked to answer with what it has. A
	// replayed answer was the wrap-up's if its reply was.
	var pl callPlan
	var cut unpaid // the reply's last calls the run cannot pay to read the results of
	// A turn plan took for a call that was not made ends with the step.
	defer s.endOverdraft(provider.Request{}, provider.Response{})
	if replayed {
		pl.wrapUp, cut = s.journal.wrappedUp(stepKey)
	} else if pl, err = s.plan(fixed, tools); err != nil {
		return "", false, err
	}
	wrapUp := pl.wrapUp
	if wrapUp {
		tools = nil
	}
	s.answered = step
	var paid provider.ModelUsage // what the answer cost, as the ledger counted it
	var over overdrawn           // what its calls passed the run's limits by
	recorded := false
	defer func() {
		if !recorded && s.journal != nil {
			// Paid for, and not recorded with an answer: what the calls
			// passed the run's limits by is kept all the same.
			s.journal.recordOver(s.ctx, stepKey, over)
		}
	}()
	for retried := false; !replayed; retried = true {
		var began time.Time
		if r.logger != nil {
			began = time.Now()
		}
		req := s.request(tools, pl)
		if s.policy != nil {
			if req, err = s.guardModel(req); err != nil {
				return "", false, err
			}
		}
		resp, err = s.complete(req, msgID)
		s.usage = s.usage.Add(resp.Usage)
		paid = s.account(req, resp)
		o := s.endOverdraft(req, resp)
		over.Tokens, over.Dollars = over.Tokens+o.Tokens, over.Dollars+o.Dollars
		if r.logger != nil {
			s.logModelCall(step, resp, time.Since(began), err)
		}
		if err == nil {
			break
		}
		// A request the provider finds too long for the window, though
		// the estimate let it through, is compacted and sent once more.
		var pe *provider.Error
		if retried || r.compaction == nil || s.nothingToCompact || !errors.As(err, &pe) || pe.Kind != provider.KindContextWindow {
			return "", false, err
		}
		if ferr := s.fit(step, fixed, true); ferr != nil {
			return "", false, ferr
		}
		if s.nothingToCompact {
			return "", false, err
		}
		if pl, err = s.plan(fixed, tools); err != nil { // the summary was paid for
			return "", false, err
		}
		wrapUp = wrapUp || pl.wrapUp
		if wrapUp {
			tools = nil
		}
	}
	if !replayed && pl.bounded && resp.StopReason == provider.StopMaxTokens {
		// Cut at the output bound its budget set: the run has nothing
		// left for another call, and its words are what it has.
		wrapUp = true
	}
	msg := resp.Message
	msg.Role = provider.RoleAssistant
	empty := msg.Content == "" && len(msg.ToolCalls) == 0
	if replayed {
		// Its calls keep the ids they were recorded with, which name
		// their results.
		msg.ToolCalls = withIDs(msg.ToolCalls, nil, nil)
	} else {
		msg.ToolCalls = withIDs(msg.ToolCalls, &s.callIDs, s.msgs)
	}
	s.callIDs.add(msg.ToolCalls)
	if !replayed && !wrapUp && len(msg.ToolCalls) > 0 {
		// Calls whose results the run cannot pay to read are not run;
		// the decision is journaled with the answer, so that a run of
		// the turn again makes the same one.
		runs, unread := s.readable(s.nextEstimate(fixed, msg, resp.Usage), msg.ToolCalls)
		cut = unpaid{calls: len(msg.ToolCalls) - runs, unread: unread}
	}
	if s.journal != nil && !replayed && !empty {
		// Recorded even when the run was cancelled as the reply came: it
		// is paid for, and the turn run again replays it instead of
		// asking the model again.
		recorded = true
		if err := s.journal.recordAnswer(context.WithoutCancel(s.ctx), stepKey, resp, msg, wrapUp, cut, paid, over); err != nil && s.ctx.Err() == nil {
			return "", false, err
		}
	}
	if err := s.ctx.Err(); err != nil {
		// A reply that arrives after cancellation is not acted on.
		return "", false, err
	}
	if empty && wrapUp && !replayed {
		// Asked for its last reply at its limit, or cut at the bound
		// its budget set before it wrote a word: the run ends at its
		// limit, with what was said before, not as a broken reply.
		return s.wrappedUp(msg, resp.Usage)
	}
	if empty {
		return "", false, fmt.Errorf("%w (stop reason %q): check the model and its max tokens", ErrEmptyReply, resp.StopReason)
	}
	s.lastOut = resp.Usage.OutputTokens
	if resp.Model != "" {
		s.lastModel = resp.Model
	}
	if wrapUp {
		answer, done, err := s.wrappedUp(msg, resp.Usage)
		if err == nil && done && s.r.guards.Has(policy.Output) {
			// A wrap-up's answer is the run's last: it cannot be corrected.
			last := ""
			if !s.corrected {
				last = "it was the run's last reply, asked to wrap up at its limit"
			}
			s.corrected = true
			if done, err = s.guardAnswer(answer, last); err != nil {
				answer, s.msgs = "", s.msgs[:len(s.msgs)-1]
			}
		}
		return answer, done, err
	}
	// The calls the run cannot pay to read the results of are not run:
	// the model reads that for each (refused), or, when the run cannot
	// pay for even that, not the last calls at all; its next call is its
	// wrap-up.
	var refused []provider.ToolCall
	if cut.calls = min(cut.calls, len(msg.ToolCalls)); cut.calls > 0 {
		all, n := msg.ToolCalls, len(msg.ToolCalls)-cut.calls
		read := len(all) - min(cut.unread, cut.calls)
		msg.ToolCalls, refused = all[:n:n], all[n:len(all):len(all)]
		if s.events && !replayed {
			for i, call := range refused {
				s.em.Emit(event.Event{Type: event.ToolCallResult, MessageID: stepName + "/result-" + strconv.Itoa(n+i+1),
					ToolCallID: call.ID, Content: unpaidResult, Role: "tool"})
			}
		}
		refused = refused[:read-n]
		s.unpaid = true
	}
	if msg.Content != "" || len(msg.ToolCalls)+len(refused) > 0 {
		s.add(provider.Message{Role: msg.Role, Content: msg.Content, ToolCalls: append(msg.ToolCalls, refused...)})
	}
	s.noteReply(resp.Usage)
	s.reached(step) // a background child's progress counts the answer before its tools run
	if s.unpaid && len(msg.ToolCalls) == 0 {
		// None left to run: the next step wraps up.
		s.addUnpaid(refused)
		s.setUsed()
		return "", false, nil
	}
	if len(msg.ToolCalls) > 0 {
		// Over the limit with tools still to run: the run is cut short.
		if err := s.checkLimit(); err != nil {
			return "", false, err
		}
	} else {
		s.setUsed()
	}
	if len(msg.ToolCalls) == 0 {
		if r.output != nil {
			done, err := s.checkAnswer(msg.Content)
			if !done {
				return "", false, nil // the next step may be a wrap-up turn
			}
			if err != nil {
				return msg.Content, true, err
			}
		}
		if r.guards.Has(policy.Output) {
			done, err := s.guardAnswer(msg.Content, "")
			if err != nil {
				// The answer goes no further: not to the caller, not in
				// the run's messages.
				s.msgs = s.msgs[:len(s.msgs)-1]
				return "", true, err
			}
			if !done {
				return "", false, nil
			}
		}
		return msg.Content, true, nil
	}

	var began time.Time
	if r.logger != nil {
		began = time.Now()
	}
	// The forks the calls start send the conversation as this step sent
	// it (replayed or not), without the reply that started them.
	prefix := s.request(tools, callPlan{})
	prefix.Messages = prefix.Messages[:len(prefix.Messages)-1]
	s.prefix = &prefix
	results, fromJournal, err := s.runCalls(step, stepKey, msg.ToolCalls)
	if r.logger != nil {
		s.logToolCalls(step, msg.ToolCalls, results, time.Since(began))
	}
	var failed error
	for i, res := range results {
		s.child = s.child.Add(res.Usage)
		call := msg.ToolCalls[i]
		s.add(provider.ToolMessage(call.ID, res.Content, res.IsError))
		if res.IsError {
			failed = res.Err
			if failed == nil {
				failed = errors.New(res.Content)
			}
		}
		// The client has the result of a call answered from the journal
		// (the run that made it showed it), and a call that waits for an
		// answer has none yet.
		if s.events && (fromJournal == nil || !fromJournal[i]) && (res.Err == nil || !isInterrupted(res.Err)) {
			resultID := firstResult
			if i > 0 {
				resultID = stepName + "/result-" + strconv.Itoa(i+1)
			}
			s.em.Emit(event.Event{Type: event.ToolCallResult, MessageID: resultID, ToolCallID: call.ID, Content: res.Content, Role: "tool"})
		}
	}
	s.addUnpaid(refused)
	if err != nil {
		return "", false, err
	}
	if failed != nil {
		*failures++
		if *failures > r.toolRetries {
			return "", false, fmt.Errorf("%w: %d steps in a row had a failed tool call, the last: %w", ErrToolRetries, *failures, failed)
		}
	} else {
		*failures = 0
	}
	s.setUsed()
	return "", false, nil // past the limit, the next step is a wrap-up turn
}

// addUnpaid adds, to the conversation, the result of each call of calls
// its run could not pay to read the result of (readable).
func (s *runState) addUnpaid(calls []provider.ToolCall) {
	for _, c := range calls {
		s.add(provider.ToolMessage(c.ID, unpaidResult, false))
	}
}

// runOpen runs the calls of the input's open turn, those left without a
// result, and adds their results to the conversation, as a step whose model
// call was made before the run.
func (s *runState) runOpen() error {
	var stepName, firstResult string
	if s.events {
		stepName, firstResult = s.stepNames(0)
		s.em.Emit(event.Event{Type: event.StepStarted, StepName: stepName})
		defer s.em.Emit(event.Event{Type: event.StepFinished, StepName: stepName})
	}
	stepKey := ""
	if s.journal != nil {
		stepKey = s.journal.stepKey(0)
	}
	results, fromJournal, err := s.runCalls(0, stepKey, s.open)
	for i, res := range results {
		s.child = s.child.Add(res.Usage)
		call := s.open[i]
		s.add(provider.ToolMessage(call.ID, res.Content, res.IsError))
		if s.events && (fromJournal == nil || !fromJournal[i]) && (res.Err == nil || !isInterrupted(res.Err)) {
			resultID := firstResult
			if i > 0 {
				resultID = stepName + "/result-" + strconv.Itoa(i+1)
			}
			s.em.Emit(event.Event{Type: event.ToolCallResult, MessageID: resultID, ToolCallID: call.ID, Content: res.Content, Role: "tool"})
		}
	}
	s.setUsed()
	return err
}

// runCalls runs the step's tool calls, and returns their results by index
// and, under a journal, which of them were answered from it (nil: none).
// Under a journal each call that finishes is recorded, and a call recorded
// before is not run again.
//
// Under a token limit, an equal share of what the run has left is set aside
// for each call's sub-agent before the calls start (run.Step.Share).
//
// Each call knows its place in the run's tree (run.AtStep): a run it
// starts is placed under the step and the call's index.
func (s *runState) runCalls(step int, stepKey string, calls []provider.ToolCall) (results []tool.Result, replayed []bool, err error) {
	at := run.Step{N: step, Calls: calls, Prefix: s.prefix}
	if s.costLimited() {
		at.Asked = s.asked()
	}
	s.prefix = nil // each step's calls get the step's own
	if s.limit > 0 || s.costLimited() {
		// The run keeps back what its next call reads before the results
		// and one share for its reply: its wrap-up is paid for before the
		// calls' sub-agents get their shares.
		at.Share = true
		at.Keep, at.KeepCost, at.Price = s.keep(int64(len(s.system())+len(s.schema)) + toolsBytes(s.tools()))
	}
	toolCtx, shares := run.AtStep(s.toolCtx, at)
	defer shares.Release()
	if s.journal == nil {
		results, err = s.r.tools.Execute(toolCtx, calls)
		return results, nil, err
	}
	results, replayed = s.journal.replayed(s.ctx, stepKey, calls)
	s.called = s.steps
	rec := &callRecorder{j: s.journal, step: stepKey, tools: s.r.tools, inner: s.traceHook, index: make(map[string]int, len(calls)),
		started: make(map[int]bool, len(calls)), extra: map[int]provider.Usage{}}
	s.callsRun = rec.started
	todo := make([]provider.ToolCall, 0, len(calls))
	for i, c := range calls {
		if replayed[i] {
			rec.started[i] = true
			if t, ok := s.r.tools.Lookup(c.Name); ok {
				if r, ok := t.(tool.Replayer); ok {
					r.Replayed(journal.With(toolCtx, s.journal.scope.Child(callKey(stepKey, i))), c)
				}
			}
		} else {
			rec.index[c.ID] = i
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return results, replayed, nil
	}
	got, err := s.r.tools.Execute(tool.WithCallHook(toolCtx, rec.hook), todo)
	for k, c := range todo {
		i := rec.index[c.ID]
		results[i] = got[k]
		results[i].Usage = results[i].Usage.Add(rec.extra[i])
	}
	// The writes are waited for even when the run was cancelled: a call
	// that ran must be found recorded by the run that recovers this one.
	if werr := rec.wait(context.WithoutCancel(s.ctx)); werr != nil && (err == nil || isInterrupted(err)) {
		err = werr
	}
	return results, replayed, err
}

// isInterrupted reports whether err is a run's wait for answers.
func isInterrupted(err error) bool {
	var in *tool.Interrupted
	return errors.As(err, &in)
}

// stepNames returns the names of a step's events: its step name, which is
// also the message id of the reply's text (AG-UI keeps the two apart), and
// the message id of its first tool result; a later result's id is the step
// name and "/result-<n>". Run ids are unique, so step names are unique among
// all open steps, whoever owns them (older AG-UI clients key steps by name
// alone).
func (s *runState) stepNames(step int) (stepName, firstResult string) {
	stepName = s.runID + "/step-" + strconv.Itoa(step)
	return stepName, stepName + "/result-1"
}
