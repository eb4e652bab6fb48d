package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/subagent"
)

// A roster member that is a factory's agent runs, as a background job,
// in the activity of a FactoryJobWorkflow, in process: the agent takes
// its messages from a mailbox, as a job's agent does in process, at its
// step boundaries. The activity fills the mailbox as the agent begins
// each step, from the messages its workflow was sent (a query of it), and
// tells its workflow, by signal, what the agent took and where it stands;
// the workflow tells the run that started the job, as an agent's job
// tells it from its workflow (inbox.tell), and, for a job of a thread,
// answers the thread's later turns that ask (inbox.answerHellos).
//
// An attempt of the activity that runs again (its worker died) replays
// the agent's journal (see workflowLog): the messages the agent took are
// taken again before the steps that took them.

const (
	// factoryInboxQuery names the query by which the activity of a
	// factory's job reads the messages its workflow took, in order, from
	// an index on; factoryProgressSignal the signal by which it tells its
	// workflow where the agent stands.
	factoryInboxQuery     = "deputy.job_inbox"
	factoryProgressSignal = "deputy.factory_progress"
)

// FactoryJobWorkflow runs the agent a Runtime factory builds as a
// background job of the run that starts it (a Factory member of the
// run's Spec.Roster, spawned with background=true or by StartJob). The
// messages its parent sends are signals the workflow takes in the order
// they were sent, as an agent's job does; the agent takes them at its
// step boundaries. It ends as an agent's job does: with the agent's
// answer, or failing with what the agent spent (past its limits or its
// time, with the code that names it); cancelled, it waits for the agent,
// whose spend comes back with it (cancelled between two attempts of its
// activity, or out of them, what its journal says they paid for).
func FactoryJobWorkflow(ctx workflow.Context, in FactoryCall) (RunOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// The agent's run is bounded by its time (the activity's
		// deadline); the activity's by a minute more.
		StartToCloseTimeout: in.JobTime + time.Minute,
		HeartbeatTimeout:    HeartbeatTimeout,
		RetryPolicy:         &sdktemporal.RetryPolicy{MaximumAttempts: 3},
		WaitForCancellation: true,
	})
	paidFor, err := keepFactoryJournal(ctx)
	if err != nil {
		return RunOutput{}, err
	}
	ib := newInbox(ctx, in.Job)
	var arrived []jobMessage
	told := map[string]bool{} // the messages an attempt told the agent took
	if err := workflow.SetQueryHandler(ctx, factoryInboxQuery, func(from int) ([]jobMessage, error) {
		page := slices.Clone(inboxPage(arrived[min(max(from, 0), len(arrived)):]))
		for i := range page {
			page[i].Told = told[page[i].ID]
		}
		return page, nil
	}); err != nil {
		return RunOutput{}, err
	}
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var m jobMessage
			ib.ch.Receive(gctx, &m)
			arrived = append(arrived, ib.inOrder(m)...)
		}
	})
	if in.Thread {
		// (A factory's agent asks no person: it has no questions to ask
		// again.)
		if err := ib.answerHellos(ctx, &questions{}); err != nil {
			return RunOutput{}, err
		}
	}
	// What the activity tells is told on, in order, before the job ends:
	// its parent reads the job's receipts as it ends.
	tctx, _ := workflow.NewDisconnectedContext(ctx)
	progress := workflow.GetSignalChannel(ctx, factoryProgressSignal)
	tell := func() {
		var p jobProgress
		for progress.ReceiveAsync(&p) {
			for _, id := range p.Delivered {
				told[id] = true
			}
			ib.tell(tctx, p)
		}
	}
	in.JobDeadline = workflow.GetInfo(ctx).WorkflowStartTime.Add(in.JobTime)
	f := workflow.ExecuteActivity(ctx, RunFactoryActivity, in)
	for done := false; !done; {
		sel := workflow.NewSelector(tctx)
		sel.AddFuture(f, func(workflow.Future) { done = true })
		sel.AddReceive(progress, func(workflow.ReceiveChannel, bool) { tell() })
		sel.Select(tctx)
	}
	tell()
	var res ToolResult
	err = f.Get(tctx, &res)
	if sdktemporal.IsCanceledError(err) {
		// What the agent spent, as a cancelled agent's job hands it back
		// (withSettled).
		var out RunOutput
		detailsOf(err, &out.Usage, &out.Cost, &out.Model, &out.Models, &out.Earlier, &out.Refused)
		if out.Usage.IsZero() && out.Cost == 0 {
			// No attempt ran to hand it back (cancelled as the next
			// waited for a worker): what its journal says the attempts
			// before paid for.
			out = paidFor()
		}
		return RunOutput{}, sdktemporal.NewCanceledError(spent(out)...)
	}
	if err != nil {
		// Out of attempts (each lost its worker): what they paid for, as
		// its journal says, comes back with the failure.
		return RunOutput{}, withUsage(paidFor(), err)
	}
	return factoryOutcome(res)
}

