package temporal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/mailbox"
)

// A roster member that is a factory's agent runs, as a background job,
// in the activity of its FactoryWorkflow (factoryJob), in process: the
// agent takes its messages from a mailbox, as a job's agent does in
// process, at its step boundaries. The activity fills the mailbox as the
// agent begins each step, from the messages its workflow was sent (a
// query of it), and tells the run that started the job, by signal, what
// the agent took and where it stands, as an agent's job tells it from
// its workflow (inbox.tell).
//
// An attempt of the activity that runs again (its worker died) runs the
// agent afresh: it is given every message its workflow took again, at
// its first step; the run that started the job kept the step each was
// first taken before.

// jobMailbox is the activity's side of a factory's job.
type jobMailbox struct {
	ctx context.Context // the activity's
	c   client.Client
	in  FactoryCall
	box *mailbox.Box

	wfID, runID string
	mu          sync.Mutex
	read        int              // messages read from the workflow
	told        mailbox.Progress // what the parent was told last
}

// jobQueryTimeout bounds one read of the job's messages from its
// workflow: a read that fails or takes longer gives the step none, and
// the next step reads them.
const jobQueryTimeout = 10 * time.Second

// jobMailboxFor returns ctx, an activity's on a worker of a server, with
// the mailbox of the factory's job in, for the agent's run.
func jobMailboxFor(ctx context.Context, in FactoryCall) context.Context {
	c := activity.GetClient(ctx)
	if c == nil {
		return ctx
	}
	info := activity.GetInfo(ctx)
	jm := &jobMailbox{ctx: ctx, c: c, in: in, wfID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID}
	jm.box = mailbox.New(jm.changed)
	jm.box.SetNotify(mailbox.Notify{Began: jm.fetch, Delivered: jm.delivered})
	return mailbox.With(ctx, jm.box)
}

// fetch puts in the box the messages the job's workflow took since the
// last read, as the agent begins step.
func (jm *jobMailbox) fetch(int) {
	jm.mu.Lock()
	from := jm.read
	jm.mu.Unlock()
	qctx, cancel := context.WithTimeout(jm.ctx, jobQueryTimeout)
	defer cancel()
	v, err := jm.c.QueryWorkflow(qctx, jm.wfID, jm.runID, factoryInboxQuery, from)
	if err != nil {
		return
	}
	var ms []jobMessage
	if v.Get(&ms) != nil {
		return
	}
	jm.mu.Lock()
	jm.read = from + len(ms)
	jm.mu.Unlock()
	for _, m := range ms {
		// Let in past mailbox.MaxQueued: the run that sent it bounded it.
		_, _ = jm.box.Requeue(mailbox.Message{ID: m.ID, Text: m.Text, From: senderSpan(m)})
	}
}

// senderSpan is the span of the model call whose reply sent m, if the
// sender's worker traced it.
func senderSpan(m jobMessage) trace.SpanContext {
	for _, l := range messageLinks([]MessageLink{{ID: m.ID, TraceID: m.TraceID, SpanID: m.SpanID}}) {
		return l.SpanContext
	}
	return trace.SpanContext{}
}

// delivered tells the parent the agent took rs before their step.
func (jm *jobMailbox) delivered(rs []mailbox.Receipt) {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	p := jm.box.Progress()
	jm.tell(jobProgress{Job: jm.in.Job, Step: rs[0].Step, Last: p.Last, Usage: p.Usage, Cost: p.Cost, Delivered: ids})
}

// changed tells the parent where the agent stands, when that changed:
// it reached a step, or took messages.
func (jm *jobMailbox) changed() {
	p := jm.box.Progress()
	jm.mu.Lock()
	same := p == jm.told
	jm.told = p
	jm.mu.Unlock()
	if !same {
		jm.tell(jobProgress{Job: jm.in.Job, Step: p.Step, Last: p.Last, Usage: p.Usage, Cost: p.Cost})
	}
}

// tell signals p to the run that started the job. A parent that has
// ended hears nothing more; the job goes on.
func (jm *jobMailbox) tell(p jobProgress) {
	if jm.in.Parent == "" {
		return
	}
	p.Last = capText(p.Last, 2048)
	sctx, cancel := context.WithTimeout(jm.ctx, jobQueryTimeout)
	defer cancel()
	_ = jm.c.SignalWorkflow(sctx, jm.in.Parent, "", jobProgressSignal, p)
}

// jobTimeText is what a factory's job that ran past its time ends with.
func jobTimeText(d time.Duration) string {
	return fmt.Sprintf("the job ran past its time of %v (Spec.JobTime): raise Spec.JobTime or give a smaller task", d)
}

// jobLimitError is what a factory's job that its limits stopped ends
// with (its code is usage_limit): its partial answer is its last words,
// which its status and its partial report carry.
func jobLimitError(in FactoryCall) error {
	var limits []string
	if in.TokenLimit > 0 {
		limits = append(limits, fmt.Sprintf("%d tokens", in.TokenLimit))
	}
	if in.CostLimit > 0 {
		limits = append(limits, fmt.Sprintf("$%g", in.CostLimit))
	}
	if len(limits) == 0 {
		return fmt.Errorf("%w: the job reached its agent's own limits", agent.ErrUsageLimit)
	}
	return fmt.Errorf("%w: the job reached %s, its share of the run's limits or Spec.JobTokens and JobCost: raise them, or give a smaller task",
		agent.ErrUsageLimit, strings.Join(limits, " and "))
}
