// Command approval shows a person approving a risky tool call made deep in
// a delegation tree. The lead agent "ops" asks its sub-agent "janitor" to
// free disk space; the janitor's delete_logs tool requires approval, so
// the whole run pauses and Run returns a *tool.Interrupted. The program
// asks on the terminal, then runs the same turn again with the answer:
// the janitor continues where it stopped (its model is not asked again,
// thanks to the journal), and the deletion runs only if the person said
// yes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync/atomic"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	if err := run(context.Background(), os.Stdin, os.Stdout, "fresh"); err != nil {
		log.Fatal(err)
	}
}

func call(name, args string) provider.ToolCall {
	return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
}

// run asks on stdin and stdout; ids says how the scripted models name
// their calls: "fresh" (a new id every time, as real models do), "none"
// (no ids, as some servers send) or "restart" (call_0 in every reply).
func run(ctx context.Context, stdin io.Reader, stdout io.Writer, ids string) error {
	// The journal of the turn lives in a store: in memory here, where the
	// question is answered in the same process; a program that resumes
	// after a restart keeps it in a file (sqlite.Open) or PostgreSQL.
	st, err := store.New(memory.New())
	if err != nil {
		return err
	}
	defer st.Close()

	ops, janitor := script(ids)
	return demo(ctx, stdin, stdout, st, ops, janitor, nil)
}

// script returns the scripted models of the lead "ops" and of its
// sub-agent "janitor". They answer the conversation they are sent, as real
// models do; ids says how they name their calls.
func script(ids string) (ops, janitor provider.Provider) {
	model := func(who string, next func() provider.ToolCall, reply string) provider.Provider {
		var n atomic.Int64
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			i := n.Add(1)
			if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage(reply + last.Content)}, nil
			}
			c := next()
			switch ids {
			case "fresh":
				c.ID = fmt.Sprintf("call_%s_%d", who, i)
			case "restart":
				c.ID = "call_0"
			}
			return provider.Response{Message: provider.AssistantMessage("", c)}, nil
		})
	}
	return model("ops", func() provider.ToolCall { return call("janitor", `{"task":"free disk space on /var"}`) }, "Janitor says: "),
		model("janitor", func() provider.ToolCall { return call("delete_logs", `{"dir":"/var/log/old"}`) }, "Result: ")
}

// demo runs the example on the two models, keeping the turn's journal in
// st; also, when not nil, sees the run's events (a test's subagent.Tree).
// The loop journals the models' answers and replays them when the turn
// runs again, so each is asked once: demo counts what they were asked.
func demo(ctx context.Context, stdin io.Reader, stdout io.Writer, st *store.Store, opsModel, janitorModel provider.Provider, also event.Sink) error {
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}
	var calls [2]atomic.Int64 // ops, janitor
	counted := func(who int, p provider.Provider) provider.Provider {
		return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			calls[who].Add(1)
			return p.Complete(ctx, req)
		})
	}
	opsModel, janitorModel = counted(0, opsModel), counted(1, janitorModel)

	deleteLogs, err := tool.New("delete_logs", "Deletes the log files in a directory.", func(ctx context.Context, in struct {
		Dir string `json:"dir"`
	}) (string, error) {
		fmt.Fprintf(stdout, "(deleting %s)\n", in.Dir)
		return "deleted the logs in " + in.Dir, nil
	})
	if err != nil {
		return err
	}
	janitor, err := subagent.FromFactory("janitor", "Frees disk space.",
		func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(janitorModel, agent.WithName("janitor"),
				agent.WithTools(tool.RequireApproval(deleteLogs, "deletes files for good", 0)))
		})
	if err != nil {
		return err
	}
	ops, err := agent.NewReact(opsModel, agent.WithName("ops"), agent.WithTools(janitor))
	if err != nil {
		return err
	}

	in := agent.Input{Text: "The disk is full."}
	answers := bufio.NewScanner(stdin)
	runCtx := ctx
	for {
		j, err := st.Journal(ctx, "turn-1")
		if err != nil {
			return err
		}
		out, err := ops.Run(agent.WithJournal(runCtx, j), in)
		var asked *tool.Interrupted
		if !errors.As(err, &asked) {
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, "answer:", out.Answer)
			fmt.Fprintf(stdout, "model calls: ops %d, janitor %d (the answers before the question were replayed, not asked again)\n", calls[0].Load(), calls[1].Load())
			return nil
		}
		var given []tool.Answer
		for _, it := range asked.Interrupts {
			fmt.Fprintf(stdout, "%s [y/N]", it.Message)
			yes := answers.Scan() && strings.EqualFold(strings.TrimSpace(answers.Text()), "y")
			fmt.Fprintln(stdout)
			payload, _ := json.Marshal(tool.Approval{Approved: yes, Note: map[bool]string{false: "the operator said no"}[yes]})
			given = append(given, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: payload})
		}
		if runCtx, err = tool.Resume(ctx, asked, given...); err != nil {
			return err
		}
	}
}
