package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
	if err := json.Unmarshal(raw, &a); err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, JobsToolName, err, usage)
	}
	jt := t.s.jobs(ctx)
	if a.Action == "list" {
		return tool.Result{Content: jt.list()}, nil
	}
	if jt == nil {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%w %q: this run has no jobs", ErrUnknownJob, a.JobID))
	}
	js := &Jobs{s: t.s, jt: jt}
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
		switch {
		case jr.Err != nil && jr.State == JobSuspended:
			res = tool.Result{Content: "job " + jr.ID + " cancelled while it waited for a person's answer: its work is discarded.", Usage: res.Usage}
		case jr.State != JobCancelled:
			res.Content = "job " + jr.ID + " had already ended; its result:\n" + res.Content
		}
		return res, nil
	}
	// wait
	ids := a.JobIDs
	if a.JobID != "" {
		ids = append([]string{a.JobID}, ids...)
	}
	wait := DefaultJobWait
	if a.Timeout != nil {
		wait = time.Duration(*a.Timeout * float64(time.Second))
	}
	if wait <= 0 {
		wait = time.Nanosecond // a look, no wait
	}
	targets, err := js.targets(ids)
	if err != nil {
		return tool.Result{}, err
	}
	if len(targets) == 0 {
		return tool.Result{Content: "no job to wait for: every job of this run has been collected (list them with action list)"}, nil
	}
	got, err := js.Wait(ctx, WaitFor{IDs: ids, Any: a.Mode == "any", Timeout: wait})
	if err != nil {
		return tool.Result{}, err
	}
	return waitResult(targets, got, wait)
}

// waitResult renders what a wait collected. A single job's result is its
// answer as it is; several are each headed by their job.
func waitResult(targets []*job, got []JobResult, wait time.Duration) (tool.Result, error) {
	var res tool.Result
	for _, r := range got {
		res.Usage = res.Usage.Add(r.Result.Usage)
		if interrupted(r.Err) {
			// The parent suspends with the job; the answers resume it.
			return tool.Result{Usage: res.Usage}, r.Err
		}
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
