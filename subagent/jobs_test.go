package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// onJob is a model reply that calls the jobs tool with action on the job
// whose receipt is the latest in the conversation; extra adds arguments.
func onJob(action, extra string) fake.Reply {
	return fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		args := `{"action":"` + action + `","job_id":"` + latestJob(req.Messages) + `"` + extra + `}`
		return provider.Response{
			Message: provider.AssistantMessage("", provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(args)}),
			Usage:   usage(1),
		}, nil
	})
}

// latestJob returns the job id of the latest receipt in msgs.
func latestJob(msgs []provider.Message) string {
	id := ""
	for _, m := range msgs {
		var r struct {
			JobID string `json:"job_id"`
		}
		if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
			id = r.JobID
		}
	}
	return id
}

// modeCall is a model turn of one call to name with args, billed a
// token, whose id is the n-th answer's in the id mode id (callIDModes).
func modeCall(id func(n int64, i int) string, n int64, name, args string) fake.Reply {
	return fake.Calls(provider.ToolCall{ID: id(n, 0), Name: name, Arguments: json.RawMessage(args)}).WithUsage(usage(1))
}

// approveOne returns ctx resuming the turn that ended with in, its one
// question approved.
func approveOne(t *testing.T, ctx context.Context, in *tool.Interrupted) context.Context {
	t.Helper()
	rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	return rctx
}

// jobID returns the job id of a receipt.
func jobID(t *testing.T, receipt string) string {
	t.Helper()
	var r struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(receipt), &r); err != nil || r.JobID == "" || r.Status != "running" {
		t.Fatalf("receipt %q: want a job id and status running", receipt)
	}
	return r.JobID
}

