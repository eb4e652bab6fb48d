// Command mcp-server serves the tour's resident expert and its one-shot
// reviewer to any MCP client — an editor, a desktop assistant, another
// agent kit — over stdio, or over streamable HTTP with -http:
//
//	go run ./examples/mcp-server                    # stdio, for an MCP host to start
//	go run ./examples/mcp-server -http 127.0.0.1:8080   # http://127.0.0.1:8080/mcp
//	go run ./examples/mcp-server -store expert.db   # the expert remembers across restarts
//
// The expert keeps its conversation across the client's calls: in memory
// by default, so a restart forgets it; with -store, in that SQLite file
// (created if missing), so the next run of the server carries on the same
// conversation. The reviewer's answer is checked against ReportSchema and
// comes back as structured content. It runs on the scripted fake provider
// unless DEPUTY_PROVIDER names a real one (see examples/internal/pick).
// Standard output is the MCP channel, so the program speaks on standard
// error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// run is the program: args are its flags, getenv reads the provider's
// configuration.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("mcp-server", flag.ContinueOnError)
	addr := fs.String("http", "", "serve streamable HTTP at this address (path /mcp) instead of stdio")
	db := fs.String("store", "", "keep the expert's conversation in this SQLite file, across restarts (default: in memory only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	model, about, err := pick.FromEnv(getenv, script())
	if err != nil {
		return err
	}
	log.Println(about)
	var st *store.Store
	if *db != "" {
		if st, err = openStore(*db); err != nil {
			return err
		}
		defer st.Close()
		log.Printf("the expert's conversation is kept in %s", *db)
	}
	srv, err := newServer(model, st)
	if err != nil {
		return err
	}
	if *addr == "" {
		if err := srv.ServeStdio(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.Handler(nil))
	hs := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	defer func() { <-done }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Printf("serving MCP at http://%s/mcp", *addr)
	if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openStore opens the durable store on the SQLite file at path.
func openStore(path string) (*store.Store, error) {
	b, err := sqlite.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-store %s: %w (name a file in a directory that exists and is writable)", path, err)
	}
	st, err := store.New(b)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("-store %s: %w", path, err)
	}
	return st, nil
}

// newServer builds the MCP server: the tour's expert and reviewer on model.
// With st, the expert's conversation is kept there; with nil, in memory.
// opts are the server's.
func newServer(model provider.Provider, st *store.Store, opts ...mcpbridge.ServerOption) (*mcpbridge.Server, error) {
	expertAgent, err := agent.NewReact(model, agent.WithName("expert"),
		agent.WithSystemPrompt("You are deputy's maintainer. Answer questions about deputy briefly."))
	if err != nil {
		return nil, err
	}
	expertOpts := []subagent.Option{subagent.WithInputFromArgs(taskText)}
	if st != nil {
		expertOpts = append(expertOpts, subagent.WithStore(st, "mcp-server/expert"))
	}
	expert, err := subagent.FromAgent("expert", "Ask deputy's maintainer a question. It remembers earlier questions.", expertAgent, expertOpts...)
	if err != nil {
		return nil, err
	}
	reviewer, err := subagent.FromFactory("reviewer", "Review a text and report problems as a structured result.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("reviewer"), agent.WithSystemPrompt(subagent.ReportPrompt()))
		},
		subagent.WithReport(), subagent.WithInputFromArgs(taskText))
	if err != nil {
		return nil, err
	}
	srv := mcpbridge.NewServer("deputy-tour", "1.0.0", opts...)
	if err := srv.AddTool(expert); err != nil {
		return nil, err
	}
	if err := srv.AddTool(reviewer); err != nil {
		return nil, err
	}
	return srv, nil
}

// taskText hands the agent the task text rather than the arguments' JSON.
func taskText(args json.RawMessage) (agent.Input, error) {
	var a struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return agent.Input{}, fmt.Errorf("arguments: %w", err)
	}
	return agent.Input{Text: a.Task}, nil
}

// script is what the fake model answers, call after call: the expert
// recalls the previous question when there is one; the reviewer finds
// one problem.
func script() *fake.Provider {
	return fake.NewProvider(
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			questions := 0
			for _, m := range req.Messages {
				if m.Role == provider.RoleUser {
					questions++
				}
			}
			text := "Sub-agents are tools: FromAgent, FromFactory and FromReact build them."
			if questions > 1 {
				text = fmt.Sprintf("As I said before (that was question %d of this conversation): the resident expert keeps the conversation.", questions-1)
			}
			return provider.Response{Message: provider.AssistantMessage(text), Usage: fake.Usage(req, provider.AssistantMessage(text))}, nil
		}).For("expert"),
		fake.Text(`{"status":"partial","summary":"Clear, but the second paragraph repeats the first.","findings":{"repeated_paragraph":2}}`).For("reviewer"),
	).Loop().DontRecord()
}
