package temporal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Starting and waiting for a run's background jobs from Go (StartJob,
// WaitJobs), as subagent.Jobs.Start and Wait do in process: two updates
// of the run's workflow, whose validators refuse a bad argument, or what
// the run cannot do, before anything is recorded.
//
// A job a program starts takes the path of a background spawn of a step:
// the workers' policy is asked about its hand-off, it counts against
// Spec.MaxSpawns, Spec.MaxBackground and Spec.MaxOwnerJobs, it is numbered
// among the run's jobs (in a thread, among the thread's), and bounded as
// such a job is. Outside a step there is no step to share the run's limits
// with: under a TokenLimit or CostLimit its share is half of what the run
// has left, its jobs' shares held back (as a step with that one call would
// give it, the other half kept for the run), cut to Spec.JobTokens and
// Spec.JobCost; its steps are Spec.JobSteps, by default
// subagent.DefaultJobSteps; its time Spec.JobTime. Without limits it is
// bounded by the job bounds alone, as a spawned job is.
//
// What a job spent is counted once in the run's RunOutput (its ChildUsage,
// Cost and Models, and so its RUN_FINISHED and agent.Output), whoever
// collects it first: a program's wait hands its usage to the program and
// the run counts it at its next step boundary (fold), or at its end; the
// model's later wait reads the job's answer without its usage, as a
// second wait does.

// Names of the updates a program starts and waits for a run's jobs with
// (StartJob, WaitJobs).
const (
	// JobStartUpdate starts a job (a subagent.Task) and returns its
	// subagent.JobStatus once its workflow has started.
	JobStartUpdate = "job_start"
	// JobsWaitUpdate waits for jobs (a subagent.WaitFor) and returns,
	// collected, those that ended: per job, its status, what the model
	// would read ("result", "is_error"), what it spent the first time it
	// is collected ("usage", "cost"), and, for a job that failed, why
	// ("error"); and, not collected, those waiting for a person, their
	// status alone (state "suspended", with its questions).
	JobsWaitUpdate = "jobs_wait"
)

// jobWaited is one job JobsWaitUpdate collected.
type jobWaited struct {
	Status  subagent.JobStatus `json:"status"`
	Result  string             `json:"result"`
	IsError bool               `json:"is_error,omitempty"`
	Usage   provider.Usage     `json:"usage"` // zero once collected before
	Err     string             `json:"error,omitempty"`
}

// serveGo takes JobStartUpdate and JobsWaitUpdate.
func (js *jobs) serveGo(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, JobStartUpdate, js.startFromGo,
		workflow.UpdateHandlerOptions{Validator: func(t subagent.Task) error {
			if bad := js.refuseStart(t); bad != "" {
				return errors.New(bad)
			}
			return nil
		}}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, JobsWaitUpdate, js.waitFromGo,
		workflow.UpdateHandlerOptions{Validator: func(w subagent.WaitFor) error {
			if bad := js.refuseWait(w); bad != "" {
				return errors.New(bad)
			}
			return nil
		}})
}

// refuseGoJobs takes JobStartUpdate and JobsWaitUpdate in a run whose
// Spec has no Background, refusing each with what to do.
func refuseGoJobs(ctx workflow.Context) error {
	no := func() error {
		return errors.New("this run offers no background jobs (its Spec has no Background): start the run with Spec.Spawn and Spec.Background set")
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, JobStartUpdate, func(workflow.Context, subagent.Task) (subagent.JobStatus, error) {
		return subagent.JobStatus{}, no()
	}, workflow.UpdateHandlerOptions{Validator: func(subagent.Task) error { return no() }}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, JobsWaitUpdate, func(workflow.Context, subagent.WaitFor) ([]jobWaited, error) {
		return nil, no()
	}, workflow.UpdateHandlerOptions{Validator: func(subagent.WaitFor) error { return no() }})
}

// goCall is the spawn call a program's start stands for.
func goCall(t subagent.Task) provider.ToolCall {
	raw, _ := json.Marshal(struct {
		Task       string `json:"task"`
		Context    string `json:"context,omitempty"`
		Agent      string `json:"agent,omitempty"`
		Background bool   `json:"background"`
	}{t.Task, t.Context, t.Agent, true})
	return provider.ToolCall{Name: SpawnToolName, Arguments: raw}
}

