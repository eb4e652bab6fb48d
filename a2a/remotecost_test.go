package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// pricedRemote serves, over HTTP, a deputy agent priced at prices whose
// model bills 40 in and 4 out tokens to "remote-m" on each call (and
// first calls tools, when given), and returns a Remote connected to it.
func pricedRemote(t *testing.T, bill *billed, prices *provider.Prices, id func(int64) string, tools ...tool.Tool) *a2a.Remote {
	t.Helper()
	var n atomic.Int64
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Definition().Name)
	}
	build := func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(billingModel(bill, id, &n, "remote-m", 40, 4, names...), agent.WithName("payer"),
			agent.WithPrices(prices), agent.WithTools(tools...))
	}
	srv, err := a2a.NewPerTask(build, a2a.WithName("payer"), a2a.WithDescription("Pays."))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	remote, err := a2a.Connect(context.Background(), hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	return remote
}

// A priced lead that delegates to a priced deputy remote counts in its
// cost what the remote reports its task cost (the remote's own figure:
// the lead has no price for the remote's models, which it does not see),
// once, in its run's cost and under its cost limit; whatever ids either
// side's model gives its calls.
func TestRemoteCostCountsInTheLeads(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"lead-m": {Input: 3e-6, Output: 15e-6}})
	if err != nil {
		t.Fatal(err)
	}
	remotePrices, err := provider.NewPrices(map[string]provider.Price{"remote-m": {Input: 0.1, Output: 0.4}})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*b }
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			var leadBill, remoteBill billed
			payer, err := pricedRemote(t, &remoteBill, remotePrices, mode.id).Tool()
			if err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			lead, err := agent.NewReact(billingModel(&leadBill, mode.id, &n, "lead-m", 100, 10, payer.Definition().Name),
				agent.WithName("lead"), agent.WithTools(payer), agent.WithPrices(prices))
			if err != nil {
				t.Fatal(err)
			}
			out, err := journaledRun(t, lead, "pay")(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, own := leadBill.total(t, prices)
			remoteUsage, remote := remoteBill.total(t, remotePrices)
			if remoteUsage.Requests != 1 || remote == 0 {
				t.Fatalf("the remote billed %+v, $%g: want one priced call", remoteUsage, remote)
			}
			if !near(out.Cost, own+remote) {
				t.Errorf("the lead's cost $%g, want its own $%g and the remote's $%g: $%g", out.Cost, own, remote, own+remote)
			}
			if out.ChildUsage != remoteUsage {
				t.Errorf("the lead's child usage %+v, want the remote's %+v", out.ChildUsage, remoteUsage)
			}

			// Under a cost limit its own calls fit in but the remote's
			// task does not, the lead stops at it.
			// (The lead keeps room for a reply of its model's most tokens.)
			limit := 1.0
			if remote <= limit {
				t.Fatalf("the remote's $%g fits in the limit", remote)
			}
			var limitedBill billed
			payer2, err := pricedRemote(t, &limitedBill, remotePrices, mode.id).Tool()
			if err != nil {
				t.Fatal(err)
			}
			limited, err := agent.NewReact(billingModel(&leadBill, mode.id, &n, "lead-m", 100, 10, payer2.Definition().Name),
				agent.WithName("lead"), agent.WithTools(payer2), agent.WithPrices(prices), agent.WithCostLimit(limit))
			if err != nil {
				t.Fatal(err)
			}
			out, err = limited.Run(context.Background(), agent.Input{Text: "pay"})
			if !errors.Is(err, agent.ErrUsageLimit) && !out.Partial {
				t.Errorf("under a cost limit of $%g the lead ended with %v (partial %v, cost $%g), want the remote's $%g counted past it", limit, err, out.Partial, out.Cost, remote)
			}
		})
	}
}

