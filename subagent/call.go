package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/guardrail"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/outcome"
	"github.com/deputy-go/deputy/internal/rerun"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/subcode"
	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// holder is an agent whose turn a call can hold for all its runs, and
// whose conversation it can put back as it was when the turn was taken,
// such as *agent.React.
type holder interface {
	Hold(ctx context.Context) (context.Context, *agent.Turn, error)
}

// checkpointer is an agent whose conversation can be put back.
type checkpointer interface {
	Checkpoint() (restore func())
}

// Call runs the child for one call of the model.
func (t *SubAgentTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	// A call of a fan-out runs in a goroutine of its own, whose stack
	// starts small (and a stack the GC shrank is small again): grown
	// here, near its top, it is copied once with few frames on it, not at
	// each doubling deep in the child's loop. In BenchmarkFanoutDefault/1024
	// that was a quarter of the CPU; growing it here took the CPU of a
	// turn from 44 to 35 ms (medians of 6 alternating runs).
	growStack(0)
	if after, ok := rerun.Call(ctx, call.ID, t.def.Name, agent.Depth(ctx)); ok {
		// The lead's call a re-run goes on from inside (devui.WithRerun).
		return t.Rerun(ctx, call, after)
	}
	if t.scoped != nil {
		return t.scoped.call(ctx, call)
	}
	args, in, err := t.prepare(ctx, call)
	if err != nil {
		return tool.Result{}, err
	}
	if t.cfg.contextForks {
		in = t.forkInput(ctx, args, in)
	}
	if n := run.CallName(ctx); n != "" && n != t.def.Name {
		// Called by a tool of the user's, which may start more children
		// in the same call: this one takes part of the call's share.
		ctx = context.WithValue(ctx, partShareKey{}, true)
	}
	return t.invoke(ctx, call.ID, args, in, opening{})
}

// partShareKey marks the context of a call that a tool of the user's
// made (Call), whose child takes part of the call's share of its parent's
// budget (run.TakeShare), not all of it.
type partShareKey struct{}

// forkInput makes in a context fork (WithContextForks) of the parent's
// request at the step whose call ctx is, when there is one: outside a
// ReAct run's step the child starts fresh.
func (t *SubAgentTool) forkInput(ctx context.Context, args json.RawMessage, in agent.Input) agent.Input {
	prefix := run.Prefix(ctx)
	if prefix == nil || in.Fork != nil {
		return in
	}
	in.Fork = prefix
	if t.forkTask != nil {
		in.Text = joinPrompts(t.forkTask(args), in.Text)
	}
	return in
}

// prepare checks a call's depth and arguments, and returns the arguments
// and the child's input.
func (t *SubAgentTool) prepare(ctx context.Context, call tool.Call) (json.RawMessage, agent.Input, error) {
	name := t.def.Name
	depth := agent.Depth(ctx)
	if depth >= t.cfg.maxDepth {
		return nil, agent.Input{}, tool.Correctable(fmt.Errorf("%w: %q cannot be called at depth %d (the cap is %d): do this work directly",
			ErrMaxDepth, name, depth, t.cfg.maxDepth))
	}
	args := toolcall.Arguments(call.Arguments)
	// The text is copied once, for the schema and for the child's input.
	text := string(args)
	if err := t.params.ValidateText(context.Background(), text); err != nil {
		return nil, agent.Input{}, fmt.Errorf("%w for %s: %v: fix the arguments to match the tool's schema and call it again", tool.ErrInvalidArguments, name, err)
	}
	in := agent.Input{Text: text}
	if t.cfg.input != nil {
		var err error
		if in, err = t.cfg.input(args, text); err != nil {
			return nil, agent.Input{}, fmt.Errorf("%w for %s: %v", tool.ErrInvalidArguments, name, err)
		}
	}
	return args, in, nil
}

// Rerun runs call's invocation again from after (devui.WithRerun).
func (t *SubAgentTool) Rerun(ctx context.Context, call tool.Call, after []provider.Message) (tool.Result, error) {
	if t.resident != nil || t.scoped != nil {
		return tool.Result{}, fmt.Errorf("subagent %q: a resident expert keeps its own conversation and cannot be re-run from a point in a call: re-run the call to it instead", t.def.Name)
	}
	args, in, err := t.prepare(ctx, call)
	if err != nil {
		return tool.Result{}, err
	}
	task := in.Text
	if c := t.cfg.check; c != nil && !t.shapeTold {
		task = joinPrompts(task, c.prompt) // as the first run of the call told it
	}
	in.Messages = append([]provider.Message{provider.UserMessage(task)}, after...)
	in.Text = ""
	return t.invoke(ctx, call.ID, args, in, opening{})
}

// opening is how an invocation is opened, passed down from the call to
// open, the one place that announces an invocation: the run id that a
// journal gives it (the same each time its turn runs; "" outside a
// journal), and the SUBAGENT_STARTED a background job emitted for it
// ahead of its run (nil: none).
type opening struct {
	stable string
	ahead  *announced
	// spentKey is the journal key under which the invocation, under a
	// journal it records itself in, keeps what it has paid for when it
	// stops unfinished ("": its own, journal.Scope.Spent; a background
	// job's is its spawning call's, where the run that spawned it finds
	// it). paid is what is recorded there (nil: nothing), and counted
	// the invocation's ledger under the journal, which holds what this run
	// counted of it.
	spentKey string
	paid     *journal.Entry
	counted  *ledger.Ledger
	// unstarted, when set, is told that the policy refused the hand-off
	// (a denial, a person's refusal or a question not answered yet): no
	// child starts, and the spawn tool does not count the call.
	unstarted func()
	// handed: the policy decided on the hand-off before the invocation
	// (a background job's, before it started): it is not asked again.
	handed bool
}