// refuseStart says why a program's start of t cannot go on ("": it can),
// as the spawn tool would refuse it: a bad argument, or a run that cannot
// start it. A cap it would go past (capped), or a run with nothing left to
// give it (noBudget), is not among them: the start's handler refuses
// those, where a refusal is counted and published as a model's is. It
// reads the run's state only: a validator records nothing and asks no
// version.
func (js *jobs) refuseStart(t subagent.Task) string {
	switch {
	case js.closing:
		return "the run is ending: start the job in a run that is working"
	case !js.spec.Spawn:
		return "this run's Spec has Background but not Spawn, and a job is a spawned sub-agent: start the run with Spec.Spawn set"
	case js.depth >= js.spec.maxDepth():
		return fmt.Sprintf("%v: %s cannot be called at depth %d (the cap is %d): start the job from a run above", subagent.ErrMaxDepth, SpawnToolName, js.depth, js.spec.maxDepth())
	case t.Agent != "" && len(js.spec.Roster) == 0:
		return fmt.Sprintf("%v for %s: agent %q: this run's Spec has no Roster, so a job is a fork of the run's own agent: leave Task.Agent empty, or list the agent in Spec.Roster", tool.ErrInvalidArguments, SpawnToolName, t.Agent)
	case t.Model != "":
		return fmt.Sprintf("%v for %s: model %q: on Temporal a job runs the run's own model: leave Task.Model empty", tool.ErrInvalidArguments, SpawnToolName, t.Model)
	case len(bytes.TrimSpace(t.OutputSchema)) > 0 && string(bytes.TrimSpace(t.OutputSchema)) != "null":
		return fmt.Sprintf("%v for %s: output_schema: on Temporal a job answers as the run's agent does (its Spec.OutputSchema): leave Task.OutputSchema empty", tool.ErrInvalidArguments, SpawnToolName)
	}
	call := goCall(t)
	if _, ok := delegatedTask(false, true, call.Arguments); !ok {
		return badTask(call) + ": say what the sub-agent must do"
	}
	if t.Agent != "" {
		if _, bad := rosterMember(js.spec.Roster, t.Agent); bad != "" {
			return bad
		}
	}
	return ""
}

// noBudget says why a program's start cannot go on for want of budget
// ("": it can): the run has nothing left of its token or cost limit to
// give a job, its jobs' shares held back.
func (js *jobs) noBudget() string {
	ht, hc := js.shares()
	if tokens, dollars := js.goShares(ht, hc); tokens < 0 || dollars < 0 {
		return fmt.Sprintf("%v: the run's tokens are used, or set aside for the jobs running now: collect those first", subagent.ErrNoBudget)
	}
	return ""
}

// capped says which cap a program's start would go past ("": none):
// Spec.MaxBackground, MaxOwnerJobs or MaxSpawns.
func (js *jobs) capped() string {
	if n := js.alive(); n >= js.spec.maxBackground() {
		return js.tooManyJobs(n)
	}
	if n := js.ownerAlive(); js.threaded() && n >= js.spec.maxOwnerJobs() {
		return tooManyOwnerJobs(n)
	}
	if js.spec.MaxSpawns > 0 && js.spawns != nil && *js.spawns >= js.spec.MaxSpawns {
		return maxSpawnsResult(js.spec).Content
	}
	return ""
}

// goShares is a job a program starts' share of the run's token and cost
// limits (0: none), with ht and hc held back for its jobs: half of what
// the run has left, what jobs a program collected spent counted; negative
// where nothing is left.
func (js *jobs) goShares(ht int64, hc float64) (int64, float64) {
	var tokens int64
	var dollars float64
	if l := js.spec.TokenLimit; l > 0 {
		left := l - ht - js.fromGo.Usage.Tokens()
		if js.out != nil {
			left -= js.out.TotalUsage().Tokens()
		}
		tokens = -1
		if left/2 > 0 {
			tokens = left / 2
		}
	}
	if l := js.spec.CostLimit; l > 0 {
		left := l - hc - js.fromGo.Cost
		if js.out != nil {
			left -= js.out.Cost
		}
		dollars = -1
		if left > 0 {
			dollars = left / 2
		}
	}
	return tokens, dollars
}

