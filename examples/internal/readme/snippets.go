// Package readme holds Go code that README.md and the guides in docs/ quote,
// so that every snippet a reader pastes compiles and passes go vet. Its test
// checks every Go block of README.md and docs/*.md against the snippets of
// the repository's Go files.
//
// A snippet is the text between a line "// snippet of docs/NAME.md" (or
// "// snippet of README.md") and the next line "// end of snippet",
// unindented. It may live in any Go file of the repository that a build or
// test compiles: this package, a package main of its own (the README's first
// program, in firstprogram), or a _test.go file of the module it needs (the
// Temporal and A2A modules' readme_test.go).
//
//lint:file-ignore U1000 the snippets are compiled and vetted for the guides, not called
package readme

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/fromenv"
	"github.com/deputy-go/deputy/provider/openai"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// snippet of docs/subagents.md
// delegate gives a lead agent the three kinds of sub-agent and runs it.
func delegate(ctx context.Context, model provider.Provider, expertAgent agent.Agent, tools *tool.Registry) error {
	// A resident expert: one agent, kept for the life of the tool; its
	// conversation accumulates, its calls take turns.
	expert, err := subagent.FromAgent("expert", "Ask the maintainer.", expertAgent)
	if err != nil {
		return err
	}

	// One-shot delegation: a fresh agent per call, built from the call's
	// arguments, its answer validated against ReportSchema (the tool tells the
	// child that shape).
	reviewer, err := subagent.FromFactory("reviewer", "Review a text.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithSystemPrompt("You review texts for errors."))
		},
		subagent.WithReport())
	if err != nil {
		return err
	}

	// The model defines the child: its system prompt and task come from the call.
	child, err := subagent.FromReact("delegate", "Start a sub-agent.", model, tools)
	if err != nil {
		return err
	}

	lead, err := agent.NewReact(model, agent.WithTools(expert, reviewer, child))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Write the release note."})
	if err != nil {
		return err
	}
	fmt.Println(out.Answer, out.Usage, out.ChildUsage)
	return nil
}

// end of snippet

// snippet of docs/fanout.md
// sharedLimits makes an OpenAI provider whose calls keep, with those of
// every other provider given adm, to the account's limits.
func sharedLimits() (*openai.Provider, error) {
	adm, err := provider.NewAdmission(provider.WithLimits("gpt-5.4-mini", provider.Limits{RequestsPerMinute: 500}))
	if err != nil {
		return nil, err
	}
	return openai.New(openai.WithAdmission(adm))
}

// end of snippet

// snippet of docs/events.md
// spending logs what each model call of a run spent, as each call ends.
func spending(ctx context.Context, lead agent.Agent) error {
	sink := event.SinkFunc(func(e event.Event) {
		if e.Type == event.Custom && e.Name == agent.UsageEvent {
			log.Println(e.SubagentRunID, string(e.Value)) // {"usage":[{"model":…,"inputTokens":…}]}
		}
	})
	_, err := lead.Run(event.WithSink(ctx, sink), agent.Input{Text: "Write the release note."})
	return err
}

// end of snippet

// snippet of docs/events.md
// watch runs lead twice, receiving its events: through a sink in the
// context, then by ranging over the run (stopping early cancels it).
func watch(ctx context.Context, lead agent.Agent) error {
	sinkCtx := event.WithSink(ctx, event.SinkFunc(func(e event.Event) { log.Println(e.Type) }))
	if _, err := lead.Run(sinkCtx, agent.Input{Text: "Write the release note."}); err != nil {
		return err
	}

	for e, err := range agent.Stream(ctx, lead, agent.Input{Text: "Write the release note."}) {
		if err != nil {
			return err
		}
		log.Println(e.Type, e.Delta)
	}
	return nil
}

// end of snippet

// snippet of docs/events.md
// serve serves a fresh lead agent per AG-UI conversation at /agui.
func serve(buildLead func() (agent.Agent, error)) error {
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return buildLead() // the agent is handed the conversation, in.Messages
	})
	if err != nil {
		return err
	}
	http.Handle("/agui", h)
	return http.ListenAndServe("localhost:8080", nil)
}

