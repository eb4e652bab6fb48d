package temporal

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/tool"
)

// Asking a person on Temporal: a tool that asks (tool.Ask,
// tool.RequireApproval) ends its activity with the question instead of a
// result, and the workflow that called it waits, durably — across worker
// restarts and for as long as it takes — for the answer, then runs the
// call again with it. The top-level workflow of the tree keeps every
// question the tree waits on, a child's included (the child tells it), and
// takes the answers (AnswerUpdate), handing a child's on to it: one address
// for the whole tree. An answer is taken once: a second answer to the same
// question is refused, as in process.

// Names of the query and update a tree's top-level workflow answers
// questions through (Pending and Answer use them).
const (
	// InterruptsQuery returns the questions the tree waits on
	// ([]tool.Interrupt; SubagentRunID names the child workflow that asks).
	InterruptsQuery = "interrupts"
	// AnswerUpdate takes answers ([]tool.Answer) to some of them.
	AnswerUpdate = "answer"

	askedSignal    = "deputy.asked"     // a child tells the top-level workflow what it asks
	answerSignal   = "deputy.answer"    // the top-level workflow hands a child its answer
	askedViaSignal = "deputy.asked_via" // a thread's job tells it what a descendant asks (relayedAsk)

	// maxAskRounds bounds the rounds of questions one tool call may ask.
	maxAskRounds = 16
)

// questions is one workflow's side of asking.
type questions struct {
	top  bool
	tree string // the top-level workflow's ID
	self string // this workflow's sub-agent run id ("" at the top)

	pending []tool.Interrupt     // at the top, the tree's; in a child, its own
	where   map[string]string    // at the top: question id → the child that asks ("" itself)
	waiting map[string]waitingOn // this workflow's own questions, by their id in the tree
	loop    bool                 // a child's answer loop is running
	// kept, for a job of a thread: a question it asks while no turn of
	// its thread runs waits for the next turn, which hears it when it
	// asks the job where it stands (open: the questions not answered).
	kept bool
	open []tool.Interrupt
	// via, for a run under a thread's job (Trace.Job): the job's workflow,
	// which its questions go through ("": straight to the tree's top).
	// relayed, in that job: each question of a descendant it holds in
	// open, by id, with the workflow that asks it (nil: it relays none,
	// recorded before relayChange).
	via     string
	relayed map[string]string
	// withdrawn, at the top: the questions of jobs that ended while they
	// waited on them (withdrawChange), by id; an answer to one is taken
	// without effect, once.
	withdrawn map[string]bool
	// telling counts the questions being told to the tree's top, whose
	// signal is not delivered yet (tellingMemo).
	telling int
}

// tellingChange names the workflow version from which a child says in
// its memo (tellingMemo) that it is telling the tree's top what it asks,
// until the signal is delivered, so that Run reads it as working (idle):
// between a child's signal sent and its delivery, neither the child nor
// the top had anything pending, and a round of questions went out
// without the child's. Asked where a child tells its questions.
const tellingChange = "deputy.telling-memo"

// tellingMemo is the memo key of a child that tells the tree's top what
// it asks: true until the top has its questions.
const tellingMemo = "deputy.telling"

// tell counts a telling starting (1) or ending (-1), and upserts the memo
// when the child starts or stops telling.
func (q *questions) tell(ctx workflow.Context, delta int) {
	q.telling += delta
	if q.telling == 1 && delta > 0 || q.telling == 0 {
		_ = workflow.UpsertMemo(ctx, map[string]any{tellingMemo: q.telling > 0})
	}
}

// askCancelChange names the workflow version from which a run cancelled
// while a call of its waits for a person's answer stops waiting and ends
// cancelled, the call not run, as a job cancelled while it asks does in
// process; before it the run waited on for the answer, so that a job
// cancelled while it asked never ended, nor did the cancel. Asked when
// the cancel comes while the run waits.
const askCancelChange = "deputy.ask-cancelled"

// withdrawChange names the workflow version from which the top of a
// tree withdraws the questions of a job that ended while it, or a child
// of its own, waited on them (cancelled, or past its time): the tree no
// longer lists them (InterruptsQuery), so a run is not suspended on
// them, and an answer to one is taken without effect instead of failing
// as it is handed to a workflow that has ended. Asked where a job ends
// with questions pending.
const withdrawChange = "deputy.withdraw-ended-asks"

