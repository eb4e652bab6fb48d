package temporal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The owner's workflow counts the jobs alive in all of an owner's threads
// (Spec.MaxOwnerJobs): a thread's spawn takes a place among them from it
// before its job starts, one spawn at a time, so that two threads
// spawning at once, or a thread whose first turn began after another's
// turn did, cannot each miss the other's jobs.
const (
	// ownerWorkflowName is the workflow that counts an owner's jobs
	// (ownerWorkflow), one per owner and task queue.
	ownerWorkflowName = "deputy.Owner"
	// ownerSlotActivityName takes a job's place among its owner's jobs
	// from the owner's workflow, starting it if it is not running.
	ownerSlotActivityName = "deputy.OwnerSlot"
	// jobsRunningActivityName reports which of the owner's jobs still run.
	jobsRunningActivityName = "deputy.JobsRunning"
	ownerTakeUpdate         = "deputy.owner_take"
)

// ownerSlotChange names the workflow version from which a thread's spawn
// takes its job's place from the owner's workflow (ownerWorkflow); before
// it, it counted the jobs of the owner's other threads that Agent knew as
// the turn began (ownerRecountChange), and could miss a thread whose first
// turn began later, or one spawning at the same moment.
const ownerSlotChange = "deputy.owner-slot"

// ownerWaiters is how many spawns the owner's workflow keeps waiting
// for their places at most: half the updates a server lets a workflow
// have in flight (ten by default). A spawn past them is refused
// (errTypeOwnerFull) and asks again shortly.
const ownerWaiters = 5

// errTypeOwnerFull is the type of the error by which the owner's workflow
// refuses a spawn while ownerWaiters spawns wait.
const errTypeOwnerFull = "deputy.owner_full"

// ownerIdle is how long the owner's workflow waits for a spawn before it
// asks which of its jobs still run, and ends when none does.
const ownerIdle = 10 * time.Minute

// ownerWorkflowID is the id of the workflow of the owner whose key
// (ownerKey) is key.
func ownerWorkflowID(key string) string {
	h := sha256.Sum256([]byte(key))
	return "deputy-owner-" + hex.EncodeToString(h[:16])
}

// ownerSlot is the input of ownerSlotActivityName.
type ownerSlot struct {
	// Owner is the owner's key (ThreadJobs.Owner).
	Owner string `json:"owner"`
	// Job is the workflow id of the job to start; Alive are those of the
	// thread's jobs alive now, counted whether the owner's workflow has
	// them or not (a job started before it kept them, or when it could
	// not be asked).
	Job   string   `json:"job"`
	Alive []string `json:"alive,omitempty"`
	// Threads are the owner's other threads Agent knew as the turn began
	// (ThreadJobs.ElsewhereThreads): the activity adds the jobs alive in
	// them to Alive, so that the owner's workflow counts those it was
	// never told of too.
	Threads []string `json:"threads,omitempty"`
	// Until is when the spawn stops waiting for its place (its activity's
	// deadline): past it, the owner's workflow gives it none.
	Until time.Time `json:"until,omitzero"`
	// Cap is Spec.MaxOwnerJobs.
	Cap int `json:"cap"`
}

// ownerGrant is what the owner's workflow answers a spawn: whether its
// job may start, and how many of the owner's jobs are alive, the job
// among them if it may.
type ownerGrant struct {
	Granted bool `json:"granted"`
	Alive   int  `json:"alive"`
}

// ownerState is what the owner's workflow carries into its next run: the
// jobs it counts alive.
type ownerState struct {
	Live []ownerJob `json:"live,omitempty"`
}

// ownerJob is a job the owner's workflow counts alive: its workflow id,
// and when its spawn took its place.
type ownerJob struct {
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
}

// ownerGrace is how long a job whose place was taken counts alive
// though the server has no workflow of it: its thread is starting it.
const ownerGrace = time.Minute

// ownerJobsSeen is what jobsRunning found of the jobs it was asked about:
// those running, and those the server has no workflow of (the others
// have ended).
type ownerJobsSeen struct {
	Running []string `json:"running,omitempty"`
	Missing []string `json:"missing,omitempty"`
}