// journalSpent is what the attempts of a factory's activity paid for,
// as the journal rs they recorded says, and unrecorded, what they told
// their workflow they paid for past it.
func journalSpent(rs []journalRecord, unrecorded RunOutput) RunOutput {
	return paidIn(rs).plus(unrecorded)
}

// plus is what o spent and what p spent: their usage, cost and models
// added up, and the model o names, else the first of them.
func (o RunOutput) plus(p RunOutput) RunOutput {
	o.Usage, o.Cost, o.Models = o.Usage.Add(p.Usage), o.Cost+p.Cost, addModels(o.Models, p.Models...)
	if o.Model == "" && len(o.Models) > 0 {
		o.Model = o.Models[0].Model
	}
	return o
}

// jobMailbox is the activity's side of a factory's job.
type jobMailbox struct {
	ctx context.Context // the activity's
	c   client.Client
	in  FactoryCall
	box *mailbox.Box

	wfID, runID string
	mu          sync.Mutex
	read        int              // messages read from the workflow
	seqs        map[string]int   // by message id, its number among the job's, where the run publishes
	toldBefore  map[string]bool  // the messages an attempt before told the workflow the agent took
	told        mailbox.Progress // what the parent was told last
}

// journalReadTime bounds the read of a factory's journal by an attempt
// that runs again.
const journalReadTime = 30 * time.Second

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

// maxInboxPage bounds the text of the messages one read of a factory's
// job's messages hands the activity (factoryInboxQuery): the answer of a
// query is a payload, which the server bounds (2 MB by default), and an
// attempt that runs again reads every message the job took. It leaves
// room for JSON's escapes (up to 6 bytes a byte of text). A page holds
// one message at least, its text cut to the bound (only a signal sent
// from outside the run is longer: a run's are jobtool.MaxMessageBytes).
const maxInboxPage = 256 << 10

// inboxPage is the first page of ms (maxInboxPage).
func inboxPage(ms []jobMessage) []jobMessage {
	size := 0
	for i, m := range ms {
		if size += len(m.Text); size > maxInboxPage {
			if i == 0 {
				m.Text = capText(m.Text, maxInboxPage)
				return []jobMessage{m}
			}
			return ms[:i]
		}
	}
	return ms
}

// fetch puts in the box the messages the job's workflow took since the
// last read, page by page, as the agent begins step.
func (jm *jobMailbox) fetch(int) {
	for range mailbox.MaxMessages {
		if !jm.fetchPage() {
			return
		}
	}
}

// fetchPage reads the next page of the job's messages into the box, and
// reports whether it read any.
func (jm *jobMailbox) fetchPage() bool {
	jm.mu.Lock()
	from := jm.read
	jm.mu.Unlock()
	qctx, cancel := context.WithTimeout(jm.ctx, jobQueryTimeout)
	defer cancel()
	v, err := jm.c.QueryWorkflow(qctx, jm.wfID, jm.runID, factoryInboxQuery, from)
	if err != nil {
		return false
	}
	var ms []jobMessage
	if v.Get(&ms) != nil {
		return false
	}
	jm.mu.Lock()
	jm.read = from + len(ms)
	for _, m := range ms {
		if m.Told {
			if jm.toldBefore == nil {
				jm.toldBefore = map[string]bool{}
			}
			jm.toldBefore[m.ID] = true
		}
		if m.Seq > 0 {
			if jm.seqs == nil {
				jm.seqs = map[string]int{}
			}
			jm.seqs[m.ID] = m.Seq
		}
	}
	jm.mu.Unlock()
	for _, m := range ms {
		// Let in past mailbox.MaxQueued: the run that sent it bounded it.
		_, _ = jm.box.Requeue(mailbox.Message{ID: m.ID, Text: m.Text, From: senderSpan(m)})
	}
	return len(ms) > 0
}

