package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// tokenUsage is AG-UI's TokenUsage as the client reads it.
type tokenUsage struct {
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Input    int64  `json:"inputTokens"`
	Output   int64  `json:"outputTokens"`
	Total    int64  `json:"totalTokens"`
	// Cost is deputy's, beside the counts it prices.
	Cost float64 `json:"costUsd,omitempty"`
}

func usageOf(t *testing.T, raw json.RawMessage) []tokenUsage {
	t.Helper()
	var u []tokenUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("usage %s: %v", raw, err)
	}
	return u
}

// waitForJob is a model turn that waits for the job whose receipt is the
// latest in the conversation.
func waitForJob(u provider.Usage) fake.Reply {
	return fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		id := ""
		for _, m := range req.Messages {
			var r struct {
				JobID string `json:"job_id"`
			}
			if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &r) == nil && r.JobID != "" {
				id = r.JobID
			}
		}
		args := `{"action":"wait","job_id":"` + id + `"}`
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "w1", Name: subagent.JobsToolName, Arguments: json.RawMessage(args)}),
			Usage: u, Model: "alpha-1"}, nil
	})
}

// The usage of RUN_FINISHED has one entry per provider and model, for every
// model call of the run: the lead's, its child's and a background job's;
// with the lead's prices, each entry says what it cost.
func TestRunUsageIsPerProviderAndModel(t *testing.T) {
	u := func(in, out int64) provider.Usage {
		return provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
	}
	alpha := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{ID: "l1", Name: "helper", Arguments: json.RawMessage(`{"task":"help"}`)},
			provider.ToolCall{ID: "l2", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)},
		).WithUsage(u(10, 1)),
		waitForJob(u(10, 1)),
		fake.Text("done").WithUsage(u(10, 1)),
	).Named("alpha", "alpha-1")
	beta := fake.NewProvider(
		fake.Text("helped").For("helper").WithUsage(u(5, 2)),
		fake.Text("dug").For(subagent.DefaultForkName).WithUsage(u(7, 3)),
	).Named("beta", "beta-1")
	prices, err := provider.NewPrices(map[string]provider.Price{"alpha-1": {Input: 0.5, Output: 2}, "beta/beta-1": {Input: 1, Output: 4}})
	if err != nil {
		t.Fatal(err)
	}

	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		helper, err := subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(beta, agent.WithName("helper"))
		})
		if err != nil {
			return nil, err
		}
		return backgroundLead(alpha, beta, []tool.Tool{helper}, agent.WithPrices(prices))
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := aguiRunChecked(t, serve(t, h).URL, runBody("th", "r1", nil), http.StatusOK, eventcheck.Options{Background: true})
	fin, _ := finished(t, evs)
	want := []tokenUsage{
		{Provider: "alpha", Model: "alpha-1", Input: 30, Output: 3, Total: 33, Cost: 30*0.5 + 3*2},
		{Provider: "beta", Model: "beta-1", Input: 12, Output: 5, Total: 17, Cost: 12*1 + 5*4},
	}
	if diff := cmp.Diff(want, usageOf(t, fin.Usage)); diff != "" {
		t.Errorf("usage (-want +got):\n%s\nresult %s", diff, fin.Result)
	}
}

