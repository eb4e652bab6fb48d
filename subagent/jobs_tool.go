package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/tool"
)

// JobsTool returns the tool with which the model acts on jobs.
func (s *Spawner) JobsTool() tool.Tool { return &jobsTool{s: s} }

type jobsTool struct{ s *Spawner }

const jobsParams = `{"type":"object","properties":{
"action":{"type":"string","enum":["status","wait","send","cancel","list"],"description":"status of a job; wait for jobs to end and collect their results; send a job a message; cancel a job; list this run's jobs"},
"job_id":{"type":"string","maxLength":128,"description":"the job, for status, send and cancel (or one job to wait for)"},
"job_ids":{"type":"array","items":{"type":"string","maxLength":128},"maxItems":64,"description":"for wait: the jobs to wait for (default: every job not collected yet)"},
"mode":{"type":"string","enum":["all","any"],"description":"for wait: return when all of them have ended (default) or as soon as any has"},
"message":{"type":"string","maxLength":16384,"description":"for send: what the job should know or do; it reads it before its next step"},
"timeout_seconds":{"type":"number","minimum":0,"maximum":600,"description":"for wait: how long to wait at most (default 30)"}
},"required":["action"],"additionalProperties":false}`

func (t *jobsTool) Definition() tool.Definition {
	return tool.Definition{Name: JobsToolName,
		Description: "Check on, wait for, message, cancel or list the background sub-agents started with " + SpawnToolName + ". " +
			"A job's result counts only once you have waited for it; jobs still running when you answer are cancelled. " +
			"A message reaches the job before its next step, never in the middle of one.",
		Parameters: json.RawMessage(jobsParams)}
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
	const usage = `pass {"action":"status"|"wait"|"send"|"cancel"|"list","job_id":"…","job_ids":["…"],"mode":"all"|"any","message":"…","timeout_seconds":0-600}`
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
