package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/journal/stored"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// A run under a journal (subagent.WithJournal) records, by itself, each
// answer its model gives and each tool call's result, keyed by their place
// in the turn (the run, the step, the call's index), and a run of the same
// turn again replays them: a recorded answer is not asked for again (no
// provider call, no events: whoever watched the first run has them; what
// it cost counts again, as spent before, see ledger.go), and a recorded
// call is not run again, so that a side effect
// happens once however often the turn is resumed or recovered. The calls
// keep the ids the first run gave them, whatever ids the provider sends
// the next time. A call that asked for input, failed with a Go error, or
// was cancelled is not recorded: it runs again. So does a call of a
// tool.Rerunner that asks for it.

// runJournal is a run's part of its turn's journal.
type runJournal struct {
	scope *journal.Scope
	key   string // the run's key; its steps hang under it
}

// journalFor returns the run's part of the journal under ctx, or nil.
func (r *React) journalFor(ctx context.Context) *runJournal {
	js := journal.From(ctx)
	if js == nil {
		return nil
	}
	return &runJournal{scope: js, key: js.Next("run." + r.name)}
}

func (j *runJournal) stepKey(step int) string { return journal.StepKey(j.key, step) }

func callKey(stepKey string, i int) string { return stepKey + "/c" + strconv.Itoa(i) }

// recordedCall is a tool call as a recorded answer keeps it: the arguments
// as text, malformed ones too.
type recordedCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// recordedAnswer is the stored form of a model's answer beside its text.
type recordedAnswer struct {
	ToolCalls  []recordedCall      `json:"tool_calls,omitempty"`
	StopReason provider.StopReason `json:"stop_reason,omitempty"`
	Model      string              `json:"model,omitempty"`
	// WrapUp: the answer ended its run as a wrap-up turn (its tool calls
	// are not run).
	WrapUp bool `json:"wrap_up,omitempty"`
	// Unpaid is how many of the last calls the run could not pay to read
	// the results of: they are not run (readable); the last Unread of
	// them are left out of what the model reads.
	Unpaid int `json:"unpaid,omitempty"`
	Unread int `json:"unread,omitempty"`
	// Over is what the call passed its run's limits by, when it took the
	// tree's turn as one that may (run.Uncovered): a run of the turn again
	// starts the tree's debt from the sum of them (runJournal.overdrawn).
	Over *overdrawn `json:"over,omitempty"`
}

// answer returns the model answer recorded for the step, if any.
func (j *runJournal) answer(step string) (provider.Response, bool) {
	e, ok := j.scope.J.Lookup(step)
	if !ok {
		return provider.Response{}, false
	}
	var a recordedAnswer
	if err := json.Unmarshal(e.Value, &a); err != nil {
		return provider.Response{}, false // an entry this code cannot read is asked again
	}
	msg := provider.AssistantMessage(e.Content)
	for _, c := range a.ToolCalls {
		var args json.RawMessage
		if c.Arguments != "" {
			args = json.RawMessage(c.Arguments)
		}
		msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
	}
	// The usage is what the answer cost when it was asked for: the run
	// does not count it again, it only estimates the next request by it.
	return provider.Response{Message: msg, StopReason: a.StopReason, Model: a.Model, Usage: e.Usage}, true
}

// wrappedUp reports whether the answer recorded for the step ended its run
// as a wrap-up turn, and what the run could not pay for of its calls
// (readable).
func (j *runJournal) wrappedUp(step string) (wrapUp bool, cut unpaid) {
	e, ok := j.scope.J.Lookup(step)
	if !ok {
		return false, cut
	}
	var a recordedAnswer
	if json.Unmarshal(e.Value, &a) != nil {
		return false, cut
	}
	return a.WrapUp, unpaid{calls: max(a.Unpaid, 0), unread: max(a.Unread, 0)}
}