// invoke runs one call whose arguments are checked, or, under a journal,
// answers it from the journal. The spawn tool shares it; a background
// job's invocation was announced ahead.
func (t *SubAgentTool) invoke(ctx context.Context, callID string, args json.RawMessage, in agent.Input, op opening) (tool.Result, error) {
	if js := journalFrom(ctx); js != nil {
		if js.Recorded {
			// The loop that made the call records its result; what the
			// invocation paid for when it stopped unfinished it records
			// itself, apart from any other the same call makes.
			key := js.Key(t.def.Name, args)
			ctx, op.stable = journalInvocation(ctx, js, key)
			var spent *ledger.Ledger
			ctx, spent = ledger.With(ctx)
			if e, ok := js.Paid(key); ok {
				// It stopped unfinished in an earlier run: see
				// opening.paid.
				op.paid, op.counted = &e, spent
			}
			res, err := t.invokeNow(ctx, callID, args, in, op)
			if err != nil {
				recordSpent(ctx, js, js.Spent(key), res.Usage, spent)
			}
			return res, err
		}
		return t.journaled(ctx, js, callID, args, in, op)
	}
	return t.invokeNow(ctx, callID, args, in, op)
}

// invokeNow runs one call: it opens the invocation one level deeper, runs
// it within the timeout, and reports how it ended.
func (t *SubAgentTool) invokeNow(ctx context.Context, callID string, args json.RawMessage, in agent.Input, op opening) (tool.Result, error) {
	var recheck handOffAgain
	if pol := policy.From(ctx); pol != nil {
		if !op.handed { // else decided before the job started: in is what it let through
			var err error
			if in, err = t.handOff(ctx, pol, callID, args, in); err != nil {
				if op.unstarted != nil {
					op.unstarted()
				}
				return tool.Result{}, err
			}
		}
		// A corrective run is a hand-off of its own, checked as this one
		// was, where this one was.
		recheck = handOffAgain{ctx: ctx, pol: pol, callID: callID, args: args}
	}
	cctx, inv := t.open(ctx, callID, op)
	if t.cfg.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, t.cfg.timeout)
		defer cancel()
	}
	// run itself refuses the answer of a child whose context ended, where
	// it can still put a resident's conversation back.
	res, err := t.run(cctx, args, in, inv.runID, op.stable, recheck)
	if op.paid != nil {
		// What the runs before paid for the invocation counts once,
		// whether or not this run got as far as replaying it (a job
		// cancelled with its run, a child stopped mid-way): the part it
		// did not replay counts now, as spent before, before the
		// invocation reports what it spent.
		if u, models := ledger.Unreplayed(op.paid.Models, op.counted.Earlier()); len(models) > 0 {
			ledger.Replay(cctx, u, models)
			res.Usage = res.Usage.Add(u)
		}
	}
	if err != nil {
		// A failed call hands back what it spent and nothing it said.
		return tool.Result{Usage: res.Usage}, t.failed(ctx, cctx, inv, err, res.Usage)
	}
	inv.finished(res.Content, res.Usage)
	return res, nil
}

// handOff asks pol about handing in down to the child, before the
// invocation opens: it returns the input the child is given (its task and
// context rewritten, when a rule rewrote them), or the error that ends the
// call: a denial or a person's refusal, which the model reads, or the
// interrupt of a question not answered yet.
func (t *SubAgentTool) handOff(ctx context.Context, pol *policy.Policy, callID string, args json.RawMessage, in agent.Input) (agent.Input, error) {
	inherited := in.Messages
	if in.Fork != nil {
		// A context fork is given its parent's conversation.
		inherited = in.Fork.Messages
	}
	chk := &policy.Check{Point: policy.BeforeDelegation, Tool: t.def.Name, CallID: callID, Arguments: args, Task: in.Text, Context: inherited}
	out := pol.Decide(ctx, chk) // chk stays on the stack
	switch out.Verdict {
	case policy.Deny:
		return in, tool.Correctable(out.Err(chk))
	case policy.Ask:
		if err := tool.ApprovePolicy(ctx, tool.Call{ID: callID, Name: t.def.Name, Arguments: args}, chk, out); err != nil {
			return in, err
		}
		// Approved, the child is handed its work as the other rules
		// left it: a redactor's rewrite holds whatever the person said.
		if chk.Task != in.Text || !sameMessages(chk.Context, inherited) {
			in = rewritten(in, chk)
		}
	case policy.Rewrite:
		in = rewritten(in, chk)
	}
	return in, nil
}

// rewritten returns in as the rules that decided chk, its hand-off,
// rewrote its task and the conversation it is given.
func rewritten(in agent.Input, chk *policy.Check) agent.Input {
	in.Text = chk.Task
	switch {
	case in.Fork == nil:
		in.Messages = chk.Context
	case len(chk.Context) == 0:
		// Nothing of the parent's conversation is left to go on
		// from: the fork starts fresh.
		in.Fork = nil
	case !sameMessages(chk.Context, in.Fork.Messages):
		// The fork goes on from the conversation as rewritten, which
		// is no longer its parent's prefix: its first request may
		// not be read from the cache.
		f := *in.Fork
		f.Messages = chk.Context
		in.Fork = &f
	}
	return in
}

// handOffAgain checks, under a policy, the hand-off of a call's
// corrective run, as handOff checked the first: under the call's context
// (outside its invocation), policy, id and arguments. The zero value
// (pol nil: no policy) checks nothing. (A value, not a closure: a closure
// cost each call under a policy an allocation.)
type handOffAgain struct {
	ctx    context.Context
	pol    *policy.Policy
	callID string
	args   json.RawMessage
}

// check checks the hand-off of retry, the corrective run's input.
func (h handOffAgain) check(t *SubAgentTool, retry agent.Input) (agent.Input, error) {
	return t.handOff(h.ctx, h.pol, h.callID, h.args, retry)
}

// sameMessages reports whether a and b are the same slice (not only
// equal): a rule that rewrites assigns a new one.
func sameMessages(a, b []provider.Message) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// invocation is one invocation of a sub-agent as its events and a render
// see it: the emitter its events go to, and its sub-agent run id ("" when
// neither events nor a render need one).
type invocation struct {
	em     event.Emitter
	events bool // whether em listens
	runID  string
	stable string // the run id a journal gives it, or ""
	// spent counts what the invocation's model calls spend, by provider
	// and model, its own sub-agents' included (nil when neither events nor
	// an outcome hook would show it).
	spent *ledger.Ledger
	// ctx is the call's: what the events show of the child's answer or
	// failure passes its policy's redactors (run.Scrub), as the result
	// will before its parent's model reads it.
	ctx context.Context
}

