package wiretest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// ForkTask is the task of the i-th context fork of ForkLead's lead.
func ForkTask(i int) string { return fmt.Sprintf("Summarize what the findings say about site %d.", i) }

// ForkLead is the model behind a lead that reads a long context, calls a
// tool, then starts Forks context forks at once and answers. A vendor's
// test server decodes each request, keeps its body with Keep and answers
// with Reply; Run then drives the lead through the adapter.
type ForkLead struct {
	// Forks is how many context forks the lead starts.
	Forks int
	// IDPrefix begins the tool-call ids the model gives, as the vendor
	// names them ("call_", "toolu_").
	IDPrefix string

	mu     sync.Mutex
	bodies [][]byte
}

// Keep keeps a request's body as the server received it.
func (f *ForkLead) Keep(body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bodies = append(f.bodies, body)
}

// Reply answers a request by what its conversation ends with.
func (f *ForkLead) Reply(req provider.Request) providertest.Reply {
	last := req.Messages[len(req.Messages)-1]
	u := provider.Usage{InputTokens: 3000, OutputTokens: 20}
	switch {
	case last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Summarize what the findings say"):
		return providertest.Reply{Text: "Soil fine, water fine, traffic heavy.", Usage: u}
	case last.Role == provider.RoleTool && last.ToolCallID == f.IDPrefix+"weather":
		calls := make([]provider.ToolCall, f.Forks)
		for i := range calls {
			raw, _ := json.Marshal(map[string]string{"task": ForkTask(i)})
			calls[i] = provider.ToolCall{ID: fmt.Sprintf("%sspawn_%d", f.IDPrefix, i), Name: subagent.SpawnToolName, Arguments: raw}
		}
		return providertest.Reply{ToolCalls: calls, Usage: u}
	case last.Role == provider.RoleTool:
		return providertest.Reply{Text: "All sites summarized.", Usage: u}
	}
	return providertest.Reply{ToolCalls: []provider.ToolCall{{ID: f.IDPrefix + "weather", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}, Usage: u}
}

// Run runs the lead on p, whose server answers with Reply, and returns
// the bodies it kept of the lead's request of the step that spawned (it
// ends with the weather result) and of each fork's first request (it ends
// with the fork's task), decoded by decode.
func (f *ForkLead) Run(t *testing.T, p provider.Provider, decode func([]byte) (provider.Request, error)) (parent []byte, forks map[int][]byte) {
	t.Helper()
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	weather, err := tool.New("get_weather", "The weather in a city.", func(_ context.Context, in struct {
		City string `json:"city"`
	}) (string, error) {
		return "sunny in " + in.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithContextForks(), subagent.WithMaxSpawns(f.Forks))
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range []tool.Tool{weather, sp} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg),
		agent.WithSystemPrompt("You lead a survey team. Delegate one site to each sub-agent."))
	if err != nil {
		t.Fatal(err)
	}
	history := []provider.Message{
		provider.UserMessage("Here are the survey's findings: " + strings.Repeat("site figures in full. ", 200)),
		provider.AssistantMessage("I have read them."),
	}
	out, err := lead.Run(t.Context(), agent.Input{Messages: history, Text: "Check the weather in Paris, then summarize every site."})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "All sites summarized." {
		t.Fatalf("answer %q", out.Answer)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	forks = map[int][]byte{}
	for _, b := range f.bodies {
		req, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == provider.RoleTool && last.ToolCallID == f.IDPrefix+"weather":
			parent = b
		case last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Summarize what"):
			for i := range f.Forks {
				if strings.HasPrefix(last.Content, ForkTask(i)) {
					forks[i] = b
				}
			}
		}
	}
	if parent == nil || len(forks) != f.Forks || len(f.bodies) != 3+f.Forks {
		t.Fatalf("%d requests, %d of them forks' (want 3 of the lead's and %d forks')", len(f.bodies), len(forks), f.Forks)
	}
	return parent, forks
}
