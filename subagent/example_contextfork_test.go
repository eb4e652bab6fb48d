package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// snippet of docs/cost.md
// reviewers is a lead that has read a long document and hands one
// section to each of its reviewers, context forks that read the document
// from the provider's cache instead of being sent it again.
func reviewers(model provider.Provider) (*agent.React, error) {
	reviewer, err := subagent.FromFactory("reviewer", "Reviews one section of the document.",
		func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(model, agent.WithName("reviewer")) // fresh for each call
		},
		subagent.WithContextForks())
	if err != nil {
		return nil, err
	}
	return agent.NewReact(model, agent.WithName("lead"), agent.WithTools(reviewer),
		agent.WithSystemPrompt("You review documents."))
}

// end of snippet

// A lead hands a section of the document it read to a reviewer, a context
// fork: the reviewer's request is the lead's, then its task.
func ExampleWithContextForks() {
	model := fake.NewProvider(
		fake.Call("reviewer", `{"task":"Review section 2."}`).For("lead"),
		fake.Text("Section 2 is sound.").For("reviewer"),
		fake.Text("Reviewed.").For("lead"),
	)
	lead, err := reviewers(model)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := lead.Run(context.Background(), agent.Input{Text: "The document: … Review section 2."}); err != nil {
		log.Fatal(err)
	}
	r := model.RequestsFor("reviewer")[0]
	fmt.Printf("system %q, %d shared messages, then %q\n", r.System, r.SharedPrefix, r.Messages[len(r.Messages)-1].Content)
	// Output: system "You review documents.", 1 shared messages, then "Review section 2."
}
