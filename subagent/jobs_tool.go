package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/tool"
)

// JobsTool returns the tool with which the model acts on jobs.
func (s *Spawner) JobsTool() tool.Tool { return &jobsTool{s: s} }

type jobsTool struct{ s *Spawner }

func (t *jobsTool) Definition() tool.Definition {
	return tool.Definition{Name: JobsToolName,
		Description: jobtool.Description(SpawnToolName), Parameters: json.RawMessage(jobtool.Params)}
}

// RunsAgain reports that every call runs again on a resumed journaled
// turn (tool.Rerunner): what it reports of a job lives in the running
// process, and a message sent again keeps its id.
func (t *jobsTool) RunsAgain(tool.Call) bool { return true }

// InOrder reports that the sends and cancels of one step run one after
// the other, in the order the model gave them (tool.Sequencer): two
// messages to one job in a step reach it in that order, and are numbered
// so, each time the turn runs.
func (t *jobsTool) InOrder(call tool.Call) bool {
	var a struct {
		Action string `json:"action"`
	}
	return exactkeys.Unmarshal(string(toolcall.Arguments(call.Arguments)), &a) == nil && (a.Action == "send" || a.Action == "cancel")
}

// Available offers the tool where the spawner is offered.
func (t *jobsTool) Available(ctx context.Context) bool { return t.s.Available(ctx) }

type jobsArgs struct {
	Action  string   `json:"action"`
	JobID   string   `json:"job_id"`
	JobIDs  []string `json:"job_ids"`
	Mode    string   `json:"mode"`
	Message string   `json:"message"`
	Timeout *float64 `json:"timeout_seconds"`
}

func (t *jobsTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	const usage = jobtool.Usage
	raw := toolcall.Arguments(call.Arguments)
	if err := t.s.jobsIn.Validate(raw); err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, JobsToolName, err, usage)
	}
	var a jobsArgs
	if err := exactkeys.Unmarshal(string(raw), &a); err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, JobsToolName, err, usage)
	}
	jt := t.s.jobs(ctx)
	if a.Action == "list" {
		return tool.Result{Content: jt.list()}, nil
	}
	if jt == nil {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%w %q: this run has no jobs", ErrUnknownJob, a.JobID))
	}
	js := &jt.api
	switch a.Action {
	case "status":
		if a.JobID == "" {
			return jsonResult(js.List())
		}
		st, err := js.Status(a.JobID)
		if err != nil {
			return tool.Result{}, err
		}
		return jsonResult(st)
	case "send":
		r, err := js.Send(ctx, a.JobID, a.Message)
		if err != nil {
			return tool.Result{}, err
		}
		return jsonResult(r)
	case "cancel":
		jr, err := js.Cancel(ctx, a.JobID)
		if err != nil {
			return tool.Result{}, err
		}
		res := jr.Result
		if jr.State != JobCancelled {
			res.Content = "job " + jr.ID + " had already ended; its result:\n" + res.Content
		}
		return res, nil
	}
	// wait
	ids := a.JobIDs
	if a.JobID != "" {
		ids = append([]string{a.JobID}, ids...)
	}
	wait, bad := jobtool.WaitTimeout(a.Timeout, DefaultJobWait)
	if bad != "" {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%w for %s: %s", tool.ErrInvalidArguments, JobsToolName, bad))
	}
	targets, err := js.targets(ids)
	if err != nil {
		return tool.Result{}, err
	}
	if targets, err = t.s.wake(ctx, jt, targets); err != nil {
		return tool.Result{}, err
	}
	if len(targets) == 0 {
		return tool.Result{Content: "no job to wait for: every job of this run has been collected (list them with action list)"}, nil
	}
	if err := js.await(ctx, targets, WaitFor{Any: a.Mode == "any", Timeout: wait}); err != nil {
		return tool.Result{}, err
	}
	return waitResult(ctx, js, targets, wait)
}

// waitResult collects and renders the targets that ended. A single job's
// result is its answer as it is; several are each headed by their job.
//
// When some wait for a person, the parent suspends with them, asking
// every question at once, and collects only them: the jobs that answered
// stay to be collected by the wait run again with the answers.
func waitResult(ctx context.Context, js *Jobs, targets []*job, wait time.Duration) (tool.Result, error) {
	var suspended []*job
	for _, j := range targets {
		if j.ended() && js.jt.state(j) == JobSuspended {
			suspended = append(suspended, j)
		}
	}
	if len(suspended) > 0 {
		var res tool.Result
		all := &tool.Interrupted{}
		for _, j := range suspended {
			r := js.collect(ctx, j)
			res.Usage = res.Usage.Add(r.Result.Usage)
			var in *tool.Interrupted
			if errors.As(r.Err, &in) {
				all.Interrupts = append(all.Interrupts, in.Interrupts...)
			}
		}
		return res, all
	}
	var got []JobResult
	for _, j := range targets {
		if j.ended() {
			got = append(got, js.collect(ctx, j))
		}
	}
	var res tool.Result
	for _, r := range got {
		res.Usage = res.Usage.Add(r.Result.Usage)
	}
	ended := map[string]bool{}
	for _, r := range got {
		ended[r.ID] = true
	}
	var running []string
	for _, j := range targets {
		if !ended[j.id] {
			running = append(running, j.id)
		}
	}
	if len(targets) == 1 {
		if len(got) == 0 {
			return tool.Result{Content: fmt.Sprintf("job %s is still running after %v: wait again, do other work meanwhile, or cancel it", targets[0].id, wait)}, nil
		}
		r := got[0].Result
		r.Usage = res.Usage
		return r, nil
	}
	var b strings.Builder
	for i, r := range got {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "job %s (%s) %s:\n%s", r.ID, r.Agent, r.State, r.Result.Content)
	}
	if len(running) > 0 {
		if len(got) > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "still running: %s: wait again, do other work meanwhile, or cancel them", strings.Join(running, ", "))
	}
	res.Content = b.String()
	return res, nil
}

func jsonResult(v any) (tool.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Content: string(b)}, nil
}
