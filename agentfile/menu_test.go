package agentfile_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// vendor is a provider that names itself and records the models it was
// asked for.
type vendor struct {
	provider.Provider
	mu     sync.Mutex
	models []string
}

func (v *vendor) Name() string { return "acme" }

func (v *vendor) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	v.mu.Lock()
	v.models = append(v.models, req.Model)
	v.mu.Unlock()
	resp, err := v.Provider.Complete(ctx, req)
	resp.Model = req.Model
	return resp, err
}

// The loader's aliases name the spawn tool's menu: a fork the lead sends
// to "opus" runs on the provider and model the alias names, and an alias
// no provider serves is refused with the names the loader knows.
func TestModelMenuByTheLoadersAliases(t *testing.T) {
	small := &vendor{Provider: model(func(req provider.Request) provider.Message {
		if r := results(req); len(r) > 0 {
			return provider.AssistantMessage("lead: " + r[0])
		}
		return provider.AssistantMessage("", provider.ToolCall{ID: "call_1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"judge","model":"opus"}`)})
	})}
	big := &vendor{Provider: model(func(provider.Request) provider.Message { return provider.AssistantMessage("judged") })}
	loader, err := agentfile.NewLoader(
		agentfile.WithProvider("small", small, "haiku-9"),
		agentfile.WithProvider("big", big, "opus-9"),
		agentfile.WithModelAlias("haiku", "haiku-9"),
		agentfile.WithModelAlias("opus", "opus-9"),
	)
	if err != nil {
		t.Fatal(err)
	}
	prices, err := provider.NewPrices(map[string]provider.Price{"haiku-9": {Input: 1e-6, Output: 5e-6}, "opus-9": {Input: 15e-6, Output: 75e-6}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loader.ModelMenu(prices, "haiku", "sonnet"); err == nil || !strings.Contains(err.Error(), `no provider the program registered serves "sonnet"`) || !strings.Contains(err.Error(), "opus") {
		t.Errorf("ModelMenu with an unknown alias = %v, want an error listing the names", err)
	}
	menu, err := loader.ModelMenu(prices, "haiku", "opus")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(small, reg, menu)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sp.Definition().Parameters), `"enum":["haiku","opus"]`) {
		t.Errorf("the spawn tool's schema does not offer the aliases: %s", sp.Definition().Parameters)
	}
	lead, err := agent.NewReact(small, agent.WithRegistry(reg), agent.WithModel("haiku-9"), agent.WithPrices(prices))
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "lead: judged" || strings.Join(big.models, ",") != "opus-9" || strings.Join(small.models, ",") != "haiku-9,haiku-9" {
		t.Errorf("answer %q; the big provider was asked for %q, the small for %q; want the fork on opus-9 alone", out.Answer, big.models, small.models)
	}
	if want := 2*(10*1e-6+2*5e-6) + 10*15e-6 + 2*75e-6; out.Cost < want-1e-12 || out.Cost > want+1e-12 {
		t.Errorf("the run cost %v, want %v (the fork at opus-9's prices)", out.Cost, want)
	}
}
