package subagent_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A lead agent forks two sub-agents in one turn, asking each for a typed
// answer, and answers from what they return.
func ExampleNewSpawner() {
	// The forks run side by side; each answers from its own task.
	researcher := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		answer := `{"millions": 0.25}`
		if strings.Contains(req.Messages[0].Content, "Lisbon") {
			answer = `{"millions": 0.55}`
		}
		return provider.Response{Message: provider.AssistantMessage(answer), Usage: fake.Usage(req, provider.AssistantMessage(answer))}, nil
	}).For("subagent")
	model := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: []byte(
				`{"task":"Population of Lisbon?","output_schema":{"type":"object","properties":{"millions":{"type":"number"}},"required":["millions"]}}`)},
			provider.ToolCall{Name: subagent.SpawnToolName, Arguments: []byte(
				`{"task":"Population of Porto?","output_schema":{"type":"object","properties":{"millions":{"type":"number"}},"required":["millions"]}}`)},
		).For("lead"),
		researcher, researcher,
		fake.Text("Lisbon has about twice Porto's population.").For("lead"),
	)

	tools, _ := tool.NewRegistry()
	spawner, err := subagent.NewSpawner(model, tools, subagent.WithMaxSpawns(4))
	if err != nil {
		log.Fatal(err)
	}
	tools.Register(spawner) // children inherit it only below the depth cap

	lead, _ := agent.NewReact(model, agent.WithName("lead"), agent.WithRegistry(tools))
	out, err := lead.Run(context.Background(), agent.Input{Text: "Compare Lisbon and Porto."})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool {
			fmt.Println("sub-agent:", m.Content)
		}
	}
	fmt.Println("answer:", out.Answer)
	fmt.Println("children:", out.ChildUsage.Requests, "model calls")
	// Output:
	// sub-agent: {"millions": 0.55}
	// sub-agent: {"millions": 0.25}
	// answer: Lisbon has about twice Porto's population.
	// children: 2 model calls
}
