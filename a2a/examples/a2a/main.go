// Command a2a is a delegation across processes over A2A: an expert served
// as an A2A agent, and, in a second process, a lead that delegates to it
// and answers, on the terminal, the question the expert asks before it
// acts.
//
// From the a2a module's directory, in two terminals:
//
//	go run ./examples/a2a serve -addr 127.0.0.1:8790
//	go run ./examples/a2a lead -url http://127.0.0.1:8790
//
// The expert refunds orders, and asks a person to approve each refund
// (tool.RequireApproval). Its question reaches the lead's terminal through
// the remote task's input-required state; the answer goes back on the same
// task, which goes on where it stood. Both sides run on scripted models, so
// the pair needs no key and no network beyond the loopback.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	if len(args) == 0 || (args[0] != "serve" && args[0] != "lead") {
		return errors.New("usage: a2a serve [-addr host:port] | a2a lead [-url URL]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8790", "address to serve the expert on")
	url := fs.String("url", "http://127.0.0.1:8790", "URL of the expert to delegate to")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "serve" {
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		var refunds atomic.Int64
		return serve(ctx, ln, out, &refunds)
	}
	return lead(ctx, *url, in, out)
}

// serve serves the refunds expert on ln until ctx ends, counting the
// refunds it makes.
func serve(ctx context.Context, ln net.Listener, out io.Writer, refunds *atomic.Int64) error {
	refund, err := tool.New("issue_refund", "Refunds an order.", func(ctx context.Context, in struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}) (string, error) {
		refunds.Add(1)
		return fmt.Sprintf("refunded $%d on order %s", in.Amount, in.Order), nil
	})
	if err != nil {
		return err
	}
	// The expert is built for each task, so that nothing one client tells
	// it (a ReAct agent keeps its conversation) reaches another's task.
	expert := func(ctx context.Context, t a2a.Task) (agent.Agent, error) {
		return agent.NewReact(provider.Func(expertModel), agent.WithName("refunds"),
			agent.WithTools(tool.RequireApproval(refund, "Refunds cost money", 0)))
	}
	srv, err := a2a.NewPerTask(expert, a2a.WithName("refunds"), a2a.WithDescription("Refunds orders, once a person approves each refund."))
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := &http.Server{Handler: srv}
	fmt.Fprintf(out, "serving the refunds expert at http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		hs.Shutdown(context.WithoutCancel(ctx))
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

// expertModel stands in for a model: it refunds the order named in the
// task, then reports what the refund tool said.
func expertModel(ctx context.Context, req provider.Request) (provider.Response, error) {
	usage := provider.Usage{InputTokens: 40, OutputTokens: 12, Requests: 1}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("Done: " + last.Content + "."), Usage: usage}, nil
	}
	call := provider.ToolCall{Name: "issue_refund", Arguments: json.RawMessage(`{"order":"A-1042","amount":30}`)}
	return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
}

// lead runs a lead that delegates to the expert at url, asking the person
// at in and out whatever the expert asks.
func lead(ctx context.Context, url string, in io.Reader, out io.Writer) error {
	remote, err := a2a.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer remote.Close()
	expert, err := remote.Tool()
	if err != nil {
		return err
	}
	name := expert.Definition().Name
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		usage := provider.Usage{InputTokens: 30, OutputTokens: 10, Requests: 1}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("The customer is sorted. " + last.Content), Usage: usage}, nil
		}
		call := provider.ToolCall{Name: name, Arguments: json.RawMessage(`{"task":"Order A-1042 arrived broken: refund the $30."}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "delegating to %s (%s)\n", remote.Card().Name, url)

	// The turn is journaled, so that the run resumed after the answer
	// replays what it did instead of doing it again.
	st, err := store.New(memory.New())
	if err != nil {
		return err
	}
	defer st.Close()
	var mu sync.Mutex
	names := map[string]string{} // sub-agent run id → name
	sink := event.SinkFunc(func(e event.Event) {
		mu.Lock() // children emit from their own goroutines
		defer mu.Unlock()
		switch e.Type {
		case event.SubagentStarted:
			names[e.SubagentRunID] = e.Name
			fmt.Fprintf(out, "  → %s started\n", e.Name)
		case event.SubagentFinished:
			how := "answered"
			if strings.Contains(string(e.Outcome), "suspended") {
				how = "waits for an answer"
			}
			fmt.Fprintf(out, "  ← %s %s\n", names[e.SubagentRunID], how)
		}
	})
	lines := bufio.NewScanner(in)
	rctx := ctx
	for {
		j, err := st.Journal(ctx, "turn")
		if err != nil {
			return err
		}
		o, err := lead.Run(agent.WithJournal(event.WithSink(rctx, sink), j), agent.Input{Text: "Handle the broken order."})
		var asked *tool.Interrupted
		if !errors.As(err, &asked) {
			if err != nil {
				return err
			}
			// The last run reports the whole turn, the runs before it included.
			fmt.Fprintf(out, "answer: %s\nusage, both sides: %s\n", o.Answer, o.TotalUsage())
			return nil
		}
		var answers []tool.Answer
		for _, q := range asked.Interrupts {
			fmt.Fprintf(out, "the expert asks: %s [yes/no] ", q.Message)
			if !lines.Scan() {
				return errors.New("no answer on standard input")
			}
			yes := strings.HasPrefix(strings.ToLower(strings.TrimSpace(lines.Text())), "y")
			fmt.Fprintln(out)
			payload, _ := json.Marshal(tool.Approval{Approved: yes})
			answers = append(answers, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: payload})
		}
		if rctx, err = tool.Resume(ctx, asked, answers...); err != nil {
			return err
		}
	}
}