// withdraw withdraws, at the top, the questions the job whose workflow
// is wfID, or a child of its own, waits on, now that it has ended.
func (q *questions) withdraw(ctx workflow.Context, wfID string) {
	if q == nil || !q.top {
		return
	}
	of := func(it tool.Interrupt) bool { return askedUnder(it, wfID) }
	if !slices.ContainsFunc(q.pending, of) || workflow.GetVersion(ctx, withdrawChange, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if q.withdrawn == nil {
		q.withdrawn = map[string]bool{}
	}
	for _, it := range q.pending {
		if of(it) {
			q.withdrawn[it.ID] = true
			delete(q.where, it.ID)
		}
	}
	q.pending = slices.DeleteFunc(q.pending, of)
}

// askedUnder reports whether it, a question of the tree, was asked by the
// job whose workflow is wfID, or by a descendant of its own (whose
// workflow ids begin with the job's).
func askedUnder(it tool.Interrupt, wfID string) bool {
	return it.SubagentRunID == wfID || strings.HasPrefix(it.SubagentRunID, wfID+"/")
}

// relayChange names the workflow version from which a thread's job
// relays the questions of its own descendants (Trace.Job): they ask
// through it, and it asks them again of the next turn of its thread that
// asks where it stands, as it does its own, instead of their calls
// failing while no turn runs to hear them. Asked at the job's start.
const relayChange = "deputy.job-relays-questions"

// askedViaChange names the workflow version from which the top of a tree
// hears the questions a thread's job relays (askedViaSignal); asked at the
// first one. A run recorded by code before relayChange ignored the signal
// (a job of the new code may send it to a turn run by the old code during
// a rolling deploy) and went on without the question: replayed, it
// ignores it still, and the job asks it again of the thread's next turn.
const askedViaChange = "deputy.hears-relayed-asks"

// relayedAsk is what a thread's job tells the tree's top a descendant of
// its own asks: the answers go to Via, which hands them on.
type relayedAsk struct {
	Via   string           `json:"via"`
	Asked []tool.Interrupt `json:"asked"`
}

// waitingOn is a question a call of this workflow waits on: the answer
// goes to set, under the id the call asked it with.
type waitingOn struct {
	asked string
	set   workflow.Settable
}

// newQuestions sets up asking for the run: at the top, the query and
// update the tree is answered through, and the loop that hears its
// children's questions. Neither records anything in the history until a
// question is asked, so runs that ask none replay as before.
func newQuestions(ctx workflow.Context, trace *Trace) (*questions, error) {
	q := &questions{top: trace.Subagent == "", tree: trace.Tree, self: trace.Subagent, where: map[string]string{}, waiting: map[string]waitingOn{}}
	if !q.top {
		if trace.Job != trace.Subagent {
			q.via = trace.Job
		}
		return q, nil
	}
	if err := workflow.SetQueryHandler(ctx, InterruptsQuery, func() ([]tool.Interrupt, error) {
		return slices.Clone(q.pending), nil
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, AnswerUpdate, q.answer, workflow.UpdateHandlerOptions{Validator: q.check}); err != nil {
		return nil, err
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, askedSignal)
		for {
			var asked []tool.Interrupt
			if !ch.Receive(ctx, &asked) {
				return
			}
			for _, it := range asked {
				q.hear(it, it.SubagentRunID)
			}
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, askedViaSignal)
		for {
			var r relayedAsk
			if !ch.Receive(ctx, &r) {
				return
			}
			if workflow.GetVersion(ctx, askedViaChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				// Recorded by code that ignored it: the job holds the
				// question and asks it again of the thread's next turn.
				continue
			}
			for _, it := range r.Asked {
				q.hear(it, r.Via)
			}
		}
	})
	return q, nil
}

// hear makes a question the tree's, at its top, its answer to go to who.
func (q *questions) hear(it tool.Interrupt, who string) {
	if _, known := q.where[it.ID]; known {
		return // asked again by a job of the thread that heard no answer
	}
	q.pending = append(q.pending, it)
	q.where[it.ID] = who
}

// relay makes a thread's job the way its descendants' questions go
// (relayChange): it holds each until it is answered, hands it to the
// tree's top, and its answer on to the descendant that asks.
func (q *questions) relay(ctx workflow.Context) {
	q.relayed = map[string]string{}
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, askedSignal)
		for {
			var asked []tool.Interrupt
			if !ch.Receive(ctx, &asked) {
				return
			}
			q.listen(ctx)
			for _, it := range asked {
				if _, known := q.relayed[it.ID]; !known {
					q.relayed[it.ID] = it.SubagentRunID
					q.open = append(q.open, it)
				}
			}
			// No turn of the thread runs: the next one hears it (answerHellos).
			_ = workflow.SignalExternalWorkflow(ctx, q.tree, "", askedViaSignal, relayedAsk{Via: q.self, Asked: asked}).Get(ctx, nil)
		}
	})
}

// listen starts, in a child, the loop that takes the answers its top
// hands it.
func (q *questions) listen(ctx workflow.Context) {
	if q.loop {
		return
	}
	q.loop = true
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, answerSignal)
		for {
			var a tool.Answer
			if !ch.Receive(ctx, &a) {
				return
			}
			q.settle(ctx, a)
		}
	})
}