// recordAnswer records the step's answer, its calls with the ids the run
// gave them, before any of the calls runs, and what it cost (paid, as the
// run's ledger counted it), so that a run of the turn that does not get
// as far as replaying it still counts it (journal.Scope.Paid).
func (j *runJournal) recordAnswer(ctx context.Context, step string, resp provider.Response, msg provider.Message, wrapUp bool, cut unpaid, paid provider.ModelUsage, over overdrawn) error {
	// The model is the one the answer was counted under: the reply's, or,
	// when the reply names none, the one its request named (a context
	// fork's parent's) or the provider's default, so that a run of the
	// turn again counts it under the same model and price, and does not
	// take what it paid for as not replayed.
	a := recordedAnswer{StopReason: resp.StopReason, Model: cmp.Or(resp.Model, paid.Model), WrapUp: wrapUp, Unpaid: cut.calls, Unread: cut.unread}
	if over != (overdrawn{}) {
		a.Over = &over
	}
	for _, c := range msg.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, recordedCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
	}
	value, _ := json.Marshal(a) // strings only: it cannot fail
	e := journal.Entry{Content: msg.Content, Value: value, Usage: resp.Usage}
	if !paid.Usage.IsZero() {
		e.Models = []provider.ModelUsage{paid}
	}
	if err := j.scope.J.Record(ctx, step, e); err != nil {
		return fmt.Errorf("recording the model's answer in the journal: %w: resume the turn when the store is back", err)
	}
	return nil
}

// replayed returns the results recorded for the step's calls, by index
// (ok false: run it). A recorded result carries what the call spent when
// it ran, which counts again, as spent before, in the run of ctx (see
// ledger.Replay).
func (j *runJournal) replayed(ctx context.Context, step string, calls []provider.ToolCall) (results []tool.Result, ok []bool) {
	results, ok = make([]tool.Result, len(calls)), make([]bool, len(calls))
	for i := range calls {
		e, found := j.scope.J.Lookup(callKey(step, i))
		if !found {
			continue
		}
		ok[i] = true
		ledger.Replay(ctx, e.Usage, e.Models)
		results[i] = tool.Result{Content: e.Content, Usage: e.Usage}
		if e.Error != "" {
			results[i] = tool.Result{Content: e.Error, IsError: true, Usage: e.Usage}
		}
		if len(e.Value) > 0 {
			results[i].Value = e.Value
		}
	}
	return results, ok
}

// callRecorder journals the results of one step's calls as they finish.
type callRecorder struct {
	j     *runJournal
	step  string
	index map[string]int // call id → its index in the step
	tools *tool.Registry
	inner tool.CallHook // the tracing hook, or nil

	mu    sync.Mutex
	waits []func(context.Context) error
	// started holds the index of each call that began; extra, by index,
	// what a call counted of what the runs before paid for it and it did
	// not replay (see hook).
	started map[int]bool
	extra   map[int]provider.Usage
}

// recordSpent records what a call that stopped unfinished (cancelled,
// waiting for an answer, failed with a Go error) has paid for over the
// runs of its turn, under the call's scope (journal.Scope.Spent), so that
// a later run counts it once: the call's own when it runs the call again,
// the run's when it does not. It writes even when ctx has ended, within a
// bound; a record that does not land leaves that spending uncounted by
// the later runs, and nothing else.
func (j *runJournal) recordSpent(ctx context.Context, key string, usage provider.Usage, spent *ledger.Ledger) {
	models := spent.Entries()
	if len(models) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = j.scope.J.Record(wctx, j.scope.Spent(key), journal.Entry{Usage: usage, Models: models})
}

// hook gives each call its own part of the journal — the scope of what it
// records itself (the answers its questions get, the sub-agent it runs) —
// and records its result when it finished.
func (c *callRecorder) hook(ctx context.Context, call tool.Call) (context.Context, func(tool.Result, error)) {
	i := c.index[call.ID]
	key := callKey(c.step, i)
	child := c.j.scope.Child(key)
	again := c.runsAgain(call)
	child.Recorded = !again
	c.mu.Lock()
	c.started[i] = true
	c.mu.Unlock()
	// The call's own ledger: what its model calls cost, per model, is
	// recorded with its result, for the run that replays it to count.
	cctx, spent := ledger.With(journal.With(ctx, child))
	var paid *journal.Entry
	if e, ok := c.j.scope.Paid(key); ok && !again {
		paid = &e
	}
	var inner func(tool.Result, error)
	if c.inner != nil {
		cctx, inner = c.inner(cctx, call)
	}
	return cctx, func(res tool.Result, err error) {
		if paid != nil {
			// What the runs before paid for the call and this one did not
			// replay (it was stopped mid-way, or went another way) counts
			// once, as spent before.
			if u, models := ledger.Unreplayed(paid.Models, spent.Earlier()); len(models) > 0 {
				ledger.Replay(cctx, u, models)
				res.Usage = res.Usage.Add(u)
				c.mu.Lock()
				c.extra[i] = u
				c.mu.Unlock()
			}
		}
		if inner != nil {
			inner(res, err)
		}
		if err != nil && !again {
			// Stopped unfinished: what it paid for is recorded, so that a
			// later run counts it whether or not it runs it again.
			c.j.recordSpent(cctx, key, res.Usage, spent)
		}
		// A call that returned its result has had its effect, even if the
		// run was cancelled meanwhile: it is recorded, so that it does not
		// run again. (A process killed between the two runs it again.)
		if err != nil || again {
			return
		}
		e := journal.Entry{Content: res.Content, Usage: res.Usage, Models: spent.Entries()}
		if res.IsError {
			e = journal.Entry{Error: res.Content, Usage: res.Usage, Models: e.Models}
		}
		if res.Value != nil {
			e.Value, _ = json.Marshal(res.Value) // a value JSON cannot hold is left out
		}
		w := c.j.scope.J.Start(key, e)
		c.mu.Lock()
		c.waits = append(c.waits, w)
		c.mu.Unlock()
	}
}