// open starts an invocation under ctx: it returns the child's context, one
// level deeper, and the invocation's sub-agent run id. With events on it
// emits SUBAGENT_STARTED, or takes over the one a background job emitted
// before its receipt (op.ahead). Under a journal the run id is the
// invocation's stable one.
func (t *SubAgentTool) open(ctx context.Context, callID string, op opening) (context.Context, invocation) {
	cctx := run.WithDepth(ctx, agent.Depth(ctx)+1)
	if a := op.ahead; a != nil && !a.used {
		// A background job's: SUBAGENT_STARTED went out before the
		// receipt, and ctx is already in the sub-agent's scope.
		a.used = true
		cctx, spent := ledger.With(cctx)
		return cctx, invocation{em: a.em, events: a.em.Enabled(), runID: a.runID, stable: op.stable, spent: spent, ctx: ctx}
	}
	em := event.From(ctx) // the scope is looked up once for the call's events
	inv := invocation{em: em, events: em.Enabled(), stable: op.stable, ctx: ctx}
	// WithRender and WithOutcome see the run id even without events.
	seen := t.cfg.render != nil || t.cfg.onOutcome != nil
	switch {
	case inv.events:
		cctx, inv.runID = t.announceStart(cctx, em, callID, op.stable)
	case seen && op.stable != "":
		inv.runID = op.stable
	case seen:
		inv.runID = id.New("sub_")
	}
	if inv.events || seen {
		cctx, inv.spent = ledger.With(cctx)
	}
	return cctx, inv
}

// announceStart emits SUBAGENT_STARTED on em for an invocation by the call
// callID, with the run id stable ("": a fresh one), and returns the context
// in the sub-agent's scope and the run id. It is where every invocation
// that runs is announced: when it opens, or ahead of a background job.
func (t *SubAgentTool) announceStart(ctx context.Context, em event.Emitter, callID, stable string) (context.Context, string) {
	runID := stable
	if runID != "" {
		ctx = event.WithSubagent(ctx, runID)
	} else {
		runID = id.New("sub_")
		ctx = event.WithSubagent(ctx, runID)
	}
	em.Emit(event.Event{
		Type: event.SubagentStarted, SubagentRunID: runID, Name: t.def.Name, Description: t.def.Description,
		ParentSubagentRunID: em.SubagentRunID(), ParentToolCallID: callID, Model: t.model,
	})
	return ctx, runID
}

// failed returns the error a failed invocation ends with, and emits its
// terminal event. An interrupt suspends the invocation: the questions its
// own tools asked are attributed to it, and the error goes up as it is.
// Otherwise the error says when the caller cancelled or the timeout struck
// (cctx is the child's context), and is capped like an answer.
func (t *SubAgentTool) failed(ctx, cctx context.Context, inv invocation, err error, spent provider.Usage) error {
	if own, ok := suspend(err, inv.suspendedID()); ok {
		inv.suspended(own, spent)
		return err
	}
	name := t.def.Name
	switch {
	case ctx.Err() != nil:
		if !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("subagent %q: %w: %w", name, ctx.Err(), err)
		}
	case cctx.Err() != nil && t.cfg.timeout > 0:
		err = tool.Correctable(fmt.Errorf("%w: %q ran longer than %v: give it a smaller task: %w", ErrTimeout, name, t.cfg.timeout, err))
	}
	// The error's text reaches the parent's conversation, and is sent
	// again with every later request: it is capped like an answer.
	err = capError(err, t.cfg.maxOutput)
	inv.errored(err, spent)
	return err
}

// suspendedID is the run id the interrupts of the invocation's own tools
// are attributed to: its sub-agent run id, else its stable one under a
// journal, else a fresh one.
func (inv invocation) suspendedID() string {
	if inv.runID != "" {
		return inv.runID
	}
	if inv.stable != "" {
		return inv.stable
	}
	return id.New("sub_")
}

// finished emits SUBAGENT_FINISHED with the call's result and what it
// spent (the invocation's runs reported spent in all).
func (inv invocation) finished(content string, spent provider.Usage) {
	if inv.events {
		inv.em.Emit(inv.spending(event.Event{Type: event.SubagentFinished, SubagentRunID: inv.runID, Result: event.JSONString(run.Scrub(inv.ctx, content))}, spent))
	}
}

// suspended emits SUBAGENT_FINISHED with the interrupt outcome: the ids of
// the questions the invocation waits for.
func (inv invocation) suspended(own []string, spent provider.Usage) {
	if inv.events {
		inv.em.Emit(inv.spending(event.Event{Type: event.SubagentFinished, SubagentRunID: inv.runID, Outcome: outcome.Suspended(own)}, spent))
	}
}

// errored emits SUBAGENT_ERROR with the call's error.
func (inv invocation) errored(err error, spent provider.Usage) {
	if inv.events {
		inv.em.Emit(inv.spending(event.Event{Type: event.SubagentError, SubagentRunID: inv.runID, Message: run.Scrub(inv.ctx, err.Error()), Code: subcode.Of(err)}, spent))
	}
}

// spending sets e's usage, per provider and model, and the model that
// answered the invocation's first request.
func (inv invocation) spending(e event.Event, spent provider.Usage) event.Event {
	e.Usage, e.Model = inv.spent.Spent(spent)
	return e
}

// announced is a sub-agent invocation whose SUBAGENT_STARTED was emitted
// ahead of its run, by the spawning call: a background job's, announced
// before the call returns its receipt. invoke takes it over (used), and
// emits the terminal event with em; if the job ends before invoke ran, the
// job emits SUBAGENT_ERROR itself. Only the job's goroutine touches it after
// the announcement.
type announced struct {
	runID string
	em    event.Emitter   // the spawning call's
	ctx   context.Context // the spawning call's, for run.Scrub
	used  bool
}

// announce emits SUBAGENT_STARTED for an invocation of t by the call callID
// under ctx that will run later, with the run id stable ("": a fresh one),
// and returns the context it must run under and the announcement its
// invocation takes over (nil when events are off).
func (t *SubAgentTool) announce(ctx context.Context, callID, stable string) (context.Context, *announced) {
	em := event.From(ctx)
	if !em.Enabled() {
		return ctx, nil
	}
	sctx, runID := t.announceStart(ctx, em, callID, stable)
	return sctx, &announced{runID: runID, em: em, ctx: ctx}
}

// unannounce ends an announced invocation that never ran, with err.
func (a *announced) unannounce(err error) {
	if a == nil || a.used {
		return
	}
	a.used = true
	if err == nil {
		err = errors.New("the job ended before its sub-agent started")
	}
	a.em.Emit(event.Event{Type: event.SubagentError, SubagentRunID: a.runID, Message: run.Scrub(a.ctx, err.Error()), Code: subcode.Of(err)})
}