// answered takes, in a thread's job that relays (relayChange), the
// answers that came and no loop took yet: a turn that asks where the job
// stands must not hear again a question answered before it asked.
func (q *questions) answered(ctx workflow.Context) {
	if q.relayed == nil {
		return
	}
	ch := workflow.GetSignalChannel(ctx, answerSignal)
	var a tool.Answer
	for ch.ReceiveAsync(&a) {
		q.settle(ctx, a)
	}
}

// reask asks the tree's top again, for a thread's job, the questions it
// holds that no one answered: its own, and its descendants' it relays.
func (q *questions) reask(ctx workflow.Context) {
	var own, theirs []tool.Interrupt
	for _, it := range q.open {
		if _, ok := q.relayed[it.ID]; ok {
			theirs = append(theirs, it)
		} else {
			own = append(own, it)
		}
	}
	if len(own) > 0 {
		_ = workflow.SignalExternalWorkflow(ctx, q.tree, "", askedSignal, own).Get(ctx, nil)
	}
	if len(theirs) > 0 {
		_ = workflow.SignalExternalWorkflow(ctx, q.tree, "", askedViaSignal, relayedAsk{Via: q.self, Asked: theirs}).Get(ctx, nil)
	}
}

// check refuses answers the tree cannot take, as tool.Resume does: an
// unknown (or already answered) question, two answers to one, a bad
// status, a payload that fails the question's schema, an expired question.
func (q *questions) check(answers []tool.Answer) error {
	if len(answers) == 0 {
		return errors.New("temporal: no answers: give one for each question to answer (see InterruptsQuery)")
	}
	// An answer to a withdrawn question is taken without effect.
	answers = slices.DeleteFunc(slices.Clone(answers), func(a tool.Answer) bool { return q.withdrawn[a.InterruptID] })
	if len(answers) == 0 {
		return nil
	}
	_, err := tool.Resume(context.Background(), &tool.Interrupted{Interrupts: q.pending}, answers...)
	return err
}

// answer takes checked answers: each question is answered once, where it
// was asked.
func (q *questions) answer(ctx workflow.Context, answers []tool.Answer) error {
	for _, a := range answers {
		if q.withdrawn[a.InterruptID] {
			delete(q.withdrawn, a.InterruptID) // its job has ended: nothing to hand it to
			continue
		}
		who, ok := q.where[a.InterruptID]
		if !ok {
			return fmt.Errorf("%w %q", tool.ErrUnknownInterrupt, a.InterruptID)
		}
		delete(q.where, a.InterruptID)
		q.pending = slices.DeleteFunc(q.pending, func(it tool.Interrupt) bool { return it.ID == a.InterruptID })
		if who == "" {
			q.settle(ctx, a)
			continue
		}
		if err := workflow.SignalExternalWorkflow(ctx, who, "", answerSignal, a).Get(ctx, nil); err != nil {
			return fmt.Errorf("temporal: handing the answer to %s: %w", who, err)
		}
	}
	return nil
}

// settle takes the answer to a question of this workflow's, or, in a
// thread's job, hands one to a descendant's on to it.
func (q *questions) settle(ctx workflow.Context, a tool.Answer) {
	if who, ok := q.relayed[a.InterruptID]; ok {
		delete(q.relayed, a.InterruptID)
		q.open = slices.DeleteFunc(q.open, func(it tool.Interrupt) bool { return it.ID == a.InterruptID })
		// One that ended asks nothing more.
		_ = workflow.SignalExternalWorkflow(ctx, who, "", answerSignal, a).Get(ctx, nil)
		return
	}
	w, ok := q.waiting[a.InterruptID]
	if !ok {
		return
	}
	delete(q.waiting, a.InterruptID)
	q.open = slices.DeleteFunc(q.open, func(it tool.Interrupt) bool { return it.ID == a.InterruptID })
	a.InterruptID = w.asked
	w.set.SetValue(a)
}

