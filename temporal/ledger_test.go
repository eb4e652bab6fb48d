package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// billing is what the models of a test billed, per model, as a provider's
// invoice counts it.
type billing struct {
	mu      sync.Mutex
	byModel map[string]provider.Usage
}

func (b *billing) add(model string, u provider.Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byModel == nil {
		b.byModel = map[string]provider.Usage{}
	}
	b.byModel[model] = b.byModel[model].Add(u)
}

func (b *billing) snapshot() map[string]provider.Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]provider.Usage{}
	for m, u := range b.byModel {
		out[m] = u
	}
	return out
}

const ledgerProvider = "acme"

type acme struct{ provider.Func }

func (acme) Name() string { return ledgerProvider }

// ledgerModel is the model of one agent of the ledger tree: with no tool
// result yet it asks for tools (named as idMode says), then answers with
// what they returned; each call bills its own token counts to model.
func ledgerModel(b *billing, idMode string, ids *atomic.Int64, model string, in, out int64, tools ...string) provider.Provider {
	return acme{func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
		b.add(model, u)
		var results []string
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				results = append(results, m.Content)
			}
		}
		if len(results) > 0 || len(tools) == 0 {
			sort.Strings(results)
			return provider.Response{Message: provider.AssistantMessage(model + " done: " + strings.Join(results, "; ")), Usage: u, Model: model}, nil
		}
		var calls []provider.ToolCall
		for i, name := range tools {
			id := ""
			switch idMode {
			case "fresh ids":
				id = fmt.Sprint("call_", ids.Add(1))
			case "ids from call_0":
				id = fmt.Sprint("call_", i)
			}
			calls = append(calls, provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(`{"task":"` + name + `"}`)})
		}
		return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u, Model: model}, nil
	}}
}

// wireUsage is a TokenUsage as a client reads it, with the part spent
// before the question.
type wireUsage struct {
	Provider string  `json:"provider"`
	Model    string  `json:"model"`
	Input    int64   `json:"inputTokens"`
	Output   int64   `json:"outputTokens"`
	Cost     float64 `json:"costUsd"`
	Earlier  *struct {
		Input  int64   `json:"inputTokens"`
		Output int64   `json:"outputTokens"`
		Cost   float64 `json:"costUsd"`
	} `json:"earlier"`
}