// run makes the call's runs of the child. A resident runs in its turn;
// the other forms build a child for the call.
//
// recheck, under a policy, checks the hand-off of a corrective run (its
// zero value: none).
func (t *SubAgentTool) run(ctx context.Context, args json.RawMessage, in agent.Input, runID, stable string, recheck handOffAgain) (tool.Result, error) {
	if t.resident != nil {
		return t.runResident(ctx, args, in, runID, stable, recheck)
	}
	return t.runChild(ctx, args, in, runID, recheck)
}

// runResident runs the call in the resident's turn: it takes the turn,
// runs the child, and ends the turn, which keeps the conversation the
// call left when it succeeded and puts back the one it found when it
// failed. A resident held for a suspended call makes other calls wait (or
// refuses them), and is held for this one when it suspends (hold.go).
//
// stable, the invocation's run id under a journal, names the call that a
// hold keeps the resident for.
func (t *SubAgentTool) runResident(ctx context.Context, args json.RawMessage, in agent.Input, runID, stable string, recheck handOffAgain) (tool.Result, error) {
	turn, err := t.takeTurn(ctx, stable)
	if err != nil {
		return tool.Result{}, err
	}
	res, err := t.runChild(turn.ctx, args, in, runID, recheck)
	return turn.end(res, err)
}

// residentTurn is a call's hold on a resident: the tool's turn, a stored
// resident's lock in the store, and the agent's own turn, held for all the
// call's runs.
type residentTurn struct {
	t   *SubAgentTool
	ctx context.Context // the call's, in the agent's own turn when held
	by  string          // the call's stable run id, which a hold names
	// save ends the resident's turn with the call's error: it holds the
	// resident for a suspended call, or lets it go, and a stored
	// resident's (WithStore) writes the new conversation of a call that
	// succeeded and unlocks.
	save    func(err error) error
	held    *agent.Turn // the agent's own turn
	restore func()      // puts the agent's conversation back
}

// takeTurn waits for the resident's turn, or refuses the call when it is
// busy and the tool was built with WithRefuseWhenBusy, then holds the
// resident for the call. What fails on the way gives back what was taken.
// While the resident is held for another, suspended call, it waits (or
// refuses) the same way, holding nothing.
func (t *SubAgentTool) takeTurn(ctx context.Context, by string) (residentTurn, error) {
	var w heldWait
	for {
		turn, err := t.tryTurn(ctx, by)
		switch {
		case err == nil:
			return turn, nil
		case errors.Is(err, errHeld):
			err = w.wait(ctx, t)
		case w.waited() && ctx.Err() != nil:
			// The caller gave up while waiting for the held resident,
			// whichever step it was in: say what it was waiting for.
			err = w.gaveUp(ctx, t.def.Name)
		}
		if err != nil {
			return residentTurn{}, err
		}
	}
}

// tryTurn takes the tool's turn (waiting for it, or refusing the call
// with WithRefuseWhenBusy), then holds the resident for the call; it fails
// with errHeld, holding nothing, while another suspended call holds it.
func (t *SubAgentTool) tryTurn(ctx context.Context, by string) (residentTurn, error) {
	name := t.def.Name
	if t.cfg.refuseBusy {
		if !t.turn.TryAcquire(1) {
			return residentTurn{}, tool.Correctable(fmt.Errorf("%w: %q is answering another call: wait for that answer, then ask again", ErrBusy, name))
		}
	} else if err := t.turn.Acquire(ctx, 1); err != nil {
		return residentTurn{}, fmt.Errorf("subagent %q: waiting for its previous call to end: %w", name, err)
	}
	turn := residentTurn{t: t, ctx: ctx, by: by}
	err := turn.hold()
	if err == nil {
		return turn, nil
	}
	turn.end(tool.Result{}, err)
	return residentTurn{}, err
}

// hold brings a stored resident to its stored conversation, then holds the
// agent's own turn for all the call's runs, so that the conversation put
// back on failure is the one this call found, with the runs of other
// callers of the same agent (another tool, a direct Run) that finished
// before it. An agent without a turn of its own is checkpointed instead.
// A panic of the agent's becomes an error.
func (rt *residentTurn) hold() (err error) {
	name := rt.t.def.Name
	defer recoverPanic(name, &err)
	// The stored conversation comes first, before the agent's own turn is
	// held (Restore takes that turn).
	if d := rt.t.cfg.durable; d != nil {
		if rt.save, err = d.begin(rt.ctx, name, rt.t.resident.(Persistent), rt.t.cfg.refuseBusy, rt.by); err != nil {
			return err
		}
	} else if rt.save, err = rt.t.pause.take(rt.ctx, rt.by); err != nil {
		return err
	}
	switch a := rt.t.resident.(type) {
	case holder:
		ctx, held, err := a.Hold(rt.ctx)
		if err != nil {
			return fmt.Errorf("subagent %q: %w", name, err)
		}
		rt.ctx, rt.held, rt.restore = ctx, held, held.Rollback
	case checkpointer:
		rt.restore = a.Checkpoint()
	}
	return nil
}

// end ends the call's turn, which ended with res and err, and returns what
// the call returns. A stored resident's new conversation is written when
// the call succeeded; a write the store refuses fails the call. A failed
// call puts the conversation back as it found it. Then the turns are given
// up.
func (rt *residentTurn) end(res tool.Result, err error) (tool.Result, error) {
	defer rt.release()
	if rt.save != nil {
		if serr := rt.save(err); serr != nil {
			res, err = tool.Result{Usage: res.Usage}, serr
		}
	}
	if err != nil && rt.restore != nil {
		// A checkpoint's restore is the user's code: it may panic.
		if perr := guarded(rt.t.def.Name, func() error { rt.restore(); return nil }); perr != nil {
			err = fmt.Errorf("%w; then putting its conversation back: %w", err, perr)
		}
	}
	return res, err
}

// release gives up the agent's own turn, then the tool's.
func (rt *residentTurn) release() {
	if rt.held != nil {
		rt.held.Release()
	}
	rt.t.turn.Release(1)
}

