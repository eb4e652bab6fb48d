package temporal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/tool"
)

// Agent is an agent.Agent whose runs are AgentWorkflow runs on Temporal:
// each Run starts one on TaskQueue through Client and waits for it, so
// that what serves or calls an agent in process — the AG-UI handler, a
// sub-agent tool, a test — runs a tree on workers instead. A cancelled
// context cancels the workflow, and with it every child.
//
// Run emits RUN_STARTED and RUN_FINISHED (or RUN_ERROR) to the sink of its
// context; with Events, the Hub that the workers' Runtime.Events is in
// this process, it also hands on every event of its tree, as an
// in-process run emits them. An AG-UI client then watches a tree on
// Temporal as it watches any other.
type Agent struct {
	Client    client.Client
	TaskQueue string
	Spec      Spec
	// Events is the Hub the workers publish to (nil: no events but the
	// run's own start and end).
	Events *Hub
}

// Run runs the Spec on in as a workflow and returns its outcome. A failed
// run reports the usage it spent before it failed.
//
// A question a tool of the tree asks (see Pending) ends Run with a
// *tool.Interrupted, its questions attributed to the child workflows that
// ask them, and leaves the workflow waiting; run again with the answers
// (tool.Resume) under the same journal (agent.WithJournal), as the AG-UI
// handler does, Run finds the same workflow, hands it the answers and goes
// on waiting for it. Without a journal, Run again starts a new workflow.
func (a *Agent) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	if a.Client == nil || a.TaskQueue == "" {
		return agent.Output{}, errors.New("temporal: Agent needs a Client and a TaskQueue")
	}
	em := event.From(ctx)
	// The workflow is started once per turn: a run resumed under the
	// turn's journal finds the one the first run started.
	raw, err := tool.Once(ctx, "temporal.start", func(ctx context.Context) (json.RawMessage, error) {
		id := newWorkflowID()
		_, err := a.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: a.TaskQueue}, AgentWorkflowName,
			RunInput{Spec: a.Spec, Text: in.Text, Messages: in.Messages})
		if err != nil {
			return nil, fmt.Errorf("temporal: starting the run: %w", err)
		}
		return json.Marshal(id)
	})
	var id string
	if err == nil {
		err = json.Unmarshal(raw, &id)
	}
	if err != nil {
		em.Emit(event.Event{Type: event.RunError, Message: err.Error()})
		return agent.Output{}, err
	}
	if a.Events != nil && em.Enabled() {
		defer a.Events.Subscribe(ctx, id)()
	}
	em.Emit(event.Event{Type: event.RunStarted, RunID: id})
	run := a.Client.GetWorkflow(ctx, id, "")
	for round := 0; ; round++ {
		out, pending, err := a.wait(ctx, run, id)
		if err == nil && len(pending) > 0 {
			if err = a.answer(ctx, id, round, pending); err == nil {
				continue
			}
			var asked *tool.Interrupted
			if errors.As(err, &asked) {
				return agent.Output{RunID: id}, err // the workflow waits on
			}
		}
		return a.finish(ctx, em, id, out, err)
	}
}

// wait waits for the workflow to end, or to wait on questions.
func (a *Agent) wait(ctx context.Context, run client.WorkflowRun, id string) (RunOutput, []tool.Interrupt, error) {
	var out RunOutput
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run.Get(gctx, &out) }()
	tick := time.NewTicker(pollQuestions)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return out, nil, err
		case <-tick.C:
			pending, err := Pending(ctx, a.Client, id)
			if err != nil || len(pending) == 0 {
				continue // the run may have ended; done says
			}
			cancel()
			if err := <-done; err == nil {
				return out, nil, nil // it ended as it was asked
			}
			return out, pending, nil
		}
	}
}

// pollQuestions is how often Run looks for questions while it waits.
const pollQuestions = 250 * time.Millisecond

// answer asks the caller's person the questions the tree waits on, and
// hands the answers to the tree. Each round's questions, and its answers
// sent, are recorded in the turn's journal (tool.Once), so that a resumed
// run asks the same questions in the same order and sends nothing twice.
func (a *Agent) answer(ctx context.Context, id string, round int, pending []tool.Interrupt) error {
	raw, err := tool.Once(ctx, "temporal.questions", func(context.Context) (json.RawMessage, error) { return json.Marshal(pending) })
	if err != nil {
		return err
	}
	var qs []tool.Interrupt
	if err := json.Unmarshal(raw, &qs); err != nil {
		return fmt.Errorf("temporal: a journaled round of questions is damaged: %w", err)
	}
	var answers []tool.Answer
	var waiting []tool.Interrupt
	for _, q := range qs {
		call := tool.Call{ID: "temporal_" + q.ID, Name: cmpOr(a.Spec.Name, "temporal"), Arguments: json.RawMessage(`{}`)}
		payload, err := tool.Ask(ctx, call, tool.Question{Reason: q.Reason, Message: q.Message, ResponseSchema: q.ResponseSchema})
		var asked *tool.Interrupted
		switch {
		case errors.As(err, &asked):
			for _, it := range asked.Interrupts {
				it.SubagentRunID = q.SubagentRunID // where the tree asks it
				waiting = append(waiting, it)
			}
		case errors.Is(err, tool.ErrCancelled):
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Cancelled})
		case err != nil:
			return err
		default:
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: payload})
		}
	}
	if len(waiting) > 0 {
		return &tool.Interrupted{Interrupts: waiting}
	}
	_, err = tool.Once(ctx, "temporal.answers", func(ctx context.Context) (json.RawMessage, error) {
		return nil, Answer(ctx, a.Client, id, answers...)
	})
	return err
}

// finish ends a run: its outcome, and RUN_FINISHED or RUN_ERROR.
func (a *Agent) finish(ctx context.Context, em event.Emitter, id string, out RunOutput, err error) (agent.Output, error) {
	if ctx.Err() != nil {
		// The caller is gone: so is the run, and every child under it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = a.Client.CancelWorkflow(cctx, id, "")
		cancel()
	}
	o := agent.Output{RunID: id, Answer: out.Answer, Messages: out.Messages, Usage: out.Usage, ChildUsage: out.ChildUsage}
	if len(out.Value) > 0 {
		o.Value = json.RawMessage(out.Value)
	}
	if err != nil {
		o.Usage = UsageOf(err)
		em.Emit(event.Event{Type: event.RunError, Message: err.Error()})
		return o, fmt.Errorf("temporal: run %s: %w", id, err)
	}
	em.Emit(event.Event{Type: event.RunFinished, RunID: id, Result: event.JSONString(out.Answer),
		Usage: tokenUsage(a.Spec.Provider, a.Spec.Model, o.TotalUsage())})
	return o, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func newWorkflowID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "deputy-" + hex.EncodeToString(b[:])
}
