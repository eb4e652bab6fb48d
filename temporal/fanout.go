package temporal

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// fanOutChange names the workflow version from which a turn's tool calls
// are driven from the run's own coroutine (runCalls), and its hand-offs
// checked by the policy in one local activity. The SDK wakes every live
// coroutine of a workflow at each event it applies (each workflow task,
// each local activity's result), and each call had a coroutine, and each
// check a local activity, which holds one too: a turn of 1,000 children
// cost about a million wake-ups in a workflow task, and again whenever a
// worker replayed the run after another died — minutes on a loaded
// machine, past a workflow task's ten seconds, so the task timed out and
// was replayed again, and the server refused to query or update the run
// meanwhile. A workflow started before it runs its calls as it did.
const fanOutChange = "deputy.fan-out"

// jobPoolChange names the workflow version from which a turn's quick
// calls of the jobs tool (a send, a status, a list: quickJobCall) run
// on at most jobWorkers coroutines, each taking the next in order, where
// each had a coroutine of its own: the SDK wakes every live coroutine at
// each event it applies, and each send applies two (its event published,
// its signal sent), so a turn of n sends woke coroutines about 2n² times
// — 300 sends took minutes on a loaded machine, 1,024 past a workflow
// task's ten seconds, and a model decides how many it makes. Asked where
// a turn has more quick calls than jobWorkers: a turn with fewer runs as
// before.
const jobPoolChange = "deputy.job-calls-pooled"

// jobWaitPoolChange names the workflow version from which every call of
// the jobs tool of a turn, its waits and cancels too, runs on at most
// jobWorkers coroutines (jobPoolChange), where a wait or a cancel had a
// coroutine of its own for as long as it waited: one that must wait is
// set aside (parked) while the pool's coroutines go on with the next
// calls, and one more coroutine, the turn's only one to wait, waits for
// any of those set aside, on one timer, the earliest of their timeouts,
// and hands each back to the pool when it may go on. Asked where a turn
// has more calls of the jobs tool than jobWorkers, a wait or a cancel
// among them: a turn with fewer runs as before.
const jobWaitPoolChange = "deputy.job-waits-pooled"

// jobWorkers bounds the coroutines that run a turn's quick calls of the
// jobs tool (jobPoolChange), and all of them (jobWaitPoolChange).
const jobWorkers = 16

// quickJobCall reports whether call, of the jobs tool with args, ends
// without waiting on a job or a person: a send, a status or a list.
func quickJobCall(args json.RawMessage) bool {
	var a struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(args, &a) != nil {
		return false
	}
	switch a.Action {
	case "send", "status", "list":
		return true
	}
	return false
}

