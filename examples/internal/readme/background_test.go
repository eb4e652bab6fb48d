package readme

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// digTool is a tool that answers once release is closed.
func digTool(release <-chan struct{}) tool.Tool {
	return tool.Func{
		Def: tool.Definition{Name: "dig", Description: "Digs.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-release:
				return tool.Result{Content: "found gold"}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		},
	}
}

// lastLine answers with the last line of the request's last message.
func lastLine(prefix string) fake.Reply {
	return fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		last := req.Messages[len(req.Messages)-1].Content
		return provider.Response{Message: provider.AssistantMessage(prefix + last[strings.LastIndex(last, "\n")+1:])}, nil
	})
}

// The guide's threadLead and turn: a job the first turn starts works on
// after it, the second turn steers it, and the third is told what it
// found, with the message it was sent.
func TestThreadLeadJobsWorkBetweenTurns(t *testing.T) {
	release := make(chan struct{})
	model := fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"Dig.","background":true}`).For("lead"),
		fake.Text("Started.").For("lead"),
		fake.Call("dig", `{}`).For(subagent.DefaultForkName),
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			told := ""
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser && strings.Contains(m.Content, "from the agent that started you") {
					told += m.Content[strings.LastIndex(m.Content, "\n")+1:]
				}
			}
			return provider.Response{Message: provider.AssistantMessage("gold; told: " + told)}, nil
		}).For(subagent.DefaultForkName),
	)
	tools, err := tool.NewRegistry(digTool(release))
	if err != nil {
		t.Fatal(err)
	}
	lead, spawner, err := threadLead(model, tools)
	if err != nil {
		t.Fatal(err)
	}
	defer spawner.Close()
	ctx := t.Context()
	if a, err := turn(ctx, lead, "t1", "Start digging."); err != nil || a != "Started." {
		t.Fatalf("turn 1: %q, %v", a, err)
	}
	jobs := spawner.Jobs(agent.WithThread(ctx, "t1"))
	list := jobs.List()
	if len(list) != 1 || list[0].State != subagent.JobRunning {
		t.Fatalf("after turn 1 the thread's jobs are %+v, want one running", list)
	}
	id := list[0].ID
	model.Add(
		fake.Call(subagent.JobsToolName, `{"action":"send","job_id":"`+id+`","message":"Dig deeper."}`).For("lead"),
		fake.Text("Sent.").For("lead"),
	)
	if a, err := turn(ctx, lead, "t1", "Tell it to dig deeper."); err != nil || a != "Sent." {
		t.Fatalf("turn 2: %q, %v", a, err)
	}
	close(release)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if st, err := jobs.Status(id); err != nil || st.State != subagent.JobRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not end")
		}
	}
	model.Add(lastLine("Found: ").For("lead"))
	a, err := turn(ctx, lead, "t1", "What did it find?")
	if err != nil || a != "Found: gold; told: Dig deeper." {
		t.Fatalf("turn 3: %q, %v; want the job's answer, told of before its first model call", a, err)
	}
}

// The guide's keptLead: a job started in one process, which closes while
// the job is in its first step, runs on in a process started again over
// the same file from its journal, its model's first answer not asked for
// again, and a turn of the thread there collects its answer.
func TestKeptLeadJobsOutliveTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deputy.db")
	ctx := t.Context()

	model := fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"Dig.","background":true}`).For("lead"),
		fake.Text("Started.").For("lead"),
		fake.Call("dig", `{}`).For(subagent.DefaultForkName),
	)
	tools, err := tool.NewRegistry(digTool(nil)) // digs until the process closes
	if err != nil {
		t.Fatal(err)
	}
	lead, spawner, st, err := keptLead(model, tools, path)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := turn(ctx, lead, "t1", "Start digging."); err != nil || a != "Started." {
		t.Fatalf("turn 1: %q, %v", a, err)
	}
	thread := agent.WithThread(ctx, "t1")
	for deadline := time.Now().Add(time.Minute); model.Remaining() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job did not start digging")
		}
	}
	id := spawner.Jobs(thread).List()[0].ID
	spawner.Close()
	st.Close()

	release := make(chan struct{})
	close(release)
	again := fake.NewProvider(
		fake.Call(subagent.JobsToolName, `{"action":"wait","job_id":"`+id+`","timeout_seconds":60}`).For("lead"),
		fake.Text("gold").For(subagent.DefaultForkName),
		lastLine("It found ").For("lead"),
	)
	tools, err = tool.NewRegistry(digTool(release))
	if err != nil {
		t.Fatal(err)
	}
	lead, spawner, st, err = keptLead(again, tools, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer spawner.Close()
	if a, err := turn(ctx, lead, "t1", "What did it find?"); err != nil || a != "It found gold" {
		t.Fatalf("turn 2 in the new process: %q, %v", a, err)
	}
	if n := len(again.RequestsFor(subagent.DefaultForkName)); n != 1 {
		t.Errorf("the job's model was asked %d times in the new process, want 1: its first answer (the dig call) replayed from its journal", n)
	}
}
