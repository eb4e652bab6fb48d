package temporal

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/internal/id"
)

// overdraftUpdate is the update of a tree's top-level run by which the
// model calls of the tree that may pass their runs' limits take turns:
// the worker of such a call takes the turn, is told what the tree's calls
// passed their runs' limits by so far, makes the call with that taken off
// what its run has left, and ends the turn with what it passed its run's
// limits by, by the signal overdraftDoneSignal (a signal, as the calls
// waiting for the turn may fill the updates the server lets a workflow
// have in flight). It is what run.Uncovered is in process, kept by the
// workflow that is the tree.
const (
	overdraftUpdate     = "deputy.overdraft"
	overdraftDoneSignal = "deputy.overdraft_done"
)

// treeTurnChange names the workflow version from which a run's model
// calls that may pass its limits take the tree's turn (overdraftUpdate)
// on a worker of a server; before it, each such call went when it was
// ready, and a tree could pass its limit by the error of one call of each
// of its runs.
const treeTurnChange = "deputy.tree-turn"

// treeTurnWaiters is how many calls a tree's workflow keeps waiting for
// the turn at most: half the updates a server lets a workflow have in
// flight (ten by default), so that the updates the tree's workflow takes
// from its callers (Answer, SendToJob, CancelJob, StartJob, WaitJobs)
// still find room while more calls wait. A call past them is refused
// (errTypeTurnFull) and asks again shortly.
const treeTurnWaiters = 5

// errTypeTurnFull is the type of the error by which a tree's workflow
// refuses a call's overdraftUpdate while treeTurnWaiters calls wait for
// the turn.
const errTypeTurnFull = "deputy.turn_full"

// overdraft is the input of overdraftUpdate and overdraftDoneSignal.
type overdraft struct {
	// Holder names the call taking or ending the turn: its workflow's id
	// and its activity's, the same across the activity's attempts, so
	// that an attempt after a lost one takes the turn its call held.
	Holder string `json:"holder"`
	// Tokens and Dollars, of overdraftDoneSignal, are what the call
	// passed its run's limits by, added to the tree's debt.
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
	// Lease is how long the turn is the holder's at most: past it, a call
	// waiting for the turn takes it (a holder whose workflow ended while
	// its call ran never ends it).
	Lease time.Duration `json:"lease,omitempty"`
	// Ask names one asking for the turn (one attempt's); Withdrawn, of
	// overdraftDoneSignal, says that it stopped waiting (its activity
	// was cancelled or timed out), so that the turn does not go to it,
	// or, given already, passes on at once.
	Ask       string `json:"ask,omitempty"`
	Withdrawn bool   `json:"withdrawn,omitempty"`
}

// treeDebt is what the model calls of a tree passed their runs' limits by so
// far, in tokens and in dollars: the result of overdraftUpdate.
type treeDebt struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
}

// treeTurn is the turn a tree's top-level workflow keeps for its model
// calls that may pass their runs' limits, and what such calls passed
// them by so far.
type treeTurn struct {
	holder string
	ask    string // the holder's asking (overdraft.Ask)
	since  time.Time
	lease  time.Duration
	debt   treeDebt
	ended  workflow.ReceiveChannel // overdraftDoneSignal
	// waiting counts the calls in take, waiting for the turn.
	waiting int
	// withdrawn are the askings that stopped waiting, not yet taken, and
	// withdrawnOrder the same, the oldest first: at most treeTurnWithdrawn.
	withdrawn      map[string]bool
	withdrawnOrder []string
}

// treeTurnWithdrawn is how many askings that stopped waiting a tree's
// workflow remembers at most. One whose update never reached the workflow
// (the call's context ended as it sent it) is never taken, and would stay
// for good; past the bound the oldest is forgotten, and should its update
// come after all, the turn goes to a call that no longer makes it, and
// passes on when its lease ends.
const treeTurnWithdrawn = 256

// endTurns takes the signals that ended turns so far.
func (t *treeTurn) endTurns() {
	for {
		var o overdraft
		if !t.ended.ReceiveAsync(&o) {
			return
		}
		t.done(o)
	}
}

// keepTreeTurn makes the workflow of ctx, a tree's top-level run, keep
// its tree's turn (overdraftUpdate). The workflow calls the turn's
// endTurns as it ends, taking the signals that ended turns since a call
// last asked for it, which the worker would warn of as unhandled.
func keepTreeTurn(ctx workflow.Context) (*treeTurn, error) {
	// The signals that end turns are taken as a call asks for the turn,
	// and while it waits: no coroutine of its own waits for them.
	t := &treeTurn{ended: workflow.GetSignalChannel(ctx, overdraftDoneSignal)}
	return t, workflow.SetUpdateHandlerWithOptions(ctx, overdraftUpdate, t.take, workflow.UpdateHandlerOptions{
		Validator: func(o overdraft) error {
			if o.Holder == "" {
				return errors.New("an overdraft names no holder")
			}
			if t.holder != "" && t.holder != o.Holder && t.waiting >= treeTurnWaiters {
				return sdktemporal.NewApplicationError("the tree's turn has as many calls waiting for it as it keeps: ask again shortly", errTypeTurnFull, nil)
			}
			return nil
		},
		// A call still waiting as the tree ends goes without the turn.
		UnfinishedPolicy: workflow.HandlerUnfinishedPolicyAbandon,
	})
}

