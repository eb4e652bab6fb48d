// Command testserver serves deputy sub-agents over MCP for the client
// conformance tests in mcpbridge/clienttest (its README is the contract).
// By default it serves one session over stdio; with -http it listens on
// 127.0.0.1, prints the endpoint URL as the first line of its output, and
// serves streamable HTTP until SIGTERM or SIGINT.
//
// Its tools run real deputy sub-agents on the fake provider:
//   - reviewer: a one-shot ReAct child validated by WithReport, so it
//     declares an output schema and answers with structured content;
//   - researcher: a ReAct child that calls a lookup tool (1 s) before
//     answering, so that a call reports progress;
//   - slow: a child that works until it is cancelled;
//   - cancellations: how many slow children have seen their cancellation.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	httpFlag := flag.Bool("http", false, "serve streamable HTTP on 127.0.0.1 instead of stdio")
	flag.Parse()
	srv, err := build()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if !*httpFlag {
		if err := srv.ServeStdio(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(nil), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

func build() (*mcpbridge.Server, error) {
	model := fake.NewProvider(
		fake.Text(`{"status":"success","summary":"the change is sound","findings":{"issues":0}}`).For("reviewer"),
		fake.Call("lookup", `{"q":"answer"}`).For("researcher"),
		fake.Text("The answer is 42.").For("researcher"),
	).Loop().DontRecord()

	reviewer, err := subagent.FromReact("reviewer", "Reviews a change and reports status, summary and findings.", model, nil, subagent.WithReport())
	if err != nil {
		return nil, err
	}
	lookup := tool.Must(tool.New("lookup", "Looks a fact up.", func(_ context.Context, in struct {
		Q string `json:"q"`
	}) (string, error) {
		// A lookup takes a while, as real work does: the progress sent
		// before it reaches the client ahead of the result. (The
		// TypeScript client drops progress that arrives in the same read
		// as the result it belongs to.)
		time.Sleep(time.Second)
		return "42", nil
	}))
	reg, err := tool.NewRegistry(lookup)
	if err != nil {
		return nil, err
	}
	researcher, err := subagent.FromReact("researcher", "Researches a question with a lookup tool.", model, reg)
	if err != nil {
		return nil, err
	}
	var cancelled atomic.Int64
	slow, err := subagent.FromFactory("slow", "Works on a task until it is cancelled.",
		func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.Func(func(ctx context.Context, _ agent.Input) (agent.Output, error) {
				<-ctx.Done()
				cancelled.Add(1)
				return agent.Output{}, ctx.Err()
			}), nil
		})
	if err != nil {
		return nil, err
	}
	count := tool.Must(tool.New("cancellations", "How many slow children have been cancelled.", func(context.Context, struct{}) (string, error) {
		return strconv.FormatInt(cancelled.Load(), 10), nil
	}))
	srv := mcpbridge.NewServer("deputy-testserver", "1.0.0")
	for _, t := range []tool.Tool{reviewer, researcher, slow, count} {
		if err := srv.AddTool(t); err != nil {
			return nil, err
		}
	}
	return srv, nil
}
