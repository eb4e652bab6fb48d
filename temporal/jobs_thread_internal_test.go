package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// A turn of a thread that fails before its first model call (here, an
// input guardrail trips) has not told its model of the thread's jobs that
// ended meanwhile, nor counted what they spent: it hands them on to the
// next turn as it got them, uncollected, so that the next turn is told
// of them and counts them. (They were handed on as collected: told of by
// no turn, their spending counted nowhere.)
func TestThreadNotesOutliveATurnThatFailsFirst(t *testing.T) {
	var calls int
	p := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		calls++
		return provider.AssistantMessage("noted"), nil
	}}
	gs := []policy.Guardrail{{Name: "no-secret", Stage: policy.Input, Check: func(_ context.Context, text string) (policy.Finding, error) {
		if strings.Contains(text, "sk-live") {
			return policy.Finding{Problem: "the task holds a key"}, nil
		}
		return policy.Finding{}, nil
	}}}
	jobUsage := provider.Usage{InputTokens: 40, OutputTokens: 2, Requests: 1}
	th := &ThreadJobs{
		Jobs: []keptJob{{ID: "job_1", Agent: forkName, Task: "count the birds", WorkflowID: "thread/job_1", Ended: true,
			Outcome: &jobOutcome{Out: RunOutput{Answer: "birds: 12", Usage: jobUsage}}}},
		Next:  1,
		Notes: []tool.Note{{ID: "job_1", Text: "Background job job_1 (subagent), started in an earlier turn, has ended (done). Its result:\nbirds: 12", Usage: jobUsage}},
	}
	spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, JobsAcrossTurns: true, Guardrails: []string{"no-secret"}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Guardrails: gs})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "use sk-live-123", Thread: th})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "the task holds a key") {
		t.Fatalf("the turn ended %v, want its input guardrail tripped", err)
	}
	if calls != 0 {
		t.Fatalf("%d model calls, want none: the guardrail stops the turn first", calls)
	}
	v, err := env.QueryWorkflow(ThreadJobsQuery)
	if err != nil {
		t.Fatal(err)
	}
	var kept ThreadJobs
	if err := v.Get(&kept); err != nil {
		t.Fatal(err)
	}
	if len(kept.Jobs) != 1 || kept.Jobs[0].ID != "job_1" || kept.Jobs[0].Collected {
		t.Errorf("the failed turn handed on %+v, want job_1 uncollected: no model read of it, its spending counted nowhere", kept.Jobs)
	}

	// The next turn, told of it again (as Agent writes the notes of the
	// jobs the last turn hands on ended and uncollected), counts it and
	// hands it on collected.
	spec.Guardrails = nil
	kept.Notes = th.Notes
	env = newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: spec, Text: "anything new?", Thread: &kept})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || out.ChildUsage != jobUsage {
		t.Errorf("%d model calls, the turn's ChildUsage %+v; want 1, and the job's %+v", calls, out.ChildUsage, jobUsage)
	}
	if v, err = env.QueryWorkflow(ThreadJobsQuery); err == nil {
		err = v.Get(&kept)
	}
	if err != nil || len(kept.Jobs) != 1 || !kept.Jobs[0].Collected {
		t.Errorf("the turn told of job_1 handed on %+v (%v), want it collected", kept.Jobs, err)
	}
}

