package temporal_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/temporal"
)

// A lead that spawns two children, run in the SDK's in-memory test
// environment. On a real deployment the same Register call goes on each
// worker (worker.New) and the run starts with client.ExecuteWorkflow.
func Example() {
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		var msg provider.Message
		switch {
		case last.Role == provider.RoleTool:
			msg = provider.AssistantMessage("both halves checked")
		case strings.HasPrefix(last.Content, "check"):
			msg = provider.AssistantMessage("ok: " + last.Content)
		default:
			msg = provider.AssistantMessage("",
				provider.ToolCall{ID: "1", Name: temporal.SpawnToolName, Arguments: []byte(`{"task":"check the first half"}`)},
				provider.ToolCall{ID: "2", Name: temporal.SpawnToolName, Arguments: []byte(`{"task":"check the second half"}`)})
		}
		return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
	})

	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	temporal.Register(env, &temporal.Runtime{Providers: map[string]provider.Provider{"main": model}})
	env.ExecuteWorkflow(temporal.AgentWorkflowName, temporal.RunInput{
		Spec: temporal.Spec{Name: "lead", Provider: "main", Spawn: true},
		Text: "review the report",
	})
	var out temporal.RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Answer)
	fmt.Println("model calls:", out.Usage.Requests, "own,", out.ChildUsage.Requests, "in children")
	// Output:
	// both halves checked
	// model calls: 2 own, 2 in children
}