// One ledger on Temporal: a tree whose grandchild asks a person for
// approval, served over AG-UI and resumed with the answer, reports what
// the models billed — the Output of the run that ends, its RUN_FINISHED,
// each SUBAGENT_FINISHED and the subagent.Tree of both runs' events — per
// model and per node, in tokens and in
// dollars at the workers' prices, with the part billed before the
// question marked, as in process (agui's TestOneLedgerAcrossAnApproval);
// each approved call runs once and no model answer is paid twice;
// whatever ids the model gives its calls.
func TestOneLedgerAcrossAnApprovalOnTemporal(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{
		"lead-m":    {Input: 3e-6, Output: 15e-6},
		"janitor-m": {Input: 1e-6, Output: 4e-6},
		"cleaner-m": {Input: 0.5e-6, Output: 2e-6},
		"scout-m":   {Input: 0.25e-6, Output: 1e-6},
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := func(byModel map[string]provider.Usage, models ...string) (u provider.Usage, dollars float64) {
		for _, m := range models {
			u = u.Add(byModel[m])
			d, unpriced := prices.Cost(provider.ModelUsage{Provider: ledgerProvider, Model: m, Usage: byModel[m]})
			if len(unpriced) > 0 {
				t.Fatalf("no price for %v", unpriced)
			}
			dollars += d
		}
		return u, dollars
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }
	tokens := func(u provider.Usage) provider.Usage {
		return provider.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	total := func(us []wireUsage) (u, earlier provider.Usage, cost, earlierCost float64) {
		for _, w := range us {
			u = u.Add(provider.Usage{InputTokens: w.Input, OutputTokens: w.Output})
			cost += w.Cost
			if e := w.Earlier; e != nil {
				earlier = earlier.Add(provider.Usage{InputTokens: e.Input, OutputTokens: e.Output})
				earlierCost += e.Cost
			}
		}
		return u, earlier, cost, earlierCost
	}
	all := []string{"lead-m", "janitor-m", "cleaner-m", "scout-m"}
	for _, idMode := range []string{"fresh ids", "no ids", "ids from call_0"} {
		t.Run(idMode, func(t *testing.T) {
			var bill billing
			var ids, deletes, notes atomic.Int64
			del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
				Task string `json:"task"`
			}) (string, error) {
				deletes.Add(1)
				return "deleted", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			note, err := tool.New("note", "Takes a note.", func(ctx context.Context, in struct {
				Task string `json:"task"`
			}) (string, error) {
				notes.Add(1)
				return "noted", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tool.NewRegistry(tool.RequireApproval(del, "deletes a file", 0), note)
			if err != nil {
				t.Fatal(err)
			}
			hub := NewHub()
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{
				"lead":    ledgerModel(&bill, idMode, &ids, "lead-m", 100, 10, "janitor", "scout"),
				"janitor": ledgerModel(&bill, idMode, &ids, "janitor-m", 60, 6, "cleaner"),
				"cleaner": ledgerModel(&bill, idMode, &ids, "cleaner-m", 40, 4, "delete", "note"),
				"scout":   ledgerModel(&bill, idMode, &ids, "scout-m", 30, 3),
			}, Tools: reg, Prices: prices, Events: hub})
			spec := Spec{Name: "lead", Provider: "lead", MaxDepth: 2, SubAgents: []SubAgent{
				{Name: "janitor", Description: "Tidies.", Agent: &Spec{Name: "janitor", Provider: "janitor", SubAgents: []SubAgent{
					{Name: "cleaner", Description: "Cleans.", Agent: &Spec{Name: "cleaner", Provider: "cleaner", Tools: []string{"delete", "note"}}},
				}}},
				{Name: "scout", Description: "Looks.", Agent: &Spec{Name: "scout", Provider: "scout"}},
			}}
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var mu sync.Mutex
			var last agent.Output
			h, err := agui.NewPerRequest(func(context.Context, *agui.RunInput) (agent.Agent, error) {
				a := &Agent{Client: c, TaskQueue: queue, Spec: spec, Events: hub}
				return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
					out, err := a.Run(ctx, in)
					mu.Lock()
					last = out
					mu.Unlock()
					return out, err
				}), nil
			}, agui.WithThreads(st))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			type frame struct {
				Type          string          `json:"type"`
				SubagentRunID string          `json:"subagentRunId"`
				Name          string          `json:"name"`
				Usage         json.RawMessage `json:"usage"`
				Outcome       struct {
					Type       string `json:"type"`
					Interrupts []struct {
						ID string `json:"id"`
					} `json:"interrupts"`
				} `json:"outcome"`
				Metadata struct {
					Usage json.RawMessage `json:"usage"`
				} `json:"metadata"`
			}
			var evs []event.Event // both runs' events, for a Tree
			post := func(body string) []frame {
				t.Helper()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out []frame
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						var f frame
						var e event.Event
						if err := json.Unmarshal([]byte(line), &f); err != nil {
							t.Fatalf("a frame that is not JSON: %q", line)
						}
						if err := json.Unmarshal([]byte(line), &e); err != nil {
							t.Fatalf("a frame that is no event: %q: %v", line, err)
						}
						out = append(out, f)
						evs = append(evs, e)
					}
				}
				return out
			}
			first := post(`{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"user","content":"tidy"}]}`)
			end := first[len(first)-1]
			if end.Type != "RUN_FINISHED" || end.Outcome.Type != "interrupt" || len(end.Outcome.Interrupts) != 1 {
				t.Fatalf("the first run ended %+v, want one question", end)
			}
			before := bill.snapshot()
			second := post(`{"threadId":"t1","runId":"r2","messages":[],"resume":[{"interruptId":"` + end.Outcome.Interrupts[0].ID + `","status":"resolved","payload":{"approved":true}}]}`)
			end = second[len(second)-1]
			if end.Type != "RUN_FINISHED" || end.Outcome.Type != "" && end.Outcome.Type != "success" {
				t.Fatalf("the resumed run ended %+v", end)
			}
			billed := bill.snapshot()

			// The interrupted run's RUN_FINISHED: what was billed before
			// the question, per model, none of it earlier, as in process.
			var asked []wireUsage
			if err := json.Unmarshal(first[len(first)-1].Usage, &asked); err != nil {
				t.Fatalf("the interrupted run's RUN_FINISHED usage %s: %v", first[len(first)-1].Usage, err)
			}
			beforeU, beforeCost := sum(before, all...)
			if u, e, c, ec := total(asked); u != tokens(beforeU) || !e.IsZero() || !near(c, beforeCost) || ec != 0 {
				t.Errorf("the interrupted run's RUN_FINISHED: %+v ($%g), %+v ($%g) earlier; billed before the question %+v ($%g)", u, c, e, ec, beforeU, beforeCost)
			}
			for _, w := range asked {
				if b, bc := sum(before, w.Model); w.Model == "" || w.Provider != ledgerProvider || w.Input != b.InputTokens || w.Output != b.OutputTokens || !near(w.Cost, bc) {
					t.Errorf("the interrupted run's RUN_FINISHED %+v, %q billed %+v ($%g) before the question", w, w.Model, b, bc)
				}
			}

			if deletes.Load() != 1 || notes.Load() != 1 {
				t.Errorf("%d deletes and %d notes, want each once", deletes.Load(), notes.Load())
			}
			for m, want := range map[string]int64{"lead-m": 2, "janitor-m": 2, "cleaner-m": 2, "scout-m": 1} {
				if got := billed[m].Requests; got != want {
					t.Errorf("%s billed %d requests, want %d", m, got, want)
				}
			}
			allU, allCost := sum(billed, all...)
			earlierU, earlierCost := sum(before, all...)

			// Output: the whole turn, the part before the question marked.
			mu.Lock()
			out := last
			mu.Unlock()
			if tokens(out.TotalUsage()) != tokens(allU) || !near(out.Cost, allCost) {
				t.Errorf("Output %+v ($%g), billed %+v ($%g)", out.TotalUsage(), out.Cost, allU, allCost)
			}
			if tokens(out.Earlier) != tokens(earlierU) || !near(out.EarlierCost, earlierCost) {
				t.Errorf("Output.Earlier %+v ($%g), billed before the question %+v ($%g)", out.Earlier, out.EarlierCost, earlierU, earlierCost)
			}

			// RUN_FINISHED, per model.
			var lead []wireUsage
			if err := json.Unmarshal(end.Usage, &lead); err != nil {
				t.Fatalf("RUN_FINISHED's usage %s: %v", end.Usage, err)
			}
			if len(lead) != len(all) {
				t.Errorf("RUN_FINISHED's usage %s, want one entry per model", end.Usage)
			}
			for _, w := range lead {
				b, bc := sum(billed, w.Model)
				e, ec := sum(before, w.Model)
				if w.Provider != ledgerProvider || w.Input != b.InputTokens || w.Output != b.OutputTokens || !near(w.Cost, bc) {
					t.Errorf("RUN_FINISHED %+v, %s billed %+v ($%g)", w, w.Model, b, bc)
				}
				if got := w.Earlier; (got == nil) != e.IsZero() || got != nil && (got.Input != e.InputTokens || got.Output != e.OutputTokens || !near(got.Cost, ec)) {
					t.Errorf("RUN_FINISHED's earlier part of %s %+v, billed before the question %+v ($%g)", w.Model, got, e, ec)
				}
			}
			if u, e, c, ec := total(lead); u != tokens(allU) || e != tokens(earlierU) || !near(c, allCost) || !near(ec, earlierCost) {
				t.Errorf("RUN_FINISHED in all %+v ($%g), %+v ($%g) earlier; billed %+v ($%g), %+v ($%g) before the question", u, c, e, ec, allU, allCost, earlierU, earlierCost)
			}

			// Each sub-agent's end: what its subtree billed, and, for one
			// that finished after the answer, what it billed before the
			// question as its earlier part (the scout finished before it).
			names := map[string]string{}
			nodes := map[string][]wireUsage{}
			for _, f := range append(first, second...) {
				switch f.Type {
				case "SUBAGENT_STARTED":
					names[f.SubagentRunID] = f.Name
				case "SUBAGENT_FINISHED", "SUBAGENT_ERROR":
					if len(f.Metadata.Usage) > 0 {
						var u []wireUsage
						if err := json.Unmarshal(f.Metadata.Usage, &u); err != nil {
							t.Fatal(err)
						}
						nodes[names[f.SubagentRunID]] = u
					}
				}
			}
			subtree := map[string][]string{"janitor": {"janitor-m", "cleaner-m"}, "cleaner": {"cleaner-m"}, "scout": {"scout-m"}}
			for name, models := range subtree {
				ws, ok := nodes[name]
				if !ok {
					t.Errorf("no end of %s with usage; ends %v", name, nodes)
					continue
				}
				if len(ws) != len(models) {
					t.Errorf("%s's end has %d usage entries, want one per model of its subtree: %+v", name, len(ws), ws)
				}
				u, e, c, ec := total(ws)
				want, wantCost := sum(billed, models...)
				if u != tokens(want) || !near(c, wantCost) {
					t.Errorf("%s's end: %+v ($%g), its subtree billed %+v ($%g)", name, u, c, want, wantCost)
				}
				wantE, wantEC := sum(before, models...)
				if name == "scout" {
					wantE, wantEC = provider.Usage{}, 0
				}
				if e != tokens(wantE) || !near(ec, wantEC) {
					t.Errorf("%s's end: earlier %+v ($%g), billed before the question %+v ($%g)", name, e, ec, wantE, wantEC)
				}
			}

			// The Tree of both runs' events: each node what its subtree
			// billed, and its roots with the lead's model all of it.
			tree := subagent.NewTree(nil)
			for _, e := range evs {
				tree.Emit(e)
			}
			var rootsU provider.Usage
			var rootsCost float64
			var check func(ns []*subagent.Node)
			check = func(ns []*subagent.Node) {
				for _, n := range ns {
					c, _ := n.Cost(nil)
					want, wantCost := sum(billed, subtree[n.Name]...)
					if tokens(n.TotalUsage()) != tokens(want) || !near(c, wantCost) || n.State != subagent.StateSucceeded {
						t.Errorf("Tree node %s (%s): %+v ($%g), its subtree billed %+v ($%g)", n.Name, n.State, n.TotalUsage(), c, want, wantCost)
					}
					wantE, _ := sum(before, subtree[n.Name]...)
					if n.Name == "scout" {
						wantE = provider.Usage{}
					}
					if n.Earlier != tokens(wantE) {
						t.Errorf("Tree node %s: earlier %+v, billed before the question %+v", n.Name, n.Earlier, wantE)
					}
					check(n.Children)
				}
			}
			roots := tree.Roots()
			check(roots)
			for _, n := range roots {
				c, _ := n.Cost(nil)
				rootsU, rootsCost = rootsU.Add(n.TotalUsage()), rootsCost+c
			}
			leadU, leadCost := sum(billed, "lead-m")
			if len(roots) != 2 || tokens(rootsU.Add(leadU)) != tokens(allU) || !near(rootsCost+leadCost, allCost) {
				t.Errorf("the Tree's %d roots and the lead: %+v ($%g), billed %+v ($%g)", len(roots), rootsU.Add(leadU), rootsCost+leadCost, allU, allCost)
			}
		})
	}
}