// The workflow id of a thread names its owner and thread unambiguously:
// no owner reaches another's thread's turns and jobs by a name that
// holds the separator (they met when joined with a NUL byte).
func TestThreadWorkflowIDIsOneToOne(t *testing.T) {
	pairs := [][2]string{
		{"ann", "t"}, {"ann\x00t", ""}, {"", "ann\x00t"}, {"ann", "\x00t"}, {"ann\x00", "t"},
		{"a", "nn\x00t"}, {"ann\x00x", "y"}, {"ann", "x\x00y"}, {"ann", "t "}, {"ann ", "t"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		id := ThreadWorkflowID(p[0], p[1])
		if q, dup := seen[id]; dup {
			t.Errorf("owner %q thread %q and owner %q thread %q share the workflow id %s", q[0], q[1], p[0], p[1], id)
		}
		seen[id] = p
	}
}

// What a thread keeps of the jobs it has handed over is bounded in
// bytes, not only in number: a thread whose jobs answered at length keeps
// the newest that fit in maxKeptBytes, so that the next turn's input
// stays far below the server's limit on a payload (2 MiB by default) and
// the thread can go on. (Sixty-four answers of 48 KiB were kept whole: 3
// MiB, which no turn of the thread could start with.) The test gives a
// turn sixteen of them, 768 KiB, over the bound: an input the server
// takes. Sixty-four made one it refuses, whose decoding alone, in the
// workflow's first task, took most of the second the SDK allows a task,
// under the race detector on a loaded machine.
func TestThreadKeepsJobsInBoundedBytes(t *testing.T) {
	const jobs = 16
	p := &script{fn: func(context.Context, int, provider.Request) (provider.Message, error) {
		return provider.AssistantMessage("nothing new"), nil
	}}
	long := strings.Repeat("a long report. ", DefaultMaxOutputBytes/15)
	th := &ThreadJobs{Next: jobs}
	for i := range jobs {
		th.Jobs = append(th.Jobs, keptJob{ID: fmt.Sprint("job_", i+1), Agent: forkName, Task: "report", WorkflowID: fmt.Sprint("thread/job_", i+1),
			Ended: true, Collected: true, Outcome: &jobOutcome{Out: RunOutput{Answer: long}}})
	}
	if raw, err := json.Marshal(th); err != nil || len(raw) <= maxKeptBytes {
		t.Fatalf("the jobs weigh %d bytes (%v), want more than the %d a thread keeps", len(raw), err, maxKeptBytes)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, JobsAcrossTurns: true},
		Text: "anything new?", Thread: th})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	v, err := env.QueryWorkflow(ThreadJobsQuery)
	if err != nil {
		t.Fatal(err)
	}
	var kept ThreadJobs
	if err := v.Get(&kept); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(RunInput{Thread: &kept})
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > maxKeptBytes+1<<10 {
		t.Errorf("the thread hands its next turn %d bytes of jobs, want at most the %d it keeps", len(raw), maxKeptBytes)
	}
	if n := len(kept.Jobs); n == 0 || n == jobs || kept.Jobs[n-1].ID != fmt.Sprint("job_", jobs) {
		t.Errorf("the thread kept %d of %d jobs, want the newest that fit", n, jobs)
	}
	if kept.Next != jobs {
		t.Errorf("the thread's next job number is %d, want %d: the ids of jobs dropped are not given again", kept.Next, jobs)
	}
}

// A job takes each sender's messages in the order sent, whatever order
// they come in, and takes a message that comes again once.
func TestInboxTakesEachMessageOnceInOrder(t *testing.T) {
	ib := &inbox{ordered: true, next: map[string]int{}}
	msg := func(from string, order int) jobMessage {
		return jobMessage{ID: fmt.Sprintf("%s-%d", from, order), From: from, Order: order}
	}
	var took []string
	for _, m := range []jobMessage{msg("a", 2), msg("b", 1), msg("a", 2), msg("a", 1), msg("a", 1), msg("a", 3), msg("b", 1), msg("a", 2)} {
		for _, got := range ib.inOrder(m) {
			took = append(took, got.ID)
		}
	}
	if want := []string{"b-1", "a-1", "a-2", "a-3"}; !slices.Equal(took, want) || len(ib.held) != 0 {
		t.Errorf("took %v, holding %v; want %v, holding none", took, ib.held, want)
	}
	// One from further ahead than a sender can have messages on their
	// way is not held for good: it is taken as it comes.
	if got := ib.inOrder(msg("a", 4+maxJobQueued)); len(got) != 1 || len(ib.held) != 0 {
		t.Errorf("a message %d ahead: took %v, holding %v; want it taken", maxJobQueued+1, got, ib.held)
	}
}

// A call that timed out reads as a timeout, not as the older error of
// the attempt before it, which the timeout wraps.
func TestFailureLineNamesATimeout(t *testing.T) {
	err := sdktemporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, sdktemporal.NewApplicationError("m: overloaded", "deputy.provider.overloaded"))
	if got := failureLine(err); got != "timed out (start to close)" {
		t.Errorf("failureLine = %q, want the timeout", got)
	}
	if got := failureLine(sdktemporal.NewApplicationError("m: bad request", "x")); got != "m: bad request" {
		t.Errorf("failureLine = %q, want the application error's message", got)
	}
}