// end of snippet

// snippet of docs/events.md
// read decodes an AG-UI stream as a Go client does, handing each event to
// sink: json.Unmarshal puts a sub-agent's usage and model, which its
// SUBAGENT_FINISHED sends in "metadata", in e.Usage and e.Model.
func read(stream io.Reader, sink event.Sink) error {
	sc := bufio.NewScanner(stream)
	sc.Buffer(nil, 1<<20) // an event's line may be long
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e event.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return err
		}
		sink.Emit(e)
	}
	return sc.Err()
}

// end of snippet

// snippet of docs/mcp.md
// serveMCP serves a sub-agent to an MCP client (an editor, a desktop
// assistant) over standard input and output.
func serveMCP(ctx context.Context, reviewer tool.Tool) error {
	srv := mcpbridge.NewServer("experts", "1.0.0")
	// A validated sub-agent also declares its output schema.
	if err := srv.AddTool(reviewer); err != nil {
		return err
	}
	return srv.ServeStdio(ctx) // or: http.Handle("/mcp", srv.Handler(nil))
}

// end of snippet

// snippet of docs/mcp.md
// useMCPTools gives the agents using reg the tools of a filesystem MCP
// server, started as a process and ended by Close.
func useMCPTools(ctx context.Context, reg *tool.Registry, dir string) (io.Closer, error) {
	files, err := mcpbridge.Connect(ctx, mcpbridge.Command("npx", "-y", "@modelcontextprotocol/server-filesystem", dir))
	if err != nil {
		return nil, err
	}
	// All tools or none; mcpbridge.WithPrefix avoids name clashes.
	if err := files.Register(reg); err != nil {
		files.Close()
		return nil, err
	}
	return files, nil
}

// end of snippet

// snippet of docs/providers.md
// realModel returns the model the environment names, or fallback when it
// names none; it prints which, e.g. "provider: openai (qwen3 at
// http://localhost:11434/v1)".
func realModel(fallback provider.Provider) (provider.Provider, error) {
	model, about, err := fromenv.New(os.Getenv)
	if errors.Is(err, fromenv.ErrNoProvider) {
		return fallback, nil
	}
	if err != nil {
		return nil, err // it says which variable to set
	}
	fmt.Println(about)
	return model, nil
}

// end of snippet

// snippet of docs/durable.md
// durable keeps a resident expert, AG-UI threads and a turn's finished
// children in one SQLite file (postgres.Open(ctx, dsn) for several
// processes).
func durable(ctx context.Context, model provider.Provider, expertAgent agent.Agent, build agui.Builder, requestID string) error {
	b, err := sqlite.Open("deputy.db")
	if err != nil {
		return err
	}
	st, err := store.New(b)
	if err != nil {
		return err
	}
	defer st.Close()

	// A resident expert whose conversation survives restarts; processes
	// consulting it take turns through a lease in the database.
	expert, err := subagent.FromAgent("ledger", "Knows the ledger.", expertAgent,
		subagent.WithStore(st, "experts/ledger"))
	if err != nil {
		return err
	}

	// AG-UI threads kept on the server: a client may send only its new
	// message; a second run on a busy thread gets 409 Conflict.
	h, err := agui.NewPerRequest(build, agui.WithThreads(st))
	if err != nil {
		return err
	}
	http.Handle("/agui", h)

	// A journal of the turn's finished children: run the same turn again
	// under the same name after a crash, and finished children are replayed.
	j, err := st.Journal(ctx, requestID)
	if err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithTools(expert))
	if err != nil {
		return err
	}
	_, err = lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "Close the month."})
	return err
}

// end of snippet

