package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/internal/rerun"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// run is Run once the turn is held: it sets the run up, runs its loop
// (loop.go) and winds it up, keeping the conversation when it succeeds.
func (r *React) run(ctx context.Context, in Input) (out Output, err error) {
	r.mu.Lock()
	base := r.kept
	inPlace := base.spare
	r.kept.spare = false // this run may write past its end
	r.mu.Unlock()
	if in.Fork != nil && len(base.msgs) > 0 {
		return Output{}, fmt.Errorf("agent %q: %w: a context fork (Input.Fork) starts from its parent's conversation, and this agent holds one of its own: build a fresh agent for each fork",
			r.name, ErrBadMessages)
	}

	// A background child's mailbox is this run's alone: the runs its
	// tools start do not see it.
	box := mailbox.From(ctx)
	if box != nil {
		ctx = mailbox.With(ctx, nil)
	}
	em := event.From(ctx) // the scope is looked up once for the run's events
	events := em.Enabled()
	runID := id.New("run_")
	tr, span := r.tracerFor(ctx)
	var s *runState
	if tr != nil {
		ctx, span = startRunSpan(ctx, tr, r, runID)
		defer func() { endRunSpan(span, out, s.ownEarlier, err) }()
	}
	var before int64 // what the turn spent before a re-run's point (rerun.WithSpent)
	var beforeCost float64
	if run.ID(ctx) == "" {
		ctx, before, beforeCost = rerun.TakeSpent(ctx)
	}
	// A run whose calls ask what its parent's ask (a context fork asks
	// its parent's model) is reserved at the price of the model that
	// answered the parent's last call until one answers its own: a
	// router's default model may be one no price names.
	askedProvider, asked := r.askedAs(in.Fork)
	answered := run.Answered(ctx, askedProvider, asked)
	ctx = run.Start(ctx, runID, r.name, r.tokenLimit)
	if box != nil {
		run.TrackSpent(ctx) // its progress counts its children's as they spend (see reached)
		// and says so between its steps too: a status read while it waits
		// on a tool counts what its own jobs have spent since.
		spentCtx := ctx
		box.Live(func() (provider.Usage, float64) { return run.Spent(spentCtx) })
	}
	pol := r.bind(ctx)
	if pol != nil {
		// The policy records each decision on the run's sink and span.
		run.Observe(ctx, em, span)
	}
	run.SetPrices(ctx, r.prices)
	costLimit := r.costLimit
	if costLimit > 0 && beforeCost > 0 {
		// What it has left is what it had: a limit used up is a tiny
		// one, not none.
		costLimit = max(costLimit-beforeCost, 1e-12)
	}
	run.SetCostLimit(ctx, costLimit)
	s = &runState{r: r, ctx: ctx, toolCtx: ctx, runID: runID, em: em, events: events, tracer: tr, policy: pol,
		schema: in.ResponseSchema, cacheKey: in.CacheKey, limit: run.Limit(ctx), readBack: run.ReadBack(ctx), box: box, before: before, lastModel: answered}
	if s.schema == nil && r.output != nil {
		s.schema = r.output.schema.Raw()
	}
	if f := in.Fork; f != nil && s.cacheKey == "" {
		s.cacheKey = f.CacheKey // where the parent's prefix is cached
		s.fork = f
	} else if f != nil {
		s.fork = f
	}
	if s.cacheKey == "" {
		s.cacheKey = r.cacheKey
	}
	if s.cacheKey == "" {
		s.cacheKey = r.name
	}
	// Under a sub-agent the run-level events are not forwarded (the
	// SUBAGENT_* events stand for them), so they are not built either.
	runEvents := s.events && em.SubagentRunID() == ""
	if tr != nil {
		s.traceHook = toolSpans{tr}.hook
		s.toolCtx = tool.WithCallHook(ctx, s.traceHook)
	}
	s.journal = r.journalFor(ctx)
	if s.journal != nil {
		s.summariesRead = map[string]bool{}
		// What the turn's earlier runs passed their limits by counts in
		// the tree's debt, once the tree's first run under the journal
		// began (its replayed answers never take the tree's turn), or
		// from the start of the tree's top run, whose journal names it.
		s.journal.joinTree(ctx)
	}
	if s.fork != nil {
		// The parent's messages are shared, not copied: clipped, so that
		// the first message the fork adds copies their headers into a
		// slice of its own, and the parent's are never written.
		s.msgs = slices.Clip(s.fork.Messages)
		base.bytes, base.reported, base.reportedBytes = compact.MsgsBytes(s.msgs), 0, 0
		base.msgs = s.msgs
	} else if inPlace {
		// Appending in place keeps a call's cost flat as the history
		// grows: the history before it is neither copied nor changed.
		s.msgs = base.msgs
	} else {
		s.msgs = make([]provider.Message, len(base.msgs), len(base.msgs)+len(in.Messages)+4)
		copy(s.msgs, base.msgs)
	}
	s.bytes, s.reported, s.reportedBytes = base.bytes, base.reported, base.reportedBytes
	s.start = len(base.msgs)
	for _, m := range in.Messages {
		s.add(m)
	}
	if len(in.Messages) > 0 && in.Text == "" {
		s.open, _ = conversation.CheckOpen(in.Messages) // checked above
	}
	if len(s.open) == 0 && (in.Text != "" || len(in.Messages) == 0) {
		s.add(provider.UserMessage(in.Text))
	}

	if runEvents {
		em.Emit(event.Event{Type: event.RunStarted, RunID: runID, ParentRunID: ParentRunID(ctx)})
	}
	var began time.Time
	if r.logger != nil {
		began = time.Now()
		defer func() { s.logEnd(s.steps, time.Since(began), err) }()
	}
	var answer string
	if r.guards.Has(policy.Input) {
		err = s.guardInput(inputText(in))
	}
	if err == nil {
		answer, err = s.loop()
	}
	s.releaseModelCheck()
	s.respendUnread()
	s.child = s.child.Add(run.Finish(ctx))
	// A run the user's tool started gives back to its call's share what
	// it neither spent nor needs for its answer to be read.
	run.Settle(ctx, s.spent(), (int64(len(answer))+3)/4)
	if ParentRunID(ctx) == "" && Depth(ctx) == 0 && (err == nil || isInterrupted(err)) {
		// A resumed top-level run (not one a tool runs inside another)
		// that did not reach a call it was given an answer for is not the
		// turn that asked: say so, rather than ask again.
		if uerr := unusedAnswers(ctx); uerr != nil {
			err = uerr
		}
	}
	if err == nil {
		// Cancelled while the run wound up (its background work still
		// running): the caller gave up before the run ended, and is told so.
		err = ctx.Err()
	}
	// Clipped, like the requests' messages: whoever appends to it gets a
	// slice of their own rather than writing into the agent's.
	out = Output{RunID: runID, Answer: answer, Messages: slices.Clip(s.msgs[s.start:]), Usage: s.usage, ChildUsage: s.child, Value: s.value,
		Compactions: s.compactions, Partial: s.partial}
	out.Queued, out.Refused = run.Counts(ctx)
	// The tokens its background work that outlives it spent before it
	// reported count with their cost (a thread's jobs: run.AddCall).
	var lasting provider.Usage
	out.Cost, out.Unpriced, out.CacheSaved, lasting = run.CloseCost(ctx)
	out.ChildUsage = out.ChildUsage.Add(lasting)
	out.Earlier, out.EarlierCost = run.Earlier(ctx)
	if s.policy != nil {
		out.Denials = denials(ctx)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// Whatever else went wrong, the caller cancelled: say so first.
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		err = fmt.Errorf("agent %q: %w", r.name, err)
		if runEvents {
			em.Emit(failedRunEvent(runID, err))
		}
		return out, err
	}
	k := kept{msgs: s.msgs, bytes: s.bytes, spare: true, reported: s.reported, reportedBytes: s.reportedBytes, epoch: base.epoch}
	trimmed := trimHistory(s.msgs, r.historyLimit)
	if len(trimmed) < len(s.msgs) {
		k = kept{msgs: trimmed, bytes: compact.MsgsBytes(trimmed), spare: true}
	}
	r.mu.Lock()
	if s.compactions > 0 || len(trimmed) < len(s.msgs) {
		k.epoch = r.newEpoch() // no longer the same conversation with more at its end
	}
	r.kept = k
	r.mu.Unlock()
	if runEvents {
		em.Emit(event.Event{Type: event.RunFinished, RunID: runID, Result: event.JSONString(answer)})
	}
	return out, nil
}