// runCalls runs one turn's tool calls as runTools does, at most the
// turn's parallelism at once, in order, from the calling coroutine: it
// starts each call's activity, local activity or child workflow and
// waits on all of them with one selector, going on with a call from its
// callback when its future is ready. Only a call that must wait for a
// person gets a coroutine of its own, for as long as it waits; so the
// work of each workflow task grows with the events it applies, not with
// the calls in flight.
func runCalls(ctx, actx workflow.Context, tn turn, idPrefix string, calls []provider.ToolCall, spawns *int) (results []ToolResult, ended []EndedCall, err error) {
	spec, depth, trace := tn.spec, tn.depth, tn.trace
	n := len(calls)
	results = make([]ToolResult, n)
	errs := make([]error, n)
	published := make([]bool, n)  // by a tool activity
	children := make([]string, n) // the sub-agent run each call started
	limit := parallelism(ctx, spec, n)
	sel := workflow.NewSelector(ctx)
	next, running := 0, 0

	var launch func()
	// finish ends call i with err (a result the workflow makes from it)
	// and lets the next call start.
	finish := func(i int, err error) {
		errs[i] = err
		if err != nil {
			results[i] = ToolResult{Content: capText(failedText(ctx, calls[i].Name, err), spec.maxOutput()), IsError: true, Usage: usageOf(err), Cost: costOf(err), Refused: refusedOf(err)}
			results[i].Models, results[i].Earlier = modelsOf(err)
		}
		results[i].Content = capText(results[i].Content, spec.maxOutput())
		running--
		launch()
	}
	finishCancelled := func(i int) {
		errs[i] = workflow.ErrCanceled
		results[i] = ToolResult{Content: capText(fmt.Sprintf("%s failed: %v", calls[i].Name, workflow.ErrCanceled), spec.maxOutput()), IsError: true}
	}
	// await goes on with call i once f is ready, in then.
	await := func(f workflow.Future, then func(f workflow.Future)) {
		sel.AddFuture(f, then)
	}
	// wait runs the rest of call i, which waits for a person, in a
	// coroutine of its own, and ends the call with its error.
	wait := func(i int, rest func(ctx workflow.Context) error) {
		f, set := workflow.NewFuture(ctx)
		workflow.Go(ctx, func(gctx workflow.Context) { set.Set(nil, rest(gctx)) })
		await(f, func(f workflow.Future) { finish(i, f.Get(ctx, nil)) })
	}
	// pool runs the rest of call i, a quick call of the jobs tool
	// (jobPoolChange), on one of at most jobWorkers coroutines, and ends
	// the call with its error.
	type pooled struct {
		rest func(ctx workflow.Context) error
		set  workflow.Settable
	}
	var queue []pooled
	workers := 0
	var enqueue func(rest func(ctx workflow.Context) error, set workflow.Settable)
	pool := func(i int, rest func(ctx workflow.Context) error) {
		f, set := workflow.NewFuture(ctx)
		await(f, func(f workflow.Future) { finish(i, f.Get(ctx, nil)) })
		enqueue(rest, set)
	}
	// parkCall runs the rest of call i, a call of the jobs tool
	// (jobWaitPoolChange), on the pool as pool does: next runs it until
	// it ends, with its result, which end takes, or must wait (parked),
	// when it is set aside (lot) until it may go on. One coroutine
	// (unpark, while waking) waits for those set aside.
	type parking struct {
		next func(ctx workflow.Context) (ToolResult, *parked)
		end  func(ctx workflow.Context, res ToolResult) error
		set  workflow.Settable
		p    *parked
	}
	var lot []*parking
	waking := false
	var unpark func(gctx workflow.Context)
	runParking := func(q *parking) func(ctx workflow.Context) error {
		return func(gctx workflow.Context) error {
			res, p := q.next(gctx)
			if p == nil {
				q.set.Set(nil, q.end(gctx, res))
				return nil
			}
			q.p = p
			if p.timed {
				tn.jobs.timed(gctx, 1)
			}
			lot = append(lot, q)
			if !waking {
				waking = true
				workflow.Go(ctx, unpark)
			}
			return nil
		}
	}
	// enqueue puts rest on the pool's queue, and starts a coroutine of the
	// pool if it has fewer than jobWorkers.
	enqueue = func(rest func(ctx workflow.Context) error, set workflow.Settable) {
		queue = append(queue, pooled{rest: rest, set: set})
		if workers >= jobWorkers {
			return
		}
		workers++
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { workers-- }()
			for len(queue) > 0 {
				q := queue[0]
				queue = queue[1:]
				if err := q.rest(gctx); q.set != nil {
					q.set.Set(nil, err)
				}
			}
		})
	}
	unpark = func(gctx workflow.Context) {
		// One timer at a time, for the earliest timeout of those set
		// aside, kept while that stays the earliest.
		var timer workflow.Future
		var timerAt time.Time
		stopTimer := func() {}
		defer func() {
			stopTimer()
			waking = false
		}()
		for len(lot) > 0 {
			var until time.Time // the earliest timeout
			for _, q := range lot {
				if d := q.p.deadline; !d.IsZero() && (until.IsZero() || d.Before(until)) {
					until = d
				}
			}
			if !until.Equal(timerAt) {
				stopTimer()
				timer, timerAt, stopTimer = nil, until, func() {}
				if left := until.Sub(workflow.Now(gctx)); !until.IsZero() && left > 0 {
					tctx, stop := workflow.WithCancel(gctx)
					timer, stopTimer = workflow.NewTimer(tctx, left), stop
				}
			}
			timedOut := func() bool { return !until.IsZero() && (timer == nil || timer.IsReady()) }
			// One may go on, its time is up, or one set aside meanwhile
			// times out first.
			wake := func() bool {
				return timedOut() || slices.ContainsFunc(lot, func(q *parking) bool {
					d := q.p.deadline
					return q.p.ready() || !d.IsZero() && (until.IsZero() || d.Before(until))
				})
			}
			err := workflow.Await(gctx, wake)
			up := timedOut()
			now := workflow.Now(gctx)
			var still []*parking
			for _, q := range lot {
				d := q.p.deadline
				due := !d.IsZero() && (up && !d.After(until) || !d.After(now))
				if err == nil && !due && !q.p.ready() {
					still = append(still, q)
					continue
				}
				if q.p.timed {
					tn.jobs.timed(gctx, -1)
				}
				p, werr := q.p, err
				q.next = func(ctx workflow.Context) (ToolResult, *parked) { return p.resume(ctx, werr) }
				q.p = nil
				enqueue(runParking(q), nil)
			}
			lot = still
		}
	}
	parkCall := func(i int, next func(ctx workflow.Context) (ToolResult, *parked), end func(ctx workflow.Context, res ToolResult) error) {
		f, set := workflow.NewFuture(ctx)
		await(f, func(f workflow.Future) { finish(i, f.Get(ctx, nil)) })
		enqueue(runParking(&parking{next: next, end: end, set: set}), nil)
	}
	// Each call is decided at once, in order, or is a plain tool call
	// or a hand-off to run; the turn's hand-offs are checked by the
	// policy together, before any starts.
	delegations := make([]*delegation, n)
	jobCalls := make([]bool, n)   // calls of the jobs tool
	jobChecked := make([]bool, n) // of which checked by the policy (jobsPolicyChange)
	var ins []Delegation
	var at []int                 // the call of each of ins
	unoffered := make([]bool, n) // calls of tools the run does not offer, checked by the policy (unofferedChange)
	checkUnoffered := func(i int) {
		if workflow.GetVersion(ctx, unofferedChange, workflow.DefaultVersion, 1) >= 1 {
			unoffered[i] = true
			ins = append(ins, Delegation{Call: calls[i], Plain: true, Depth: depth, Path: tn.path, Trace: trace})
			at = append(at, i)
		}
	}
	for i, call := range calls {
		isSpawn := call.Name == SpawnToolName && spec.Spawn
		sub, isSub := findSub(spec, call.Name)
		switch {
		case call.Name == subagent.JobsToolName && tn.jobs.offered() && depth < spec.maxDepth():
			jobCalls[i] = true
			if tn.jobs.policed(ctx) {
				// Checked with the turn's hand-offs, as a plain call.
				jobChecked[i] = true
				ins = append(ins, Delegation{Call: call, Plain: true, Depth: depth, Path: tn.path, Trace: trace})
				at = append(at, i)
			}
		case contains(spec.Tools, call.Name):
		case (isSub || isSpawn) && depth >= spec.maxDepth():
			results[i] = ToolResult{Content: fmt.Sprintf("%v: %q cannot delegate further", subagent.ErrMaxDepth, call.Name), IsError: true}
			checkUnoffered(i)
		case isSub || isSpawn:
			if bad := foldedKeys(ctx, sub, isSpawn, call); bad != "" {
				// Refused as in process, before the policy is asked.
				results[i] = ToolResult{Content: bad, IsError: true}
				break
			}
			// A spawn counts against Spec.MaxSpawns once the policy let
			// it go on (below).
			d := &delegation{tn: tn, call: call, sub: sub, isSpawn: isSpawn, id: fmt.Sprintf("%s.%d-%s", idPrefix, i, call.Name)}
			d.tasked = d.readsTask(ctx)
			d.background = isSpawn && backgroundAsked(call) && tn.jobs.offered() && tn.jobs.enabled(ctx)
			if bad := d.pickMember(ctx); bad != "" {
				// Refused before the policy is asked, as a call with
				// folded keys is.
				results[i] = ToolResult{Content: bad, IsError: true}
				break
			}
			if d.background && tn.jobs.threaded() {
				tn.jobs.number(ctx, d)
			}
			d.receipt = d.background && tn.jobs.policed(ctx)
			delegations[i] = d
			ins = append(ins, d.checkInput())
			at = append(at, i)
		default:
			results[i] = ToolResult{Content: fmt.Sprintf("%v: %q; the tools are the ones listed in this request", tool.ErrUnknownTool, call.Name), IsError: true}
			checkUnoffered(i)
		}
	}
	quick := 0
	for i, call := range calls {
		if jobCalls[i] && quickJobCall(call.Arguments) {
			quick++
		}
	}
	// Whether the turn's calls of the jobs tool are pooled, all of them
	// (parkAll), or its quick ones (pooling).
	all := 0
	for i := range calls {
		if jobCalls[i] {
			all++
		}
	}
	parkAll := all > quick && all > jobWorkers && workflow.GetVersion(ctx, jobWaitPoolChange, workflow.DefaultVersion, 1) >= 1
	pooling := !parkAll && quick > jobWorkers && workflow.GetVersion(ctx, jobPoolChange, workflow.DefaultVersion, 1) >= 1
	var checks Checks
	decided := make([]Delegated, n)
	if len(ins) > 0 {
		if err := workflow.ExecuteLocalActivity(checkContext(ctx, spec), ChecksActivityName, ins).Get(ctx, &checks); err != nil {
			for _, i := range at {
				errs[i] = err
				results[i] = ToolResult{Content: capText(failedText(ctx, calls[i].Name, err), spec.maxOutput()), IsError: true}
			}
			ended, err = endTurn(ctx, trace, calls, results, errs, published, children)
			return results, ended, err
		}
		for k, i := range at {
			decided[i] = checks.decided(k, ins[k])
			if d := delegations[i]; d != nil {
				d.policed = checks.Policy
			}
		}
	}
	var refusals []event.Event
	for _, i := range at {
		// In order, the spawns the policy did not refuse count, up to
		// Spec.MaxSpawns; one asked about counts once it goes on.
		if d := delegations[i]; d != nil && d.isSpawn && decided[i].Refused == "" && len(decided[i].Asked) == 0 && !countSpawn(spec, spawns) {
			delegations[i], results[i] = nil, maxSpawnsResult(spec)
			tn.refuse()
			refusals = append(refusals, refusedEvent("max_spawns", d.call.ID, d.name(), results[i].Content))
		}
	}
	publishRefused(ctx, trace, maxSpawnsEventChange, refusals...)

	// start starts call i, or decides it at once (false).
	start := func(i int) bool {
		call := calls[i]
		if d := delegations[i]; d != nil {
			v := decided[i]
			if len(v.Asked) > 0 {
				wait(i, func(gctx workflow.Context) error {
					if err := d.askRounds(gctx, d.checkInput(), &v); err != nil {
						return err
					}
					if v.Refused == "" && d.isSpawn && !countSpawn(spec, spawns) {
						results[i] = maxSpawnsResult(spec)
						tn.refuse()
						publishRefused(gctx, trace, maxSpawnsEventChange, refusedEvent("max_spawns", d.call.ID, d.name(), results[i].Content))
						return nil
					}
					if res, done := d.handOff(v); done {
						results[i] = res
						return nil
					}
					var err error
					results[i], err = d.rest(gctx, true)
					children[i] = d.started
					return err
				})
				return true
			}
			if res, done := d.handOff(v); done {
				results[i] = res
				results[i].Content = capText(res.Content, spec.maxOutput())
				return false
			}
			if d.background {
				// Starting a job waits for its workflow to start.
				wait(i, func(gctx workflow.Context) error {
					var err error
					results[i], err = d.rest(gctx, true)
					children[i] = d.started
					return err
				})
				return true
			}
			d.goOn(ctx, await, checks.Policy, func(res ToolResult, err error) {
				results[i], children[i] = res, d.started
				finish(i, err)
			})
			return true
		}
		if jobCalls[i] {
			// Acting on a job may wait for it.
			policed := jobChecked[i] && checks.Policy
			run := func(gctx workflow.Context) error {
				var err error
				results[i], err = actPlain(gctx, tn, call, policed, decided[i], tn.jobs.act)
				return err
			}
			args := call.Arguments
			if policed {
				args = decided[i].Arguments
			}
			if parkAll && len(decided[i].Asked) == 0 {
				v := decided[i]
				if policed && v.Refused != "" {
					results[i] = ToolResult{Content: capText(v.Refused, spec.maxOutput()), IsError: true}
					return false
				}
				c := call
				if policed {
					c.Arguments = v.Arguments
				}
				parkCall(i, func(gctx workflow.Context) (ToolResult, *parked) { return tn.jobs.actOrPark(gctx, c) },
					func(gctx workflow.Context, res ToolResult) error {
						var err error
						if policed {
							res, err = checkResult(gctx, tn, c, res)
						}
						results[i] = res
						return err
					})
				return true
			}
			if pooling && len(decided[i].Asked) == 0 && quickJobCall(args) {
				pool(i, run)
				return true
			}
			wait(i, run)
			return true
		}
		if unoffered[i] && checks.Policy {
			// Its call and its result (what the model reads of it) are
			// checked, as in process, where the registry checks a call
			// before it finds the tool missing.
			refusal := results[i]
			wait(i, func(gctx workflow.Context) error {
				var err error
				results[i], err = actPlain(gctx, tn, call, true, decided[i], func(workflow.Context, provider.ToolCall) ToolResult { return refusal })
				return err
			})
			return true
		}
		if !contains(spec.Tools, call.Name) {
			return false // decided above
		}
		published[i] = trace != nil
		f := workflow.ExecuteActivity(actx, CallToolActivityName, ToolCall{Call: call, Depth: depth, Path: tn.path, MaxOutputBytes: spec.maxOutput(), Trace: trace})
		await(f, func(f workflow.Future) {
			err := f.Get(ctx, &results[i])
			if err == nil && len(results[i].Asked) > 0 {
				wait(i, func(gctx workflow.Context) error { return askAndRunAgain(gctx, actx, tn, call, &results[i], nil) })
				return
			}
			finish(i, err)
		})
		return true
	}
	launch = func() {
		for running < limit && next < n && ctx.Err() == nil {
			i := next
			next++
			if start(i) {
				running++
			}
		}
	}

	launch()
	// Cancelled, the calls running end as their activities and children
	// are cancelled, and no other starts.
	for running > 0 {
		sel.Select(ctx)
	}
	for ; next < n; next++ {
		if delegations[next] != nil || jobCalls[next] || contains(spec.Tools, calls[next].Name) {
			finishCancelled(next)
		}
	}
	ended, err = endTurn(ctx, trace, calls, results, errs, published, children)
	return results, ended, err
}

