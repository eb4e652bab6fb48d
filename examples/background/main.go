// Command background shows a lead agent with a child in the background: it
// starts the child with spawn_subagent (background=true) and gets a job id
// at once, sends it a message while the child works (the child reads it
// before its next step), checks its status, waits for its answer, and
// answers. It prints each tool result the lead read, and the lead's
// answer.
//
// It runs on the scripted fake provider, so it needs no key and no
// network; the child takes 200 ms over its first step, during which the
// message arrives.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w.
func run(ctx context.Context, w io.Writer) error {
	return demo(ctx, w, script(), nil)
}

// demo runs the example on model, writing to w; also, when not nil, sees
// the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, also event.Sink) error {
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}
	readReport := tool.Func{
		Def: tool.Definition{Name: "read_report", Description: "Reads the report.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{Content: "# Findings\nThe tram line pays for itself in twelve years..."}, nil
		},
	}
	lead, err := newLead(model, readReport)
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "How long is the report, headings aside?"})
	if err != nil {
		return err
	}
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			fmt.Fprintf(w, "tool result: %s\n", m.Content)
		}
	}
	fmt.Fprintf(w, "answer: %s\n", out.Answer)
	fmt.Fprintf(w, "tokens: lead %d, child %d\n", out.Usage.Tokens(), out.ChildUsage.Tokens())
	return nil
}

// snippet of docs/background.md
// newLead returns a lead that can start children in the background
// (spawn_subagent with background=true) and act on them (subagent_jobs).
func newLead(model provider.Provider, more ...tool.Tool) (*agent.React, error) {
	tools, err := tool.NewRegistry(more...)
	if err != nil {
		return nil, err
	}
	spawner, err := subagent.NewSpawner(model, tools, subagent.WithBackground(), subagent.WithMaxBackground(4))
	if err != nil {
		return nil, err
	}
	if err := tools.Register(spawner); err != nil {
		return nil, err
	}
	if err := tools.Register(spawner.JobsTool()); err != nil {
		return nil, err
	}
	return agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools))
}

// end of snippet

// script is the fake model: the lead starts a job, messages it, checks on
// it, waits for it and answers; the child reads the report and answers
// with the message in mind.
func script() *fake.Provider {
	u := func(in int64) provider.Usage { return provider.Usage{InputTokens: in, OutputTokens: 5, Requests: 1} }
	return fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"Count the words of the report.","background":true}`).For("lead").WithUsage(u(40)),
		onJob("send", `,"message":"Leave the headings out of the count."`).For("lead").WithUsage(u(60)).After(50*time.Millisecond),
		onJob("status", "").For("lead").WithUsage(u(80)),
		onJob("wait", `,"timeout_seconds":60`).For("lead").WithUsage(u(100)),
		fake.Text("The report has 412 words, headings aside.").For("lead").WithUsage(u(120)),
		fake.Call("read_report", `{}`).For(subagent.DefaultForkName).WithUsage(u(30)).After(200*time.Millisecond),
		fake.Text("412 words, headings left out as asked.").For(subagent.DefaultForkName).WithUsage(u(50)),
	)
}

// onJob is a lead's reply that calls subagent_jobs with action on the job
// of the latest receipt it read; extra adds arguments.
func onJob(action, extra string) fake.Reply {
	return fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		job := ""
		for _, m := range req.Messages {
			var r struct {
				JobID string `json:"job_id"`
			}
			if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
				job = r.JobID
			}
		}
		args := `{"action":"` + action + `","job_id":"` + job + `"` + extra + `}`
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(args)})}, nil
	})
}