// runChild makes the call's runs of the child — the first and, when its
// answer is rejected, the corrective one — and makes the call's result of
// the last answer. A panicking child becomes an error, and whatever
// happens the Result carries what the runs spent.
//
// Under a parent run with a token limit, the call takes the share of what
// the parent had left set aside for it (run.TakeShare), gives the
// child that as its limit, and gives back what it did not use when the
// call ends. A child that reaches its limit answers partially: with what
// its wrap-up turn said, or, cut short, with what it last said.
func (t *SubAgentTool) runChild(ctx context.Context, args json.RawMessage, in agent.Input, runID string, recheck handOffAgain) (res tool.Result, err error) {
	// A job's bounds name the limit that stops its sub-agent, not those
	// of the sub-agent's own children.
	bounds, _ := ctx.Value(jobBoundsKey{}).(*jobBounds)
	if bounds != nil {
		ctx = context.WithValue(ctx, jobBoundsKey{}, (*jobBounds)(nil))
	}
	runs := childRuns{t: t, ctx: ctx, args: args, budget: -1, recheck: recheck}
	// Of what the call's share has left, all when the model called this
	// tool, half when a tool of the user's calls it (run.TakeShare): the
	// child gives back what it did not spend, less what reading its
	// result costs, for the next child that tool starts.
	sole := ctx.Value(partShareKey{}) == nil
	var settleCost func(float64, int64)
	runs.costShare, settleCost = run.TakeCostShare(ctx, sole)
	defer func() { settleCost(runs.cost, resultTokens(res)) }()
	if t.limited == nil {
		// A job's own limit (JobLimits.Tokens) binds under its parent's
		// wider share: it takes no more of the share than that.
		if granted, ok, g := run.TakeShare(ctx, bounds.ownTokens(), sole); ok {
			runs.budget = granted
			defer func() { g.SettleRead(runs.usage.Tokens(), resultTokens(res)) }()
		}
	}
	defer func() { res.Usage = runs.usage }()
	defer recoverPanic(t.def.Name, &err)
	if t.cfg.guards.Has(policy.Input) {
		if err := runs.guardInput(in); err != nil {
			return tool.Result{}, err
		}
	}
	out, v, err := runs.answer(in)
	o := Outcome{RunID: runID, Arguments: args, Output: out, Usage: runs.usage, Models: ledger.From(ctx).Entries()}
	var refused *retryRefused
	switch {
	case errors.As(err, &refused):
		// Its answer did not fit, and the policy refused the hand-off of
		// another try: what it answered is what it has, with why.
		o.Content, o.Value = t.unretried(out.Answer, v.problem, "the policy refused it: "+refused.err.Error())
	case errors.Is(err, errNoRetry), err == nil && out.Partial && v.problem != nil:
		// Its answer did not fit, and its share could not pay for another
		// try (a wrap-up's answer is its run's last): what it answered is
		// what it has.
		o.Content, o.Value = t.unretried(out.Answer, v.problem, "the sub-agent's budget could not pay for a corrective retry")
	case err != nil && errors.Is(err, agent.ErrUsageLimit) && ctx.Err() == nil && runs.usage.Requests == 0 && lastSaid(out.Messages) == "":
		// Its share could not pay for its first model call: its parent
		// reads why out of that share, which is at least what that costs.
		o.Content, o.Value = t.unstarted()
	case err != nil && errors.Is(err, agent.ErrUsageLimit) && ctx.Err() == nil:
		// Cut short at its budget: what it said last is what it has.
		o.Content, o.Value = t.partial(lastSaid(out.Messages), bounds.limitName(err))
	case err != nil:
		return tool.Result{}, err
	case out.Partial && t.cfg.check == nil:
		o.Content, o.Value = t.partial(out.Answer, "")
	default:
		if o.Content, o.Value, err = t.accept(out.Answer, v); err != nil {
			return tool.Result{}, err
		}
	}
	return t.deliver(ctx, o)
}

// resultTokens is what reading res costs its caller, in tokens as the
// budgets' estimate counts them.
func resultTokens(res tool.Result) int64 { return (int64(len(res.Content)) + 3) / 4 }

// unretried is the content and value of the result of a child whose
// answer did not fit the shape asked for (problem) and that was not
// retried, for the reason why (its share of its parent's budget could not
// pay for a corrective retry, or the policy refused it): a partial Report
// under WithReport, else its answer with the problem noted; both say why
// it was not retried.
func (t *SubAgentTool) unretried(answer string, problem error, why string) (string, any) {
	if strings.TrimSpace(answer) == "" {
		answer = "(nothing)"
	}
	if c := t.cfg.check; c.result {
		r := Report{Status: ReportPartial, Summary: "[the answer did not fit the report's shape, and was not retried: " + why + "]\n" + answer}
		return fitResult(r, t.cfg.maxOutput), r
	}
	return withNote(answer, problem.Error()+"; not retried: "+why, t.cfg.maxOutput), nil
}

// partial is the content and value of the result of a child that reached
// its token or cost limit, from what it said: under WithReport a Report
// with status partial; otherwise its words, after a note that says they
// are partial. stopped, when not "", names the limit (limitName) that
// stopped the child before it could answer.
func (t *SubAgentTool) partial(said, stopped string) (string, any) {
	cut := stopped != ""
	note := "the sub-agent reached the end of its budget (tokens or cost) and answered with what it had"
	if cut {
		note = "the sub-agent reached its " + stopped + " before it could answer; this is what it said last"
	}
	if strings.TrimSpace(said) == "" {
		said = "(nothing)"
	}
	if c := t.cfg.check; c != nil && c.result {
		r := Report{Status: ReportPartial, Summary: said}
		if cut {
			r.Summary = note + ": " + said
		}
		return fitResult(r, t.cfg.maxOutput), r
	}
	if !cut && t.cfg.check == nil {
		return said, nil // its own words say what is unfinished, as it was told
	}
	return textcap.Cap("["+note+"]\n"+said, t.cfg.maxOutput), nil
}

// unstartedNote says why a child made no model call: its share of its
// parent's budget was too small for one.
const unstartedNote = run.UnstartedNote

// unstarted is the content and value of the result of a child whose share
// of its parent's budget could not pay for its first model call: a
// partial Report under WithReport, else the note, as run.UnstartedReport
// and run.UnstartedLine spell them (TestUnstartedResultsAreWhatTheFloorCounts),
// since its parent reads it out of a share at least run.Floor.
func (t *SubAgentTool) unstarted() (string, any) {
	if c := t.cfg.check; c != nil && c.result {
		r := Report{Status: ReportPartial, Summary: unstartedNote}
		return fitResult(r, t.cfg.maxOutput), r
	}
	return textcap.Cap("["+unstartedNote+"]", t.cfg.maxOutput), nil
}

