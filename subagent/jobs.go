package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// JobsToolName is the name of the companion tool of background spawns.
const JobsToolName = "subagent_jobs"

// DefaultJobWait is how long a wait for a background job lasts when the
// model gives no timeout.
const DefaultJobWait = 30 * time.Second

// jobTable holds the background jobs of one parent run. The run owns their
// goroutines: when it ends, the table cancels what still runs, waits for
// it, and hands the run the usage not yet collected.
type jobTable struct {
	mu     sync.Mutex
	jobs   map[string]*job
	order  []string
	wg     sync.WaitGroup
	owned  bool // close runs at the end of the run
	closed bool // the run has ended: no new jobs
}

type job struct {
	id, agent, task string
	cancel          context.CancelFunc
	done            chan struct{}
	res             tool.Result // set before done closes
	err             error       // set before done closes
	settle          func(spent int64)
	folded          bool // its usage has been handed to the parent; guarded by the table's mu
}

// attrJobID is the job id on the span of a background job
// ("background_job <name>"), the span under which the job's sub-agent runs.
const attrJobID = attribute.Key("deputy.job.id")

// jobMargin is what a background job costs its parent beyond its child's
// answer, in tokens, taken from the job's share: the receipt (about 50
// tokens), read by the parent's next calls until it is collected, say
// three times, and the call that collects it (about 30), written once
// and read once.
const jobMargin = 3*50 + 2*30

// startJob runs fn in the background under the parent run's context and
// returns the job's receipt. who is the sub-agent the job runs (for a fork,
// the spawner's fork), callID the spawning call. The settle function fn
// returns is called when the job's usage reaches the parent.
//
// SUBAGENT_STARTED is emitted before the receipt, so that a UI finds the
// child under its spawning call while the call is still open; the job's
// events carry that sub-agent run id, and its terminal event comes when the
// job ends. A traced run gets a span for the job, a child of the spawning
// call's span that lasts as long as the job.
func (s *Spawner) startJob(ctx context.Context, who *SubAgentTool, callID, task string, fn func(context.Context, *announced) (tool.Result, func(int64), error)) (tool.Result, error) {
	jt := s.jobs(ctx)
	if jt == nil {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%s: background jobs need a running agent to own them: call without background", SpawnToolName))
	}
	// The job outlives the call, not the run: its context is the run's. Its
	// depth is the caller's.
	jctx, cancel := context.WithCancel(run.Context(ctx))
	jctx = run.WithDepth(jctx, agent.Depth(ctx))
	// The job's child takes its share of the parent's budget like a child
	// in the foreground; the step ending does not give it back. What the
	// parent spends on the job itself comes out of the share first
	// (jobMargin).
	jctx, giveBack := run.KeepShare(ctx, jctx, jobMargin)
	jobID, runID := id.New("job_"), ""
	if js := journalFrom(ctx); js != nil {
		// The same job each time the turn runs: a resumed turn, replaying
		// the model's decisions, waits for it by the id the model saw, and
		// its sub-agent run has the id the client saw.
		jobID, runID = jobIDs(js, callID)
	}
	j := &job{id: jobID, agent: who.def.Name, task: task, cancel: cancel, done: make(chan struct{})}
	jt.mu.Lock()
	if jt.closed {
		jt.mu.Unlock()
		cancel()
		return tool.Result{}, tool.Correctable(fmt.Errorf("%s: the run has ended: no background job can start", SpawnToolName))
	}
	jt.jobs[j.id] = j
	jt.order = append(jt.order, j.id)
	jt.wg.Add(1)
	jt.mu.Unlock()
	var span trace.Span
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		// The spawning call's span ends with the receipt: the job's own
		// span keeps the child's spans in a live parent.
		jctx = trace.ContextWithSpan(jctx, sp)
		jctx, span = sp.TracerProvider().Tracer(agent.TracerName).Start(jctx, "background_job "+who.def.Name,
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrJobID.String(j.id)))
	}
	jctx, ann := who.announce(jctx, callID, runID)
	go func() {
		defer jt.wg.Done()
		defer close(j.done)
		defer cancel()
		defer giveBack()
		j.res, j.settle, j.err = fn(jctx, ann)
		ann.unannounce(j.err)
		if span != nil {
			if j.err != nil {
				span.RecordError(j.err)
				span.SetStatus(codes.Error, j.err.Error())
			}
			span.End()
		}
	}()
	receipt, _ := json.Marshal(map[string]string{"job_id": j.id, "status": "running",
		"note": "A job id is not a result: collect it with " + JobsToolName + " (wait) or cancel it before you answer."})
	return tool.Result{Content: string(receipt)}, nil
}

// jobs returns the run's job table, creating it and arranging its cleanup
// at the end of the run. It returns nil outside a run, or when the run has
// ended before any job started.
func (s *Spawner) jobs(ctx context.Context) *jobTable {
	jt := run.Local(ctx, jobsKey{s}, func() any { return &jobTable{jobs: map[string]*job{}} }).(*jobTable)
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if !jt.owned {
		if !run.OnEnd(ctx, jt.close) {
			return nil
		}
		jt.owned = true
	}
	return jt
}

type jobsKey struct{ s *Spawner }

// close cancels the jobs still running, waits for all, and returns the
// usage not yet handed to the parent.
func (jt *jobTable) close() provider.Usage {
	jt.mu.Lock()
	jt.closed = true
	for _, j := range jt.jobs {
		j.cancel()
	}
	jt.mu.Unlock()
	jt.wg.Wait()
	var u provider.Usage
	jt.mu.Lock()
	defer jt.mu.Unlock()
	for _, id := range jt.order {
		if j := jt.jobs[id]; !j.folded {
			j.folded = true
			j.settle(j.res.Usage.Tokens())
			u = u.Add(j.res.Usage)
		}
	}
	return u
}