// goOn starts the child and reads its answer, checked by the policy when
// the worker has one, as rest does, going on from await's callbacks; done
// takes the result.
func (d *delegation) goOn(ctx workflow.Context, await func(workflow.Future, func(workflow.Future)), policy bool, done func(ToolResult, error)) {
	await(d.start(ctx), func(f workflow.Future) {
		res, after, err := d.answer(ctx, f, true)
		if after == nil || !policy {
			// Without a policy on the worker, the answer is what the
			// check would leave.
			done(res, err)
			return
		}
		await(workflow.ExecuteLocalActivity(checkContext(ctx, d.tn.spec), CheckActivityName, *after), func(f workflow.Future) {
			var v Delegated
			if cerr := f.Get(ctx, &v); cerr != nil {
				done(res, cerr)
				return
			}
			res.Content, res.IsError = v.Result, v.IsError
			done(res, nil)
		})
	})
}

// unofferedChange names the workflow version from which a call of a
// tool the run does not offer (unknown, or a sub-agent past the depth
// cap) is checked by the workers' policy, before and after, as in
// process; asked at each such call.
const unofferedChange = "deputy.unoffered-policy"

// actPlain runs a call the workflow answers itself with act (the jobs
// tool, whose result holds a background job's answer when it collects
// one; a tool the run does not offer), checked by the workers' policy
// (policed) as the registry checks a call in process: before it, as the
// turn's check decided (v) — refused, asked about (the person is waited
// for), or with its arguments as the policy left them; after it, its
// result (denied, the model reads why; rewritten, what the rule made of
// it).
func actPlain(ctx workflow.Context, tn turn, call provider.ToolCall, policed bool, v Delegated, act func(workflow.Context, provider.ToolCall) ToolResult) (ToolResult, error) {
	if !policed {
		return act(ctx, call), nil
	}
	if len(v.Asked) > 0 {
		d := &delegation{tn: tn, call: call}
		if err := d.askRounds(ctx, Delegation{Call: call, Plain: true, Depth: tn.depth, Path: tn.path, Trace: tn.trace}, &v); err != nil {
			return ToolResult{}, err
		}
	}
	if v.Refused != "" {
		return ToolResult{Content: v.Refused, IsError: true}, nil
	}
	call.Arguments = v.Arguments
	return checkResult(ctx, tn, call, act(ctx, call))
}