// limitName names the limit that stopped a child with err, an
// agent.ErrUsageLimit: "cost limit" when the run marked it so
// (run.CostLimited), else "token limit".
func limitName(err error) string {
	if run.IsCostLimited(err) {
		return "cost limit"
	}
	return "token limit"
}

// lastSaid is the text of the last assistant message of msgs.
func lastSaid(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Role == provider.RoleAssistant && strings.TrimSpace(m.Content) != "" {
			return m.Content
		}
	}
	return ""
}

// recoverPanic turns a panic into a correctable error in *err. Defer it
// directly.
func recoverPanic(name string, err *error) {
	if p := recover(); p != nil {
		*err = tool.Correctable(toolcall.Panicked(name, p))
	}
}

// childRuns are the runs of the child in one call: they share the call's
// context and arguments, and add up what they spend.
type childRuns struct {
	t     *SubAgentTool
	ctx   context.Context
	args  json.RawMessage
	usage provider.Usage // spent by the runs so far
	// budget is the tokens set aside for the runs from the parent's
	// budget, -1 when none were; costShare the call's share of what the
	// parent may still spend (0: none), and cost what the runs spent of it.
	budget    int64
	costShare float64
	cost      float64
	// checks counts the guardrail checks made, which name their
	// decisions in the invocation's part of a turn's journal.
	checks int
	// recheck, under a policy, checks the hand-off of the corrective run
	// (its zero value, without one: none).
	recheck handOffAgain
}

// guard checks text with the tool's guardrails of stage. Under a journal
// each decision is recorded in the invocation's part of it, in the order
// the checks are made, and a run of the turn that runs the invocation
// again (it had not finished) replays it: no check, no event, again.
func (r *childRuns) guard(stage policy.Stage, text string, retried bool) (*policy.GuardrailError, provider.Usage, error) {
	js := journalFrom(r.ctx)
	key := ""
	if js != nil {
		r.checks++
		key = js.Prefix + "g" + strconv.Itoa(r.checks)
	}
	// A judge (Judge) runs its model inside this call, as a run of the
	// call's: it spends of what the call's runs have left of the call's
	// share, which the call holds, as a corrective run does. (Drawing,
	// as a run the user's tool starts, on what the call's share has left
	// found it empty, all of it taken for the child: under any token
	// limit the judge could not make its call.)
	// What the judge costs is counted in what the call's runs spent, so
	// that a corrective run gets what both left and the call settles its
	// share with it (its tokens come back in the usage returned).
	tokens, dollars := r.left()
	ctx, _ := run.ForRun(r.ctx, tokens, dollars)
	ctx, spent := ledger.With(ctx)
	fail, u, err := r.t.cfg.guards.Journaled(ctx, js, key, stage, text, r.t.def.Name, retried)
	for _, m := range spent.Entries() {
		r.cost += m.Cost
	}
	return fail, u, err
}

// answer runs the child on in and, when the tool validates or guards its
// answer, checks it (review); a rejected answer gets one corrective run,
// checked in turn. It returns the last run's output and the verdict on
// its answer (zero when the tool does not validate). An answer a
// guardrail fails for good is an error: a tripwire's, which stops the
// parent's run, or the child's failure, which its model reads.
func (r *childRuns) answer(in agent.Input) (out agent.Output, v verdict, err error) {
	c := r.t.cfg.check
	guarded := r.t.cfg.guards.Has(policy.Output)
	if c == nil && !guarded {
		out, err = r.attempt(in)
		return out, verdict{}, err
	}
	first := in
	if c != nil {
		// The child is told the shape on its first try: through the
		// provider's structured output where it has one, and in words.
		first.ResponseSchema = c.schema.Raw()
		if !r.t.shapeTold && in.Text != "" {
			// (A run that goes on from a conversation, Rerun's, was told
			// in its task.)
			first.Text = joinPrompts(in.Text, c.prompt)
		}
	}
	if out, err = r.attempt(first); err != nil {
		return out, verdict{}, err
	}
	v, fail, err := r.review(out, false)
	switch {
	case err != nil:
		return out, v, err
	case fail != nil && (fail.Tripwire || out.Partial):
		// A partial answer is not corrected: its run has no budget left.
		return out, v, r.guardFailed(fail, unretriedPartial)
	case v.problem == nil && fail == nil:
		return out, v, nil
	case out.Partial:
		r.rejected(v.problem, false)
		return out, v, nil
	}
	answered := out
	task := in
	if in.Text == "" && len(in.Messages) > 0 {
		// A run that went on from a conversation (Rerun) is corrected as
		// a fresh child is: told its task again, with the rejected answer.
		task = agent.Input{Text: in.Messages[0].Content, CacheKey: in.CacheKey}
	}
	if r.spentShare() {
		if fail != nil {
			return answered, v, r.guardFailed(fail, unretriedShare)
		}
		r.rejected(v.problem, false)
		return answered, v, errNoRetry
	}
	var note string
	if v.problem != nil {
		note = c.correction(v.problem)
	} else {
		note = guardrail.Note(fail)
		if c != nil {
			note += "\n" + c.prompt
		}
	}
	retry := r.t.correction(task, out.Answer, note)
	if r.recheck.pol != nil {
		// The corrective run hands the child a task of its own: the
		// policy decides on it as on the first.
		if retry, err = r.recheck.check(r.t, retry); err != nil {
			switch {
			case !tool.IsCorrectable(err):
				return answered, v, err // a question not answered yet
			case fail != nil:
				return answered, v, r.guardFailed(fail, "the policy refused the corrective hand-off: "+err.Error())
			}
			r.rejected(v.problem, false)
			return answered, v, &retryRefused{err: err}
		}
	}
	r.rejected(v.problem, true)
	if out, err = r.attempt(retry); err != nil {
		if errors.Is(err, agent.ErrUsageLimit) && out.TotalUsage().Requests == 0 && r.ctx.Err() == nil {
			// The corrective run could not pay for a model call.
			if fail != nil {
				return answered, v, r.guardFailed(fail, unretriedShare)
			}
			return answered, v, errNoRetry
		}
		if len(out.Messages) == 0 {
			// The corrective run did not start (no budget left): what the
			// child said is in the first.
			out = answered
		}
		return out, verdict{}, err
	}
	v, fail, err = r.review(out, true)
	if err == nil && fail != nil {
		err = r.guardFailed(fail, "")
	}
	if err == nil {
		r.rejected(v.problem, false)
	}
	return out, v, err
}

