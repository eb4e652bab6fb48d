package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A background job whose sub-agent asks for approval suspends; the parent,
// waiting for it, suspends too, and the run ends with the interrupt. The
// resumed turn continues the same job (same job id, same sub-agent run),
// whose approved call runs and whose result reaches the parent.
func TestBackgroundJobAskingForApprovalSuspendsTheRun(t *testing.T) {
	st := newStore(t)

	var deletes atomic.Int64
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
		Path string `json:"path"`
	}) (string, error) {
		deletes.Add(1)
		return "deleted " + in.Path, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		fake.Calls(provider.ToolCall{ID: "s1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"clean up","background":true}`)}).For("lead").WithUsage(usage(1)),
		waitCall("w1").For("lead"),
		fake.Text("all clean").For("lead").WithUsage(usage(1)),
		fake.Calls(provider.ToolCall{ID: "d1", Name: "delete", Arguments: json.RawMessage(`{"path":"/tmp/x"}`)}).For(fork).WithUsage(usage(1)),
		fake.Text("deleted it").For(fork).WithUsage(usage(1)),
	)
	model := p
	reg, _ := setup(t, model, true, []subagent.SpawnOption{subagent.WithBackground()}, tool.RequireApproval(del, "deletes data", 0))
	newLead := lead
	lead := newLead(t, model, reg)

	// resumes is what the client saw of the runs before: a resumed run
	// does not announce again the calls it replays.
	run := func(ctx context.Context, resumes ...event.Event) (agent.Output, []event.Event, error) {
		t.Helper()
		j, err := st.Journal(ctx, "turn")
		if err != nil {
			t.Fatal(err)
		}
		var rec eventcheck.Recorder
		out, err := lead.Run(event.WithSink(agent.WithJournal(ctx, j), &rec), agent.Input{Text: "tidy up"})
		evs := rec.Events()
		if problems := eventcheck.Check(evs, eventcheck.Options{Background: true, Resumes: resumes}); len(problems) > 0 {
			t.Errorf("the stream breaks the rules:\n%s", strings.Join(problems, "\n"))
		}
		return out, evs, err
	}
	ctx := context.Background()
	out1, ev1, err := run(ctx)
	var in *tool.Interrupted
	if !errors.As(err, &in) || len(in.Interrupts) != 1 {
		t.Fatalf("first run: %v, want one interrupt", err)
	}
	job := eventcheck.StartedRun(ev1, fork)
	if it := in.Interrupts[0]; it.SubagentRunID != job || job == "" || it.ToolCallID != "d1" {
		t.Fatalf("interrupt %+v, want the job's (%s) call d1", it, job)
	}
	if got := eventcheck.Outcome(ev1, job); got != `{"type":"suspended","interruptIds":["`+in.Interrupts[0].ID+`"]}` {
		t.Errorf("the job's SUBAGENT_FINISHED outcome = %s", got)
	}
	if last := ev1[len(ev1)-1]; last.Type != event.RunFinished || !strings.HasPrefix(string(last.Outcome), `{"type":"interrupt"`) {
		t.Errorf("the run ended with %s %s, want RUN_FINISHED with the interrupt outcome", last.Type, last.Outcome)
	}
	if deletes.Load() != 0 {
		t.Fatal("the call ran before it was approved")
	}

	rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	out2, ev2, err := run(rctx, ev1...)
	if err != nil || out2.Answer != "all clean" {
		t.Fatalf("resumed run: %q, %v", out2.Answer, err)
	}
	if deletes.Load() != 1 {
		t.Errorf("deletes %d, want 1", deletes.Load())
	}
	if got := eventcheck.StartedRun(ev2, fork); got != job {
		t.Errorf("the resumed run announced the job as %q, want the same sub-agent run %q", got, job)
	}
	// The job's result reached the parent through its wait.
	reqs := p.RequestsFor("lead")
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Content; got != "deleted it" {
		t.Errorf("the lead read %q from its wait, want the job's answer", got)
	}
	if p.Remaining() != 0 {
		t.Errorf("%d scripted replies unused", p.Remaining())
	}
	// Each model call was made once; the resumed run counts the whole
	// turn, what the first run spent as earlier.
	if got := out2.TotalUsage().Requests; got != 5 || out2.Earlier != out1.TotalUsage() {
		t.Errorf("the resumed run counted %d requests, %+v earlier; want 5, the first run's %+v earlier", got, out2.Earlier, out1.TotalUsage())
	}

	// Run once more (as after a crash before the turn was reported): the
	// finished job is answered from the journal, announced once, at no
	// new cost: all it reports was spent before. (A fresh lead: this one
	// keeps the turn it finished.)
	lead = newLead(t, model, reg)
	out3, ev3, err := run(ctx, append(ev1, ev2...)...)
	if err != nil || out3.Answer != "all clean" || out3.TotalUsage() != out2.TotalUsage() || out3.Earlier != out3.TotalUsage() {
		t.Fatalf("replayed run: %q, usage %v (%v earlier), %v; want the whole turn's %v, all earlier", out3.Answer, out3.TotalUsage(), out3.Earlier, err, out2.TotalUsage())
	}
	if got := eventcheck.StartedRun(ev3, fork); got != job || eventcheck.Outcome(ev3, job) == "(no SUBAGENT_FINISHED)" {
		t.Errorf("the replayed job was announced as %q, want %q, and finished", got, job)
	}
}

// waitCall is a model turn that waits for the latest job, with a call id
// of its own, as a real model gives (a journaled turn replays the calls
// with the ids they had).
func waitCall(id string) fake.Reply {
	return fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		args := `{"action":"wait","job_id":"` + latestJob(req.Messages) + `"}`
		return provider.Response{
			Message: provider.AssistantMessage("", provider.ToolCall{ID: id, Name: subagent.JobsToolName, Arguments: json.RawMessage(args)}),
			Usage:   usage(1),
		}, nil
	})
}

