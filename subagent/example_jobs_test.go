package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Go code acts on a thread's background children with the six actions of
// the jobs tool: it starts a child, sends it a message while its first
// step reads a report, checks its status and the list, waits for its
// answer, and cancels a second child. (Inside a run, a tool or a hook
// gets the run's jobs the same way, with Spawner.Jobs of its context.)
func ExampleJobs() {
	reading, release := make(chan struct{}), make(chan struct{})
	readReport := tool.Func{
		Def: tool.Definition{Name: "read_report", Description: "Reads the report.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			reading <- struct{}{} // the child is in its first step
			select {
			case <-release:
				return tool.Result{Content: "The tram line pays for itself in twelve years."}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		},
	}
	// The child reads the report, then answers with the messages it got.
	model := fake.NewProvider(
		fake.Call("read_report", `{}`).For(subagent.DefaultForkName),
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			last := req.Messages[len(req.Messages)-1].Content
			answer := "412 words; told: " + last[strings.LastIndex(last, "\n")+1:]
			return provider.Response{Message: provider.AssistantMessage(answer)}, nil
		}).For(subagent.DefaultForkName),
		fake.Call("read_report", `{}`).For(subagent.DefaultForkName),
	)
	tools, _ := tool.NewRegistry(readReport)
	spawner, err := subagent.NewSpawner(model, tools, subagent.WithJobsAcrossTurns(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer spawner.Close()
	ctx := agent.WithThread(context.Background(), "thread-1")
	jobs := spawner.Jobs(ctx)

	count, err := jobs.Start(ctx, subagent.Task{Task: "Count the words of the report."})
	if err != nil {
		log.Fatal(err)
	}
	<-reading
	r, _ := jobs.Send(ctx, count.ID, "Leave the headings out.")
	fmt.Println("send:", r.State, "seq", r.Seq)
	st, _ := jobs.Status(count.ID)
	fmt.Println("status:", st.State, "at step", st.Step, "-", len(st.Messages), "message", st.Messages[0].State)
	release <- struct{}{}
	done, _ := jobs.Wait(ctx, subagent.WaitFor{IDs: []string{count.ID}, Timeout: time.Minute})
	fmt.Println("wait:", done[0].State, "-", done[0].Result.Content)
	fmt.Println("message:", done[0].Messages[0].State, "before step", done[0].Messages[0].Step)

	summary, _ := jobs.Start(ctx, subagent.Task{Task: "Summarize the report."})
	<-reading
	cancelled, _ := jobs.Cancel(ctx, summary.ID)
	fmt.Println("cancel:", cancelled.State)
	for _, j := range jobs.List() {
		fmt.Printf("list: %q %s\n", j.Task, j.State)
	}
	// Output:
	// send: queued seq 1
	// status: running at step 1 - 1 message queued
	// wait: done - 412 words; told: Leave the headings out.
	// message: delivered before step 2
	// cancel: cancelled
	// list: "Count the words of the report." done
	// list: "Summarize the report." cancelled
}
