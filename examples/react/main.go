// Command react shows the form in which the model defines the sub-agent:
// the lead model writes the child's system prompt and task in its call, and
// a ReAct agent is built for it, with the tools the program allows.
//
// It runs on the scripted fake provider; built with -tags realmodel, on the
// model the environment names (see examples/internal/pick).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/examples/internal/pick"
	"github.com/deputy-go/deputy/fake"
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
	script := fake.NewProvider(
		fake.Call("delegate", `{"system_prompt":"You are a careful editor. Count before you judge.","task":"Is 'deputy delegates well' under five words?"}`).For("lead"),
		fake.Call("count_words", `{"text":"deputy delegates well"}`).For("delegate"),
		fake.Text("Yes: 3 words.").For("delegate"),
		fake.Text("It is: three words.").For("lead"),
	)
	model, about, err := pick.FromEnv(getenv, script)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, about)

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
	if reqs := script.RequestsFor("delegate"); len(reqs) > 0 {
		fmt.Fprintln(w, "child system prompt:", reqs[0].System)
	}
	fmt.Fprintln(w, "answer:", out.Answer)
	fmt.Fprintln(w, "usage (requests, tokens in, tokens out): lead", out.Usage, "| delegate", out.ChildUsage)
	return nil
}
