package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// inbound returns the messages from the parent a request carries.
func inbound(req provider.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser && strings.Contains(m.Content, "from the agent that started you") {
			out = append(out, m.Content)
		}
	}
	return out
}

// A message sent while the child waits for its model reaches it before
// its next model call, not the one under way; its receipt says queued,
// then delivered and the step.
func TestJobMessageDeliveredAtTheNextStep(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"dig","background":true}`).For("lead"),
			onJob("send", `,"message":"look under the stairs"`).For("lead").After(time.Second),
			onJob("wait", `,"timeout_seconds":600`).For("lead"),
			onJob("status", "").For("lead"),
			fake.Text("done").For("lead"),
			fake.Call("lookup", `{}`).For(subagent.DefaultForkName).WithUsage(usage(5)).After(time.Minute),
			fake.Text("found it under the stairs").For(subagent.DefaultForkName).WithUsage(usage(6)),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		rec := &recorder{}
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 4 {
			t.Fatalf("tool results %q", got)
		}
		var sent subagent.Receipt
		if err := json.Unmarshal([]byte(got[1]), &sent); err != nil || sent.State != subagent.MessageQueued || sent.Seq != 1 || sent.MessageID == "" {
			t.Fatalf("send's receipt %s (%v): want the message queued, first", got[1], err)
		}
		if got[2] != "found it under the stairs" {
			t.Errorf("wait returned %q", got[2])
		}
		var st subagent.JobStatus
		if err := json.Unmarshal([]byte(got[3]), &st); err != nil {
			t.Fatal(err)
		}
		want := subagent.JobStatus{ID: sent.JobID, Agent: subagent.DefaultForkName, Task: "dig", State: subagent.JobDone, Step: 2,
			LastWords: "found it under the stairs", Usage: provider.Usage{InputTokens: 11, Requests: 2},
			Messages: []subagent.Receipt{{JobID: sent.JobID, MessageID: sent.MessageID, State: subagent.MessageDelivered, Step: 2, Seq: 1}}}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("status (-want +got):\n%s", diff)
		}
		reqs := p.RequestsFor(subagent.DefaultForkName)
		if len(reqs) != 2 || len(inbound(reqs[0])) != 0 || len(inbound(reqs[1])) != 1 || !strings.Contains(inbound(reqs[1])[0], "look under the stairs") {
			t.Fatalf("the child's requests carried %d requests; want the message in the second only", len(reqs))
		}
		// After the tool result, not inside the step that was under way.
		last := reqs[1].Messages[len(reqs[1].Messages)-1]
		if last.Role != provider.RoleUser || !strings.Contains(last.Content, sent.MessageID) {
			t.Errorf("the second request ends with %+v, want the message", last)
		}
		if n := len(rec.custom(subagent.JobMessageEvent)); n != 1 {
			t.Errorf("%d %s events, want 1", n, subagent.JobMessageEvent)
		}
	})
}

// custom returns the CUSTOM events named name.
func (r *recorder) custom(name string) []event.Event {
	var out []event.Event
	for _, e := range r.of(event.Custom) {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// slowOrFast answers a fork's task after five minutes when it says slow.
func slowOrFast() fake.Reply {
	return fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		if strings.Contains(task, "slow") {
			select {
			case <-time.After(5 * time.Minute):
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
		return provider.Response{Message: provider.AssistantMessage(task + " done"), Usage: usage(int64(len(task)))}, nil
	}).For(subagent.DefaultForkName)
}

// Wait for any returns the first job to end; wait with no ids then
// collects the rest; each job's usage counts once.
func TestJobWaitAnyThenAll(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"slow","background":true}`, `{"task":"fast","background":true}`).For("lead"),
			fake.Call(subagent.JobsToolName, `{"action":"wait","mode":"any","timeout_seconds":600}`).For("lead"),
			fake.Call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":600}`).For("lead"),
			fake.Call(subagent.JobsToolName, `{"action":"wait"}`).For("lead"),
			fake.Text("done").For("lead"),
			slowOrFast(), slowOrFast(),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		start := time.Now()
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 5 {
			t.Fatalf("tool results %q", got)
		}
		if !strings.Contains(got[2], "fast done") || strings.Contains(got[2], "slow done") || !strings.Contains(got[2], "still running: job_") {
			t.Errorf("wait for any: %q, want the fast job, the slow one still running", got[2])
		}
		if !strings.HasSuffix(got[3], "slow done") || strings.Contains(got[3], "fast") {
			t.Errorf("wait for the rest: %q, want the slow job alone", got[3])
		}
		if !strings.HasPrefix(got[4], "no job to wait for") {
			t.Errorf("a wait with nothing left: %q", got[4])
		}
		if wall := time.Since(start); wall != 5*time.Minute {
			t.Errorf("wall time %v, want the slow job's five minutes", wall)
		}
		if diff := cmp.Diff(provider.Usage{InputTokens: 8, Requests: 2}, out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
	})
}