// TestJobLifecycle walks a background job: started, listed, waited for
// past a timeout, collected (its usage once), collected again (no usage).
func TestJobLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"dig deep","background":true}`).For("lead").WithUsage(usage(1)),
			fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").WithUsage(usage(1)),
			onJob("wait", `,"timeout_seconds":1`).For("lead"),
			onJob("wait", `,"timeout_seconds":120`).For("lead"),
			onJob("wait", "").For("lead"),
			fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").WithUsage(usage(1)),
			fake.Text("done").For("lead").WithUsage(usage(1)),
			fake.Text("dug").For(subagent.DefaultForkName).WithUsage(usage(10)).After(time.Minute),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		start := time.Now()
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if wall := time.Since(start); wall != time.Minute {
			t.Errorf("wall time %v, want the job's minute", wall)
		}
		got := toolResults(out.Messages)
		if len(got) != 6 {
			t.Fatalf("tool results %q", got)
		}
		id := jobID(t, got[0])
		want := []string{
			got[0],
			id + "\tsubagent\trunning\t\"dig deep\"\n",
			"job " + id + " is still running after 1s: wait again, do other work meanwhile, or cancel it",
			"dug",
			"dug",
			id + "\tsubagent\tdone\t\"dig deep\"\n",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tool results (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(times(7, usage(1)), out.Usage); diff != "" {
			t.Errorf("parent usage (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(usage(10), out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
	})
}

// TestJobRunEndsWithJobRunning checks that a run that answers without
// collecting its job cancels it, reports it cancelled in the events, and
// still counts what it spent.
func TestJobRunEndsWithJobRunning(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			spawns(`{"task":"dig","background":true}`).For("lead").WithUsage(usage(1)),
			fake.Text("done without waiting").For("lead").WithUsage(usage(1)).After(time.Second),
			fake.Call("lookup", `{}`).For(fork).WithUsage(usage(7)),
			fake.Text("too late").For(fork).WithUsage(usage(1000)).After(time.Hour),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		rec := &recorder{}
		start := time.Now()
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if wall := time.Since(start); wall != time.Second {
			t.Errorf("wall time %v: the run waited for its job", wall)
		}
		if out.Answer != "done without waiting" {
			t.Errorf("answer %q", out.Answer)
		}
		if diff := cmp.Diff(times(2, usage(1)), out.Usage); diff != "" {
			t.Errorf("parent usage (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(usage(7), out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
		var types []event.Type
		var codes []string
		for _, e := range rec.of(event.SubagentStarted, event.SubagentFinished, event.SubagentError, event.RunFinished) {
			types = append(types, e.Type)
			if e.Type == event.SubagentError {
				codes = append(codes, e.Code)
			}
		}
		if diff := cmp.Diff([]event.Type{event.SubagentStarted, event.SubagentError, event.RunFinished}, types); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"cancelled"}, codes); diff != "" {
			t.Errorf("SUBAGENT_ERROR codes (-want +got):\n%s", diff)
		}
	})
}

// TestJobCancel checks the cancel action: on a running job it cancels it
// (its usage once, reported cancelled), on a finished one it reports the
// result instead.
func TestJobCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name      string
		child     []fake.Reply
		want      string // the cancel's result, after the job id
		wantList  string
		wantSpent provider.Usage
		wantCodes []string
	}{
		{
			name: "running",
			child: []fake.Reply{
				fake.Call("lookup", `{}`).WithUsage(usage(7)),
				fake.Text("too late").WithUsage(usage(1000)).After(time.Hour),
			},
			want:      " cancelled at step 2 (7 tokens spent): it had nothing to report yet.",
			wantList:  "cancelled",
			wantSpent: usage(7),
			wantCodes: []string{"cancelled"},
		},
		{
			name:      "already finished",
			child:     []fake.Reply{fake.Call("lookup", `{}`).WithUsage(usage(3)), fake.Text("found it").WithUsage(usage(4))},
			want:      " had already ended; its result:\nfound it",
			wantList:  "done",
			wantSpent: provider.Usage{InputTokens: 7, Requests: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := fake.NewProvider(
					spawns(`{"task":"dig","background":true}`).For("lead").WithUsage(usage(1)),
					onJob("cancel", "").For("lead").After(time.Minute),
					fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").WithUsage(usage(1)),
					fake.Text("done").For("lead").WithUsage(usage(1)),
				)
				for _, r := range tc.child {
					p.Add(r.For(subagent.DefaultForkName))
				}
				reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
				rec := &recorder{}
				out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				got := toolResults(out.Messages)
				if len(got) != 3 {
					t.Fatalf("tool results %q", got)
				}
				id := jobID(t, got[0])
				want := []string{got[0], "job " + id + tc.want, id + "\tsubagent\t" + tc.wantList + "\t\"dig\"\n"}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("tool results (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantSpent, out.ChildUsage); diff != "" {
					t.Errorf("child usage (-want +got):\n%s", diff)
				}
				var codes []string
				for _, e := range rec.of(event.SubagentError) {
					codes = append(codes, e.Code)
				}
				if diff := cmp.Diff(tc.wantCodes, codes); diff != "" {
					t.Errorf("SUBAGENT_ERROR codes (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestJobsToolBadCalls checks the jobs tool's correctable errors.
func TestJobsToolBadCalls(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name    string
		args    string
		wantErr error
		want    []string
	}{
		{"unknown action", `{"action":"kill","job_id":"j"}`, tool.ErrInvalidArguments, []string{"at /action", `pass {"action":"status"|"wait"|"send"|"cancel"|"list"`}},
		{"wait too long", `{"action":"wait","job_id":"j","timeout_seconds":601}`, tool.ErrInvalidArguments, []string{"at /timeout_seconds"}},
		{"not JSON", `{"action":`, tool.ErrInvalidArguments, []string{"not valid JSON"}},
		{"unknown job", `{"action":"wait","job_id":"job_nope"}`, subagent.ErrUnknownJob, []string{`subagent: unknown job "job_nope": this run's jobs are: job_`}},
		{"no job id", `{"action":"cancel"}`, subagent.ErrUnknownJob, []string{`subagent: unknown job ""`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(
				spawns(`{"task":"dig","background":true}`).For("lead"),
				fake.Call(subagent.JobsToolName, tc.args).For("lead"),
				fake.Text("done").For("lead"),
				fake.Text("dug").For(subagent.DefaultForkName),
			)
			var res tool.Result
			reg, s := setup(t, p, false, []subagent.SpawnOption{subagent.WithBackground()})
			jobs := s.JobsTool() // registered behind a spy that keeps its error
			spy := tool.Func{Def: jobs.Definition(), Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
				r, err := jobs.Call(ctx, c)
				if err != nil {
					res = tool.Result{Content: err.Error(), IsError: true, Err: err}
				}
				return r, err
			}}
			if err := reg.Register(spy); err != nil {
				t.Fatal(err)
			}
			if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(res.Err, tc.wantErr) || !tool.IsCorrectable(res.Err) {
				t.Errorf("error %v, want a correctable %v", res.Err, tc.wantErr)
			}
			mustContain(t, res.Content, tc.want...)
		})
	}
}

