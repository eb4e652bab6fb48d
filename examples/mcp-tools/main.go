// Command mcp-tools gives a spawned child the tools of a real MCP server:
// by default the reference filesystem server, started with npx over stdio
// and confined to a fresh directory holding one note. The lead agent
// spawns a child; the child reads the note with the server's
// read_text_file tool; the lead answers from what the child reports.
//
//	go run ./examples/mcp-tools                      # needs node and npx
//	go run ./examples/mcp-tools node server.js ARGS   # any MCP server over stdio
//
// It runs on the scripted fake provider unless DEPUTY_PROVIDER names a real
// one (see examples/internal/pick).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	dir, err := os.MkdirTemp("", "deputy-mcp-tools")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("Release 1.4 ships on Thursday; the migration runs on Wednesday night."), 0o600); err != nil {
		log.Fatal(err)
	}
	server := mcpbridge.Command("npx", "-y", "@modelcontextprotocol/server-filesystem@2026.8.31", dir)
	if len(os.Args) > 1 {
		server = mcpbridge.Command(os.Args[1], os.Args[2:]...)
	}
	if err := run(context.Background(), os.Stdout, os.Getenv, server, dir); err != nil {
		log.Fatal(err)
	}
}

// run connects to the MCP server, gives its tools to the lead's registry
// (which a spawned child inherits) and runs the lead, on the model getenv
// names (see package pick) or the scripted one.
func run(ctx context.Context, w io.Writer, getenv func(string) string, server mcpbridge.Transport, dir string) error {
	model, about, err := pick.FromEnv(getenv, script(filepath.Join(dir, "notes.txt")))
	if err != nil {
		return err
	}
	return demo(ctx, w, model, about, server, dir, nil)
}

// demo runs the example on model, said to be about, with the tools of
// server over the notes in dir, writing to w; also, when not nil, sees
// the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about string, server mcpbridge.Transport, dir string, also event.Sink) error {
	fmt.Fprintln(w, about)
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}

	files, err := mcpbridge.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer files.Close()
	tools, err := tool.NewRegistry()
	if err != nil {
		return err
	}
	if err := files.Register(tools); err != nil {
		return err
	}
	fmt.Fprintf(w, "tools from the MCP server: %d\n", tools.Len())

	spawner, err := subagent.NewSpawner(model, tools)
	if err != nil {
		return err
	}
	if err := tools.Register(spawner); err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools),
		agent.WithSystemPrompt("Delegate reading files to a sub-agent with spawn_subagent, then answer."))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "When does release 1.4 ship? The notes are in " + dir + "."})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "usage: lead", out.Usage, "| child", out.ChildUsage)
	return nil
}

// script: the lead spawns a child; the child reads the note through the MCP
// server's tool and reports; the lead answers from the report.
func script(note string) *fake.Provider {
	lastTool := func(text string) fake.Reply {
		return fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			last := req.Messages[len(req.Messages)-1]
			msg := provider.AssistantMessage(text + last.Content)
			return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
		})
	}
	return fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"Read `+note+` and report what it says about release 1.4."}`).For("lead"),
		fake.Call("read_text_file", `{"path":`+strconv.Quote(note)+`}`).For("subagent"),
		lastTool("The notes say: ").For("subagent"),
		lastTool("From the team's notes — ").For("lead"),
	)
}