// snippet of docs/serving.md
// serveUsers serves threads that belong to the signed-in user, whose
// identity middleware (userFrom reads it) runs before the handler, and
// ends every run cancelled when the server shuts down.
func serveUsers(ctx context.Context, st *store.Store, build agui.Builder, userFrom func(context.Context) (string, bool)) error {
	h, err := agui.NewPerRequest(build, agui.WithThreads(st),
		agui.WithAuthorize(func(r *http.Request, threadID string) (string, error) {
			user, ok := userFrom(r.Context())
			if !ok {
				return "", &agui.Refusal{Status: http.StatusUnauthorized}
			}
			return user, nil // the owner the thread is kept under
		}))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/threads/", http.StripPrefix("/threads", h.Threads())) // list, read, delete, stop
	srv := &http.Server{Addr: ":8080", Handler: mux}
	srv.RegisterOnShutdown(func() { h.Shutdown(ctx) }) // every run ends cancelled
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	err = srv.Shutdown(context.WithoutCancel(ctx)) // waits for the runs to end
	<-served
	return err
}

// end of snippet

// snippet of docs/durable.md
// approve runs a lead's turn; when a tool anywhere in the tree asks for
// approval, it approves every question and resumes the same turn.
func approve(ctx context.Context, st *store.Store, lead agent.Agent, in agent.Input) (agent.Output, error) {
	j, err := st.Journal(ctx, "req-42")
	if err != nil {
		return agent.Output{}, err
	}
	out, err := lead.Run(agent.WithJournal(ctx, j), in)
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		return out, err // finished, or failed
	}
	answers := make([]tool.Answer, len(asked.Interrupts))
	for i, it := range asked.Interrupts {
		fmt.Println("approving:", it.Message)
		answers[i] = tool.Answer{InterruptID: it.ID, Status: tool.Resolved,
			Payload: json.RawMessage(`{"approved":true}`)}
	}
	rctx, err := tool.Resume(ctx, asked, answers...)
	if err != nil {
		return out, err
	}
	return lead.Run(agent.WithJournal(rctx, j), in)
}

// end of snippet

// snippet of docs/background.md
// threadLead returns a lead whose background children belong to the
// thread of the run that started them, not to the run: they work on
// between turns. Close the spawner when done with the lead.
func threadLead(model provider.Provider, tools *tool.Registry) (*agent.React, *subagent.Spawner, error) {
	spawner, err := subagent.NewSpawner(model, tools, subagent.WithJobsAcrossTurns(nil))
	if err != nil {
		return nil, nil, err
	}
	if err := tools.Register(spawner); err != nil {
		return nil, nil, err
	}
	if err := tools.Register(spawner.JobsTool()); err != nil {
		return nil, nil, err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools))
	return lead, spawner, err
}

// turn runs one turn of the thread: its first model call is told which
// of the thread's jobs ended since the last turn, and what they found.
func turn(ctx context.Context, lead *agent.React, thread, text string) (string, error) {
	out, err := lead.Run(agent.WithThread(ctx, thread), agent.Input{Text: text})
	return out.Answer, err
}

// end of snippet

// snippet of docs/background.md
// keptLead returns a lead whose threads' background children are kept in
// the SQLite file at path: a process started again over the same file
// tells each thread's next turn of the jobs that ended meanwhile, and
// runs on from its journal each job that was running. Close the spawner,
// then the store, when done.
func keptLead(model provider.Provider, tools *tool.Registry, path string) (*agent.React, *subagent.Spawner, *store.Store, error) {
	b, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := store.New(b)
	if err != nil {
		return nil, nil, nil, err
	}
	spawner, err := subagent.NewSpawner(model, tools,
		subagent.WithJobsAcrossTurns(nil),
		subagent.WithJobStore(st),
		subagent.WithJobTTL(24*time.Hour), // the default: swept a day after the thread's last turn
	)
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	if err := tools.Register(spawner); err != nil {
		return nil, nil, nil, err
	}
	if err := tools.Register(spawner.JobsTool()); err != nil {
		return nil, nil, nil, err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools))
	return lead, spawner, st, err
}

// end of snippet
