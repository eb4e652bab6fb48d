package temporal

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Messages sent to a job while it waits for a person's approval are
// delivered once the person has answered, before its next step, each
// once and in order, their receipts queued while it waits and delivered
// at that step; the approved payment is made once. With models that name
// their calls afresh, not at all, or from call_0.
func TestJobMessagesSentWhileItAsksAreDeliveredOnce(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) { jobMessagesWhileItAsks(t, mode.id) })
	}
}

func jobMessagesWhileItAsks(t *testing.T, id func(n int64, i int) string) {
	const bill = "pay the bill"
	var paid, holds, n, jobCalls atomic.Int64
	var mu sync.Mutex
	var heard []string // the words the job's last model call read, in order
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		call := func(name, args string) (provider.Message, error) {
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: name, Arguments: json.RawMessage(args)}), nil
		}
		if firstUserOf(req) == bill {
			jobCalls.Add(1)
			var words []string
			for _, msg := range req.Messages {
				for _, w := range []string{"word one", "word two"} {
					if msg.Role == provider.RoleUser && strings.Contains(msg.Content, w) {
						words = append(words, w)
					}
				}
			}
			mu.Lock()
			heard = words
			mu.Unlock()
			if len(rs) == 0 {
				return call("pay", `{}`)
			}
			return provider.AssistantMessage("bill: " + rs[0]), nil
		}
		switch len(rs) {
		case 0:
			return call(SpawnToolName, `{"task":"`+bill+`","background":true}`)
		case 1:
			return call("hold", `{}`)
		}
		return provider.AssistantMessage("lead done"), nil
	}}
	holding, release := make(chan struct{}), make(chan struct{})
	reg, err := tool.NewRegistry(payer(&paid), holdOn("hold", &holds, holding, release))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg})
	env.SetTestTimeout(time.Minute)
	var one, two goUpdate
	var asked []tool.Interrupt
	var waiting, done []subagent.JobStatus
	state := 0
	everyTick(env, 50*time.Millisecond, func() bool {
		switch state {
		case 0: // The job asks: two messages are sent to it.
			if queried(env, InterruptsQuery, &asked) && len(asked) > 0 {
				env.UpdateWorkflow(JobSendUpdate, "send-1", one.callbacks(), JobSend{JobID: "job_1", Text: "word one"})
				env.UpdateWorkflow(JobSendUpdate, "send-2", two.callbacks(), JobSend{JobID: "job_1", Text: "word two"})
				state = 1
			}
		case 1: // Both are queued: the person approves.
			d1, _ := one.outcome()
			d2, _ := two.outcome()
			if d1 && d2 {
				queried(env, JobsQuery, &waiting)
				env.UpdateWorkflow(AnswerUpdate, "answer", noCallbacks{t}, []tool.Answer{{InterruptID: asked[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}})
				state = 2
			}
		case 2:
			if queried(env, JobsQuery, &done) && len(done) == 1 && done[0].State == subagent.JobDone {
				close(release)
				return true
			}
		}
		return false
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"pay", "hold"}, Spawn: true, Background: true}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	for i, u := range []*goUpdate{&one, &two} {
		u.mu.Lock()
		r, ok := u.value.(interface{ Get(any) error })
		var got subagent.Receipt
		if ok {
			ok = r.Get(&got) == nil
		} else {
			got, ok = u.value.(subagent.Receipt)
		}
		u.mu.Unlock()
		if !ok || got.State != subagent.MessageQueued || got.Seq != i+1 {
			t.Errorf("send %d returned %+v, want it queued as message %d", i+1, u.value, i+1)
		}
	}
	if len(waiting) != 1 || waiting[0].State != subagent.JobSuspended || len(waiting[0].Messages) != 2 ||
		waiting[0].Messages[0].State != subagent.MessageQueued || waiting[0].Messages[1].State != subagent.MessageQueued {
		t.Errorf("while the job waited for the person: %+v, want it suspended with both messages queued", waiting)
	}
	if len(done) != 1 || len(done[0].Messages) != 2 {
		t.Fatalf("once the job ended: %+v, want its two receipts", done)
	}
	for i, r := range done[0].Messages {
		if r.State != subagent.MessageDelivered || r.Seq != i+1 || r.Step != 2 {
			t.Errorf("receipt %d once the job ended: %+v, want message %d delivered before step 2", i+1, r, i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(heard, ", "); got != "word one, word two" || jobCalls.Load() != 2 || paid.Load() != 1 {
		t.Errorf("the job's last step read %q in %d model calls and paid %d times; want each word once, in order, in 2 calls, one payment", got, jobCalls.Load(), paid.Load())
	}
}