// runState is one run in progress.
type runState struct {
	r       *React
	ctx     context.Context
	toolCtx context.Context // ctx, with the tracing hook when traced
	runID   string
	em      event.Emitter // of ctx
	events  bool          // em.Enabled()
	tracer  trace.Tracer  // nil when not traced
	msgs    []provider.Message
	// callIDs are the ids of the calls of msgs, and of those compacted
	// away, that a reply's calls must not take.
	callIDs callIDs
	usage   provider.Usage
	child   provider.Usage
	// ownEarlier is the part of usage replayed from the journal: the
	// model answers and summaries an earlier run of the turn paid for.
	ownEarlier provider.Usage
	// start is where the run's own messages begin in msgs, bytes what
	// msgs weigh (compact.MsgBytes), and reported and reportedBytes the last
	// reply's reported tokens and the bytes they covered (see kept).
	start                          int
	bytes, reported, reportedBytes int64
	// compactions counts the run's compactions; nothingToCompact is set
	// once a compaction found nothing before the run to fold in.
	compactions      int
	nothingToCompact bool
	// summariesRead holds the journal keys of the summaries the run
	// replayed or made (see respendUnread).
	summariesRead map[string]bool
	// schema is the run's Input.ResponseSchema, cacheKey the key of its
	// model calls: both the same on every call of the run.
	schema   json.RawMessage
	cacheKey string
	// fork is the parent's request a context fork starts from (nil: the
	// run is no fork), and prefix the request of the step whose tool
	// calls run now, which the forks they start send (run.Step.Prefix).
	fork   *provider.Request
	prefix *provider.Request
	// value is the answer's value under OutputOf, corrected whether the
	// model was told once that its answer did not fit.
	value     any
	corrected bool
	// guards counts the run's guardrail checks, each journaled under its
	// place in the run (see checkGuards).
	guards int
	// journal is the run's part of its turn's journal (nil: none), and
	// traceHook the tools' tracing hook (nil: not traced).
	journal   *runJournal
	traceHook tool.CallHook
	// policy binds the run (policy.From of its context), nil when none;
	// modelCheck is the check of its model calls (guardModel), nil
	// before the first.
	policy     *policy.Policy
	modelCheck *modelCheck
	steps      int // model calls begun
	// answered and called are the last step whose model answer the run
	// replayed or received, and the last whose recorded call results it
	// read (under a journal; see respendUnread).
	answered, called int
	// callsRun holds the index of each call of step called that the run
	// replayed or began (guarded by the recorder's mutex while they run).
	callsRun map[int]bool
	// limit is the run's token limit (0: none): the agent's, or less when
	// the tool that started the run gave it less. lastOut is the output
	// tokens of the last reply, for the estimate of the next call's cost;
	// partial is set when the run answered in a wrap-up turn.
	// open is the calls of the input's last turn left without a result,
	// which the run runs first.
	open  []provider.ToolCall
	limit int64
	// before is what the turn spent before the point a re-run goes on
	// from (rerun.WithSpent), counted as used against the token limit and
	// not in the run's usage.
	before     int64
	lastOut    int64
	lastModel  string     // the model that answered last, for the price of the next call
	askedLast  *run.Asked // what the run's calls ask, with lastModel (asked)
	partial    bool
	wrapByCost bool // the cost limit, not the token limit, made the last call the wrap-up
	// unpaid: a reply asked for calls whose results the run could not pay
	// to read (see readable); its next call is its wrap-up.
	unpaid bool
	// readBack: the run's answer goes back to a parent that reads it out
	// of the same budget (run.ReadBack).
	readBack bool
	// od is the turn of the call plan made as one that may pass the run's
	// limits, until the call ends it (endOverdraft); nil for none.
	od *run.Overdraft
	// box is the mailbox of a background child's run (nil: none), read at
	// each step boundary (see inbox.go).
	box *mailbox.Box
	// sent links the model call of a step that took messages to the spans
	// they were sent under, when traced.
	sent []trace.Link
}
