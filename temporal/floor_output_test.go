package temporal

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/provider"
)

// billedModel is model "m1" of provider "pp", whose replies come from
// fn with the usage fn says they billed; it counts its calls and what
// they billed.
type billedModel struct {
	fn     func(req provider.Request) (provider.Message, provider.Usage)
	mu     sync.Mutex
	calls  int
	billed provider.Usage
}

func (m *billedModel) Name() string { return "pp" }

func (m *billedModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	msg, u := m.fn(req)
	u.Requests = 1
	m.mu.Lock()
	m.calls++
	m.billed = m.billed.Add(u)
	m.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: "m1", StopReason: provider.StopEndTurn}, nil
}

// The prices of floorTree's model, in dollars a token.
const floorIn, floorOut = 1e-6, 40e-6

func floorPrices(t *testing.T) *provider.Prices {
	t.Helper()
	prices, err := provider.NewPrices(map[string]provider.Price{"pp/m1": {Input: floorIn, Output: floorOut}})
	if err != nil {
		t.Fatal(err)
	}
	return prices
}

// floorTree is a lead under a cost limit, at floorPrices, that spawns two
// children whose calls id names, and then answers from its wrap-up: what
// its first call leaves (rest) is two floors and 20 µ$, less than an
// output token. Its first call reads 1,000 tokens and writes 300; what
// it keeps back for its next call is those and its wrap-up note.
func floorTree(id func(n int64, i int) string) (spec Spec, calls []provider.ToolCall, m *billedModel, rest float64) {
	spec = Spec{Name: "lead", Provider: "pp", Model: "m1", Spawn: true}
	calls = spawnCalls(2).ToolCalls
	for i := range calls {
		calls[i].ID = id(int64(i+1), i)
	}
	const in1, out1 = 1000, 300
	rest = float64(2*shareFloor(calls, len(unstartedLine))+20) * floorIn
	spec.CostLimit = in1*floorIn + out1*floorOut + float64(in1+out1+wrapUpNoteTokens(spec))*floorIn + rest
	m = &billedModel{fn: func(req provider.Request) (provider.Message, provider.Usage) {
		if len(req.Messages) == 1 {
			return provider.AssistantMessage("", calls...), provider.Usage{InputTokens: in1, OutputTokens: out1}
		}
		// The wrap-up: what it reads, as estimated, and one token.
		return provider.AssistantMessage("Not written."), provider.Usage{InputTokens: int64(requestBytes(req)+3) / 4, OutputTokens: 1}
	}}
	return spec, calls, m, rest
}

// A lead on Temporal under a cost limit whose model's output token costs
// more than what would be left of its reply's part once two children got
// the floor (what reading a child's "not started" line costs) does not
// run them, as in process: it cannot pay to read their results (a
// workflow started before deputy.unpaid-calls gives each its even share,
// and not the floor, which was given whenever anything was left, the
// lead keeping back 20 µ$ of a reply whose every token costs 40 µ$). The tree
// spends within its limit, its children, too small to start, call no
// model, and the lead answers from its wrap-up. With models that name
// their calls afresh, not at all, and from call_0.
func TestShareFloorPaysAnOutputTokenOnTemporal(t *testing.T) {
	const in, out = floorIn, floorOut
	prices := floorPrices(t)
	inEachIDMode(t, func(t *testing.T, _ client.Client, id func(n int64, i int) string) {
		spec, calls, m, rest := floorTree(id)
		limit := spec.CostLimit
		floor := shareFloor(calls, len(unstartedLine))
		ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"pp": m}, Prices: prices})
		leadID := fmt.Sprintf("floor-%s-%d", queue, len(calls))
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: leadID, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: "split the work in two"})
		if err != nil {
			t.Fatal(err)
		}
		var o RunOutput
		if err := run.Get(ctx, &o); err != nil {
			t.Fatalf("the lead ended with %v, want its answer", err)
		}
		// From deputy.unpaid-calls on, calls whose results what is left
		// cannot pay to read (a floor each, after a token of the reply)
		// are not run: the lead reads that they were not. (The even share
		// is what a workflow started before it gives: floor-output.json.)
		for _, msg := range o.Messages {
			if msg.Role == provider.RoleTool && msg.Content != unpaidResult {
				t.Errorf("a child's result is %q, want %q: the $%.8f left after two floors pays for no output token at $%.8f", msg.Content, unpaidResult, rest-2*float64(floor)*in, out)
			}
		}
		m.mu.Lock()
		n, billed := m.calls, m.billed
		m.mu.Unlock()
		if o.Answer != "Not written." || n != 2 {
			t.Errorf("the lead answered %q in a tree of %d model calls, want its wrap-up in its two calls, none by the children", o.Answer, n)
		}
		if o.TotalUsage() != billed {
			t.Errorf("the run reports %+v, the model billed %+v", o.TotalUsage(), billed)
		}
		if cost, _ := prices.Cost(provider.ModelUsage{Provider: "pp", Model: "m1", Usage: billed}); cost > limit+1e-12 || math.Abs(o.Cost-cost) > 1e-12 {
			t.Errorf("the tree cost $%.8f and reports $%.8f under a limit of $%.8f", cost, o.Cost, limit)
		}
	})
}