// checkResult asks the workers' policy about res, the result of call
// made by tn's run, before the model reads it: what the model reads is
// what the policy left (its usage and cost stay).
func checkResult(ctx workflow.Context, tn turn, call provider.ToolCall, res ToolResult) (ToolResult, error) {
	in := Delegation{Call: call, Depth: tn.depth, Path: tn.path, After: true, Result: res.Content, IsError: res.IsError, Trace: tn.trace}
	var v Delegated
	if err := workflow.ExecuteLocalActivity(checkContext(ctx, tn.spec), CheckActivityName, in).Get(ctx, &v); err != nil {
		return res, err
	}
	res.Content, res.IsError = v.Result, v.IsError
	return res, nil
}

// countSpawn counts a spawn that goes on against Spec.MaxSpawns, or
// reports false when the run has started as many as it may.
func countSpawn(spec Spec, spawns *int) bool {
	if spec.MaxSpawns > 0 && *spawns >= spec.MaxSpawns {
		return false
	}
	*spawns++
	return true
}

// maxSpawnsResult is what the model reads for a spawn past Spec.MaxSpawns.
func maxSpawnsResult(spec Spec) ToolResult {
	return ToolResult{Content: fmt.Sprintf("%v: this run has started its %d sub-agents: do the rest directly, or combine tasks", subagent.ErrMaxSpawns, spec.MaxSpawns), IsError: true}
}