// collect hands a finished job's outcome to the caller, with its usage the
// first time only. A job suspended by an interrupt hands over the
// interrupt, as an error: the caller suspends too (see suspendedJob).
func (jt *jobTable) collect(j *job) (tool.Result, error) {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	res := tool.Result{Content: j.res.Content, Value: j.res.Value}
	var err error
	switch {
	case interrupted(j.err):
		res, err = tool.Result{}, j.err
	case j.err != nil:
		res = tool.Result{Content: "job " + j.id + " failed: " + j.err.Error(), IsError: true, Err: j.err}
	}
	if !j.folded {
		j.folded = true
		j.settle(j.res.Usage.Tokens())
		res.Usage = j.res.Usage
	}
	return res, err
}

// JobsTool returns the companion tool of background spawns, with which the
// model waits for a job (with a timeout), lists the run's jobs, or cancels
// one. Register it beside the spawner when using WithBackground; like the
// spawner, it is offered only below the depth cap.
//
// A job whose sub-agent is paused by an interrupt (tool.Ask, at any depth)
// is suspended: waiting for it returns the interrupt, so the waiting run
// and every ancestor suspend too, and the top-level run ends with it.
// Under a journal (agent.WithJournal) the job keeps its id and sub-agent run id
// when the turn is run again, so the resumed turn's wait finds the same
// job, which continues with the answers and hands its result to the
// parent. A suspended job the parent never waits for is discarded with
// the run, like a job still running when the parent answers.
func (s *Spawner) JobsTool() tool.Tool { return &jobsTool{s: s} }

type jobsTool struct{ s *Spawner }

const jobsParams = `{"type":"object","properties":{
"action":{"type":"string","enum":["wait","list","cancel"],"description":"wait for a job's result, list this run's jobs, or cancel a job"},
"job_id":{"type":"string","description":"the job, for wait and cancel"},
"timeout_seconds":{"type":"number","minimum":0,"maximum":600,"description":"for wait: how long to wait at most (default 30)"}
},"required":["action"],"additionalProperties":false}`

func (t *jobsTool) Definition() tool.Definition {
	return tool.Definition{Name: JobsToolName,
		Description: "Wait for, list or cancel the background sub-agents started with " + SpawnToolName + ". " +
			"A job's result counts only once you have waited for it; jobs still running when you answer are cancelled.",
		Parameters: json.RawMessage(jobsParams)}
}

// Available offers the tool where the spawner is offered.
// RunsAgain reports that every call runs again on a resumed journaled
// turn (tool.Rerunner): what it reports of a job lives in the running
// process.
func (t *jobsTool) RunsAgain(tool.Call) bool { return true }

func (t *jobsTool) Available(ctx context.Context) bool { return t.s.Available(ctx) }

func (t *jobsTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	const usage = `pass {"action":"wait"|"list"|"cancel","job_id":"…","timeout_seconds":0-600}`
	raw := toolcall.Arguments(call.Arguments)
	if err := t.s.jobsIn.Validate(raw); err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, JobsToolName, err, usage)
	}
	var a struct {
		Action  string   `json:"action"`
		JobID   string   `json:"job_id"`
		Timeout *float64 `json:"timeout_seconds"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: %s", tool.ErrInvalidArguments, JobsToolName, err, usage)
	}
	jt := t.s.jobs(ctx)
	if a.Action == "list" {
		return tool.Result{Content: jt.list()}, nil
	}
	j := jt.find(a.JobID)
	if j == nil {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%w %q: this run's jobs are: %s", ErrUnknownJob, a.JobID, jt.ids()))
	}
	if a.Action == "cancel" {
		j.cancel()
		select {
		case <-j.done:
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		res, err := jt.collect(j)
		switch {
		case err != nil:
			res.Content = "job " + j.id + " cancelled while it waited for a person's answer: its work is discarded."
		case errors.Is(j.err, context.Canceled):
			res.Content = "job " + j.id + " cancelled: its work is discarded."
			res.IsError = false
		default:
			res.Content = "job " + j.id + " had already ended; its result:\n" + res.Content
		}
		return res, nil
	}
	wait := DefaultJobWait
	if a.Timeout != nil {
		wait = time.Duration(*a.Timeout * float64(time.Second))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-j.done:
		return jt.collect(j)
	case <-timer.C:
		return tool.Result{Content: fmt.Sprintf("job %s is still running after %v: wait again, do other work meanwhile, or cancel it", j.id, wait)}, nil
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
}

func (jt *jobTable) find(id string) *job {
	if jt == nil {
		return nil
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	return jt.jobs[id]
}

func (jt *jobTable) ids() string {
	if jt == nil {
		return "(none)"
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if len(jt.order) == 0 {
		return "(none)"
	}
	ids := append([]string(nil), jt.order...)
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// list renders the run's jobs, one a line: id, agent, status, task.
func (jt *jobTable) list() string {
	if jt == nil {
		return "no jobs in this run"
	}
	jt.mu.Lock()
	defer jt.mu.Unlock()
	if len(jt.order) == 0 {
		return "no jobs in this run"
	}
	var b strings.Builder
	for _, id := range jt.order {
		j := jt.jobs[id]
		status := "running"
		select {
		case <-j.done:
			switch {
			case j.err == nil:
				status = "done"
			case interrupted(j.err):
				status = "suspended (waiting for a person's answer)"
			case errors.Is(j.err, context.Canceled):
				status = "cancelled"
			default:
				status = "failed"
			}
		default:
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", j.id, j.agent, status, clip(j.task, 80))
	}
	return b.String()
}
