package treetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
)

// A lead calls two critics at once; the test asserts who was called, how
// and how it ended, and prints the golden dump.
func Example() {
	p := fake.NewProvider(
		fake.Call("critic", `{"task":"the numbers"}`).For("lead"),
		fake.Text("The numbers hold.").For("critic"),
		fake.Text("Both agree.").For("lead"),
	)
	critic, _ := subagent.FromReact("critic", "Checks one aspect.", p, nil)
	lead, _ := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic))
	tree := subagent.NewTree(nil)
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review."}); err != nil {
		fmt.Println(err)
		return
	}
	tr := treetest.New(printed{}, tree) // in a test: treetest.New(t, tree)
	tr.Nodes("critic").WithArgs(`{"task":"*"}`).Count(1).Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("hold"))
	tr.Nodes("critic").Each(treetest.MaxTokens(5))
	fmt.Print(tr.Dump())
	// Output:
	// treetest: critic: spent 8 tokens with its sub-agents, more than 5
	// > critic succeeded {"task":"the numbers"} → "The numbers hold." (3+5 tokens)
	// critic succeeded {"task":"the numbers"} → "The numbers hold." (3+5 tokens)
}

// printed is a testing.TB that prints failures, for the example.
type printed struct{ testing.TB }

func (printed) Helper()                           {}
func (printed) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
func (printed) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
