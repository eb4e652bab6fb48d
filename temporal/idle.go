package temporal

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// maxIdleWalk bounds the workflows idle reads of one tree: past it, Run
// goes back to waiting for the tree's questions to stay the same for
// settleQuestions.
const maxIdleWalk = 10_000

// idle reports whether no branch of the tree whose top workflow is tree
// is working: every open workflow in it, parents read before their
// children, has no activity and no workflow task pending, waits on no
// timer after which it works on (a wait for its jobs with a timeout, or a
// turn's greeting of its thread's jobs, after which its model, which may
// ask, is called: waitingMemo), is not telling the tree's top what it
// asks (tellingMemo), and every child
// it started is open (a child that has ended sets its parent going
// again). An activity waiting to be retried is pending, its backoff
// included. A tree that is idle with questions pending waits only on their
// answers, so none of its branches can ask another before they are given:
// the round of questions is whole. Background jobs (child workflows
// started with an execution timeout, as jobs are, subagent.DefaultJobTime)
// and what runs under them are not read, nor a turn's waits for the jobs
// of earlier turns of its thread: they run beside the turn, as in
// process, and a question one asks later comes in a later round.
//
// A branch is read once, so a change it makes after it was read is not
// seen; but a branch read as waiting only on questions goes on only when
// they are answered, and one that ends is read as working by whoever
// reads it next, its parent having been read first. ok is false when the
// tree could not be read whole (a workflow could not be described, or its
// memo read, or the tree has more than maxIdleWalk workflows).
func idle(ctx context.Context, c client.Client, tree string) (idle, ok bool) {
	queue := []string{tree}
	for read := 0; len(queue) > 0; read++ {
		if read >= maxIdleWalk {
			return false, false
		}
		id := queue[0]
		queue = queue[1:]
		d, err := describeRun(ctx, c, id)
		var missing *serviceerror.NotFound
		switch {
		case errors.As(err, &missing):
			return false, true // a child its parent has asked for, not started yet
		case err != nil:
			return false, false
		}
		if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return false, true // it ended: its parent goes on (or, the top, Run's wait ends)
		}
		if id != tree && d.GetExecutionConfig().GetWorkflowExecutionTimeout().AsDuration() > 0 {
			continue // a background job
		}
		if d.GetPendingWorkflowTask() != nil {
			return false, true
		}
		switch waiting, read := waitsOnTimer(d); {
		case !read:
			return false, false
		case waiting:
			return false, true // its timer leads to more work
		}
		for _, a := range d.GetPendingActivities() {
			// A turn's wait for a job of an earlier turn of its thread
			// (AwaitJob) is a job's work, not the turn's.
			if a.GetActivityType().GetName() != AwaitJobActivityName {
				return false, true
			}
		}
		for _, ch := range d.GetPendingChildren() {
			queue = append(queue, ch.GetWorkflowId())
		}
	}
	return true, true
}

// waitsOnTimer reports whether the workflow d describes waits on a timer
// after which it works on (waitingMemo), or is telling the tree's top
// what it asks (tellingMemo); read is false when its memo cannot be read
// (a data converter of the application's encodes it).
func waitsOnTimer(d *workflowservice.DescribeWorkflowExecutionResponse) (waiting, read bool) {
	for _, key := range []string{waitingMemo, tellingMemo} {
		p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[key]
		if p == nil {
			continue
		}
		if err := converter.GetDefaultDataConverter().FromPayload(p, &waiting); err != nil {
			return false, false
		}
		if waiting {
			return true, true
		}
	}
	return false, true
}

// describeRun reads the latest run of workflow id as the server holds it.
func describeRun(ctx context.Context, c client.Client, id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return nil, err
	}
	return d.RawResponse, nil
}