// senderSpan is the span of the model call whose reply sent m, if the
// sender's worker traced it.
func senderSpan(m jobMessage) trace.SpanContext {
	for _, l := range messageLinks([]MessageLink{{ID: m.ID, TraceID: m.TraceID, SpanID: m.SpanID}}) {
		return l.SpanContext
	}
	return trace.SpanContext{}
}

// delivered tells the parent the agent took rs before their step, and
// publishes each one's deputy.job_delivered, as the model call of an
// agent's job that took it does, where the run publishes its jobs'
// events (it numbered them: jobMessage.Seq).
func (jm *jobMailbox) delivered(rs []mailbox.Receipt) {
	var ids []string
	em := event.From(jm.ctx)
	for _, r := range rs {
		jm.mu.Lock()
		seq, told := jm.seqs[r.ID], jm.toldBefore[r.ID]
		jm.mu.Unlock()
		if told {
			// An attempt before told of it (its journal lacks it, and the
			// agent took it again): the run has its receipt, and its
			// event is published.
			continue
		}
		ids = append(ids, r.ID)
		if seq > 0 && em.Enabled() {
			em.Emit(jobEvent(subagent.JobDeliveredEvent, "", jobMessageEvent{
				Receipt: subagent.Receipt{JobID: jm.in.Job, MessageID: r.ID, State: subagent.MessageDelivered, Step: r.Step, Seq: seq}, RunID: em.SubagentRunID()}))
		}
	}
	if len(ids) == 0 {
		jm.changed()
		return
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

// tell signals p to the job's workflow, which tells the run. What it
// cannot tell is lost: the next step tells where the agent stands again.
func (jm *jobMailbox) tell(p jobProgress) {
	p.Last = capText(p.Last, 2048)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(jm.ctx), jobQueryTimeout)
	defer cancel()
	_ = jm.c.SignalWorkflow(sctx, jm.wfID, jm.runID, factoryProgressSignal, p)
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

// A factory's agent records its run in a journal its workflow keeps, as
// an agent in process records its turn under agent.WithJournal: each
// model answer, tool call and message delivery, by its place in the run.
// A record is a signal to the workflow, written before the agent goes on;
// an attempt of the activity that runs again (its worker died, or
// stopped) reads the journal from its workflow and replays it, so that no
// model answer is paid twice, no finished tool call (an approved one
// among them) runs again, and a message reaches the agent before the step
// it reached it before.

const (
	factoryJournalSignal = "deputy.factory_journal" // the activity records an entry
	factoryJournalQuery  = "deputy.factory_journal" // the activity's next attempt reads them
	// factoryUnrecordedSignal tells the workflow what a model answer the
	// journal could not record (past its bounds) paid; the next attempt
	// reads the sum with factoryUnrecordedQuery, and hands it back with
	// its own spend, since it pays for that answer again.
	factoryUnrecordedSignal = "deputy.factory_unrecorded"
	factoryUnrecordedQuery  = "deputy.factory_unrecorded"

	// maxFactoryJournal and maxFactoryJournalBytes bound the entries one
	// factory's run records in its workflow's history, and their size (the
	// next attempt reads them in one query's answer, a payload, which the
	// server's blob size limit, 2 MB by default, bounds, and the SDK
	// refuses past it); past them, and for an entry past the worker's
	// payload limit (Runtime.PayloadLimit), the run goes on unrecorded
	// from there, and an attempt that runs again runs what was not
	// recorded again (handing back what the attempt before paid for it:
	// factoryUnrecordedSignal). The bounds count what every attempt
	// recorded.
	maxFactoryJournal      = 4096
	maxFactoryJournalBytes = 3 << 19 // 1.5 MB
)

// journalRecord is one entry of a factory's journal.
type journalRecord struct {
	Key   string        `json:"key"`
	Entry journal.Entry `json:"entry"`
	// Attempt is the attempt of the activity that recorded it: the
	// workflow takes none from an attempt before the latest it has a
	// record of, which may still run though the server gave up on it
	// (its worker cut off from the server). (What such an attempt records
	// before the next records anything is taken: the next attempt, which
	// read the journal before it, records over it what it runs again.)
	Attempt int32 `json:"attempt,omitempty"`
}

// keepFactoryJournal keeps, in a FactoryWorkflow, the journal its
// activity records (factoryJournalSignal) and hands it to the activity's
// next attempt (factoryJournalQuery), and what the attempts paid for past
// it (factoryUnrecordedSignal, factoryUnrecordedQuery). It records
// nothing in the history until a signal comes. It returns what the
// attempts paid for, as those say.
func keepFactoryJournal(ctx workflow.Context) (func() RunOutput, error) {
	var kept []journalRecord
	var unrecorded RunOutput
	var fence int32 // the latest attempt heard from
	ch := workflow.GetSignalChannel(ctx, factoryJournalSignal)
	uch := workflow.GetSignalChannel(ctx, factoryUnrecordedSignal)
	// take takes the signals that came: those the goroutine below has not
	// taken yet stay in their channels' buffers (it waits for them to
	// come, not in a Receive, which would hold one of them), so that what
	// the attempts paid for counts each, read as the workflow ends.
	take := func() {
		var r journalRecord
		for ch.ReceiveAsync(&r) {
			switch {
			case r.Attempt > 0 && r.Attempt < fence:
				// From an attempt the server gave up on. (A worker from
				// before attempts were named names none: 0.)
			case len(kept) < maxFactoryJournal:
				kept = append(kept, r)
			}
			fence = max(fence, r.Attempt)
			r = journalRecord{}
		}
		var o RunOutput
		for uch.ReceiveAsync(&o) {
			unrecorded = unrecorded.plus(o)
			o = RunOutput{}
		}
	}
	if err := workflow.SetQueryHandler(ctx, factoryJournalQuery, func() ([]journalRecord, error) { return kept, nil }); err != nil {
		return nil, err
	}
	if err := workflow.SetQueryHandler(ctx, factoryUnrecordedQuery, func() (RunOutput, error) { return unrecorded, nil }); err != nil {
		return nil, err
	}
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			if workflow.Await(gctx, func() bool { return ch.Len() > 0 || uch.Len() > 0 }) != nil {
				return
			}
			take()
		}
	})
	return func() RunOutput {
		take()
		return journalSpent(kept, unrecorded)
	}, nil
}

