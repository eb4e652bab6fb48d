package main

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program runs on the scripted fake: the environment it is given is
// empty, whatever the process's holds.
func Example() {
	if err := run(context.Background(), os.Stdout, func(string) string { return "" }, "agents", "broken"); err != nil {
		panic(err)
	}
	// Output:
	// provider: fake (scripted replies; docs/providers.md tells how to use a real one)
	// loaded 2 definitions from agents:
	//   reviewer (reviewer.md): tools [read_file], output "file:schemas/review.json", sha256:cfee9e8e11f6…
	//   summarizer (summarizer.yaml): tools [], output "", sha256:db8cd5029554…
	// audit: reviewer calls read_file {"path":"main.go"}
	// validated result: map[findings:[main ignores the error of run] verdict:request_changes]
	// answer: The review asks for one change: handle the error of run.
	// agentfile: 3 problems, nothing loaded:
	//   reviewer.md:4: tools: "Read": no tool of the program is named so (read_file): remove it, fix the name, or have the program register the tool (agentfile.WithTools, WithMCPServer and mcpServers)
	//   reviewer.md:4: tools: "Grep": no tool of the program is named so (read_file): remove it, fix the name, or have the program register the tool (agentfile.WithTools, WithMCPServer and mcpServers)
	//   reviewer.md:5: permissionMode: not implemented: deputy has no permission modes (a tool that needs a person's approval is wrapped by the program with tool.RequireApproval): remove the key, or load with agentfile.WithUnsupported(agentfile.Warn) to ignore it with a warning
}
