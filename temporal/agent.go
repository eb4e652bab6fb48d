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
func (a *Agent) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	if a.Client == nil || a.TaskQueue == "" {
		return agent.Output{}, errors.New("temporal: Agent needs a Client and a TaskQueue")
	}
	id := newWorkflowID()
	em := event.From(ctx)
	if a.Events != nil && em.Enabled() {
		defer a.Events.Subscribe(ctx, id)()
	}
	em.Emit(event.Event{Type: event.RunStarted, RunID: id})
	run, err := a.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: a.TaskQueue}, AgentWorkflowName,
		RunInput{Spec: a.Spec, Text: in.Text, Messages: in.Messages})
	if err != nil {
		err = fmt.Errorf("temporal: starting the run: %w", err)
		em.Emit(event.Event{Type: event.RunError, Message: err.Error()})
		return agent.Output{RunID: id}, err
	}
	var out RunOutput
	err = run.Get(ctx, &out)
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

func newWorkflowID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "deputy-" + hex.EncodeToString(b[:])
}
