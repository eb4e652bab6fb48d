package agent

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// replyCeiling bounds a reply under a token or cost limit when WithMaxTokens
// does not: the output bound sent with every call under a limit must be one
// every model accepts (older models write at most 4,096 tokens, and some
// APIs refuse a larger bound).
const replyCeiling = 4096

// callPlan is what a run's budget allows its next model call: the output
// bound sent with it (0: the provider's default), whether it is the run's
// wrap-up turn, and the budget note that goes last in its messages ("":
// none).
type callPlan struct {
	maxTokens int
	wrapUp    bool
	note      string
	// bounded: the output bound is the budget's, so a reply cut there
	// ended the run's budget, not only its length.
	bounded bool
}

// plan reserves the next model call's tokens and dollars before it is
// made: the call goes only if its estimated input and the output it may
// produce fit what the run, and every run it is inside, has left, and what
// it may produce is sent as its output bound (provider.Request.MaxTokens),
// so that no reply passes it. A run whose answer its parent reads again
// (run.ReadBack) keeps room for that reading too: its bound is half of
// what is left after the input. A call that offers tools keeps room for
// the call after it to read its reply again and wrap up (follow). The
// call is a wrap-up turn when a second call like it would not fit after
// it, when it could not write one tool call that the next could read, or
// when the last reply asked for calls the run could not pay to read
// (unpaid). fixed is what the system prompt, tool definitions and
// response schema weigh, in bytes; tools are what the call offers.
//
// A call whose worst case does not fit what is left (its input at a token
// a byte of what the estimate counts at four, and its output bound) may
// pass the run's limits by its estimation error: it waits until no other
// such call of the tree is in flight, and is planned again with what such
// calls passed their runs' limits by taken off what is left (run.Uncovered),
// so that the tree passes its limits by at most the error of one call.
// The call ends that turn with what it spent (endOverdraft).
func (s *runState) plan(fixed int64, tools []provider.ToolDef) (callPlan, error) {
	lim := s.limits()
	if !lim.tokens && !lim.cost {
		return callPlan{maxTokens: s.r.maxTokens}, nil
	}
	p, covered, err := s.planIn(lim, fixed, tools)
	if err != nil || covered {
		return p, err
	}
	lim, od, err := s.overdrawn()
	if err != nil {
		return p, err
	}
	if p, _, err = s.planIn(lim, fixed, tools); err != nil {
		od.Done(0, 0)
		return p, err
	}
	s.od = od
	return p, nil
}

// overdrawn takes the turn of a call whose worst case what the run has
// left cannot pay for (run.Uncovered), once no other such call of the
// tree is in flight, and returns what is left, read again then, less what
// such calls passed their runs' limits by so far: what the call is
// planned with. The call ends the turn with Done.
func (s *runState) overdrawn() (left, *run.Overdraft, error) {
	od, err := run.Uncovered(s.ctx)
	if err != nil {
		return left{}, nil, err
	}
	lim := s.limits()
	leftTokens, leftDollars := int64(math.MaxInt64), math.Inf(1)
	debt, debtDollars := od.Debt()
	if lim.tokens {
		leftTokens, lim.n = lim.n, lim.n-debt
	}
	if lim.cost {
		leftDollars, lim.dollars = lim.dollars, lim.dollars-debtDollars
	}
	od.Left(leftTokens, leftDollars)
	return lim, od, nil
}

// endOverdraft ends the turn of a call planned as one that may pass the
// run's limits (plan), with what the call spent, resp at req, and returns
// what the call passed the run's limits by, which its answer's record
// keeps (recordedAnswer.Over).
func (s *runState) endOverdraft(req provider.Request, resp provider.Response) (over overdrawn) {
	if s.od == nil {
		return over
	}
	dollars, _, _ := s.price(req, resp)
	over.Tokens, over.Dollars = s.od.Done(resp.Usage.Tokens(), dollars)
	s.od = nil
	return over
}

// overdrawn is what a model call passed its run's limits by, in tokens
// and in dollars (run.Overdraft.Done).
type overdrawn struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
}

