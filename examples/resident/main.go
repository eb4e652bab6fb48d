// Command resident shows the resident-expert form: one agent, kept for the
// life of the tool, answers several calls and remembers the earlier ones.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
//
// With -consult N it consults the expert N times instead, inside a small
// context window (-window, in tokens), and prints how many compactions
// kept it there, the largest request sent and the share of input tokens
// read from the prompt cache:
//
//	go run ./examples/resident -consult 5000 -window 8000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func main() {
	consult := flag.Int("consult", 0, "consult the expert this many times and report its compactions")
	window := flag.Int64("window", 8000, "with -consult, the model's context window in tokens")
	flag.Parse()
	var err error
	if *consult > 0 {
		err = longHaul(context.Background(), os.Stdout, os.Getenv, *consult, *window)
	} else {
		err = run(context.Background(), os.Stdout, os.Getenv)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run runs the example, writing to w; getenv picks the provider (see
// examples/internal/pick), the scripted fake when nothing is set.
func run(ctx context.Context, w io.Writer, getenv func(string) string) error {
	model, about, err := pick.FromEnv(getenv, script())
	if err != nil {
		return err
	}
	return demo(ctx, w, model, about, nil)
}

// script is the scripted model the example runs on without a real one.
func script() *fake.Provider {
	return fake.NewProvider(
		fake.Call("historian", `{"task":"Who designed the Analytical Engine?"}`).For("lead"),
		fake.Text("Charles Babbage.").For("historian"),
		fake.Call("historian", `{"task":"And who wrote its first program?"}`).For("lead"),
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			// The expert still has the first exchange in its conversation.
			prev := req.Messages[1].Content
			text := "Ada Lovelace, for " + strings.TrimSuffix(prev, ".") + "'s engine."
			return provider.Response{Message: provider.AssistantMessage(text), Usage: provider.Usage{InputTokens: 40, OutputTokens: 12, Requests: 1}}, nil
		}).For("historian"),
		fake.Text("Babbage designed it; Ada Lovelace wrote its first program.").For("lead"),
	)
}

// demo runs the example on model, writing to w; also, when not nil, sees
// the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about string, also event.Sink) error {
	fmt.Fprintln(w, about)
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}

	historian, err := agent.NewReact(model, agent.WithName("historian"), agent.WithSystemPrompt("You are a historian of computing."))
	if err != nil {
		return err
	}
	expert, err := subagent.FromAgent("historian", "Ask a historian of computing; it remembers the conversation.", historian)
	if err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(expert))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Tell me about the Analytical Engine."})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "the historian remembers", len(historian.History()), "messages")
	fmt.Fprintln(w, "usage (requests, tokens in, tokens out): lead", out.Usage, "| historian", out.ChildUsage)
	return nil
}

// longHaul consults one expert n times within a window of the given size,
// on the fake provider (with Anthropic's prompt cache) unless the
// environment names a model, and reports how compaction kept it inside.
func longHaul(ctx context.Context, w io.Writer, getenv func(string) string, n int, window int64) error {
	script := fake.NewProvider(fake.Text("Noted; the log is up to date.")).Loop().PromptCache(fake.AnthropicCache).DontRecord()
	model, about, err := pick.FromEnv(getenv, script)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, about)
	// Count what the model was sent and how much of it came from cache.
	var mu sync.Mutex
	var calls, compactions int
	var largest int64
	var total provider.Usage
	model = provider.Wrap(model, func(ctx context.Context, req provider.Request, next provider.Next) (provider.Response, error) {
		resp, err := next(ctx, req)
		mu.Lock()
		calls++
		if req.System == agent.DefaultSummaryPrompt {
			compactions++ // the call that writes a compaction's summary
		}
		largest = max(largest, resp.Usage.InputTokens)
		total = total.Add(resp.Usage)
		mu.Unlock()
		return resp, err
	})
	keeper, err := agent.NewReact(model, agent.WithName("keeper"), agent.WithSystemPrompt("You keep the ship's log."),
		agent.WithContextWindow(window))
	if err != nil {
		return err
	}
	expert, err := subagent.FromAgent("keeper", "Keeps the ship's log.", keeper)
	if err != nil {
		return err
	}
	for i := range n {
		// A lead's model would make these calls; here they are made directly.
		task := "Log entry " + strconv.Itoa(i+1) + ": wind from the north-west, " + strings.Repeat("seas calm, all hands well, ", 8)
		args, _ := json.Marshal(map[string]string{"task": task})
		res, err := expert.Call(ctx, tool.Call{ID: "call-" + strconv.Itoa(i+1), Name: "keeper", Arguments: args})
		if err != nil {
			return fmt.Errorf("consultation %d: %w", i+1, err)
		}
		if res.IsError {
			return fmt.Errorf("consultation %d: %s", i+1, res.Content)
		}
	}
	share := 0.0
	if total.InputTokens > 0 {
		share = float64(total.CacheReadTokens) / float64(total.InputTokens)
	}
	fmt.Fprintf(w, "consultations: %d, model calls: %d (summaries included)\n", n, calls)
	fmt.Fprintf(w, "compactions: %d\n", compactions)
	fmt.Fprintf(w, "largest request: %d tokens (window %d)\n", largest, window)
	fmt.Fprintf(w, "input tokens read from cache: %.1f%%\n", 100*share)
	fmt.Fprintf(w, "kept now: %d messages\n", len(keeper.History()))
	return nil
}