// rejected emits a ValidationEvent for an answer the validator rejected
// with problem; nil problem (the answer fit) emits nothing.
func (r *childRuns) rejected(problem error, retry bool) {
	if problem == nil {
		return
	}
	em := event.From(r.ctx)
	if !em.Enabled() {
		return
	}
	v := struct {
		Verdict string `json:"verdict"`
		Problem string `json:"problem"`
	}{"fail", textcap.Cap(problem.Error(), 1024)}
	if retry {
		v.Verdict = "retry"
	}
	b, _ := json.Marshal(v)
	em.Emit(event.Event{Type: event.Custom, Name: ValidationEvent, Value: b})
}

// review checks an answer: against the tool's schema, when it validates,
// then, when it fits, with the tool's output guardrails (retried: the
// answer is a correction). A guardrail's failure is fail; the checks'
// usage counts in the call's.
func (r *childRuns) review(out agent.Output, retried bool) (v verdict, fail *policy.GuardrailError, err error) {
	if r.t.cfg.check != nil {
		if v, err = r.check(out.Answer); err != nil || v.problem != nil {
			return v, nil, err
		}
	}
	if !r.t.cfg.guards.Has(policy.Output) {
		return v, nil, nil
	}
	fail, spent, err := r.guard(policy.Output, out.Answer, retried)
	r.usage = r.usage.Add(spent)
	if err != nil {
		err = tool.Correctable(fmt.Errorf("%w: %q: %w", ErrChildFailed, r.t.def.Name, err))
	}
	return v, fail, err
}

// guardInput checks the child's task with the tool's input guardrails,
// before the child starts: a failure trips, and the child never runs.
func (r *childRuns) guardInput(in agent.Input) error {
	text := in.Text
	if text == "" && len(in.Messages) > 0 {
		text = in.Messages[0].Content // Rerun's task
	}
	fail, spent, err := r.guard(policy.Input, text, false)
	r.usage = r.usage.Add(spent)
	switch {
	case err != nil:
		return tool.Correctable(fmt.Errorf("%w: %q: %w", ErrChildFailed, r.t.def.Name, err))
	case fail != nil:
		return r.guardFailed(fail, "")
	}
	return nil
}

// guardFailed is the error of a call a guardrail failed: a tripwire's is
// not correctable, so that it stops the parent's run, and every run above
// it, without any model reading what tripped it; an answer still failed
// after its correction fails the child, as a validation that fails twice
// does, and the parent's model reads why (not the answer).
func (r *childRuns) guardFailed(fail *policy.GuardrailError, unretried string) error {
	if fail.Tripwire {
		return fmt.Errorf("subagent %q: %w", r.t.def.Name, fail)
	}
	fail.Unretried = unretried // why it was not corrected, "" when it was
	return tool.Correctable(fmt.Errorf("%w: %q: %w", ErrChildFailed, r.t.def.Name, fail))
}

// Why a rejected answer the corrective run could have fixed was not sent
// back (policy.GuardrailError.Unretried).
const (
	unretriedShare   = "the sub-agent's share of its parent's budget could not pay for a corrected answer"
	unretriedPartial = "the sub-agent's answer was partial, given at its limit"
)

// errNoRetry: the call's share of its parent's budget cannot pay for the
// corrective run of a rejected answer.
var errNoRetry = errors.New("subagent: no budget left for a corrective retry")

// retryRefused: the policy refused the hand-off of the corrective run of
// a rejected answer (err: the denial or the person's refusal).
type retryRefused struct{ err error }

func (e *retryRefused) Error() string {
	return "subagent: the corrective retry was refused: " + e.err.Error()
}
func (e *retryRefused) Unwrap() error { return e.err }

// spentShare reports whether the runs have spent the call's share of its
// parent's budget, tokens or dollars, so that no further run can start.
func (r *childRuns) spentShare() bool {
	tokens := r.budget
	if r.t.limited != nil {
		tokens = r.t.budget
	}
	return tokens >= 0 && r.usage.Tokens() >= tokens || r.costShare > 0 && r.cost >= r.costShare
}

// attempt makes one run of the child and adds what it spent to the call's
// usage. The child's own failure is correctable: the parent's model reads
// it; a cancellation or an interrupt goes up as it is.
// left is what the call's runs have left of the call's share, in tokens
// (-1: no share) and dollars (0: none), for the next run: a corrective
// run gets what the first left, and when none is left, a tiny positive
// amount of dollars (0 would be no limit).
func (r *childRuns) left() (tokens int64, dollars float64) {
	tokens = -1
	if r.budget >= 0 {
		tokens = max(r.budget-r.usage.Tokens(), 0)
	}
	if r.costShare > 0 {
		dollars = max(r.costShare-r.cost, 1e-12)
	}
	return tokens, dollars
}

func (r *childRuns) attempt(in agent.Input) (agent.Output, error) {
	a, closer, err := r.build()
	if err != nil {
		return agent.Output{}, err
	}
	if closer != nil {
		defer closer.Close()
	}
	tokens, dollars := r.left()
	ctx, recorded := run.ForRun(r.ctx, tokens, dollars)
	out, err := a.Run(ctx, in)
	r.usage = r.usage.Add(out.TotalUsage())
	r.cost += out.Cost
	if u, dollars := recorded.Counted(); out.Earlier != u {
		// An agent that reports a part spent before a resume and did not
		// record it as a React does (a remote agent): recorded for it, so
		// that the parent's Earlier holds it too.
		run.AddEarlier(r.ctx, usage.Less(out.Earlier, u), max(out.EarlierCost-dollars, 0))
	}
	if err != nil && r.ctx.Err() == nil && !interrupted(err) && !guardrail.Tripped(err) {
		// (A tripwire below stops every run up to the top.)
		err = tool.Correctable(fmt.Errorf("%w: %q: %w", ErrChildFailed, r.t.def.Name, err))
	}
	return out, err
}