// pricedAs returns the provider and the model whose price the run's next
// call is reserved at: the model that answered its last call (before its
// first, the one that answered its parent's last call when the run's calls
// ask what the parent's ask: run.Answered), else the one its request
// names — a context fork asks its parent's model, whose cache holds the
// prefix, whatever the fork's own agent would ask — else the agent's or
// its provider's default.
func (s *runState) pricedAs() (providerName, model string) {
	providerName, model = s.r.askedAs(s.fork)
	if s.lastModel != "" {
		model = s.lastModel
	}
	return providerName, model
}

// asked returns what the run's calls ask and the model that answered the
// last (run.Asked), made again only when that model changes.
func (s *runState) asked() *run.Asked {
	if s.askedLast == nil || s.askedLast.Answered != s.lastModel {
		providerName, model := s.r.askedAs(s.fork)
		s.askedLast = &run.Asked{Provider: providerName, Model: model, Answered: s.lastModel}
	}
	return s.askedLast
}

// askedAs returns the provider and the model the calls of a run of r ask:
// for a context fork (fork), its parent's model when the parent's request
// names one; else the agent's or its provider's default.
func (r *React) askedAs(fork *provider.Request) (providerName, model string) {
	providerName, model = r.spanIdentity()
	if fork != nil && fork.Model != "" {
		model = fork.Model
	}
	return providerName, model
}

// planIn is plan with what is left, lim: the plan, and whether the call's
// worst case fits lim (covered).
func (s *runState) planIn(lim left, fixed int64, tools []provider.ToolDef) (callPlan, bool, error) {
	r := s.r
	p := callPlan{maxTokens: r.maxTokens}
	name, model := s.pricedAs()
	base := s.estimate(fixed)
	p.note = s.budgetNote(false)
	est := base + (int64(len(p.note))+3)/4
	out := s.room(lim, est, name, model, s.readBack)
	last := s.unpaid || out < est+2*max(s.lastOut, 1)+1 // after this call, one like it would not fit
	if !last && len(tools) > 0 {
		// A reply of tool calls is read again by the next call: the
		// bound leaves room for that call to read it and wrap up.
		f := s.follow(lim, est, name, model)
		last = f < run.CallTokens(tools)
		out = min(out, f)
	}
	if last {
		// This is the last call.
		p.wrapUp = true
		p.note = s.budgetNote(true)
		est = base + (int64(len(p.note))+3)/4
		out = s.room(lim, est, name, model, s.readBack)
		// The cost limit, not the token limit, makes this the last call
		// when it leaves less room: wrappedUp names it.
		tokensOnly := lim
		tokensOnly.cost = false
		s.wrapByCost = lim.cost && out < s.room(tokensOnly, est, name, model, s.readBack)
	}
	if out < 1 {
		return p, false, s.noRoom(est, lim)
	}
	ceiling := int64(r.maxTokens)
	if ceiling == 0 {
		ceiling = replyCeiling
	}
	p.maxTokens = int(min(out, ceiling))
	p.bounded = out <= ceiling
	return p, s.covers(lim, s.worst(fixed)+int64(len(p.note)), int64(p.maxTokens), name, model), nil
}

// worst is the most the next request, whose system prompt and tool
// definitions weigh fixed bytes, may read (its note aside): what the
// provider counted so far and a token a byte of what was added since
// (estimate counts a token per four bytes).
func (s *runState) worst(fixed int64) int64 {
	if s.reported > 0 {
		return s.reported + s.bytes - s.reportedBytes
	}
	return fixed + s.bytes
}

// covers reports whether lim pays for a call to model of providerName
// reading in tokens and writing out.
func (s *runState) covers(lim left, in, out int64, providerName, model string) bool {
	if lim.tokens && in+out > lim.n {
		return false
	}
	if lim.cost {
		if price, ok := run.ReservePriceOf(s.ctx, providerName, model); ok {
			return float64(in)*price.Input+float64(out)*price.Output <= lim.dollars
		}
	}
	return true
}

// left is what a run may still spend, read once before a model call.
type left struct {
	tokens, cost bool    // whether a token, a cost limit bounds the run
	n            int64   // tokens left
	dollars      float64 // dollars left
}

