package subagent_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A job cancelled while it waits for a person's approval is cancelled:
// its status says so and lists no question (nobody is to answer it), a
// wait for it reads it cancelled and does not suspend the lead with the
// question withdrawn, the cancel hands back its usage once, in the
// lead's ChildUsage, and the call that asked never runs.
func TestJobCancelledWhileItWaitsAsksNothing(t *testing.T) {
	var deletes int
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct{}) (string, error) {
		deletes++
		return "deleted", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		spawns(`{"task":"clean up","background":true}`).For("lead").WithUsage(usage(1)),
		fake.Call(subagent.JobsToolName, `{"action":"list"}`).For("lead").After(100*time.Millisecond).WithUsage(usage(2)),
		onJob("cancel", "").For("lead"),
		onJob("status", "").For("lead").WithUsage(usage(4)),
		onJob("wait", `,"timeout_seconds":60`).For("lead").WithUsage(usage(4)),
		fake.Text("never mind").For("lead").WithUsage(usage(8)),
		fake.Call("delete", `{}`).For(fork).WithUsage(usage(16)),
	)
	reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()}, tool.RequireApproval(del, "", 0))
	synctest.Test(t, func(t *testing.T) {
		var status subagent.JobStatus
		out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "tidy up"})
		if err != nil || out.Answer != "never mind" {
			t.Fatalf("run: %q, %v; want it to finish", out.Answer, err)
		}
		results := toolResults(out.Messages)
		mustContain(t, results[1], "suspended")
		mustContain(t, results[2], "cancelled while it waited for a person's answer")
		if err := json.Unmarshal([]byte(results[3]), &status); err != nil {
			t.Fatalf("the status %q: %v", results[3], err)
		}
		if status.State != subagent.JobCancelled || len(status.Questions) != 0 {
			t.Errorf("after the cancel the job's status is %s with the questions %+v, want cancelled asking nothing", status.State, status.Questions)
		}
		mustContain(t, results[4], "job "+status.ID+" cancelled at step 1 (16 tokens spent)")
		if deletes != 0 {
			t.Errorf("the delete ran %d times, want never", deletes)
		}
		if out.ChildUsage != usage(16) {
			t.Errorf("the lead counts %+v of its children, want the job's one call, %+v", out.ChildUsage, usage(16))
		}
	})
}