// An agent that calls its model itself, outside any agent.React, still
// has its usage reported: as one entry without provider and model.
func TestRunUsageOfAnAgentThatCountsItself(t *testing.T) {
	h, err := agui.New(agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		return agent.Output{Answer: "hi", Usage: provider.Usage{InputTokens: 4, OutputTokens: 1, Requests: 1}}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	fin, _ := finished(t, aguiRun(t, serve(t, h).URL, runBody("th", "r1", nil), http.StatusOK))
	if diff := cmp.Diff([]tokenUsage{{Input: 4, Output: 1, Total: 5}}, usageOf(t, fin.Usage)); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// approvalUsage is what each run of the approval tree spends: one call of
// each agent's model, whichever the run.
var approvalUsage = []tokenUsage{
	{Provider: approvaltree.ProviderName, Model: "lead-model", Input: 10, Output: 2, Total: 12},
	{Provider: approvaltree.ProviderName, Model: "janitor-model", Input: 10, Output: 2, Total: 12},
	{Provider: approvaltree.ProviderName, Model: "cleaner-model", Input: 10, Output: 2, Total: 12},
}

// wholeApprovalUsage is what the whole turn of the approval tree spends
// over its two runs, which the run that resumes it reports.
var wholeApprovalUsage = []tokenUsage{
	{Provider: approvaltree.ProviderName, Model: "lead-model", Input: 20, Output: 4, Total: 24},
	{Provider: approvaltree.ProviderName, Model: "janitor-model", Input: 20, Output: 4, Total: 24},
	{Provider: approvaltree.ProviderName, Model: "cleaner-model", Input: 20, Output: 4, Total: 24},
}

// byModel compares usage entries whatever their order.
var byModel = cmpopts.SortSlices(func(a, b tokenUsage) bool { return a.Model < b.Model })

// RUN_FINISHED and SUBAGENT_FINISHED say, per provider and model, what the
// prompt cache saved at that model's prices (cacheSavedUsd) beside what
// the calls cost: cached input at its own price, cache writes at theirs.
func TestRunUsageSaysWhatTheCacheSaved(t *testing.T) {
	alpha := fake.NewProvider(
		fake.Call("helper", `{"task":"help"}`).WithUsage(provider.Usage{InputTokens: 100, CacheWriteTokens: 100, OutputTokens: 1, Requests: 1}),
		fake.Text("done").WithUsage(provider.Usage{InputTokens: 120, CacheReadTokens: 100, OutputTokens: 1, Requests: 1}),
	).Named("alpha", "alpha-1")
	beta := fake.NewProvider(fake.Text("helped").WithUsage(provider.Usage{InputTokens: 50, CacheReadTokens: 40, OutputTokens: 2, Requests: 1})).Named("beta", "beta-1")
	prices, err := provider.NewPrices(map[string]provider.Price{
		"alpha-1":     {Input: 1, Output: 4, CacheRead: 0.125, CacheWrite: 1.25},
		"beta/beta-1": {Input: 2, Output: 8, CacheRead: 0.5},
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		helper, err := subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(beta, agent.WithName("helper"))
		})
		if err != nil {
			return nil, err
		}
		return agent.NewReact(alpha, agent.WithName("lead"), agent.WithTools(helper), agent.WithPrices(prices))
	})
	if err != nil {
		t.Fatal(err)
	}
	type saving struct {
		Model string  `json:"model"`
		Cost  float64 `json:"costUsd"`
		Saved float64 `json:"cacheSavedUsd"`
	}
	savings := func(raw json.RawMessage) []saving {
		var s []saving
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("usage %s: %v", raw, err)
		}
		return s
	}
	resp := post(t, serve(t, h).URL, runBody("th", "r1", nil))
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body)
	fin, _ := finished(t, events(frames))
	// alpha: the first call wrote 100 tokens at 0.25 more each; the second
	// read them at 0.875 less each. beta: 40 read at 1.5 less each.
	betaSaving := saving{Model: "beta-1", Cost: 10*2 + 40*0.5 + 2*8, Saved: 40 * 1.5}
	want := []saving{
		{Model: "alpha-1", Cost: 100*1.25 + 1*4 + 20*1 + 100*0.125 + 1*4, Saved: -100*0.25 + 100*0.875},
		betaSaving,
	}
	if diff := cmp.Diff(want, savings(fin.Usage)); diff != "" {
		t.Errorf("RUN_FINISHED's usage (-want +got):\n%s", diff)
	}
	var sub []saving
	for _, f := range frames {
		var w wireEvent
		if err := json.Unmarshal([]byte(f.raw), &w); err != nil {
			t.Fatal(err)
		}
		if w.Type == string(event.SubagentFinished) {
			sub = savings(w.Metadata.Usage) // where a client reads it
		}
	}
	if diff := cmp.Diff([]saving{betaSaving}, sub); diff != "" {
		t.Errorf("SUBAGENT_FINISHED's usage (-want +got):\n%s", diff)
	}
}
