package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/subcode"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// Persistent is a resident whose conversation can be saved (WithStore).
type Persistent interface {
	Snapshot() ([]byte, error)
	Restore(data []byte) error
	Reset()
}

// Appender is a Persistent agent stored a part at a time (docs/durable.md).
type Appender interface {
	Persistent
	Mark() (epoch uint64, n int)
	SnapshotFrom(n int) ([]byte, error)
	RestoreParts(parts ...[]byte) error
	AppendParts(parts ...[]byte) error
}

// appenderOf returns p as an Appender: itself when it is one, else its
// parts when it opens them to deputy's packages (*agent.React), else nil.
func appenderOf(p Persistent) Appender {
	switch a := p.(type) {
	case Appender:
		return a
	case interface {
		Parts(conversation.Key) conversation.Parts
	}:
		return struct {
			Persistent
			conversation.Parts
		}{p, a.Parts(conversation.Key{})}
	}
	return nil
}

// durable is a FromAgent tool's stored conversation, kept in parts
// (store.Parts): each call that succeeds appends what it added, for an
// Appender, or writes the whole conversation, for any other Persistent.
type durable struct {
	st   *store.Store
	key  string
	hold string // the key of the record that holds the expert
	// at is where the stored conversation stood when the agent's was last
	// made the same (zero: nothing stored): a call that finds it so skips
	// Restore, and one that finds parts added reads only those.
	at store.Parts
	// mark is what an Appender's Mark returned when its conversation was
	// last made the one stored (ok: it was): when Mark says otherwise at
	// the next call (the agent was run, reset or restored outside the
	// tool), the store is not the agent's past, and the whole is read or
	// written instead of parts.
	mark struct {
		epoch uint64
		n     int
		ok    bool
	}
}

// synced reports whether app's conversation is still the one stored.
func (d *durable) synced(app Appender) bool {
	if app == nil || !d.mark.ok {
		return false
	}
	e, n := app.Mark()
	return e == d.mark.epoch && n == d.mark.n
}

// marked notes that app's conversation is now the one stored.
func (d *durable) marked(app Appender) {
	if app != nil {
		d.mark.epoch, d.mark.n = app.Mark()
		d.mark.ok = true
	}
}

// WithStore keeps a resident's conversation in st (docs/durable.md).
func WithStore(st *store.Store, key string) Option {
	return usedBy(formAgent|formScoped,
		"WithStore keeps the conversation of a FromAgent expert (a one-shot or spawned child has none to keep)",
		func(c *config) error {
			if st == nil {
				return errors.New("WithStore(nil, …): pass a store, such as store.New(sqlite.Open(path))")
			}
			if key == "" {
				return errors.New("WithStore: empty key: name the expert's conversation")
			}
			c.durable = &durable{st: st, key: key, hold: "expert-suspended/" + key}
			return nil
		})
}

// lockKey is the name of the expert's lock, apart from its conversation.
func (d *durable) lockKey() string { return "expert/" + d.key }

// holdKey is the key of the record that holds the expert for a suspended
// call.
func (d *durable) holdKey() string { return d.hold }

// begin takes the expert's lock and, unless another suspended call holds
// the expert (errHeld: the lock is given back), brings the agent's
// conversation to the stored one. The returned function ends the turn
// with the call's error: it holds the expert for a suspended call, lets it
// go for the call that held it, writes the new conversation of a call that
// succeeded, and in any case releases the lock.
func (d *durable) begin(ctx context.Context, name string, p Persistent, refuse bool, by string) (end func(error) error, err error) {
	var lk *store.Lock
	if refuse {
		lk, err = d.st.TryLock(ctx, d.lockKey())
		if errors.Is(err, store.ErrBusy) {
			return nil, tool.Correctable(fmt.Errorf("%w: %q is answering a call in another process: wait for that answer, then ask again", ErrBusy, name))
		}
	} else {
		lk, err = d.st.Lock(ctx, d.lockKey())
	}
	if err != nil {
		return nil, fmt.Errorf("subagent %q: taking its turn in the store: %w", name, err)
	}
	mine, held, err := d.checkHold(ctx, by)
	if err != nil || held {
		lk.Unlock()
		if err != nil {
			return nil, fmt.Errorf("subagent %q: %w", name, err)
		}
		return nil, errHeld
	}
	if err := d.load(ctx, name, p); err != nil {
		lk.Unlock()
		return nil, err
	}
	app := appenderOf(p)
	var epoch uint64
	var n int
	synced := false // the agent holds what is stored: the call may append
	if app != nil {
		if err := guarded(name, func() error { synced = d.synced(app); epoch, n = app.Mark(); return nil }); err != nil {
			lk.Unlock()
			return nil, err
		}
	}
	return func(callErr error) error {
		defer lk.Unlock()
		// A background context: the answer is in; only a write the store
		// refuses undoes the turn.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if h := holdFor(ctx, callErr, d.st, by); h != nil {
			b, _ := json.Marshal(h) // strings and a time: it cannot fail
			if err := lk.Put(wctx, d.holdKey(), b, store.AnyVersion); err != nil {
				return fmt.Errorf("subagent %q: keeping the expert for its suspended call (the call cannot be resumed: run the turn again): %w", name, err)
			}
			return nil
		}
		if mine {
			if err := d.st.Delete(wctx, d.holdKey()); err != nil && callErr == nil {
				return fmt.Errorf("subagent %q: letting go of the expert held for this call (the call is undone): %w", name, err)
			}
		}
		if callErr != nil {
			return nil
		}
		if err := d.save(wctx, lk, name, p, app, synced, epoch, n); err != nil {
			return fmt.Errorf("subagent %q: storing its conversation (the call is undone): %w", name, err)
		}
		return nil
	}, nil
}