// TestJobNeedsARun checks that a background spawn outside a run, which no
// run would clean up after, is refused.
func TestJobNeedsARun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider(fake.Text("dug").For(subagent.DefaultForkName))
	reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
	res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t","background":true}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].IsError {
		t.Fatalf("result %+v, want an error", res[0])
	}
	mustContain(t, res[0].Content, "background jobs need a running agent to own them: call without background")
	if p.Calls() != 0 {
		t.Errorf("the child ran")
	}
	list, err := reg.Execute(t.Context(), []tool.Call{{ID: "c2", Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"list"}`)}})
	if err != nil || list[0].Content != "no jobs in this run" {
		t.Errorf("list outside a run: %+v, %v", list[0], err)
	}
}

// TestJobBudgetHeldUntilCollected checks that a background job's tokens
// stay set aside until its usage reaches the parent: a fork spawned while
// it runs gets only what is left beside it.
func TestJobBudgetHeldUntilCollected(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		pr := &probe{}
		p := fake.NewProvider(
			spawns(`{"task":"slow","background":true}`).For("lead").WithUsage(usage(1000)),
			spawns(`{"task":"quick"}`).For("lead").WithUsage(provider.Usage{Requests: 1}).After(time.Minute),
			onJob("wait", "").For("lead"),
			spawns(`{"task":"after"}`).For("lead").WithUsage(provider.Usage{Requests: 1}),
			fake.Text("done").For("lead").WithUsage(provider.Usage{Requests: 1}),
		)
		child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			task := req.Messages[0].Content
			switch {
			case task == "slow" && len(req.Messages) == 1:
				return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: "probe", Arguments: json.RawMessage(`{}`)}), Usage: usage(1000)}, nil
			case task == "slow":
				return provider.Response{Message: provider.AssistantMessage("slow done"), Usage: usage(1000)}, nil
			case len(req.Messages) == 1:
				return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: "probe", Arguments: json.RawMessage(`{}`)}), Usage: provider.Usage{Requests: 1}}, nil
			}
			return provider.Response{Message: provider.AssistantMessage(task + " done"), Usage: provider.Usage{Requests: 1}}, nil
		}).For(fork)
		for range 6 {
			p.Add(child)
		}
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithChildTokenBudget(5000)}, pr.tool())
		out, err := lead(t, p, reg, agent.WithTokenLimit(10000)).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		// 9,000 left, less the 1,000 the lead's next call reads and the
		// 64 of the note that makes it the wrap-up, in two: the job's
		// share, 3,968, less what its receipt and collection cost the
		// lead (210). While the job is uncollected "quick" gets
		// a share of what is left beside it; once collected (spent
		// 2,000), "after" gets a share of all that is left.
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if len(pr.seen) != 3 {
			t.Fatalf("the children's limits %q, want three", pr.seen)
		}
		slow, _ := strconv.Atoi(pr.seen[0])
		quick, _ := strconv.Atoi(pr.seen[1])
		after, _ := strconv.Atoi(pr.seen[2])
		if slow != 3968-210 || quick > (10000-1000-slow)/2 || after <= quick {
			t.Errorf("the children's limits, in order: %q; want %d for the job, less than %d beside it, more once it was collected", pr.seen, 3968-210, (10000-1000-slow)/2)
		}
		if diff := cmp.Diff(provider.Usage{InputTokens: 2000, Requests: 6}, out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
		if got := strings.Join(toolResults(out.Messages)[1:], "|"); got != "quick done|slow done|after done" {
			t.Errorf("tool results %q", got)
		}
	})
}

// TestJobAfterRunEnd checks that once a run has ended, its jobs are
// cancelled and counted, and a background spawn under its context is
// refused instead of starting a job no run would wait for.
func TestJobAfterRunEnd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		fork := subagent.DefaultForkName
		p := fake.NewProvider(
			fake.Call("lookup", `{}`).For(fork).WithUsage(usage(7)),
			fake.Text("too late").For(fork).After(time.Hour),
		).Loop()
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		ctx := run.Start(t.Context(), "run_custom", "custom", 0)
		spawnBG := []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t","background":true}`)}}
		res, err := reg.Execute(ctx, spawnBG)
		if err != nil || res[0].IsError {
			t.Fatalf("first spawn: %+v, %v", res[0], err)
		}
		time.Sleep(time.Minute)
		if diff := cmp.Diff(usage(7), run.Finish(ctx)); diff != "" {
			t.Errorf("usage handed back at the run's end (-want +got):\n%s", diff)
		}
		res, err = reg.Execute(ctx, spawnBG)
		if err != nil || !res[0].IsError {
			t.Fatalf("spawn after the run's end: %+v, %v; want an error result", res[0], err)
		}
		mustContain(t, res[0].Content, "the run has ended: no background job can start")
	})
}