// A priced remote that asks for approval and is resumed counts in the
// lead's cost once: the first run's cost holds the lead's first call and
// the remote task's first round, and the resumed run reports the whole
// turn, the lead's calls and the task's, with the first run's cost as its
// earlier part; whatever ids either side's model gives its calls.
func TestResumedRemoteCostCountsOnce(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"lead-m": {Input: 3e-6, Output: 15e-6}})
	if err != nil {
		t.Fatal(err)
	}
	remotePrices, err := provider.NewPrices(map[string]provider.Price{"remote-m": {Input: 1e-3, Output: 4e-3}})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*b }
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			var leadBill, remoteBill billed
			var transfers atomic.Int64
			transfer := tool.RequireApproval(tool.Must(tool.New("transfer", "Moves money.", func(ctx context.Context, in struct {
				Task string `json:"task"`
			}) (string, error) {
				transfers.Add(1)
				return "moved", nil
			})), "moves money", 0)
			payer, err := pricedRemote(t, &remoteBill, remotePrices, mode.id, transfer).Tool()
			if err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			lead, err := agent.NewReact(billingModel(&leadBill, mode.id, &n, "lead-m", 100, 10, payer.Definition().Name),
				agent.WithName("lead"), agent.WithTools(payer), agent.WithPrices(prices))
			if err != nil {
				t.Fatal(err)
			}
			run := journaledRun(t, lead, "pay")
			out1, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("first run: %v, want one question", err)
			}
			_, own1 := leadBill.total(t, prices)
			_, remote1 := remoteBill.total(t, remotePrices)
			if !near(out1.Cost, own1+remote1) {
				t.Errorf("the first run's cost $%g, want the lead's $%g and the remote's $%g", out1.Cost, own1, remote1)
			}
			rctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out2, err := run(rctx)
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			_, own := leadBill.total(t, prices)
			remoteUsage, remote := remoteBill.total(t, remotePrices)
			if transfers.Load() != 1 || remoteUsage.Requests != 2 {
				t.Fatalf("%d transfers and %d remote model calls, want 1 and 2", transfers.Load(), remoteUsage.Requests)
			}
			if !near(out2.Cost, own+remote) {
				t.Errorf("the resumed run's cost $%g, want the turn's: the lead's $%g and the remote's $%g", out2.Cost, own, remote)
			}
			if !near(out2.EarlierCost, out1.Cost) {
				t.Errorf("the resumed run's earlier cost $%g, want the first run's $%g", out2.EarlierCost, out1.Cost)
			}
			if out2.ChildUsage != remoteUsage {
				t.Errorf("the resumed run's child usage %+v, want the remote's %+v", out2.ChildUsage, remoteUsage)
			}
		})
	}
}

// RUN_FINISHED of a priced lead that delegated to a priced deputy remote
// gives, in its usage by model, the remote's cost beside the lead's: the
// entries' costUsd add up to both, and its tokens to both models' once.
func TestRemoteCostInRunFinished(t *testing.T) {
	prices, err := provider.NewPrices(map[string]provider.Price{"lead-m": {Input: 3e-6, Output: 15e-6}})
	if err != nil {
		t.Fatal(err)
	}
	remotePrices, err := provider.NewPrices(map[string]provider.Price{"remote-m": {Input: 1e-3, Output: 4e-3}})
	if err != nil {
		t.Fatal(err)
	}
	var leadBill, remoteBill billed
	payer, err := pricedRemote(t, &remoteBill, remotePrices, idModes[0].id).Tool()
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	lead, err := agent.NewReact(billingModel(&leadBill, idModes[0].id, &n, "lead-m", 100, 10, payer.Definition().Name),
		agent.WithName("lead"), agent.WithTools(payer), agent.WithPrices(prices))
	if err != nil {
		t.Fatal(err)
	}
	h, err := agui.New(lead)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	body := `{"threadId":"th","runId":"r1","messages":[{"id":"u1","role":"user","content":"pay"}]}`
	req, err := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var finished *event.Event
	for _, frame := range strings.Split(string(raw), "\n\n") {
		data, ok := strings.CutPrefix(frame, "data: ")
		var e event.Event
		if ok && json.Unmarshal([]byte(data), &e) == nil && e.Type == event.RunFinished {
			finished = &e
		}
	}
	if finished == nil {
		t.Fatalf("no RUN_FINISHED in %s", raw)
	}
	var entries []struct {
		Total int64   `json:"totalTokens"`
		Cost  float64 `json:"costUsd"`
	}
	if err := json.Unmarshal(finished.Usage, &entries); err != nil {
		t.Fatalf("usage %s: %v", finished.Usage, err)
	}
	var tokens int64
	var dollars float64
	for _, e := range entries {
		tokens, dollars = tokens+e.Total, dollars+e.Cost
	}
	ownUsage, own := leadBill.total(t, prices)
	remoteUsage, remote := remoteBill.total(t, remotePrices)
	if tokens != ownUsage.Tokens()+remoteUsage.Tokens() || math.Abs(dollars-(own+remote)) > 1e-12*(own+remote) {
		t.Errorf("RUN_FINISHED usage %s: want %d tokens and $%g, the lead's and the remote's", finished.Usage, ownUsage.Tokens()+remoteUsage.Tokens(), own+remote)
	}
}