// startFromGo starts a job for a program, as a background spawn of a
// step starts one: asked of the policy, counted, numbered, bounded. A
// start past a cap, or with nothing left of the run's limits, is refused
// on that path too, as a spawn is in process: counted in the run's
// RunOutput.Refused and published as a deputy.refused event of the
// reason (max_background, max_owner_jobs, max_spawns, no_budget).
func (js *jobs) startFromGo(ctx workflow.Context, t subagent.Task) (subagent.JobStatus, error) {
	js.starting++
	defer func() { js.starting-- }()
	if bad := js.refuseStart(t); bad != "" {
		// The run began to end after the validator let it through.
		return subagent.JobStatus{}, errors.New(bad)
	}
	if broke := js.noBudget(); broke != "" {
		if workflow.GetVersion(ctx, goBudgetChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			// A history recorded before goBudgetChange: a step took what
			// the validator found left, and the start was refused here,
			// counting nothing.
			return subagent.JobStatus{}, errors.New(broke)
		}
		js.fromGo.Refused++
		// The sub-agent it would have started: the member Task.Agent
		// names, or a fork.
		publishRefused(ctx, js.trace, goBudgetChange, refusedEvent("no_budget", "", cmp.Or(t.Agent, forkName), broke))
		return subagent.JobStatus{}, errors.New(broke)
	}
	if capped := js.capped(); capped != "" && workflow.GetVersion(ctx, goRefusedChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		// A history recorded before goRefusedChange: refused here,
		// counting nothing.
		return subagent.JobStatus{}, errors.New(capped)
	}
	if !js.enabled(ctx) {
		return subagent.JobStatus{}, errors.New("this run was started by a worker too old to start background jobs: start a new run")
	}
	held, heldCost := js.held()
	tokens, dollars := js.goShares(held, heldCost)
	tn := turn{spec: js.spec, depth: js.depth, path: js.path, childLimit: max(tokens, 0), costShare: max(dollars, 0), trace: js.trace, q: js.q, jobs: js, refused: &js.fromGo.Refused}
	js.goStarts++
	d := &delegation{tn: tn, call: goCall(t), isSpawn: true, background: true, id: fmt.Sprintf("%s/go.%d-%s", js.idPrefix, js.goStarts, SpawnToolName)}
	if bad := d.pickMember(ctx); bad != "" {
		return subagent.JobStatus{}, errors.New(bad) // (the validator checked it)
	}
	if js.threaded() {
		js.number(ctx, d)
	}
	var v Delegated
	if err := d.check(ctx, d.checkInput(), &v); err != nil {
		return subagent.JobStatus{}, err
	}
	if v.Refused == "" && !countSpawn(js.spec, js.spawns) {
		tn.refuse()
		v.Refused = maxSpawnsResult(js.spec).Content
		publishRefused(ctx, js.trace, maxSpawnsEventChange, refusedEvent("max_spawns", d.call.ID, d.name(), v.Refused))
	}
	if res, done := d.handOff(v); done {
		return subagent.JobStatus{}, errors.New(res.Content)
	}
	res, err := d.rest(ctx, true)
	switch {
	case err != nil:
		return subagent.JobStatus{}, err
	case res.IsError || d.job == nil:
		return subagent.JobStatus{}, errors.New(res.Content)
	}
	return d.job.status(), nil
}

// refuseWait says why a program's wait w cannot go on ("": it can).
func (js *jobs) refuseWait(w subagent.WaitFor) string {
	if js.closing {
		return "the run is ending, its jobs with it (in a thread, they work on): wait for them in a run that is working, or read its output"
	}
	if w.Timeout < 0 {
		return fmt.Sprintf("%v: a wait's timeout is %v: give 0 (until the jobs end) or more", tool.ErrInvalidArguments, w.Timeout)
	}
	for _, id := range w.IDs {
		if j, bad := js.named(id); j == nil {
			if len(js.list) == 0 {
				return fmt.Sprintf("%v %q: this run has no jobs", subagent.ErrUnknownJob, id)
			}
			return bad.Content
		}
	}
	return ""
}