// ask makes the questions a call asked the tree's, waits for their
// answers and returns them, under the ids the call asked with.
func (q *questions) ask(ctx workflow.Context, asked []tool.Interrupt) ([]tool.Answer, error) {
	mine := make([]tool.Interrupt, len(asked))
	futures := make([]workflow.Future, len(asked))
	for i, it := range asked {
		// Two children may ask the same question of the same call: the
		// tree knows each by an id of its own.
		id := it.ID
		if q.self != "" {
			sum := sha256.Sum256([]byte(q.self + "\x1f" + it.ID))
			id = "int_" + hex.EncodeToString(sum[:12])
		}
		f, set := workflow.NewFuture(ctx)
		q.waiting[id] = waitingOn{asked: it.ID, set: set}
		futures[i] = f
		it.ID, it.SubagentRunID = id, q.self
		mine[i] = it
	}
	if q.top {
		for _, it := range mine {
			q.pending = append(q.pending, it)
			q.where[it.ID] = ""
		}
	} else {
		q.listen(ctx)
		if q.kept {
			q.open = append(q.open, mine...)
		}
		// Under a thread's job, through the job, which holds it for the
		// thread's next turn.
		to := cmp.Or(q.via, q.tree)
		telling := workflow.GetVersion(ctx, tellingChange, workflow.DefaultVersion, 1) >= 1
		if telling {
			q.tell(ctx, 1)
		}
		err := workflow.SignalExternalWorkflow(ctx, to, "", askedSignal, mine).Get(ctx, nil)
		if telling {
			q.tell(ctx, -1)
		}
		if err != nil && !q.kept {
			return nil, fmt.Errorf("temporal: telling %s what %s asks: %w", to, q.self, err)
		}
	}
	answers := make([]tool.Answer, len(asked))
	for i, f := range futures {
		if err := workflow.Await(ctx, f.IsReady); err != nil && !f.IsReady() &&
			workflow.GetVersion(ctx, askCancelChange, workflow.DefaultVersion, 1) >= 1 {
			return nil, sdktemporal.NewCanceledError() // cancelled: the call is not run
		}
		// Recorded before askCancelChange, a cancelled run waited on.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if err := f.Get(dctx, &answers[i]); err != nil {
			return nil, err
		}
	}
	return answers, nil
}

// Pending returns the questions the tree whose top-level workflow is tree
// waits on: each with its id, what it asks, its response schema and the
// child workflow that asks (SubagentRunID; "" for the top-level run).
//
// While the tree's workflow task keeps failing or timing out (as when a
// worker that held the workflow died and another replays its history),
// the server refuses to ask it; Pending asks again until it answers or
// ctx ends.
func Pending(ctx context.Context, c client.Client, tree string) ([]tool.Interrupt, error) {
	var v converter.EncodedValue
	err := whileNotReady(ctx, func() error {
		var err error
		v, err = c.QueryWorkflow(ctx, tree, "", InterruptsQuery)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("temporal: reading what %s waits on: %w", tree, err)
	}
	var out []tool.Interrupt
	if err := v.Get(&out); err != nil {
		return nil, fmt.Errorf("temporal: reading what %s waits on: %w", tree, err)
	}
	return out, nil
}

// Answer answers questions of the tree whose top-level workflow is tree.
// Answers that cannot be taken are refused, and none is taken: an unknown
// or already answered question (tool.ErrUnknownInterrupt), two answers to
// one (ErrAnsweredTwice), a payload that fails the question's schema
// (ErrBadAnswer), an expired question (ErrExpired). Each call that asked
// runs again with its answer, and the tree goes on.
//
// While the tree's workflow task keeps failing or timing out, the server
// refuses answers; Answer offers them again, as the same update (taken
// once however often it is offered), until they are taken or ctx ends.
func Answer(ctx context.Context, c client.Client, tree string, answers ...tool.Answer) error {
	id, err := updateID()
	if err != nil {
		return fmt.Errorf("temporal: answering %s: %w", tree, err)
	}
	var h client.WorkflowUpdateHandle
	err = whileNotReady(ctx, func() error {
		var err error
		h, err = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			UpdateID: id, WorkflowID: tree, UpdateName: AnswerUpdate, Args: []any{answers}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("temporal: answering %s: %w", tree, err)
	}
	if err := h.Get(ctx, nil); err != nil {
		return fmt.Errorf("temporal: answering %s: %w", tree, err)
	}
	return nil
}

// updateID names one Answer's update, the same each time it is offered.
func updateID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "answer-" + hex.EncodeToString(b[:]), nil
}

// whileNotReady calls f again, waiting longer each time (up to five
// seconds), for as long as the workflow cannot take it and ctx lasts:
// while the server says the workflow is not ready (its workflow task
// keeps failing or timing out, so it refuses queries and updates), or
// the workflow's worker did not answer in the time the server gives it,
// or the server handed it to a worker that was stopping: a worker that
// stops cancels the polls it has in flight, and the server, until it
// sees one cancelled, may give it a query or an update, which then fails
// as cancelled at once, whatever ctx (as right after a worker is
// replaced by another).
func whileNotReady(ctx context.Context, f func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := f()
		var notReady *serviceerror.WorkflowNotReady
		var late *serviceerror.DeadlineExceeded
		var dropped *serviceerror.Canceled
		if !errors.As(err, &notReady) && !((errors.As(err, &late) || errors.As(err, &dropped) || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() == nil) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the workflow could not take it until the context ended (%w): its workflow task keeps failing or timing out, or its workers are too busy to answer; look in their logs for why: %w", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}
