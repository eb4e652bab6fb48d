package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/provider"
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

// snapshot returns what was billed so far, per model.
func (b *billing) snapshot() map[string]provider.Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]provider.Usage{}
	for m, u := range b.byModel {
		out[m] = u
	}
	return out
}

func sumOf(byModel map[string]provider.Usage, models ...string) provider.Usage {
	var u provider.Usage
	if len(models) == 0 {
		for _, v := range byModel {
			u = u.Add(v)
		}
		return u
	}
	for _, m := range models {
		u = u.Add(byModel[m])
	}
	return u
}

func costOf(t *testing.T, prices *provider.Prices, byModel map[string]provider.Usage, models ...string) float64 {
	t.Helper()
	if len(models) == 0 {
		for m := range byModel {
			models = append(models, m)
		}
	}
	var dollars float64
	for _, m := range models {
		d, unpriced := prices.Cost(provider.ModelUsage{Provider: ledgerProvider, Model: m, Usage: byModel[m]})
		if len(unpriced) > 0 {
			t.Fatalf("no price for %v", unpriced)
		}
		dollars += d
	}
	return dollars
}

const ledgerProvider = "acme"

// ok returns v, or fails the test with err.
func ok[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

type acme struct{ provider.Func }

func (acme) Name() string { return ledgerProvider }

// ledgerModel is the model of one agent of the ledger tree: a function of
// what it is sent, as a real model is. With no tool result yet it asks
// for tools (named as idMode says), then answers with what they returned.
// Each model bills its own token counts.
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

// ledgerTree is a lead that asks a janitor and a scout at once; the
// janitor asks a cleaner, which deletes (with a person's approval) and
// takes a note at once. It counts its side effects.
type ledgerTree struct {
	bill           billing
	deletes, notes atomic.Int64
	out            agent.Output // the last run's
	mu             sync.Mutex
}

func (lt *ledgerTree) build(t *testing.T, idMode string, prices *provider.Prices, tp *sdktrace.TracerProvider) agent.Agent {
	t.Helper()
	var ids atomic.Int64
	del := ok(tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
		Task string `json:"task"`
	}) (string, error) {
		lt.deletes.Add(1)
		return "deleted", nil
	}))(t)
	note := ok(tool.New("note", "Takes a note.", func(ctx context.Context, in struct {
		Task string `json:"task"`
	}) (string, error) {
		lt.notes.Add(1)
		return "noted", nil
	}))(t)
	cleaner := ok(subagent.FromFactory("cleaner", "Cleans.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(ledgerModel(&lt.bill, idMode, &ids, "cleaner-m", 40, 4, "delete", "note"),
			agent.WithName("cleaner"), agent.WithTools(tool.RequireApproval(del, "deletes a file", 0), note))
	}, subagent.WithMaxDepth(2)))(t)
	janitor := ok(subagent.FromFactory("janitor", "Tidies.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(ledgerModel(&lt.bill, idMode, &ids, "janitor-m", 60, 6, "cleaner"), agent.WithName("janitor"), agent.WithTools(cleaner))
	}))(t)
	scout := ok(subagent.FromFactory("scout", "Looks.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(ledgerModel(&lt.bill, idMode, &ids, "scout-m", 30, 3), agent.WithName("scout"))
	}))(t)
	lead := ok(agent.NewReact(ledgerModel(&lt.bill, idMode, &ids, "lead-m", 100, 10, "janitor", "scout"), agent.WithName("lead"),
		agent.WithTools(janitor, scout), agent.WithPrices(prices), agent.WithTracerProvider(tp)))(t)
	return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
		out, err := lead.Run(ctx, in)
		lt.mu.Lock()
		lt.out = out
		lt.mu.Unlock()
		return out, err
	})
}

// wireUsage is a TokenUsage as a client reads it, with the part earlier
// runs of the turn spent.
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

// wireEvent is an event as a client reads it: a sub-agent's usage is in
// its metadata.
type wireEvent struct {
	Type          string          `json:"type"`
	SubagentRunID string          `json:"subagentRunId"`
	Name          string          `json:"name"`
	Usage         json.RawMessage `json:"usage"`
	Metadata      struct {
		Usage json.RawMessage `json:"usage"`
		Model string          `json:"model"`
	} `json:"metadata"`
}