// TestJobEventsAndSpan checks what a UI and a trace see of a background
// job: its SUBAGENT_STARTED comes before the spawning call's result (the
// receipt), under that call; the child's events carry its sub-agent run id
// and end with SUBAGENT_FINISHED after the receipt; and the child's run
// span hangs under a span of the job, which outlives the spawning call's.
func TestJobEventsAndSpan(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"dig deep","background":true}`).For("lead"),
			onJob("wait", `,"timeout_seconds":120`).For("lead"),
			fake.Text("done").For("lead"),
			fake.Text("dug").For(subagent.DefaultForkName).After(time.Minute),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		rec := &recorder{}
		out, err := lead(t, p, reg, agent.WithTracerProvider(tp)).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		id := jobID(t, toolResults(out.Messages)[0])
		spawnCall := out.Messages[1].ToolCalls[0].ID

		rec.mu.Lock()
		events := slices.Clone(rec.events)
		rec.mu.Unlock()
		if problems := eventcheck.Check(events, eventcheck.Options{Partial: true, Background: true}); len(problems) > 0 {
			t.Fatalf("the events break the rules:\n%s", strings.Join(problems, "\n"))
		}
		started, receipt, finished := -1, -1, -1
		var child string
		for i, e := range events {
			switch {
			case e.Type == event.SubagentStarted && e.ParentToolCallID == spawnCall:
				started, child = i, e.SubagentRunID
			case e.Type == event.ToolCallResult && e.ToolCallID == spawnCall:
				receipt = i
			case e.Type == event.SubagentFinished && e.SubagentRunID == child && child != "":
				finished = i
			}
		}
		if started < 0 || receipt < 0 || finished < 0 || !(started < receipt && receipt < finished) {
			t.Fatalf("SUBAGENT_STARTED at %d, receipt at %d, SUBAGENT_FINISHED at %d: want them in that order", started, receipt, finished)
		}
		text := ""
		for _, e := range events {
			if e.Type == event.TextMessageContent && e.SubagentRunID == child {
				text += e.Delta
			}
		}
		if text != "dug" {
			t.Errorf("the child's attributed text is %q, want %q", text, "dug")
		}

		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans.Ended() {
			byName[s.Name()] = s
		}
		call, job, run := byName["execute_tool "+subagent.SpawnToolName], byName["background_job "+subagent.DefaultForkName], byName["invoke_agent "+subagent.DefaultForkName]
		if call == nil || job == nil || run == nil {
			t.Fatalf("spans %v: want the spawning call's, the job's and the child's run", slices.Collect(maps.Keys(byName)))
		}
		if job.Parent().SpanID() != call.SpanContext().SpanID() || run.Parent().SpanID() != job.SpanContext().SpanID() {
			t.Errorf("the job's span is not under the spawning call's, or the child's run is not under the job's")
		}
		if !job.EndTime().After(call.EndTime()) || run.EndTime().After(job.EndTime()) {
			t.Errorf("the job's span ends at %v, the call's at %v, the run's at %v: want call < run <= job", job.EndTime(), call.EndTime(), run.EndTime())
		}
		var gotID string
		for _, a := range job.Attributes() {
			if a.Key == attribute.Key("deputy.job.id") {
				gotID = a.Value.AsString()
			}
		}
		if gotID != id {
			t.Errorf("the job's span has %s %q, want %q", attribute.Key("deputy.job.id"), gotID, id)
		}
	})
}
