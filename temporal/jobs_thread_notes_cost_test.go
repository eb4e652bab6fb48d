package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// What a thread's job that ended between turns spent counts in the turn
// told of it, its dollars in RunOutput.Cost as its tokens in ChildUsage:
// the turns report what the model billed, tokens and dollars. (The next
// turn counted the job's tokens but not its cost.)
func TestJobNoteCountsItsCostOnTemporal(t *testing.T) {
	inEachIDMode(t, jobNoteCost)
}

func jobNoteCost(t *testing.T, c client.Client, id func(n int64, i int) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const turn1, turn2, long = "start the search", "what now?", "find the key"
	var n atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		rs := resultsOf(req)
		switch task := firstUserOf(req); {
		case task == long && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: "hold", Arguments: json.RawMessage(`{}`)}), nil
		case task == long:
			return provider.AssistantMessage("the key is under the mat"), nil
		case task == turn1 && len(rs) == 0:
			return provider.AssistantMessage("", provider.ToolCall{ID: id(n.Add(1), 0), Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + long + `","background":true}`)}), nil
		case task == turn2:
			return provider.AssistantMessage("noted"), nil
		}
		return provider.AssistantMessage("started"), nil
	}}
	reg, err := tool.NewRegistry(tool.Must(tool.New("hold", "Holds on.", func(ctx context.Context, _ struct{}) (string, error) {
		once.Do(func() { close(holding) })
		select {
		case <-release:
			return "held", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	price := provider.Price{Input: 1e-5, Output: 3e-5}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("deputy-thread-note-cost-%d", time.Now().UnixNano())
	w := worker.New(c, queue, worker.Options{})
	Register(w, &Runtime{Providers: map[string]provider.Provider{"m": m}, Tools: reg, Prices: prices})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	lead := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Model: "m1", Tools: []string{"hold"}, Spawn: true, Background: true, JobsAcrossTurns: true}}
	tctx := agent.WithOwner(agent.WithThread(ctx, "thread-"+queue), "cy")
	out1, err := lead.Run(tctx, agent.Input{Text: turn1})
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	close(release) // the turn has ended: the job ends between turns
	for {
		d, err := describe(ctx, c, ThreadWorkflowID("cy", "thread-"+queue)+"/job_1")
		if err == nil && d.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not end between turns: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rec recorder
	out2, err := lead.Run(event.WithSink(tctx, &rec), agent.Input{Text: turn2})
	if err != nil {
		t.Fatal(err)
	}
	// The second turn reports the job's spend under the model that
	// answered it, not in an entry without a model.
	var finished []provider.ModelUsage
	for _, e := range rec.events {
		if e.Type == event.RunFinished {
			finished, _, _ = ledger.Decode(e.Usage)
		}
	}
	var sum provider.Usage
	for _, mu := range finished {
		sum = sum.Add(mu.Usage)
		if mu.Model == "" {
			t.Errorf("the second turn's RUN_FINISHED has an entry without a model: %+v", finished)
		}
	}
	total := out2.TotalUsage()
	total.Requests = 0 // (the event's usage does not count requests)
	if sum != total || len(finished) == 0 {
		t.Errorf("the second turn's RUN_FINISHED lists %+v, summing to %+v; the turn reported %+v", finished, sum, out2.TotalUsage())
	}
	calls, billed := m.total()
	spent, cost := out1.TotalUsage().Add(out2.TotalUsage()), out1.Cost+out2.Cost
	if calls != 5 || spent != billed || math.Abs(cost-price.Cost(billed)) > 1e-12 {
		t.Errorf("%d model calls billing %+v for $%g; the turns reported %+v for $%g ($%g and $%g); want 5 (2 the first turn's, 2 the job's, 1 the second's), each counted once in tokens and dollars",
			calls, billed, price.Cost(billed), spent, cost, out1.Cost, out2.Cost)
	}
}