// done ends the turn o's call holds, adding what it passed its run's
// limits by to the debt (even when its lease ran out and another call
// holds the turn now).
func (t *treeTurn) done(o overdraft) {
	if o.Withdrawn {
		if o.Ask == "" {
			return
		}
		if t.holder == o.Holder && t.ask == o.Ask {
			t.holder = "" // it was given the turn as it stopped waiting
			return
		}
		if t.withdrawn == nil {
			t.withdrawn = map[string]bool{}
		}
		t.withdrawn[o.Ask] = true
		t.withdrawnOrder = append(t.withdrawnOrder, o.Ask)
		if len(t.withdrawnOrder) > treeTurnWithdrawn {
			delete(t.withdrawn, t.withdrawnOrder[0])
			t.withdrawnOrder = slices.Delete(t.withdrawnOrder, 0, 1)
		}
		return
	}
	if t.holder == o.Holder {
		t.holder = ""
	}
	t.debt.Tokens += max(o.Tokens, 0)
	t.debt.Dollars += max(o.Dollars, 0)
}

// take gives o's call the turn once no other call holds it, or the one
// that does held it past its lease, and returns the debt.
func (t *treeTurn) take(ctx workflow.Context, o overdraft) (treeDebt, error) {
	t.waiting++
	defer func() { t.waiting-- }()
	t.endTurns()
	gone := func() bool { return o.Ask != "" && t.withdrawn[o.Ask] }
	for t.holder != "" && t.holder != o.Holder && !gone() {
		wait := t.since.Add(t.lease).Sub(workflow.Now(ctx))
		if wait <= 0 {
			break // its holder is lost
		}
		held := t.holder
		if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool {
			t.endTurns()
			return t.holder != held || gone()
		}); err != nil {
			return treeDebt{}, err
		}
	}
	if gone() {
		// Its call stopped waiting: the turn stays with the next.
		delete(t.withdrawn, o.Ask)
		return treeDebt{}, errors.New("the call stopped waiting for the turn")
	}
	t.holder, t.ask, t.since, t.lease = o.Holder, o.Ask, workflow.Now(ctx), max(o.Lease, time.Second)
	return t.debt, nil
}

// treeTurnOf is the turn a model call of the tree whose top-level
// workflow is tree (run treeRun) took, or nil when it went without one
// (outside a server, or when the tree's workflow could not be asked).
type treeTurnOf struct {
	c             client.Client
	tree, treeRun string
	holder        string
	debt          treeDebt
	// job is the turn of the thread's job the call works under, which it
	// holds with the tree's (Reserve.Job): nil when the turn is the job's,
	// or the call works under none, or the job's workflow gives none.
	job *treeTurnOf
}

// takeRunTurn takes the turn of a model call that may pass its run's
// limits from the tree's top-level workflow, waiting while another call
// of the tree holds it; lease is how long the call may hold it. A call of
// a run under the thread's job whose workflow is job ("" for none, or the
// tree's own) holds the job's turn as well, so that a call of the job
// that asks for it once the tree's workflow has ended waits for this one
// and plans with what it passed its run's limits by; once the tree's
// workflow has ended, as a thread's turn ends before the jobs it started
// do, the call takes the job's turn. It returns nil, and the call goes
// without the turn, when neither workflow can give one (they have ended,
// or their worker is older than the turn); and ctx's error if ctx ends
// first.
func takeRunTurn(ctx context.Context, tree, treeRun, job string, lease time.Duration) (*treeTurnOf, error) {
	info := activity.GetInfo(ctx)
	return askRunTurn(ctx, activity.GetClient(ctx), tree, treeRun, job, info.WorkflowExecution.ID+"/"+info.ActivityID, lease)
}

// askRunTurn is takeRunTurn for the call named holder, asking with c.
func askRunTurn(ctx context.Context, c client.Client, tree, treeRun, job, holder string, lease time.Duration) (*treeTurnOf, error) {
	t, err := askTreeTurn(ctx, c, tree, treeRun, holder, lease)
	if err != nil || job == "" || job == tree {
		return t, err
	}
	if t == nil {
		// The tree's workflow has ended, and the thread's job the run
		// works under outlived it: the job's turn.
		return askTreeTurn(ctx, c, job, "", holder, lease)
	}
	// Taken after the tree's, as every call of the job takes the tree's
	// first while it gives turns: no two calls wait for each other.
	j, err := askTreeTurn(ctx, c, job, "", holder, lease)
	if err != nil {
		t.done(ctx, 0, 0)
		return nil, err
	}
	t.job = j
	return t, nil
}

