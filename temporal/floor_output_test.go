package temporal

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

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
	rest = float64(2*shareFloor(calls)+20) * floorIn
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

// runInputOf reads the input a workflow was started with.
func runInputOf(ctx context.Context, t *testing.T, c client.Client, id string) RunInput {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		t.Fatalf("workflow %s has no history", id)
	}
	e, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	var in RunInput
	if err := converter.GetDefaultDataConverter().FromPayloads(e.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// A lead on Temporal under a cost limit whose model's output token costs
// more than what would be left of its reply's part once two children got
// the floor (what reading a child's "not started" line costs) gives each
// child its even share, as in process, and not the floor: the floor is
// given only while what is left after it pays for a token of the lead's
// reply. (The floor was given whenever anything was left, and the lead
// kept back 20 µ$ of a reply whose every token costs 40 µ$.) The tree
// spends within its limit, its children, too small to start, call no
// model, and the lead answers from its wrap-up. With models that name
// their calls afresh, not at all, and from call_0.
func TestShareFloorPaysAnOutputTokenOnTemporal(t *testing.T) {
	const in, out = floorIn, floorOut
	prices := floorPrices(t)
	inEachIDMode(t, func(t *testing.T, _ client.Client, id func(n int64, i int) string) {
		spec, calls, m, rest := floorTree(id)
		limit := spec.CostLimit
		floor := shareFloor(calls)
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
		for i := range calls {
			got := runInputOf(ctx, t, c, fmt.Sprintf("%s/0.%d-%s", leadID, i, SpawnToolName)).Spec.CostLimit
			if want := rest / 3; math.Abs(got-want) > 1e-12 {
				t.Errorf("child %d was given $%.8f, want its even share $%.8f, not the floor $%.8f: the $%.8f left after two floors pays for no output token at $%.8f",
					i, got, want, float64(floor)*in, rest-2*float64(floor)*in, out)
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