func (c *callRecorder) runsAgain(call tool.Call) bool {
	t, ok := c.tools.Lookup(call.Name)
	if !ok {
		return false
	}
	r, ok := t.(tool.Rerunner)
	return ok && r.RunsAgain(call)
}

// wait waits for the results' writes, and fails when one did not land.
func (c *callRecorder) wait(ctx context.Context) error {
	var errs []error
	for _, w := range c.waits {
		if err := w(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("recording finished tool calls in the journal: %w: resume the turn when the store is back", err)
	}
	return nil
}

// unusedAnswers is the error of a top-level run resumed with answers it
// did not use, or nil.
func unusedAnswers(ctx context.Context) error {
	ids := tool.UnusedAnswers(ctx)
	if len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the run ended without reaching the calls that asked %v: resume the turn that asked, under its journal (subagent.WithJournal), with the same input", tool.ErrUnusedAnswer, ids)
}

// WithJournal returns a context under which a run records its turn in j, and
// a run of the same turn again (after a crash, or with answers: tool.Resume)
// replays it: recorded model answers and finished tool calls, at any depth,
// are not made again, their cost counted as spent earlier (Output.Earlier).
// Calls are keyed by their place in the turn, whatever ids the provider
// gives. A call that asked for input, failed with a Go error, was cancelled,
// or is a tool.Rerunner asking for it, runs again; a replayed Result.Value is
// its JSON. A write the store refuses fails the run. Delete the journal of a
// turn that ended unsuspended (store.DeleteJournal). See docs/durable.md.
func WithJournal(ctx context.Context, j *store.Journal) context.Context {
	if j == nil {
		return ctx
	}
	return journal.With(ctx, stored.New(j))
}

// has reports whether the journal holds an entry under key.
func (j *runJournal) has(key string) bool {
	_, ok := j.scope.J.Lookup(key)
	return ok
}

// overdrawn returns what the model calls of the turn's earlier runs that
// took the tree's turn passed their runs' limits by (recordedAnswer.Over),
// in the whole journal of the turn, every run's: the debt the tree's
// calls plan with, as the turn run once would have it. A nil runJournal
// returns nothing.
func (j *runJournal) overdrawn() (tokens int64, dollars float64) {
	if j == nil {
		return 0, 0
	}
	for _, k := range j.scope.J.Keys("") {
		if a, ok := strings.CutSuffix(k, overSuffix); ok && journal.IsAnswer(a) {
			o := j.unrecordedOver(a)
			tokens += max(o.Tokens, 0)
			dollars += max(o.Dollars, 0)
			continue
		}
		if !journal.IsAnswer(k) {
			continue
		}
		e, ok := j.scope.J.Lookup(k)
		if !ok || !bytes.Contains(e.Value, []byte(`"over"`)) {
			continue
		}
		var a recordedAnswer
		if json.Unmarshal(e.Value, &a) != nil || a.Over == nil {
			continue
		}
		tokens += max(a.Over.Tokens, 0)
		dollars += max(a.Over.Dollars, 0)
	}
	return tokens, dollars
}

// joinTree tells the tree of ctx that the run runs under j, before any of
// the run's model calls, so that what the calls of the turn's earlier
// runs passed their limits by counts in the tree's debt (run.RecordedDebt).
//
// A tree's runs can run under journals of their own (a worker under
// WithJournal of its own), and a run of the tree again may start such a
// run late, after other calls of the tree have planned. So the journal of
// the tree's top run names each other journal, kept in the same store,
// that a run of the tree runs under, before that run's first call; and
// the top run, as it begins, counts the debt of every journal it names,
// before any call of the tree plans. A name that cannot be written (the
// store failed, or the top run has ended), or a journal that cannot be
// read, leaves that debt out of the tree's plans until a run under the
// journal begins, and nothing else.
func (j *runJournal) joinTree(ctx context.Context) {
	turn := j.scope.J.Turn()
	tj := run.TreeLocal(ctx, treeJournalsKey{}, func() any { return &treeJournals{named: map[string]bool{}} }).(*treeJournals)
	st := stored.Store(j.scope)
	if run.Parent(ctx) == "" {
		tj.mu.Lock()
		tj.home = j
		tj.mu.Unlock()
		run.OnEnd(ctx, func() provider.Usage {
			// A run of the tree that outlives its top run (a thread's
			// job) names nothing in a journal whose turn has ended, and
			// may be gone.
			tj.mu.Lock()
			tj.home = nil
			tj.mu.Unlock()
			return provider.Usage{}
		})
		if st != nil {
			for _, k := range j.scope.J.Keys(journalsPrefix) {
				e, ok := j.scope.J.Lookup(k)
				if !ok || e.Content == turn {
					continue
				}
				other, err := st.Journal(ctx, e.Content)
				if err != nil {
					continue
				}
				run.RecordedDebt(ctx, e.Content, (&runJournal{scope: stored.New(other)}).overdrawn)
				tj.mu.Lock()
				tj.named[e.Content] = true
				tj.mu.Unlock()
			}
		}
	}
	run.RecordedDebt(ctx, turn, j.overdrawn)
	tj.mu.Lock()
	home := tj.home
	named := home == nil || st == nil || stored.Store(home.scope) != st || home.scope.J.Turn() == turn || tj.named[turn]
	tj.named[turn] = true
	tj.mu.Unlock()
	if named {
		return
	}
	sum := sha256.Sum256([]byte(turn))
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = home.scope.J.Record(wctx, journalsPrefix+hex.EncodeToString(sum[:16]), journal.Entry{Content: turn})
}

// treeJournals is what the runs of a tree know of the journals they run
// under (joinTree): the journal of the tree's top run, nil when it has
// none, and the journals it names.
type treeJournals struct {
	mu    sync.Mutex
	home  *runJournal
	named map[string]bool
}

type treeJournalsKey struct{}

// journalsPrefix starts the keys of the entries, in the journal of a
// tree's top run, that name another journal a run of the tree ran under
// (joinTree): the entry's Content is the journal's turn.
const journalsPrefix = "journals/"

// overSuffix follows the key of a model answer (journal.StepKey,
// SummaryKey) in the key of what its calls that were paid for and not
// recorded passed their runs' limits by (recordOver).
const overSuffix = "/over"

// recordOver records what model calls at the answer key passed their
// run's limits by, over, when their answer is not recorded (an empty
// reply, a call that failed or was cancelled after it was paid for, a
// summary that failed): added to what earlier runs of the turn recorded
// there, so that a run of the turn again starts the tree's debt with it
// (overdrawn), as it does with a recorded answer's. It writes even when
// ctx has ended, within a bound; a record that does not land leaves that
// debt out of the later runs' plans, and nothing else.
func (j *runJournal) recordOver(ctx context.Context, answer string, over overdrawn) {
	if over == (overdrawn{}) {
		return
	}
	before := j.unrecordedOver(answer)
	over.Tokens += max(before.Tokens, 0)
	over.Dollars += max(before.Dollars, 0)
	value, _ := json.Marshal(over) // numbers only: it cannot fail
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = j.scope.J.Record(wctx, answer+overSuffix, journal.Entry{Value: value})
}

// unrecordedOver returns what recordOver recorded for the answer key.
func (j *runJournal) unrecordedOver(answer string) (over overdrawn) {
	if e, ok := j.scope.J.Lookup(answer + overSuffix); ok {
		_ = json.Unmarshal(e.Value, &over) // an entry this code cannot read counts nothing
	}
	return over
}