// askTreeTurn takes the turn of the call named holder from the tree's
// workflow alone, asking with c (takeRunTurn).
func askTreeTurn(ctx context.Context, c client.Client, tree, treeRun, holder string, lease time.Duration) (*treeTurnOf, error) {
	t := &treeTurnOf{c: c, tree: tree, treeRun: treeRun, holder: holder}
	ask := id.New("ask_")
	pause := 20 * time.Millisecond
	for {
		h, err := t.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: tree, RunID: treeRun, UpdateName: overdraftUpdate,
			Args:         []any{overdraft{Holder: t.holder, Lease: lease, Ask: ask}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, &t.debt)
		}
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			t.withdraw(ctx, ask)
			return nil, ctx.Err()
		}
		var busy *serviceerror.ResourceExhausted
		var full *sdktemporal.ApplicationError
		if !errors.As(err, &busy) && !(errors.As(err, &full) && full.Type() == errTypeTurnFull) {
			return nil, nil
		}
		// The tree's workflow keeps treeTurnWaiters calls waiting, and the
		// server caps the updates a workflow has in flight: the calls
		// waiting for the turn are more than that. Ask again shortly.
		select {
		case <-ctx.Done():
			// Its update was refused: the workflow has nothing to forget.
			return nil, ctx.Err()
		case <-time.After(pause + rand.N(pause)):
		}
		pause = min(2*pause, time.Second)
	}
}

// withdraw tells the tree's workflow that the asking ask stopped waiting
// for the turn, as ctx ended: the update it sent stays in the workflow,
// which would give the turn to a call that no longer makes it, and keep
// it from the others until its lease ended.
func (t *treeTurnOf) withdraw(ctx context.Context, ask string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// Lost, the turn passes on when its lease ends.
	_ = t.c.SignalWorkflow(ctx, t.tree, t.treeRun, overdraftDoneSignal, overdraft{Holder: t.holder, Ask: ask, Withdrawn: true})
}

// done ends the turn, with what the call passed its run's limits by; a
// nil turn does nothing. It is told even when the call's context has
// ended, so that the next call need not wait out the lease.
func (t *treeTurnOf) done(ctx context.Context, tokens int64, dollars float64) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// Lost, the turn passes on when its lease ends.
	_ = t.c.SignalWorkflow(ctx, t.tree, t.treeRun, overdraftDoneSignal, overdraft{Holder: t.holder, Tokens: tokens, Dollars: dollars})
	// The job's debt too, which its calls plan with once the tree's
	// workflow has ended.
	t.job.done(ctx, tokens, dollars)
}

// factoryTurn is the tree's turn as the agent a factory builds takes it
// (drun.OuterTurn): the agent runs in one activity, and its model calls
// that may pass their runs' limits take the turn of the workflow's tree
// too, and of the thread's job the agent works under (takeRunTurn), one
// at a time (they take the agent's own tree's turn first; one is what the
// activity holds the tree's turn under).
type factoryTurn struct {
	tree, treeRun string
	job           string // the thread's job the agent works under (Trace.Job)
	lease         time.Duration
	ctx           context.Context // the activity's, for ending a turn
	one           chan struct{}   // holds a token while a call holds the turn
	held          *treeTurnOf
}

// newFactoryTurn is the tree's turn for the agent of the activity of
// actx. Its lease is what a workflow's own model call gets by default
// (DefaultActivityTimeout), not the activity's time, which is the whole
// agent's: a worker lost while one of the agent's calls held the turn
// holds up the tree's other such calls no longer than a model call's. A
// call of the agent that takes longer may then share the turn.
func newFactoryTurn(actx context.Context, tree, treeRun, job string) *factoryTurn {
	return &factoryTurn{tree: tree, treeRun: treeRun, job: job, ctx: actx, one: make(chan struct{}, 1),
		lease: min(activity.GetInfo(actx).StartToCloseTimeout, DefaultActivityTimeout) + HeartbeatTimeout}
}

func (t *factoryTurn) Take(ctx context.Context) (tokens int64, dollars float64, ok bool, err error) {
	select {
	case t.one <- struct{}{}:
	case <-ctx.Done():
		return 0, 0, false, ctx.Err()
	}
	held, err := takeRunTurn(ctx, t.tree, t.treeRun, t.job, t.lease)
	if err != nil || held == nil {
		<-t.one
		return 0, 0, false, err
	}
	t.held = held
	return held.debt.Tokens, held.debt.Dollars, true, nil
}

func (t *factoryTurn) Done(tokens int64, dollars float64) {
	held := t.held
	t.held = nil
	held.done(t.ctx, tokens, dollars)
	<-t.one
}
