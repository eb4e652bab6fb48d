package fake_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// Children that run in parallel share their name and so their replies: one
// Respond reply, kept by Loop, answers each child from its own task,
// whatever order the calls arrive in.
func ExampleRespond_parallelChildren() {
	child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		return provider.Response{Message: provider.AssistantMessage("done: " + task)}, nil
	}).For("researcher")
	p := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: "researcher", Arguments: []byte(`{"task":"read A"}`)},
			provider.ToolCall{Name: "researcher", Arguments: []byte(`{"task":"read B"}`)},
		).For("lead"),
		fake.Text("both read").For("lead"),
		child,
	).Loop()
	researcher, err := subagent.FromReact("researcher", "Reads a document.", p, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcher))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "Read A and B."})
	if err != nil {
		fmt.Println(err)
		return
	}
	var results []string
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			results = append(results, m.Content)
		}
	}
	sort.Strings(results)
	fmt.Println(results, out.Answer)
	// Output:
	// [done: read A done: read B] both read
}