// Cancelling a job ends its sub-agent's own background children too, and
// hands back a partial report with what it spent.
func TestJobCancelEndsItsChildren(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"dig","background":true}`).For("lead"),
			onJob("cancel", "").For("lead").After(time.Minute),
			fake.Text("done").For("lead"),
		)
		// The child starts a grandchild in the background and waits for
		// it; the grandchild takes a day.
		model := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if strings.Contains(req.Messages[0].Content, "deeper") {
				select {
				case <-time.After(24 * time.Hour):
					return provider.Response{Message: provider.AssistantMessage("too late")}, nil
				case <-ctx.Done():
					return provider.Response{}, ctx.Err()
				}
			}
			if len(toolResults(req.Messages)) == 0 {
				return provider.Response{Message: provider.AssistantMessage("asking a helper first", spawn(`{"task":"deeper","background":true}`)), Usage: usage(2)}, nil
			}
			wait := provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":600,"job_id":"` + latestJob(req.Messages) + `"}`)}
			return provider.Response{Message: provider.AssistantMessage("", wait), Usage: usage(3)}, nil
		}).For("child")
		p.Add(model, model, model)
		reg, err := tool.NewRegistry(lookup())
		if err != nil {
			t.Fatal(err)
		}
		s, err := subagent.NewSpawner(p, reg, subagent.WithBackground(), subagent.WithMaxDepth(2), subagent.WithForkName("child"))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(s); err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(s.JobsTool()); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		start := time.Now()
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if wall := time.Since(start); wall != time.Minute {
			t.Errorf("wall time %v, want the minute before the cancel", wall)
		}
		got := toolResults(out.Messages)
		if len(got) != 2 || !strings.Contains(got[1], "cancelled at step 2 (5 tokens spent); partial report, its last words:\nasking a helper first") {
			t.Fatalf("tool results %q, want a partial report", got)
		}
		var codes []string
		for _, e := range rec.of(event.SubagentError) {
			codes = append(codes, e.Code)
		}
		if diff := cmp.Diff([]string{"cancelled", "cancelled"}, codes); diff != "" {
			t.Errorf("SUBAGENT_ERROR codes of the child and the grandchild (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(provider.Usage{InputTokens: 5, Requests: 2}, out.ChildUsage); diff != "" {
			t.Errorf("child usage (-want +got):\n%s", diff)
		}
	})
}

// A background spawn past WithMaxBackground is refused, with an event.
func TestJobMaxBackground(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"slow","background":true}`).For("lead"),
			spawns(`{"task":"slow too","background":true}`).For("lead"),
			onJob("cancel", "").For("lead"),
			fake.Text("done").For("lead"),
			slowOrFast(),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxBackground(1)})
		rec := &recorder{}
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 3 || !strings.Contains(got[1], subagent.ErrMaxBackground.Error()) {
			t.Fatalf("tool results %q, want the second spawn refused", got)
		}
		refused := rec.custom(subagent.RefusedEvent)
		if len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_background"`) {
			t.Errorf("refusal events %v", refused)
		}
	})
}

// The Go API does what the tool does.
func TestJobsGoAPI(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(slowOrFast(), slowOrFast())
		var s *subagent.Spawner
		var results []subagent.JobResult
		var cancelled subagent.JobResult
		var errs []error
		driver := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
			Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
				jobs := s.Jobs(ctx)
				fast, err := jobs.Start(ctx, subagent.Task{Task: "fast"})
				errs = append(errs, err)
				slow, err := jobs.Start(ctx, subagent.Task{Task: "slow"})
				errs = append(errs, err)
				_, err = jobs.Send(ctx, slow.ID, " ")
				errs = append(errs, err)
				_, err = jobs.Status("job_nope")
				errs = append(errs, err)
				results, err = jobs.Wait(ctx, subagent.WaitFor{IDs: []string{fast.ID}, Timeout: time.Minute})
				errs = append(errs, err)
				cancelled, err = jobs.Cancel(ctx, slow.ID)
				errs = append(errs, err)
				_, err = jobs.Send(ctx, slow.ID, "too late")
				errs = append(errs, err)
				return tool.Result{Content: "driven", Usage: results[0].Result.Usage.Add(cancelled.Result.Usage)}, nil
			}}
		p.Add(fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead"))
		reg, sp := setup(t, p, false, []subagent.SpawnOption{subagent.WithBackground()}, driver)
		s = sp
		if s.Jobs(t.Context()) != nil {
			t.Error("Jobs outside a run is not nil")
		}
		if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
			t.Fatal(err)
		}
		wantErrs := []error{nil, nil, tool.ErrInvalidArguments, subagent.ErrUnknownJob, nil, nil, subagent.ErrJobEnded}
		for i, want := range wantErrs {
			if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
				t.Errorf("action %d: error %v, want %v", i, errs[i], want)
			}
		}
		if len(results) != 1 || results[0].State != subagent.JobDone || results[0].Result.Content != "fast done" || results[0].Usage != usage(4) {
			t.Errorf("wait: %+v", results)
		}
		if cancelled.State != subagent.JobCancelled || !strings.Contains(cancelled.Result.Content, "cancelled") {
			t.Errorf("cancel: %+v", cancelled)
		}
	})
}

