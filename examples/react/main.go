// Command react shows the form in which the model defines the sub-agent:
// the lead model writes the child's system prompt and task in its call, and
// a ReAct agent is built for it, with the tools the program allows.
package main

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

type wordsArgs struct {
	Text string `json:"text"`
}

func main() {
	model := fake.NewProvider(
		fake.Call("delegate", `{"system_prompt":"You are a careful editor. Count before you judge.","task":"Is 'deputy delegates well' under five words?"}`).For("lead"),
		fake.Call("count_words", `{"text":"deputy delegates well"}`).For("delegate"),
		fake.Text("Yes: 3 words.").For("delegate"),
		fake.Text("It is: three words.").For("lead"),
	)
	fmt.Println("provider: fake (scripted replies)")

	count := tool.Must(tool.New("count_words", "Counts the words of a text.", func(_ context.Context, in wordsArgs) (int, error) {
		return len(strings.Fields(in.Text)), nil
	}))
	childTools, err := tool.NewRegistry(count)
	if err != nil {
		log.Fatal(err)
	}
	delegate, err := subagent.FromReact("delegate", "Start a sub-agent: write its system prompt and its task.", model, childTools, nil,
		subagent.WithReactOptions(agent.WithMaxSteps(4)))
	if err != nil {
		log.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(delegate))
	if err != nil {
		log.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Is 'deputy delegates well' short?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("child system prompt:", model.RequestsFor("delegate")[0].System)
	fmt.Println("answer:", out.Answer)
	fmt.Println("usage: lead", out.Usage, "| delegate", out.ChildUsage)
}
