// Command files loads sub-agents from a directory of definition files —
// Claude Code's Markdown agent files and deputy's YAML form — and lets a
// lead agent delegate to them.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	// The definitions sit beside this file: found from here, or from the
	// repository's root (go run ./examples/files).
	base := "."
	if _, err := os.Stat("agents"); err != nil {
		base = filepath.Join("examples", "files")
	}
	if err := run(context.Background(), os.Stdout, os.Getenv, filepath.Join(base, "agents"), filepath.Join(base, "broken")); err != nil {
		log.Fatal(err)
	}
}

// ReadArgs are read_file's arguments.
type ReadArgs struct {
	Path string `json:"path"`
}

// snippet of docs/files.md
// load loads the sub-agents defined in dir, resolved against what the
// program gives them: a provider, tools, a hook it trusts.
func load(dir string, model provider.Provider, tools *tool.Registry, w io.Writer) (*agentfile.Loader, *agentfile.Roster, error) {
	loader, err := agentfile.NewLoader(
		agentfile.WithProvider("main", model), // the provider model: inherit means
		agentfile.WithTools(tools),            // the tools that tools: may name
		agentfile.WithHook("audit", func(ctx context.Context, in agentfile.HookInput) error {
			fmt.Fprintf(w, "audit: %s calls %s %s\n", in.Agent, in.Call.Name, in.Call.Arguments)
			return nil // an error would refuse the call
		}),
		agentfile.WithSubagentOptions(subagent.WithOutcome(func(ctx context.Context, o subagent.Outcome) {
			fmt.Fprintf(w, "validated result: %v\n", o.Value)
		})),
	)
	if err != nil {
		return nil, nil, err
	}
	// All or nothing: an *agentfile.Error lists every problem, by file and line.
	roster, err := loader.LoadDir(dir)
	return loader, roster, err
}

// end of snippet

// run loads the definitions in dir, lets a lead delegate to them, then
// shows what loading broken reports; it writes to w, and getenv picks the
// provider (the scripted fake when nothing is set).
func run(ctx context.Context, w io.Writer, getenv func(string) string, dir, broken string) error {
	model, about, err := pick.FromEnv(getenv, script())
	if err != nil {
		return err
	}
	return demo(ctx, w, model, about, dir, broken, nil)
}

// script is the fake model: the lead asks the reviewer, which reads the
// file and answers in its schema; the lead answers from the review.
func script() *fake.Provider {
	return fake.NewProvider(
		fake.Call("reviewer", `{"task":"review main.go"}`).For("lead"),
		fake.Call("read_file", `{"path":"main.go"}`).For("reviewer"),
		fake.Text(`{"verdict":"request_changes","findings":["main ignores the error of run"]}`).For("reviewer"),
		fake.Text("The review asks for one change: handle the error of run.").For("lead"),
	)
}

// demo runs the example on model, said to be about, writing to w; also,
// when not nil, sees the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about, dir, broken string, also event.Sink) error {
	fmt.Fprintln(w, about)
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}

	readFile, err := tool.New("read_file", "Reads a source file.",
		func(ctx context.Context, a ReadArgs) (string, error) {
			return "package main\n\nfunc main() { run() }\n", nil
		})
	if err != nil {
		return err
	}
	tools, err := tool.NewRegistry(readFile)
	if err != nil {
		return err
	}
	loader, roster, err := load(dir, model, tools, w)
	if err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(roster.Tools()...))
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "loaded %d definitions from %s:\n", len(roster.Definitions()), dir)
	for _, d := range roster.Definitions() {
		fmt.Fprintf(w, "  %s (%s): tools %v, output %q, %s…\n", d.Name, d.File, d.Tools, d.Output, d.Hash[:len("sha256:")+12])
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Is main.go ready to ship?"})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "answer:", out.Answer)

	// A directory with a problem loads nothing, and says what to fix.
	_, err = loader.LoadDir(broken)
	var problems *agentfile.Error
	if !errors.As(err, &problems) {
		return fmt.Errorf("the broken directory loaded: %v", err)
	}
	fmt.Fprintln(w, strings.ReplaceAll(err.Error(), "\t", "  "))
	return nil
}