// A message sent while the child makes its last model call is never
// taken: once the job has ended its receipt says undelivered, not queued
// forever, and a message sent after that is refused as to an ended job.
func TestJobMessageAfterTheLastStepIsUndelivered(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"dig","background":true}`).For("lead"),
			onJob("send", `,"message":"look under the stairs"`).For("lead").After(time.Second),
			onJob("wait", `,"timeout_seconds":600`).For("lead"),
			onJob("status", "").For("lead"),
			onJob("send", `,"message":"and in the attic"`).For("lead"),
			fake.Text("done").For("lead"),
			fake.Text("found nothing").For(subagent.DefaultForkName).WithUsage(usage(5)).After(time.Minute),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 5 {
			t.Fatalf("tool results %q", got)
		}
		var sent subagent.Receipt
		if err := json.Unmarshal([]byte(got[1]), &sent); err != nil || sent.State != subagent.MessageQueued {
			t.Fatalf("send's receipt %s (%v): want the message queued", got[1], err)
		}
		var st subagent.JobStatus
		if err := json.Unmarshal([]byte(got[3]), &st); err != nil {
			t.Fatal(err)
		}
		want := []subagent.Receipt{{JobID: sent.JobID, MessageID: sent.MessageID, State: subagent.MessageUndelivered, Seq: 1}}
		if diff := cmp.Diff(want, st.Messages); diff != "" {
			t.Errorf("the ended job's receipts (-want +got):\n%s", diff)
		}
		if !strings.Contains(got[4], "takes no more messages") {
			t.Errorf("a message to the ended job: %q, want it refused", got[4])
		}
		if reqs := p.RequestsFor(subagent.DefaultForkName); len(reqs) != 1 {
			t.Errorf("the child made %d model calls, want 1", len(reqs))
		}
	})
}

// Jobs.Start refuses a task the spawn tool would refuse, with an error
// that says what to fix, and starts nothing: a blank task, a member not
// on the roster, an output schema that is not an object, a model when
// the spawner offers none. A good task with a null schema starts.
func TestJobsStartRefusesABadTask(t *testing.T) {
	for _, c := range []struct {
		name string
		task subagent.Task
		want string // in the error; "" starts the job
	}{
		{"blank task", subagent.Task{Task: " \n"}, "task is blank"},
		{"unknown member", subagent.Task{Task: "dig", Agent: "digger"}, `no sub-agent named "digger"`},
		{"schema a string", subagent.Task{Task: "dig", OutputSchema: json.RawMessage(`"object"`)}, "output_schema"},
		{"schema an array", subagent.Task{Task: "dig", OutputSchema: json.RawMessage(` [{"type":"object"}]`)}, "output_schema"},
		{"model without a menu", subagent.Task{Task: "dig", Model: "expert"}, "offers no choice of model"},
		{"null schema", subagent.Task{Task: "dig", OutputSchema: json.RawMessage(`null`)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sp *subagent.Spawner
			var started []subagent.JobStatus
			var startErr error
			driver := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					jobs := sp.Jobs(ctx)
					_, startErr = jobs.Start(ctx, c.task)
					if _, err := jobs.Wait(ctx, subagent.WaitFor{}); err != nil {
						return tool.Result{}, err
					}
					started = jobs.List()
					return tool.Result{Content: "driven"}, nil
				}}
			p := fake.NewProvider(fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead"),
				fake.Text("dug").For(subagent.DefaultForkName))
			reg := mk(tool.NewRegistry(driver))(t)
			sp = mk(subagent.NewSpawner(p, reg, subagent.WithBackground()))(t)
			if _, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"}); err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if startErr != nil || len(started) != 1 || started[0].State != subagent.JobDone {
					t.Fatalf("start: %v, jobs %+v", startErr, started)
				}
				return
			}
			if !errors.Is(startErr, tool.ErrInvalidArguments) || !strings.Contains(startErr.Error(), c.want) {
				t.Fatalf("start: %v, want an invalid-arguments error saying %q", startErr, c.want)
			}
			if len(started) != 0 || len(p.Requests()) != 2 {
				t.Fatalf("%d jobs, %d requests: a refused task started something", len(started), len(p.Requests()))
			}
		})
	}
}