// limits reads what the run, and every run it is inside, has left: of its
// token limit, its sub-agents' included, less what is set aside for work
// running beside it (a background job's share); of its cost limit.
func (s *runState) limits() left {
	var l left
	if s.limit > 0 {
		run.SetUsed(s.ctx, s.spent())
		l.n, l.tokens = run.TokensLeft(s.ctx)
	}
	l.dollars, l.cost = run.CostLeft(s.ctx)
	return l
}

// room returns how many output tokens what is left pays for after a call
// to model of providerName estimated to read est tokens; with readBack,
// after its reply is read once more, as input, by the parent. A model the
// prices lack is reserved at the dearest price they hold
// (run.ReservePriceOf).
func (s *runState) room(l left, est int64, providerName, model string, readBack bool) int64 {
	out := int64(math.MaxInt64)
	if l.tokens {
		out = l.n - est
		if readBack {
			out = floorHalf(out)
		}
	}
	if l.cost {
		if l.dollars <= 0 {
			return min(out, 0)
		}
		if price, ok := run.ReservePriceOf(s.ctx, providerName, model); ok {
			per := price.Output
			if readBack {
				per += price.Input
			}
			if per > 0 {
				out = min(out, int64(math.Floor((l.dollars-float64(est)*price.Input)/per)))
			} else if float64(est)*price.Input > l.dollars {
				out = min(out, 0)
			}
		}
	}
	return out
}

// follow returns the output bound of a call estimated to read est tokens
// that offers tools: its reply, m tokens, is read again by the next call
// with the wrap-up note, and that call writes a token (two when the run's
// answer is read again), so 2·est + 2·m + note + reply fit what is left.
// The results of the reply's calls are read only as far as what is left
// pays for them (readable).
func (s *runState) follow(l left, est int64, providerName, model string) int64 {
	note := s.wrapUpTokens()
	reply := int64(1)
	if s.readBack {
		reply = 2
	}
	tokens := int64(-1)
	if l.tokens {
		tokens = l.n
	}
	price, priced := provider.Price{}, false
	if l.cost && l.dollars > 0 {
		price, priced = run.ReservePriceOf(s.ctx, providerName, model)
	}
	out := run.FollowBound(tokens, est, note, reply, priced, l.dollars, price, s.readBack)
	if l.cost && l.dollars <= 0 {
		out = min(out, 0) // nothing left to pay with
	}
	return out
}

// unpaid is what a run could not pay for of a reply's calls (readable):
// its last calls are not run, and of those the last unread are left out
// of what the model reads, the others answered with unpaidResult.
type unpaid struct{ calls, unread int }

// unpaidResult is the result of a call its run could not pay to read
// the result of (readable): the call is not run.
const unpaidResult = "not run: the budget could not pay for it"

// readable returns, of the calls of a reply that leaves the next call
// reading est tokens before their results (the reply included), how many
// the run can pay to read the results of, in order (runs): each at least
// what reading the answer of a sub-agent that could not start costs
// (run.Floor), after what the wrap-up reads and a token of its reply (two
// when the run's answer is read again), the calls after them answered
// with unpaidResult; and how many of those it cannot pay to read even
// that of (unread), the last ones, which are left out of what the model
// reads. A run that cannot pay for its wrap-up anyway runs them all.
func (s *runState) readable(est int64, calls []provider.ToolCall) (runs, unread int) {
	lim := s.limits()
	if !lim.tokens && !lim.cost {
		return len(calls), 0
	}
	keep := est + s.wrapUpTokens()
	reply := int64(1)
	if s.readBack {
		reply = 2
	}
	avail := int64(math.MaxInt64) // tokens the results may be read for
	if lim.tokens {
		avail = lim.n - keep - reply
	}
	if lim.cost {
		name, model := s.pricedAs()
		if price, ok := run.ReservePriceOf(s.ctx, name, model); ok && price.Input > 0 {
			rest := lim.dollars - float64(keep)*price.Input - price.Output
			if s.readBack {
				rest -= price.Input
			}
			avail = min(avail, int64(math.Floor(rest/price.Input)))
		}
	}
	return run.Readable(avail, calls, run.RefusalBytes, len(unpaidResult))
}