// waitFromGo waits for a program, for at most w.Timeout (0: until they
// end), for the jobs w names (none: every job not collected yet) to end,
// all of them or, with w.Any, one, and collects those that ended. In the
// run at the top of its tree, which knows its jobs' questions, a job
// waiting for a person counts as ended (goWaitAsksChange), as a suspended
// job does in process: it is returned with its questions, not collected,
// and goes on once the person has answered (Pending, Answer). When the
// run ends meanwhile, it collects the jobs the run cancelled as it ended;
// when a thread's turn ends, it returns what has ended.
func (js *jobs) waitFromGo(ctx workflow.Context, w subagent.WaitFor) ([]jobWaited, error) {
	js.waiting++
	defer func() { js.waiting-- }()
	js.drain()
	var targets []*bgJob
	for _, id := range w.IDs {
		if j := js.find(id); j != nil && !slices.Contains(targets, j) { // (known: the validator checked)
			targets = append(targets, j)
		}
	}
	if len(w.IDs) == 0 {
		for _, j := range js.list {
			if !j.collected {
				targets = append(targets, j)
			}
		}
	}
	ended := endedOf(targets, w.Any)
	// A run that ends cancels its jobs, and the wait collects them; a
	// thread's turn leaves them working, and the wait returns.
	leaving := func() bool { return js.closing && js.threaded() }
	// Asked where a target asks now or the wait would wait: a history
	// recorded before it waited on past a question.
	suspends := js.q != nil && js.q.top && (js.asking(targets) || !ended() && !leaving()) &&
		workflow.GetVersion(ctx, goWaitAsksChange, workflow.DefaultVersion, 1) >= 1
	settled := ended
	if suspends {
		settled = js.settledOf(targets, w.Any)
	}
	done := func() bool { return settled() || leaving() }
	if !done() {
		var err error
		if w.Timeout > 0 {
			_, err = workflow.AwaitWithTimeout(ctx, w.Timeout, done)
		} else {
			err = workflow.Await(ctx, done)
		}
		if err != nil {
			return nil, err
		}
	}
	js.drain()
	if suspends {
		js.asking(targets)
	}
	var out []jobWaited
	for _, j := range targets {
		if !j.ended {
			if suspends && len(j.asks) > 0 {
				// Still running: a later wait collects it once it ends.
				out = append(out, jobWaited{Status: j.status()})
			}
			continue
		}
		r := j.collect(js.spec.maxOutput())
		js.fromGo.Usage, js.fromGo.Cost, js.fromGo.Refused = js.fromGo.Usage.Add(r.Usage), js.fromGo.Cost+r.Cost, js.fromGo.Refused+r.Refused
		js.fromGo.Models = addModels(js.fromGo.Models, r.Models...)
		got := jobWaited{Status: j.status(), Result: r.Content, IsError: r.IsError, Usage: r.Usage}
		if got.Status.State == subagent.JobFailed && !pastLimit(j.err) {
			got.Err = messageOf(j.err)
		}
		out = append(out, got)
	}
	return out, nil
}

// fold counts in out what the jobs a program collected spent since it
// last did, at the run's step boundaries.
func (js *jobs) fold(out *RunOutput) {
	if js == nil {
		return
	}
	g := js.takeFromGo()
	out.ChildUsage, out.Cost, out.Refused = out.ChildUsage.Add(g.Usage), out.Cost+g.Cost, out.Refused+g.Refused
	if len(g.Models) > 0 {
		out.Models = addModels(out.Models, g.Models...)
	}
}

// takeFromGo returns what the jobs a program collected spent, not yet
// counted, and forgets it.
func (js *jobs) takeFromGo() ToolResult {
	if js == nil {
		return ToolResult{}
	}
	g := js.fromGo
	js.fromGo = ToolResult{}
	return g
}

