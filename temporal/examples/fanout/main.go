// Command fanout is the fan-out of docs/temporal.md on Temporal: a lead agent spawns
// three researchers in one turn, each a child workflow on whichever worker
// picks it up, and writes its answer from theirs.
//
// Start a development server (prints "host:port namespace"; a module of
// its own, whose first build takes several minutes), one or more workers,
// then the run, from the temporal module's directory:
//
//	(cd internal/devserver && go run .)
//	go run ./examples/fanout worker -addr HOST:PORT -namespace NS
//	go run ./examples/fanout run    -addr HOST:PORT -namespace NS
//
// It runs on a scripted provider, so it needs no key and no network; each
// researcher takes 300 ms to answer. Stop a worker with Ctrl-C (or kill it)
// mid-run: the run finishes on the others.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/temporal"
)

const queue = "deputy-fanout"

var researchers = []string{"historian", "economist", "planner"}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "worker" && os.Args[1] != "run") {
		fmt.Fprintln(os.Stderr, "usage: fanout worker|run -addr host:port -namespace ns")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:7233", "Temporal server address")
	ns := fs.String("namespace", "default", "Temporal namespace")
	_ = fs.Parse(os.Args[2:])

	ctx := context.Background()
	c, err := temporal.Dial(ctx, *addr, *ns, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if os.Args[1] == "worker" {
		w := worker.New(c, queue, worker.Options{})
		temporal.Register(w, runtime())
		if err := w.Run(worker.InterruptCh()); err != nil {
			log.Fatal(err)
		}
		return
	}

	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("fanout-%d", start.UnixNano()), TaskQueue: queue},
		temporal.AgentWorkflowName, leadInput())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("workflow", run.GetID())
	var out temporal.RunOutput
	if err := run.Get(ctx, &out); err != nil {
		log.Fatal(err)
	}
	report(os.Stdout, out, time.Since(start))
}

// runtime is what each worker registers: the scripted provider.
func runtime() *temporal.Runtime {
	return &temporal.Runtime{Providers: map[string]provider.Provider{"scripted": provider.Func(scripted)}}
}

// leadInput is the lead's workflow input: a lead that may spawn.
func leadInput() temporal.RunInput {
	spec := temporal.Spec{
		Name:     "lead",
		Provider: "scripted",
		System:   "You lead a team of researchers; split the question and combine their answers.",
		Spawn:    true,
	}
	return temporal.RunInput{Spec: spec, Text: "Should Lisbon extend its tram network to the eastern riverside?"}
}

// report writes the lead's answer and the tree's usage.
func report(w io.Writer, out temporal.RunOutput, wall time.Duration) {
	fmt.Fprintf(w, "%s\n\nusage: own %v, children %v, wall %v\n", out.Answer, out.Usage, out.ChildUsage, wall.Round(time.Millisecond))
}

// scripted answers by what it is asked, not by call order, so that any
// worker can answer any call, including a retry after a lost worker.
func scripted(ctx context.Context, req provider.Request) (provider.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	var msg provider.Message
	switch {
	case last.Role == provider.RoleTool:
		var parts []string
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				parts = append(parts, "- "+m.Content)
			}
		}
		msg = provider.AssistantMessage("Yes, in stages. What the team found:\n" + strings.Join(parts, "\n"))
	case strings.HasPrefix(last.Content, "Context:"):
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
		who := strings.TrimSpace(strings.SplitN(strings.TrimPrefix(last.Content, "Context:\n"), "\n", 2)[0])
		msg = provider.AssistantMessage(who + ": the eastern line pays for itself within fifteen years.")
	default:
		var calls []provider.ToolCall
		for i, r := range researchers {
			args, _ := json.Marshal(map[string]string{"context": r, "task": "Assess the extension from your field."})
			calls = append(calls, provider.ToolCall{ID: fmt.Sprint("call-", i), Name: temporal.SpawnToolName, Arguments: args})
		}
		msg = provider.AssistantMessage("", calls...)
	}
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg), StopReason: provider.StopEndTurn}, nil
}