// workflowLog is the journal of a factory's agent, kept by its workflow.
type workflowLog struct {
	ctx         context.Context // the activity's
	c           client.Client
	wfID, runID string
	limit       int   // the largest entry it records, in bytes
	attempt     int32 // the activity's, which its records carry

	mu      sync.Mutex
	entries map[string]journal.Entry
	keys    []string
	sent    int   // entries recorded in the workflow, by every attempt
	bytes   int   // and their size
	full    bool  // an entry was left out: nothing after it is recorded
	failed  error // the first record the workflow did not take
	// before is what the attempts before paid for past their journal
	// (factoryUnrecordedQuery): this attempt pays for it again, and hands
	// it back with its own.
	before RunOutput
}

// journaled returns ctx, an activity's on a worker of a server, with the
// journal of the factory's agent it runs, read from the workflow when the
// activity runs again.
func journaled(ctx context.Context, limit int) (context.Context, *workflowLog) {
	c := activity.GetClient(ctx)
	if c == nil {
		return ctx, nil
	}
	info := activity.GetInfo(ctx)
	l := &workflowLog{ctx: ctx, c: c, wfID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID, limit: limit, attempt: info.Attempt, entries: map[string]journal.Entry{}}
	if info.Attempt > 1 {
		// Asked again while the workflow cannot answer yet (its worker
		// was lost with it), for up to journalReadTime.
		qctx, cancel := context.WithTimeout(ctx, journalReadTime)
		defer cancel()
		var rs []journalRecord
		err := whileNotReady(qctx, func() error {
			v, err := c.QueryWorkflow(qctx, l.wfID, l.runID, factoryJournalQuery)
			if err == nil {
				err = v.Get(&rs)
			}
			return err
		})
		if err != nil {
			// What it recorded runs again, which costs, but loses nothing;
			// this attempt records nothing, lest the journal mix its run
			// with the one it could not read.
			activity.GetLogger(ctx).Warn("deputy: the factory's journal could not be read; its agent runs from the start", "error", err)
			l.full = true
		}
		for _, r := range rs {
			l.add(r.Key, r.Entry)
			// The bounds count what the attempts before recorded.
			l.sent, l.bytes = l.sent+1, l.bytes+recordSize(r)
		}
		if err == nil {
			// (A workflow that began before it kept this has none.)
			if v, err := c.QueryWorkflow(qctx, l.wfID, l.runID, factoryUnrecordedQuery); err == nil {
				_ = v.Get(&l.before)
			}
		}
	}
	return journal.With(ctx, journal.New(l)), l
}

// unrecordedBefore is what the attempts before paid for past their
// journal.
func (l *workflowLog) unrecordedBefore() RunOutput {
	if l == nil {
		return RunOutput{}
	}
	return l.before
}