// A parent that cancels a suspended job instead of waiting for it is not
// suspended: the job's question is dropped with its work.
func TestCancelledSuspendedJobDoesNotSuspendTheParent(t *testing.T) {
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct{}) (string, error) { return "deleted", nil })
	if err != nil {
		t.Fatal(err)
	}
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		spawns(`{"task":"clean up","background":true}`).For("lead"),
		fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").After(100*time.Millisecond),
		onJob("cancel", "").For("lead"),
		fake.Text("never mind").For("lead"),
		fake.Call("delete", `{}`).For(fork),
	)
	reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()}, tool.RequireApproval(del, "", 0))
	synctest.Test(t, func(t *testing.T) {
		// The list comes after the job has asked (the bubble's clock moves
		// only when every goroutine waits).
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "tidy up"})
		if err != nil || out.Answer != "never mind" {
			t.Fatalf("run: %q, %v; want it to finish", out.Answer, err)
		}
		results := toolResults(out.Messages)
		mustContain(t, results[1], "suspended")
		mustContain(t, results[2], "cancelled while it waited for a person's answer")
	})
}

// nestedAsker is the model of a lead that hands a cleanup to a child in
// the foreground; the child starts it in the background as a job of its
// own and waits for it; the job's delete needs a person's approval. It
// names its calls as id does, and counts the calls of each agent.
type nestedAsker struct {
	id                 func(n int64, i int) string
	n                  atomic.Int64
	lead, child, grand atomic.Int64
}

func (m *nestedAsker) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	k := m.n.Add(1)
	u := provider.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: 1, Requests: 1}
	call := func(name, args string) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: m.id(k, 0), Name: name, Arguments: json.RawMessage(args)}), Usage: u}, nil
	}
	text := func(s string) (provider.Response, error) {
		return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
	}
	results := toolResults(req.Messages)
	last := ""
	if len(results) > 0 {
		last = results[len(results)-1]
	}
	switch {
	case !strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]):
		m.lead.Add(1)
		if len(results) == 0 {
			return call(subagent.SpawnToolName, `{"task":"have the cleanup done"}`)
		}
		return text("lead: " + last)
	case strings.Contains(req.Messages[0].Content, "have the cleanup done"):
		m.child.Add(1)
		switch len(results) {
		case 0:
			return call(subagent.SpawnToolName, `{"task":"clean up","background":true}`)
		case 1:
			return call(subagent.JobsToolName, `{"action":"wait","job_id":"`+latestJob(req.Messages)+`","timeout_seconds":60}`)
		}
		return text("child: " + last)
	default:
		m.grand.Add(1)
		if len(results) == 0 {
			return call("delete", `{"path":"/tmp/x"}`)
		}
		return text("deleted it")
	}
}

// A background job started by a child, not by the lead, whose sub-agent
// asks a person: the child waiting for it suspends with its question,
// and so does the lead, whose run ends with the question, attributed to
// the job's sub-agent, at once (not when the wait times out). Resumed
// with the approval, the delete runs once, no model answer is asked for
// twice, and the answer comes up through the child to the lead; in the
// three id modes.
func TestChildsBackgroundJobAskingAPersonSuspendsTheRun(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var deletes atomic.Int64
			del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
				Path string `json:"path"`
			}) (string, error) {
				deletes.Add(1)
				return "deleted " + in.Path, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			m := &nestedAsker{id: mode.id}
			reg, _ := setup(t, m, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxDepth(2)}, tool.RequireApproval(del, "deletes data", 0))
			st := newStore(t)
			run := func(ctx context.Context) (agent.Output, []event.Event, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				var rec eventcheck.Recorder
				out, err := lead(t, m, reg).Run(event.WithSink(agent.WithJournal(ctx, j), &rec), agent.Input{Text: "tidy up"})
				return out, rec.Events(), err
			}
			start := time.Now()
			_, ev1, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run ended with %v after %v, want the job's question", err, time.Since(start))
			}
			var job string
			for _, e := range ev1 {
				if e.Type == event.SubagentStarted && e.ParentSubagentRunID != "" {
					job = e.SubagentRunID // the grandchild: started by the child
				}
			}
			if it := in.Interrupts[0]; job == "" || it.SubagentRunID != job || it.Reason != tool.ApprovalReason {
				t.Fatalf("the question %+v, want the approval asked by the child's job %q", it, job)
			}
			if d, l, c, g := deletes.Load(), m.lead.Load(), m.child.Load(), m.grand.Load(); d != 0 || l != 1 || c != 2 || g != 1 {
				t.Fatalf("before the answer: %d deletes, and the lead, child and job asked their models %d, %d and %d times; want 0, 1, 2, 1", d, l, c, g)
			}

			rctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := run(rctx)
			if err != nil {
				t.Fatalf("the resumed run: %v", err)
			}
			if out.Answer != "lead: child: deleted it" {
				t.Errorf("the resumed run answered %q, want the job's answer through the child", out.Answer)
			}
			if d, l, c, g := deletes.Load(), m.lead.Load(), m.child.Load(), m.grand.Load(); d != 1 || l != 2 || c != 3 || g != 2 {
				t.Errorf("after the answer: %d deletes, and the lead, child and job asked their models %d, %d and %d times; want 1, 2, 3, 2", d, l, c, g)
			}
		})
	}
}