// nextEstimate is what the run's next call will read before the results
// of msg's calls, msg being the reply just received at usage u: as
// estimate counts it once msg is added and noted (noteReply).
func (s *runState) nextEstimate(fixed int64, msg provider.Message, u provider.Usage) int64 {
	bytes := s.bytes + compact.MsgBytes(msg)
	reported, at := s.reported, s.reportedBytes
	if u.InputTokens > 0 {
		reported, at = u.InputTokens+u.OutputTokens, bytes
	}
	if reported > 0 {
		return reported + (bytes-at+3)/4
	}
	return (fixed + bytes + 3) / 4
}

// floorHalf is n/2 rounded down, negative numbers included.
func floorHalf(n int64) int64 { return n >> 1 }

// noRoom is the error of a run that cannot pay for another model call.
func (s *runState) noRoom(est int64, l left) error {
	if out := l.n - est; l.tokens && (out < 1 || s.readBack && floorHalf(out) < 1) {
		left := l.n
		how := "raise WithTokenLimit or give a smaller task"
		if s.readBack {
			how = "its parent reads its answer out of the same part, so the reply gets half of what is left: " + how
		}
		return fmt.Errorf("%w: %d tokens used, the limit is %d, and the next model call, reading about %d tokens, would leave no room for a reply in the %d left: %s",
			ErrUsageLimit, s.spent(), s.limit, est, left, how)
	}
	return run.CostLimited(fmt.Errorf("%w: the next model call, reading about %d tokens, would leave no room for a reply in the $%.6f the work has left of its cost limit: raise WithCostLimit or give a smaller task",
		ErrUsageLimit, est, max(l.dollars, 0)))
}

// budgetNote is, once a token limit is nearly reached, a note that tells
// the model to wrap up, so that it can return what it has instead of losing
// the work to ErrUsageLimit; for the wrap-up turn (wrapUp), the note that
// this is its last reply; else "".
func (s *runState) budgetNote(wrapUp bool) string {
	lim := s.limit
	if lim == 0 {
		if wrapUp { // by the cost limit
			return costNote
		}
		return ""
	}
	used := s.spent()
	if wrapUp {
		return tokenNote(used, lim)
	}
	if used*5 < lim*4 {
		return ""
	}
	return "Budget note: you have used " + strconv.FormatInt(used, 10) + " of your " + strconv.FormatInt(lim, 10) +
		" tokens. Finish now: answer with what you have, and say plainly what is unfinished (status \"partial\" if you report a status)."
}

// keep is what the run keeps back, as a step's tool calls start, for its
// next model call before their results: the tokens it will read (the
// conversation so far, whose system prompt and tools weigh fixed bytes,
// and the wrap-up note that call carries when it is the run's last) and
// what they cost at the run's prices (run.Step.Share), with the price of
// its model (run.Step.Price). The calls' results are read out of their
// own shares (run.ReadBack), so that what is kept and the share for the
// reply pay for the run's wrap-up however its children spend.
func (s *runState) keep(fixed int64) (tokens int64, dollars float64, price provider.Price) {
	tokens = s.estimate(fixed) + s.wrapUpTokens()
	if _, limited := run.CostLeft(s.ctx); limited {
		name, model := s.pricedAs()
		price, _ = run.ReservePriceOf(s.ctx, name, model)
		dollars = price.Cost(provider.Usage{InputTokens: tokens})
	}
	return tokens, dollars, price
}

// wrapUpTokens is what the longest wrap-up note the run may yet be sent
// weighs, in tokens as the estimate counts them: under a token limit, the
// one that says the whole limit is used (no run within its limit says
// more). It is counted, not written: it is asked before every model call
// of a limited run.
func (s *runState) wrapUpTokens() int64 {
	n := len(costNote)
	if s.limit != 0 {
		n = tokenNoteLen(s.limit, s.limit)
	}
	return (int64(n) + 3) / 4
}

// costLimited reports whether a cost limit bounds the run.
func (s *runState) costLimited() bool {
	_, limited := run.CostLeft(s.ctx)
	return limited
}

// spent is what the run has used so far, its sub-agents' included, and
// what its turn spent before the point a re-run goes on from.
func (s *runState) spent() int64 { return s.usage.Add(s.child).Tokens() + s.before }

