// Command react shows the form in which the model defines the sub-agent:
// the lead model writes the child's system prompt and task in its call, and
// a ReAct agent is built for it, with the tools the program allows.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

type wordsArgs struct {
	Text string `json:"text"`
}

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv); err != nil {
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
		fake.Call("delegate", `{"system_prompt":"You are a careful editor. Count before you judge.","task":"Is 'deputy delegates well' under five words?"}`).For("lead"),
		fake.Call("count_words", `{"text":"deputy delegates well"}`).For("delegate"),
		fake.Text("Yes: 3 words.").For("delegate"),
		fake.Text("It is: three words.").For("lead"),
	)
}

// demo runs the example on model, writing to w; also, when not nil, sees
// the run's events (a test's subagent.Tree).
func demo(ctx context.Context, w io.Writer, model provider.Provider, about string, also event.Sink) error {
	fmt.Fprintln(w, about)
	if also != nil {
		ctx = event.WithSink(ctx, also)
	}

	count := tool.Must(tool.New("count_words", "Counts the words of a text.", func(_ context.Context, in wordsArgs) (int, error) {
		return len(strings.Fields(in.Text)), nil
	}))
	childTools, err := tool.NewRegistry(count)
	if err != nil {
		return err
	}
	delegate, err := subagent.FromReact("delegate", "Start a sub-agent: write its system prompt and its task.", model, childTools,
		subagent.WithReactOptions(agent.WithMaxSteps(4)))
	if err != nil {
		return err
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(delegate))
	if err != nil {
		return err
	}
	out, err := lead.Run(ctx, agent.Input{Text: "Is 'deputy delegates well' short?"})
	if err != nil {
		return err
	}
	if prompt := childPrompt(out.Messages); prompt != "" {
		fmt.Fprintln(w, "child system prompt:", prompt)
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "usage (requests, tokens in, tokens out): lead", out.Usage, "| delegate", out.ChildUsage)
	return nil
}

// childPrompt returns the system prompt the lead wrote for its first
// sub-agent, from its call in the lead's transcript.
func childPrompt(msgs []provider.Message) string {
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			var args struct {
				SystemPrompt string `json:"system_prompt"`
			}
			if c.Name == "delegate" && json.Unmarshal(c.Arguments, &args) == nil {
				return args.SystemPrompt
			}
		}
	}
	return ""
}