// load brings p's conversation to the stored one: it reads only what
// another process added since this one last saw it, and restores only
// when something changed.
func (d *durable) load(ctx context.Context, name string, p Persistent) error {
	app := appenderOf(p)
	var parts [][]byte
	var from int
	var now store.Parts
	err := guarded(name, func() (err error) {
		parts, from, now, err = d.st.ReadParts(ctx, d.key, d.at)
		if err == nil && from > 0 && len(parts) > 0 && !d.synced(app) {
			// Another process added to it, and this agent no longer
			// holds what was stored before: read it whole.
			parts, from, now, err = d.st.ReadParts(ctx, d.key, store.Parts{})
		}
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		if d.at.Version != 0 { // deleted since this process last saw it
			if err := guarded(name, func() error { p.Reset(); return nil }); err != nil {
				return err
			}
			d.marked(app)
		}
		d.at = store.Parts{}
		return nil
	case err != nil:
		return fmt.Errorf("subagent %q: reading its conversation: %w", name, err)
	case from > 0 && len(parts) == 0:
		// As this process left it: the agent's conversation stands, even
		// if it was run outside the tool since (then the call writes it
		// whole).
		return nil
	}
	err = guarded(name, func() error {
		switch {
		case app == nil && len(parts) > 1:
			return fmt.Errorf("the agent (%T) cannot read a conversation stored in parts: make it an Appender, as *agent.React is", p)
		case app == nil:
			return p.Restore(parts[0])
		case from > 0:
			// Only parts were added to what the agent holds.
			return app.AppendParts(parts...)
		}
		return app.RestoreParts(parts...)
	})
	if err != nil {
		return fmt.Errorf("subagent %q: restoring its stored conversation: %w: delete it (store.Delete %q) to start afresh", name, err, d.key)
	}
	d.at = now
	d.marked(app)
	return nil
}

// save writes what a call that succeeded changed, fenced by lk: the
// messages it added, when the agent held what was stored as the call
// began (synced) and its conversation only grew at its end since Mark
// returned (epoch, n); else the whole conversation.
func (d *durable) save(ctx context.Context, lk *store.Lock, name string, p Persistent, app Appender, synced bool, epoch uint64, n int) error {
	return guarded(name, func() error {
		var part []byte
		if app != nil && synced {
			if e, _ := app.Mark(); e == epoch {
				var err error
				if part, err = app.SnapshotFrom(n); err != nil {
					return err
				}
			}
		}
		now, err := lk.AppendPart(ctx, d.key, d.at, part, p.Snapshot)
		if err != nil {
			return err
		}
		d.at = now
		d.marked(app)
		return nil
	})
}

// checkHold reads, under the expert's lock, whether a suspended call
// holds the expert: the call under ctx itself (mine: it is resumed), or
// another (held). A hold that is no longer live is deleted.
func (d *durable) checkHold(ctx context.Context, by string) (mine, held bool, err error) {
	data, _, err := d.st.Get(ctx, d.holdKey())
	if errors.Is(err, store.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading whether a suspended call holds it: %w", err)
	}
	var h hold
	if err := json.Unmarshal(data, &h); err != nil {
		return false, false, fmt.Errorf("the record of the call holding it cannot be read: %v: delete it (store.Delete %q)", err, d.holdKey())
	}
	if by != "" && h.By == by {
		return true, false, nil
	}
	if h.live(ctx, d.st) {
		return false, true, nil
	}
	// Abandoned, or its questions expired: let go.
	_ = d.st.Delete(ctx, d.holdKey())
	return false, false, nil
}

func journalFrom(ctx context.Context) *journal.Scope { return journal.From(ctx) }

// recordable reports whether a failed invocation is finished: its error is
// what the parent's model reads (a child that failed, an answer that was
// not JSON), not a cancellation or a refusal that a re-run may not repeat.
func recordable(err error) bool {
	return errors.Is(err, ErrChildFailed) || errors.Is(err, ErrNoJSON)
}

// replayed is the error of a recorded failed invocation. It is an
// ErrChildFailed, as the invocation's error was.
type replayed struct{ msg string }

func (e *replayed) Error() string { return e.msg }
func (e *replayed) Unwrap() error { return ErrChildFailed }

// journaled answers an invocation from the journal, or runs it and records
// how it finished.
func (t *SubAgentTool) journaled(ctx context.Context, js *journal.Scope, callID string, args json.RawMessage, in agent.Input, op opening) (tool.Result, error) {
	name := t.def.Name
	key := js.Key(name, args)
	if e, ok := js.J.Lookup(key); ok {
		_, stable := journalInvocation(ctx, js, key)
		replayMail(ctx, js, key)
		return t.replay(ctx, callID, e, op.ahead, stable)
	}
	js.Enter()
	cctx, stable := journalInvocation(ctx, js, key)
	// The invocation's own ledger: what its model calls cost, per model,
	// is recorded with it, for the run that replays it to count.
	cctx, spent := ledger.With(cctx)
	op.stable = stable
	job := op.spentKey != "" // a background job's, kept under its spawning call
	if !job {
		op.spentKey = js.Spent(key)
	}
	if e, ok := js.PaidUnder(op.spentKey, js.Child(key).Prefix); ok {
		op.paid, op.counted = &e, spent
	}
	if job {
		requeueWaiting(ctx, js, key)
	}
	res, err := t.invokeNow(cctx, callID, args, in, op)
	var wait func(context.Context) error
	var merr error // the messages a job took, recorded before its outcome
	if err == nil || recordable(err) {
		merr = recordMail(ctx, js, key)
	} else if job && interrupted(err) {
		recordWaiting(ctx, js, key)
	}
	switch {
	case merr != nil:
	case err == nil:
		e := journal.Entry{Content: res.Content, Usage: res.Usage, Models: spent.Entries()}
		if res.Value != nil {
			e.Value, _ = json.Marshal(res.Value) // a value JSON cannot hold is left out
		}
		wait = js.J.Start(key, e)
	case recordable(err):
		wait = js.J.Start(key, journal.Entry{Error: err.Error(), Usage: res.Usage, Models: spent.Entries()})
	}
	if job || err != nil && !recordable(err) {
		// A job's record is kept up to date however it ends: a run that
		// does not start the job again reads it there, not the
		// invocation's entry.
		recordSpent(ctx, js, op.spentKey, res.Usage, spent)
	}
	var rerr error
	for _, w := range js.Leave(wait) {
		if werr := w(ctx); werr != nil && rerr == nil {
			rerr = werr
		}
	}
	if rerr == nil {
		rerr = merr
	}
	if rerr != nil && (err == nil || recordable(err)) {
		// The child's work is spent; its usage still reaches the parent.
		return tool.Result{Usage: res.Usage}, fmt.Errorf("subagent %q: recording finished calls in the journal: %w: resume the turn when the store is back", name, rerr)
	}
	return res, err
}

// recordSpent records what an invocation that stopped unfinished (cancelled,
// suspended, failed in a way a run of the turn may not repeat) has paid
// for over the runs of its turn, so that a later run counts it once
// whether or not it replays it all (see opening.paid, spawnCall.earlier).
// It writes even when ctx has ended, within a bound: a record that does
// not land leaves that spending uncounted by the later runs, and nothing
// else.
func recordSpent(ctx context.Context, js *journal.Scope, spentKey string, usage provider.Usage, spent *ledger.Ledger) {
	models := spent.Entries()
	if len(models) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = js.J.Record(wctx, spentKey, journal.Entry{Usage: usage, Models: models})
}

// replay returns a recorded invocation, with the events of one that ran.
// It is not paid for again: what it spent when it ran counts again, as
// spent by an earlier run of the turn (ledger.Replay), in the Result's
// Usage and on its terminal event.
//
// stable is the invocation's run id, the same as when it ran, so that a
// viewer given every run of the turn finds it under the same node.
func (t *SubAgentTool) replay(ctx context.Context, callID string, e journal.Entry, ahead *announced, stable string) (tool.Result, error) {
	ledger.Replay(ctx, e.Usage, e.Models)
	spent := ledger.Encode(e.Models, e.Usage, true)
	model := ""
	if len(e.Models) > 0 {
		model = e.Models[0].Model
	}
	em := event.From(ctx)
	events := em.Enabled()
	runID := ""
	if ahead != nil && !ahead.used {
		// A background job's, announced when it was spawned.
		ahead.used = true
		em, events, runID = ahead.em, ahead.em.Enabled(), ahead.runID
	} else if events {
		_, runID = t.announceStart(ctx, em, callID, stable)
	}
	if e.Error != "" {
		err := tool.Correctable(&replayed{msg: e.Error})
		if events {
			em.Emit(event.Event{Type: event.SubagentError, SubagentRunID: runID, Message: run.Scrub(ctx, e.Error), Code: subcode.Of(err), Usage: spent, Model: model})
		}
		return tool.Result{Usage: e.Usage}, err
	}
	if events {
		em.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: runID, Result: event.JSONString(run.Scrub(ctx, e.Content)), Usage: spent, Model: model})
	}
	res := tool.Result{Content: e.Content, Usage: e.Usage}
	if len(e.Value) > 0 {
		res.Value = e.Value
	}
	return res, nil
}

// guarded calls fn, which calls a method of the user's Persistent, and
// turns a panic into an error, so that the expert's lock is still given up
// and the caller's model reads what went wrong.
func guarded(name string, fn func() error) (err error) {
	defer recoverPanic(name, &err)
	return fn()
}