// setUsed tells the run's scope what it has used, for the budgets of the
// sub-agents its tools start.
func (s *runState) setUsed() {
	if s.limit > 0 {
		run.SetUsed(s.ctx, s.spent())
	}
}

// checkLimit fails the run once it is past a limit: a reply whose input
// the estimate undercounted can take it there, and then no call is left.
func (s *runState) checkLimit() error {
	if left, limited := run.CostLeft(s.ctx); limited && left < 0 {
		cost, _ := run.Cost(s.ctx)
		return run.CostLimited(fmt.Errorf("%w: the work cost $%.6f, past its cost limit by $%.6f: raise WithCostLimit or give a smaller task", ErrUsageLimit, cost, -left))
	}
	if lim := s.limit; lim > 0 {
		used := s.spent()
		run.SetUsed(s.ctx, used)
		if used > lim {
			return fmt.Errorf("%w: %d tokens used, the limit is %d: raise WithTokenLimit or give a smaller task", ErrUsageLimit, used, lim)
		}
	}
	return nil
}

// costNote is the note of a wrap-up turn under a cost limit alone.
const costNote = "Budget note: another step would pass the money this work may cost. This is your last reply, and no tools are available: answer now with what you have, " +
	"and say plainly what is unfinished (status \"partial\" if you report a status)."

// The parts of tokenNote around its two numbers.
const (
	tokenNoteUsed  = "Budget note: you have used "
	tokenNoteLimit = " of your "
	tokenNoteEnd   = " tokens, and another step would pass the limit. This is your last reply, and no tools are available: answer now with what you have, " +
		"and say plainly what is unfinished (status \"partial\" if you report a status)."
)

// tokenNote is the note of a wrap-up turn under a token limit, having
// used tokens of limit.
func tokenNote(used, limit int64) string {
	return tokenNoteUsed + strconv.FormatInt(used, 10) + tokenNoteLimit + strconv.FormatInt(limit, 10) + tokenNoteEnd
}

// tokenNoteLen is len(tokenNote(used, limit)), counted without writing
// the note.
func tokenNoteLen(used, limit int64) int {
	return len(tokenNoteUsed) + decimalLen(used) + len(tokenNoteLimit) + decimalLen(limit) + len(tokenNoteEnd)
}

// decimalLen is len(strconv.FormatInt(n, 10)).
func decimalLen(n int64) int {
	d := 1
	u := uint64(n)
	if n < 0 {
		d++
		u = -u
	}
	for ; u >= 10; u /= 10 {
		d++
	}
	return d
}

// wrappedUp ends the run with the reply to its wrap-up turn: its text is
// the answer, any tool calls it asked for anyway are dropped (no tools were
// offered). A reply with no text leaves the run at its limit with no
// answer. Under OutputOf the answer's value is kept when it fits; it is
// not corrected, since there is no budget for another call.
func (s *runState) wrappedUp(msg provider.Message, u provider.Usage) (string, bool, error) {
	msg.ToolCalls = nil
	s.setUsed()
	if strings.TrimSpace(msg.Content) == "" {
		if s.limit == 0 || s.wrapByCost { // wrapped up by the cost limit
			cost, _ := run.Cost(s.ctx)
			return "", false, run.CostLimited(fmt.Errorf("%w: the work cost $%.6f, and the last reply, asked to wrap up before it passed its cost limit, had no answer: raise WithCostLimit or give a smaller task",
				ErrUsageLimit, cost))
		}
		return "", false, fmt.Errorf("%w: %d tokens used, the limit is %d, and the last reply, asked to wrap up, had no answer: raise WithTokenLimit or give a smaller task",
			ErrUsageLimit, s.spent(), s.limit)
	}
	s.add(msg)
	s.noteReply(u)
	s.partial = true
	if o := s.r.output; o != nil {
		if v, problem := o.check(s.ctx, msg.Content); problem == nil {
			s.value = v
		}
	}
	return msg.Content, true, nil
}

// toolsBytes is what tool definitions weigh, in bytes, for the estimate
// of a call's input.
func toolsBytes(tools []provider.ToolDef) int64 {
	var n int
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return int64(n)
}