// viewerFigures is what the run-tree viewer (devui) shows for a thread's
// runs, as its script reads their events: the lead's usage from the last
// RUN_FINISHED, each sub-agent's from its last SUBAGENT_FINISHED or
// SUBAGENT_ERROR, by name.
func viewerFigures(t *testing.T, frames []frame) (lead []wireUsage, nodes map[string][]wireUsage) {
	t.Helper()
	names := map[string]string{}
	nodes = map[string][]wireUsage{}
	for _, f := range frames {
		var e wireEvent
		if err := json.Unmarshal([]byte(f.raw), &e); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case "SUBAGENT_STARTED":
			names[e.SubagentRunID] = e.Name
		case "SUBAGENT_FINISHED", "SUBAGENT_ERROR":
			var u []wireUsage
			if len(e.Metadata.Usage) > 0 {
				if err := json.Unmarshal(e.Metadata.Usage, &u); err != nil {
					t.Fatal(err)
				}
				nodes[names[e.SubagentRunID]] = u
			}
		case "RUN_FINISHED":
			lead = nil
			if err := json.Unmarshal(e.Usage, &lead); err != nil {
				t.Fatal(err)
			}
		}
	}
	return lead, nodes
}

func wireTotal(us []wireUsage) (u, earlier provider.Usage, cost, earlierCost float64) {
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

func tokens(u provider.Usage) provider.Usage {
	return provider.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

// One ledger: a tree whose grandchild asks a person for approval, served
// over AG-UI and resumed with the answer, reports on every surface what
// the models billed — the resumed run's Output, its RUN_FINISHED, the
// subagent.Tree of both runs' events, the spans and the viewer's figures
// — per node and in total, in tokens and in money, with the part spent
// before the question marked the same way everywhere; each approved call
// runs once and no model answer is paid twice; whatever ids the model
// gives its calls.
func TestOneLedgerAcrossAnApproval(t *testing.T) {
	prices := ok(provider.NewPrices(map[string]provider.Price{
		"lead-m":    {Input: 3e-6, Output: 15e-6},
		"janitor-m": {Input: 1e-6, Output: 4e-6},
		"cleaner-m": {Input: 0.5e-6, Output: 2e-6},
		"scout-m":   {Input: 0.25e-6, Output: 1e-6},
	}))(t)
	for _, idMode := range []string{"fresh ids", "no ids", "ids from call_0"} {
		t.Run(idMode, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			var lt ledgerTree
			st := sqliteStore(t, t.TempDir()+"/s.db")
			h := ok(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
				return lt.build(t, idMode, prices, tp), nil
			}, agui.WithThreads(st)))(t)
			url := serve(t, h).URL

			resp := post(t, url, runBody("th", "run-1", nil))
			frames1 := readFrames(t, resp.Body)
			resp.Body.Close()
			fin1, o := finished(t, events(frames1))
			if o.Type != "interrupt" || len(o.Interrupts) != 1 {
				t.Fatalf("outcome %s, want one question", fin1.Outcome)
			}
			before := lt.bill.snapshot()
			ans := tool.Answer{InterruptID: o.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}
			resp = post(t, url, runBody("th", "run-2", []tool.Answer{ans}))
			frames2 := readFrames(t, resp.Body)
			resp.Body.Close()
			if _, o2 := finished(t, events(frames2)); o2.Type != "" && o2.Type != "success" {
				t.Fatalf("the resumed run ended %s", o2.Type)
			}
			billed := lt.bill.snapshot()

			// The interrupted run's RUN_FINISHED: what was billed before
			// the question, per model, none of it earlier.
			var asked []wireUsage
			if err := json.Unmarshal(fin1.Usage, &asked); err != nil {
				t.Fatalf("the interrupted run's RUN_FINISHED usage %s: %v", fin1.Usage, err)
			}
			if u, e, c, ec := wireTotal(asked); u != tokens(sumOf(before)) || !e.IsZero() || !near(c, costOf(t, prices, before)) || ec != 0 {
				t.Errorf("the interrupted run's RUN_FINISHED: %+v ($%g), %+v ($%g) earlier; billed before the question %+v ($%g)", u, c, e, ec, sumOf(before), costOf(t, prices, before))
			}
			for _, w := range asked {
				if b := before[w.Model]; w.Model == "" || w.Input != b.InputTokens || w.Output != b.OutputTokens {
					t.Errorf("the interrupted run's RUN_FINISHED %+v, %q billed %+v before the question", w, w.Model, b)
				}
			}

			// Side effects, and each answer paid once.
			if lt.deletes.Load() != 1 || lt.notes.Load() != 1 {
				t.Errorf("%d deletes and %d notes, want each once", lt.deletes.Load(), lt.notes.Load())
			}
			for m, want := range map[string]int64{"lead-m": 2, "janitor-m": 2, "cleaner-m": 2, "scout-m": 1} {
				if got := billed[m].Requests; got != want {
					t.Errorf("%s billed %d requests, want %d: an answer was paid twice, or not asked", m, got, want)
				}
			}
			all, allCost := sumOf(billed), costOf(t, prices, billed)
			earlier, earlierCost := sumOf(before), costOf(t, prices, before)

			// Output: the whole turn, the part before the question marked.
			out := lt.out
			if got := out.TotalUsage(); got != all {
				t.Errorf("Output: %+v, billed %+v", got, all)
			}
			if out.Usage != billed["lead-m"] {
				t.Errorf("Output.Usage %+v, the lead's model billed %+v", out.Usage, billed["lead-m"])
			}
			if out.Earlier != earlier || !near(out.EarlierCost, earlierCost) {
				t.Errorf("Output.Earlier %+v ($%g), billed before the question %+v ($%g)", out.Earlier, out.EarlierCost, earlier, earlierCost)
			}
			if !near(out.Cost, allCost) {
				t.Errorf("Output.Cost $%g, billed $%g", out.Cost, allCost)
			}

			// RUN_FINISHED, per model, and the viewer's figures.
			lead, nodes := viewerFigures(t, append(frames1, frames2...))
			for _, w := range lead {
				b, e := billed[w.Model], before[w.Model]
				if w.Provider != ledgerProvider || w.Input != b.InputTokens || w.Output != b.OutputTokens || !near(w.Cost, costOf(t, prices, billed, w.Model)) {
					t.Errorf("RUN_FINISHED %+v, %s billed %+v", w, w.Model, b)
				}
				if got := w.Earlier; (got == nil) != e.IsZero() || got != nil && (got.Input != e.InputTokens || got.Output != e.OutputTokens || !near(got.Cost, costOf(t, prices, before, w.Model))) {
					t.Errorf("RUN_FINISHED's earlier part of %s %+v, billed before the question %+v", w.Model, got, e)
				}
			}
			if u, e, c, ec := wireTotal(lead); u != tokens(all) || e != tokens(earlier) || !near(c, allCost) || !near(ec, earlierCost) {
				t.Errorf("RUN_FINISHED in all %+v ($%g), %+v ($%g) earlier; billed %+v ($%g), %+v ($%g) before the question", u, c, e, ec, all, allCost, earlier, earlierCost)
			}
			// Per node: what its subtree's models billed, and, for a node
			// the resumed run reported, what they billed before the
			// question as its earlier part (the scout finished before it:
			// its figures are its first run's, none of it earlier).
			earlierOf := func(name string, models ...string) provider.Usage {
				if name == "scout" {
					return provider.Usage{}
				}
				return sumOf(before, models...)
			}
			earlierCostOf := func(name string, models ...string) float64 {
				if name == "scout" {
					return 0
				}
				return costOf(t, prices, before, models...)
			}
			subtree := map[string][]string{"janitor": {"janitor-m", "cleaner-m"}, "cleaner": {"cleaner-m"}, "scout": {"scout-m"}}
			for name, models := range subtree {
				u, e, c, ec := wireTotal(nodes[name])
				if want := sumOf(billed, models...); u != tokens(want) || !near(c, costOf(t, prices, billed, models...)) {
					t.Errorf("the viewer shows %s at %+v ($%g), its subtree billed %+v ($%g)", name, u, c, want, costOf(t, prices, billed, models...))
				}
				if want := earlierOf(name, models...); e != tokens(want) || !near(ec, earlierCostOf(name, models...)) {
					t.Errorf("the viewer shows %s's earlier part at %+v ($%g), billed before the question %+v", name, e, ec, want)
				}
			}

			// The Tree, given both runs' events.
			tree := subagent.NewTree(nil)
			for _, f := range append(frames1, frames2...) {
				var w wireEvent
				_ = json.Unmarshal([]byte(f.raw), &w)
				e := f.e
				if len(w.Metadata.Usage) > 0 {
					e.Usage, e.Model = w.Metadata.Usage, w.Metadata.Model
				}
				tree.Emit(e)
			}
			roots := tree.Roots()
			var rootsUsage provider.Usage
			var rootsCost float64
			var check func(ns []*subagent.Node)
			check = func(ns []*subagent.Node) {
				for _, n := range ns {
					models := subtree[n.Name]
					c, _ := n.Cost(nil)
					if want := sumOf(billed, models...); tokens(n.TotalUsage()) != tokens(want) || !near(c, costOf(t, prices, billed, models...)) || n.State != subagent.StateSucceeded {
						t.Errorf("Tree node %s (%s): %+v ($%g), its subtree billed %+v", n.Name, n.State, n.TotalUsage(), c, want)
					}
					if want := earlierOf(n.Name, models...); n.Earlier != tokens(want) {
						t.Errorf("Tree node %s: earlier %+v, billed before the question %+v", n.Name, n.Earlier, want)
					}
					check(n.Children)
				}
			}
			check(roots)
			if len(roots) != 2 || len(roots[0].Children)+len(roots[1].Children) != 1 {
				t.Fatalf("the Tree of both runs has %d roots, want janitor and scout, the cleaner under the janitor", len(roots))
			}
			for _, n := range roots {
				rootsUsage = rootsUsage.Add(n.TotalUsage())
				c, _ := n.Cost(nil)
				rootsCost += c
			}
			if tokens(rootsUsage.Add(billed["lead-m"])) != tokens(all) || !near(rootsCost+costOf(t, prices, billed, "lead-m"), allCost) {
				t.Errorf("the Tree's roots and the lead: %+v ($%g), billed %+v ($%g)", rootsUsage.Add(billed["lead-m"]), rootsCost+costOf(t, prices, billed, "lead-m"), all, allCost)
			}

			// The spans: the chat spans, and the runs' own usage, each
			// sum to what was billed; the last run span of each agent
			// carries its subtree's whole turn and cost.
			var chatIn, chatOut, ownIn, ownOut int64
			last := map[string]map[attribute.Key]attribute.Value{}
			for _, s := range rec.Ended() {
				a := map[attribute.Key]attribute.Value{}
				for _, kv := range s.Attributes() {
					a[kv.Key] = kv.Value
				}
				switch {
				case strings.HasPrefix(s.Name(), "chat"):
					chatIn += a["gen_ai.usage.input_tokens"].AsInt64()
					chatOut += a["gen_ai.usage.output_tokens"].AsInt64()
				case strings.HasPrefix(s.Name(), "invoke_agent "):
					ownIn += a["gen_ai.usage.input_tokens"].AsInt64()
					ownOut += a["gen_ai.usage.output_tokens"].AsInt64()
					last[strings.TrimPrefix(s.Name(), "invoke_agent ")] = a
				}
			}
			if chatIn != all.InputTokens || chatOut != all.OutputTokens || ownIn != all.InputTokens || ownOut != all.OutputTokens {
				t.Errorf("spans: chat %d in %d out, runs' own %d in %d out; billed %+v", chatIn, chatOut, ownIn, ownOut, all)
			}
			subtree["lead"] = nil
			for name, models := range subtree {
				a := last[name]
				want, wantBefore := sumOf(billed, models...), earlierOf(name, models...)
				if a[agent.AttrSubtreeInputTokens].AsInt64() != want.InputTokens || a[agent.AttrSubtreeOutputTokens].AsInt64() != want.OutputTokens ||
					!near(a[agent.AttrCost].AsFloat64(), costOf(t, prices, billed, models...)) {
					t.Errorf("%s's last run span: subtree %d in %d out $%g, its subtree billed %+v", name,
						a[agent.AttrSubtreeInputTokens].AsInt64(), a[agent.AttrSubtreeOutputTokens].AsInt64(), a[agent.AttrCost].AsFloat64(), want)
				}
				if a[agent.AttrEarlierInputTokens].AsInt64() != wantBefore.InputTokens || a[agent.AttrEarlierOutputTokens].AsInt64() != wantBefore.OutputTokens {
					t.Errorf("%s's last run span: earlier %d in %d out, billed before the question %+v", name,
						a[agent.AttrEarlierInputTokens].AsInt64(), a[agent.AttrEarlierOutputTokens].AsInt64(), wantBefore)
				}
			}
		})
	}
}