// build returns the agent for one run: the resident; a fork built with
// what the runs before it left of its budget; or the factory's agent, with
// itself as the io.Closer to close after the run when it is one.
func (r *childRuns) build() (agent.Agent, io.Closer, error) {
	t, name := r.t, r.t.def.Name
	switch {
	case t.resident != nil:
		return t.resident, nil, nil
	case t.limited != nil:
		left := t.budget - r.usage.Tokens()
		if left <= 0 {
			return nil, nil, tool.Correctable(fmt.Errorf("%w: %w: %q spent its budget of %d tokens before it could try again: give it a smaller task",
				ErrChildFailed, agent.ErrUsageLimit, name, t.budget))
		}
		a, err := t.limited(left)
		if err != nil {
			return nil, nil, fmt.Errorf("subagent %q: building the agent: %w", name, err)
		}
		return a, nil, nil
	}
	a, err := t.factory(r.ctx, r.args)
	switch {
	case err != nil && tool.IsCorrectable(err):
		return nil, nil, fmt.Errorf("subagent %q: %w", name, err)
	case err != nil:
		return nil, nil, fmt.Errorf("subagent %q: building the agent: %w", name, err)
	case a == nil:
		return nil, nil, fmt.Errorf("subagent %q: the factory returned no agent and no error", name)
	}
	closer, _ := a.(io.Closer)
	return a, closer, nil
}

// check checks an answer against the tool's schema. It fails only when
// the call's context ends first.
func (r *childRuns) check(answer string) (verdict, error) {
	v, err := r.t.cfg.check.check(r.ctx, answer)
	if err != nil {
		return verdict{}, fmt.Errorf("subagent %q: checking the answer: %w", r.t.def.Name, err)
	}
	return v, nil
}

// correction is the input of the corrective run, after the answer to in
// was rejected with note. A resident remembers the task and its answer;
// a child built for the call is told both again.
func (t *SubAgentTool) correction(in agent.Input, answer, note string) agent.Input {
	retry := agent.Input{Text: note, CacheKey: in.CacheKey}
	if c := t.cfg.check; c != nil {
		retry.ResponseSchema = c.schema.Raw()
	}
	if t.resident == nil {
		retry.Text = in.Text + "\n\n" + retry.Text + "\nYour rejected answer was:\n" + answer
		retry.Messages = in.Messages
		retry.Fork = in.Fork // a context fork is corrected from the same prefix
	}
	return retry
}

// accept returns the content and the value of the call's result, from the
// child's last answer and, when the tool validates, the verdict on it. An
// answer still invalid after the correction is passed on with a note
// saying what is wrong, or, under WithReport, as a failed Report; under
// WithReport an answer with no JSON at all fails the call.
func (t *SubAgentTool) accept(answer string, v verdict) (content string, value any, err error) {
	c := t.cfg.check
	switch {
	case c == nil:
		return answer, nil, nil
	case v.problem == nil:
		return v.raw, v.value, nil
	case c.result && !v.found:
		return "", nil, tool.Correctable(fmt.Errorf("%w: %q answered twice without the JSON result asked for: %s",
			ErrNoJSON, t.def.Name, clip(answer, 200)))
	case c.result:
		r := Report{Status: ReportFailed, Summary: answer}
		return fitResult(r, t.cfg.maxOutput), r, nil
	default:
		return withNote(answer, v.problem.Error(), t.cfg.maxOutput), nil, nil
	}
}

// deliver hands o to WithOutcome's hook and returns the call's result:
// o's content, or what WithRender makes of o, capped. A child that ignored its cancellation does not get to
// answer, and a resident's conversation does not keep the turn.
func (t *SubAgentTool) deliver(ctx context.Context, o Outcome) (tool.Result, error) {
	if t.cfg.onOutcome != nil {
		t.cfg.onOutcome(ctx, o)
	}
	content := o.Content
	if t.cfg.render != nil {
		var err error
		if content, err = t.cfg.render(ctx, o); err != nil {
			return tool.Result{}, fmt.Errorf("subagent %q: rendering the result: %w", t.def.Name, err)
		}
	}
	if ctx.Err() != nil {
		return tool.Result{}, fmt.Errorf("subagent %q: %w", t.def.Name, context.Cause(ctx))
	}
	if content == "" {
		content = "(the sub-agent gave an empty answer)"
	}
	return tool.Result{Content: textcap.Cap(content, t.cfg.maxOutput), Value: o.Value}, nil
}

// withNote returns the answer followed by the validation note, in at most
// limit bytes: the answer is cut, never the note, which the model needs to
// know that the answer is not what it asked for. A note longer than a
// quarter of limit is cut itself.
func withNote(answer, problem string, limit int) string {
	const open, end = "\n\n[validation failed: ", "]"
	room := max(limit/4-len(open)-len(end), 0)
	if len(problem) > room {
		cut := max(room-len("…"), 0)
		for cut > 0 && !utf8.RuneStart(problem[cut]) {
			cut--
		}
		problem = problem[:cut] + "…"
	}
	note := open + problem + end
	return textcap.Cap(answer, limit-len(note)) + note
}

// cappedError is an error whose text is cut to the output cap; errors.Is
// and errors.As still see the whole chain.
type cappedError struct {
	err error
	msg string
}

func (e *cappedError) Error() string { return e.msg }
func (e *cappedError) Unwrap() error { return e.err }

// capError caps the text of err at limit bytes, like an answer.
func capError(err error, limit int) error {
	msg := err.Error()
	if len(msg) <= limit {
		return err
	}
	return &cappedError{err: err, msg: textcap.Cap(msg, limit)}
}

// fitResult encodes r in at most max bytes, shortening its summary (and
// saying so) rather than cutting the JSON, so that what the model reads
// stays a Report.
func fitResult(r Report, limit int) string {
	b, _ := json.Marshal(r)
	for len(b) > limit && r.Summary != summaryCut {
		// Each byte of summary cut takes at least one byte of JSON away.
		keep := max(0, len(r.Summary)-(len(b)-limit)-len(summaryCut))
		for keep > 0 && !utf8.RuneStart(r.Summary[keep]) {
			keep--
		}
		r.Summary = r.Summary[:keep] + summaryCut
		b, _ = json.Marshal(r)
	}
	return string(b)
}

const summaryCut = " [truncated]"

func clip(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…"
}
