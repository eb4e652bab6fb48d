package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// A run keeps the receipts of a job's newest maxJobReceipts messages,
// the older ones dropped and counted: a lead that sends its job more
// reads its status with the newest, numbered on from the dropped, and a
// thread hands its next turn as many, with the count. (Every receipt was
// kept, in the run's memory, its status and the next turn's input, for
// as many messages as a model sends.)
func TestJobReceiptsAreBounded(t *testing.T) {
	const task, sent = "wait for word", maxJobReceipts + 44
	seen := make(chan struct{})
	var status subagent.JobStatus
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		if firstUserOf(req) == task {
			select { // it ends once the lead has read its status
			case <-seen:
			case <-ctx.Done():
				return provider.Message{}, ctx.Err()
			}
			return provider.AssistantMessage("heard nothing"), nil
		}
		call := func(i int, name, args string) provider.ToolCall {
			return provider.ToolCall{ID: fmt.Sprint("c", i), Name: name, Arguments: json.RawMessage(args)}
		}
		switch len(rs) {
		case 0:
			return provider.AssistantMessage("", call(0, SpawnToolName, `{"task":"`+task+`","background":true}`)), nil
		case 1:
			var calls []provider.ToolCall
			for i := range sent {
				calls = append(calls, call(i+1, subagent.JobsToolName, fmt.Sprintf(`{"action":"send","job_id":"job_1","message":"word %d"}`, i+1)))
			}
			return provider.AssistantMessage("", calls...), nil
		case 1 + sent:
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"status","job_id":"job_1"}`)), nil
		case 2 + sent:
			if err := json.Unmarshal([]byte(rs[len(rs)-1]), &status); err != nil {
				return provider.Message{}, err
			}
			close(seen)
			return provider.AssistantMessage("", call(0, subagent.JobsToolName, `{"action":"wait","job_id":"job_1","timeout_seconds":60}`)), nil
		}
		return provider.AssistantMessage("done"), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.OnGetVersion(jobQueueChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true, Background: true}, Text: "talk to your job"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	ms := status.Messages
	if len(ms) != maxJobReceipts || ms[0].Seq != sent-maxJobReceipts+1 || ms[len(ms)-1].Seq != sent || ms[len(ms)-1].MessageID != fmt.Sprint("msg_", sent) {
		t.Errorf("the lead read %d receipts (%+v … %+v), want the newest %d, numbered %d to %d", len(ms), first(ms), last(ms), maxJobReceipts, sent-maxJobReceipts+1, sent)
	}

	// A thread hands its next turn the newest, with the count, a job kept
	// whole by a turn before the bound included.
	j := &bgJob{id: "job_1", agent: forkName, task: task, wfID: "thread/job_1"}
	for i := range sent {
		j.receipts = append(j.receipts, subagent.Receipt{JobID: "job_1", MessageID: fmt.Sprint("msg_", i+1), State: subagent.MessageQueued, Seq: i + 1})
	}
	k := j.kept()
	if len(k.Receipts) != maxJobReceipts || k.Dropped != sent-maxJobReceipts || k.Receipts[0].Seq != sent-maxJobReceipts+1 {
		t.Errorf("the thread keeps %d receipts from %+v, %d dropped; want the newest %d, %d dropped", len(k.Receipts), first(k.Receipts), k.Dropped, maxJobReceipts, sent-maxJobReceipts)
	}
	if again := k.job(); again.dropped+len(again.receipts)+1 != sent+1 {
		t.Errorf("the next turn numbers the job's next message %d, want %d", again.dropped+len(again.receipts)+1, sent+1)
	}
}

func first(rs []subagent.Receipt) subagent.Receipt {
	if len(rs) == 0 {
		return subagent.Receipt{}
	}
	return rs[0]
}

func last(rs []subagent.Receipt) subagent.Receipt {
	if len(rs) == 0 {
		return subagent.Receipt{}
	}
	return rs[len(rs)-1]
}