// ownerWorkflow counts the jobs alive in an owner's threads: each spawn
// takes its job's place (the update deputy.owner_take) while fewer than
// the cap are alive. Jobs that ended leave as the cap is reached, or as
// the workflow has waited ownerIdle for a spawn: it asks then which still
// run, and ends once none does.
func ownerWorkflow(ctx workflow.Context, in ownerState) error {
	live := slices.Clone(in.Live)
	busy := false // a spawn is being decided
	takes := 0
	waiting := 0 // spawns in take
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: elsewhereTime + 5*time.Second,
		RetryPolicy: &sdktemporal.RetryPolicy{MaximumAttempts: 3}})
	has := func(id string) bool {
		return slices.ContainsFunc(live, func(j ownerJob) bool { return j.ID == id })
	}
	prune := func(ctx workflow.Context) {
		ids := make([]string, len(live))
		for i, j := range live {
			ids[i] = j.ID
		}
		var seen ownerJobsSeen
		if err := workflow.ExecuteActivity(actx, jobsRunningActivityName, ids).Get(ctx, &seen); err != nil {
			return // counted alive
		}
		now := workflow.Now(ctx)
		live = slices.DeleteFunc(live, func(j ownerJob) bool {
			return !slices.Contains(seen.Running, j.ID) && !(slices.Contains(seen.Missing, j.ID) && now.Sub(j.Since) < ownerGrace)
		})
	}
	take := func(ctx workflow.Context, s ownerSlot) (ownerGrant, error) {
		waiting++
		defer func() { waiting-- }()
		if err := workflow.Await(ctx, func() bool { return !busy }); err != nil {
			return ownerGrant{}, err
		}
		now := workflow.Now(ctx)
		if !s.Until.IsZero() && now.After(s.Until) {
			// Its spawn stopped waiting: it starts no job here.
			return ownerGrant{}, errors.New("the spawn stopped waiting for its place")
		}
		busy = true
		defer func() { busy = false }()
		takes++
		for _, id := range s.Alive {
			if !has(id) {
				live = append(live, ownerJob{ID: id, Since: now})
			}
		}
		if has(s.Job) {
			return ownerGrant{Granted: true, Alive: len(live)}, nil // asked again
		}
		if len(live) >= s.Cap {
			prune(ctx)
		}
		if len(live) >= s.Cap {
			return ownerGrant{Alive: len(live)}, nil
		}
		live = append(live, ownerJob{ID: s.Job, Since: now})
		return ownerGrant{Granted: true, Alive: len(live)}, nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ownerTakeUpdate, take, workflow.UpdateHandlerOptions{
		Validator: func(s ownerSlot) error {
			if s.Job == "" || s.Cap < 1 {
				return errors.New("a spawn's place names no job, or no cap")
			}
			if waiting >= ownerWaiters {
				return sdktemporal.NewApplicationError("the owner's workflow has as many spawns waiting as it keeps: ask again shortly", errTypeOwnerFull, nil)
			}
			return nil
		},
	}); err != nil {
		return err
	}
	for {
		seen := takes
		woke, err := workflow.AwaitWithTimeout(ctx, ownerIdle, func() bool {
			return takes != seen || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		})
		if err != nil {
			return err
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, ownerWorkflowName, ownerState{Live: live})
		}
		if woke || takes != seen {
			continue
		}
		if err := workflow.Await(ctx, func() bool { return !busy }); err != nil {
			return err
		}
		busy = true
		prune(ctx)
		busy = false
		if len(live) == 0 && takes == seen {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			if takes == seen {
				return nil
			}
		}
	}
}

// takeOwnerSlot takes a job's place among its owner's jobs from the owner's
// workflow, which it starts on the caller's task queue when none runs.
func (a *Activities) takeOwnerSlot(ctx context.Context, s ownerSlot) (ownerGrant, error) {
	c := activity.GetClient(ctx)
	info := activity.GetInfo(ctx)
	s.Until = info.Deadline
	if len(s.Threads) > 0 {
		// The jobs alive in the owner's other threads this process knows,
		// as the count before the owner's workflow found them.
		rctx, cancel := context.WithTimeout(ctx, elsewhereTime)
		for _, id := range s.Threads {
			alive, _, _ := aliveIn(rctx, c, id)
			s.Alive = append(s.Alive, alive...)
		}
		cancel()
		if ctx.Err() != nil {
			return ownerGrant{}, ctx.Err()
		}
		s.Threads = nil
	}
	pause := 20 * time.Millisecond
	for {
		op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: ownerWorkflowID(s.Owner), TaskQueue: info.TaskQueue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		}, ownerWorkflowName, ownerState{})
		h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: op,
			UpdateOptions: client.UpdateWorkflowOptions{UpdateName: ownerTakeUpdate, Args: []any{s},
				WaitForStage: client.WorkflowUpdateStageCompleted},
		})
		var g ownerGrant
		if err == nil {
			err = h.Get(ctx, &g)
		}
		var full *sdktemporal.ApplicationError
		if err == nil || ctx.Err() != nil || !errors.As(err, &full) || full.Type() != errTypeOwnerFull {
			return g, err
		}
		// As many spawns wait as the owner's workflow keeps: ask again.
		select {
		case <-ctx.Done():
			return ownerGrant{}, ctx.Err()
		case <-time.After(pause + rand.N(pause)):
		}
		pause = min(2*pause, time.Second)
	}
}

// jobsRunning reports which of the workflows ids still run, and which the
// server has none of; those it cannot tell of count as running.
func (a *Activities) jobsRunning(ctx context.Context, ids []string) (ownerJobsSeen, error) {
	c := activity.GetClient(ctx)
	var seen ownerJobsSeen
	for _, id := range ids {
		d, err := describeRun(ctx, c, id)
		var missing *serviceerror.NotFound
		switch {
		case errors.As(err, &missing):
			seen.Missing = append(seen.Missing, id)
		case err != nil:
			if ctx.Err() != nil {
				return ownerJobsSeen{}, ctx.Err()
			}
			seen.Running = append(seen.Running, id)
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			seen.Running = append(seen.Running, id)
		}
	}
	return seen, nil
}