// StartJob starts a background job in the run whose workflow is
// workflowID, as its model does with spawn_subagent and background=true,
// and returns the job's status once its workflow has started. The run's
// Spec must have Spawn and Background; the job is a fork of the run's
// agent, or the Agent member of Spec.Roster that Task.Agent names (Model
// and OutputSchema must be empty), checked by the workers' policy,
// counted against Spec.MaxSpawns, MaxBackground and MaxOwnerJobs, and
// bounded by the job bounds, with half of what is left of the run's
// limits (see the package documentation). A refusal says what to do. A
// bad Task, or a run that cannot start a job, is refused before anything
// is recorded; a start past one of those caps, or with nothing left of
// the run's limits to give it (subagent.ErrNoBudget), is refused by the
// run, counted in its RunOutput.Refused and published as a deputy.refused
// event (subagent.RefusedEvent) of reason max_spawns, max_background,
// max_owner_jobs or no_budget where the run publishes its jobs' events,
// as subagent.Jobs.Start does in process. The run's model sees a job
// started in its list and may wait for it, send it messages or cancel it.
func StartJob(ctx context.Context, c client.Client, workflowID string, t subagent.Task) (subagent.JobStatus, error) {
	var st subagent.JobStatus
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: JobStartUpdate, Args: []any{t}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &st)
	}
	if err != nil {
		return st, fmt.Errorf("temporal: starting a job in %s: %w%s", workflowID, err, noTurnHint(err))
	}
	return st, nil
}

// WaitJobs waits for the jobs of the run whose workflow is workflowID as
// w says — those w.IDs names (none: every job not collected yet), all of
// them or, with w.Any, the first to end, for at most w.Timeout — and
// returns, collected, those that ended, maybe none. Timeout 0 waits until
// they end, or ctx's deadline where it has one. A job's usage is in its
// Result the first time it is collected, by a program or the run's model,
// and counted once in the run's RunOutput. A failed job's Err says why; a
// cancelled one, or one stopped at a bound, hands back a partial report.
//
// A job waiting for a person's answer — a question of its own or of a
// child of its own — counts as ended, as a suspended job does for
// subagent.Jobs.Wait in process, where workflowID is the run at the top
// of its tree (the one that holds the tree's questions): the wait returns
// it at once with State subagent.JobSuspended, its Questions, and Err a
// *tool.Interrupted that carries them (find it with errors.As). It is not
// collected: it is still running, and its Result is empty; a wait before
// the person answers returns it so again. Answer it (Pending, Answer), and
// a later wait collects it, with its usage, once it has ended.
func WaitJobs(ctx context.Context, c client.Client, workflowID string, w subagent.WaitFor) ([]subagent.JobResult, error) {
	if dl, ok := ctx.Deadline(); ok && w.Timeout == 0 {
		// The workflow waits on: it does not know when the caller gives up.
		// It returns a tenth before the deadline, for its answer to come back.
		w.Timeout = max(time.Until(dl)*9/10, time.Millisecond)
	}
	var got []jobWaited
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: JobsWaitUpdate, Args: []any{w}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &got)
	}
	if err != nil {
		return nil, fmt.Errorf("temporal: waiting for the jobs of %s: %w%s", workflowID, err, noTurnHint(err))
	}
	return jobResults(got), nil
}

// jobResults is what a program reads of the jobs a wait returned, in the
// shape subagent.Jobs.Wait gives them.
func jobResults(got []jobWaited) []subagent.JobResult {
	out := make([]subagent.JobResult, len(got))
	for i, g := range got {
		out[i] = subagent.JobResult{JobStatus: g.Status, Result: tool.Result{Content: g.Result, IsError: g.IsError, Usage: g.Usage}}
		switch {
		case g.Status.State == subagent.JobSuspended:
			out[i].Err = &tool.Interrupted{Interrupts: slices.Clone(g.Status.Questions)}
		case g.Err != "":
			out[i].Err = errors.New(strings.TrimSpace(g.Err))
			out[i].Result.Err = out[i].Err
		}
	}
	return out
}