// paid is what the runs the journal holds paid for their model answers
// (journal.Scope.PaidUnder): what an attempt that does not replay them
// hands back for them.
func (l *workflowLog) paid() RunOutput {
	if l == nil {
		return RunOutput{}
	}
	e, _ := journal.New(l).PaidUnder("", "")
	out := RunOutput{Usage: e.Usage, Models: e.Models}
	for _, m := range e.Models {
		out.Cost += m.Cost
	}
	if len(e.Models) > 0 {
		out.Model = e.Models[0].Model
	}
	return out
}

// paidIn is what the runs journaled in rs paid for their model answers.
func paidIn(rs []journalRecord) RunOutput {
	l := &workflowLog{entries: map[string]journal.Entry{}}
	for _, r := range rs {
		l.add(r.Key, r.Entry)
	}
	return l.paid()
}

// err is the first record the workflow did not take, if any: the
// attempt then fails, to run again from the journal, where the agent
// would have failed.
func (l *workflowLog) err() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *workflowLog) add(key string, e journal.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[key]; !ok {
		l.keys = append(l.keys, key)
	}
	l.entries[key] = e
}

func (l *workflowLog) Turn() string { return l.wfID }

func (l *workflowLog) Lookup(key string) (journal.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	return e, ok
}

func (l *workflowLog) Keys(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, k := range l.keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// recordSize is the size of r as the workflow is sent it (0: it cannot
// be sent).
func recordSize(r journalRecord) int {
	b, err := json.Marshal(r)
	if err != nil {
		return 0
	}
	return len(b)
}

// Record signals the entry to the workflow, which keeps it before the
// signal returns; an entry past the bounds is kept here only, and so is
// every entry after it: the journal the next attempt reads is the run up
// to a point, with no hole in it (a step's answer left out, and the
// messages taken before the next step kept, would have the next attempt
// ask the model again and hand it those messages twice).
func (l *workflowLog) Record(ctx context.Context, key string, e journal.Entry) error {
	r := journalRecord{Key: key, Entry: e, Attempt: l.attempt}
	size := recordSize(r)
	l.mu.Lock()
	if l.failed != nil {
		// The attempt fails: the agent goes no further.
		err := l.failed
		l.mu.Unlock()
		return err
	}
	send := !l.full && size > 0 && size <= l.limit && l.sent < maxFactoryJournal && l.bytes+size <= maxFactoryJournalBytes
	if send {
		l.sent, l.bytes = l.sent+1, l.bytes+size
	} else {
		l.full = true
	}
	l.mu.Unlock()
	if !send {
		l.tellUnrecorded(key, e)
		l.add(key, e)
		return nil
	}
	// Written even as the activity is cancelled: what the agent did last
	// is kept.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), jobQueryTimeout)
	defer cancel()
	if err := l.c.SignalWorkflow(sctx, l.wfID, l.runID, factoryJournalSignal, r); err != nil {
		err = fmt.Errorf("recording %s in the journal its workflow keeps: %w", key, err)
		l.mu.Lock()
		if l.failed == nil {
			l.failed = err
		}
		l.mu.Unlock()
		return err
	}
	l.add(key, e)
	return nil
}

// tellUnrecorded tells the workflow what e, an entry left out of the
// journal, paid for, if it is a model answer: should this attempt be
// lost, the next pays for it again, and hands back both. What cannot be
// told is lost to the ledger (and logged).
func (l *workflowLog) tellUnrecorded(key string, e journal.Entry) {
	p := paidIn([]journalRecord{{Key: key, Entry: e}})
	if p.Usage.IsZero() && p.Cost == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), jobQueryTimeout)
	defer cancel()
	if err := l.c.SignalWorkflow(sctx, l.wfID, l.runID, factoryUnrecordedSignal, p); err != nil {
		activity.GetLogger(l.ctx).Warn("deputy: what a model answer past the factory's journal paid could not be told its workflow", "key", key, "error", err)
	}
}

func (l *workflowLog) Start(key string, e journal.Entry) func(context.Context) error {
	err := l.Record(l.ctx, key, e)
	return func(context.Context) error { return err }
}

// workerStopping reports whether the worker of the activity of ctx is
// stopping, which cancels the activity without a cancel asked for.
func workerStopping(ctx context.Context) bool {
	if !activity.IsActivity(ctx) {
		return false
	}
	select {
	case <-activity.GetWorkerStopChannel(ctx):
		return true
	default:
		return false
	}
}
