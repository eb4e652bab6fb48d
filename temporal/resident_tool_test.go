package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

// An agent in process consults a resident on Temporal through
// ResidentTool: the workers' policy checks the hand-off at the calling
// agent's path and the resident's run one level below it; the lead's
// Output counts what the resident's model billed; and a journaled turn
// that stops to ask a person after the consultation, resumed, does not ask
// the resident again, counts its spend once (as the earlier runs' part),
// and runs the approved call once — whatever ids the lead's model gives
// its calls.
func TestResidentToolNamesItsCallerAndCountsItsSpend(t *testing.T) {
	inEachIDMode(t, func(t *testing.T, c client.Client, id func(n int64, i int) string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n := new(atomic.Int64)
		expert := &steps{name: "expert", id: id, n: n, steps: [][][2]string{{{"search", `{"q":"{task}"}`}}}}
		tools := &countedTools{args: map[string][]string{}}
		reg, err := tool.NewRegistry(tools.tool(t, "search"))
		if err != nil {
			t.Fatal(err)
		}
		w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}, paths: map[string]bool{}}
		pol, err := policy.New(w)
		if err != nil {
			t.Fatal(err)
		}
		queue := fmt.Sprintf("deputy-resident-tool-%d", time.Now().UnixNano())
		wk := worker.New(c, queue, worker.Options{})
		prices, err := provider.NewPrices(map[string]provider.Price{"m1": {Input: 1e-3, Output: 2e-3}})
		if err != nil {
			t.Fatal(err)
		}
		Register(wk, &Runtime{Providers: map[string]provider.Provider{"m": expert}, Tools: reg, Policy: pol, Prices: prices})
		if err := wk.Start(); err != nil {
			t.Fatal(err)
		}
		defer wk.Stop()
		res, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "resident-" + queue, TaskQueue: queue}, ResidentWorkflowName,
			ResidentInput{Spec: Spec{Name: "expert", Provider: "m", Tools: []string{"search"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.SignalWorkflow(context.Background(), res.GetID(), "", CloseSignal, nil) }()

		ask, err := ResidentTool(c, res.GetID(), "expert", "Consults the expert, who remembers earlier questions.")
		if err != nil {
			t.Fatal(err)
		}
		publish := tool.RequireApproval(tools.tool(t, "publish"), "publishing needs a person", 0)
		lead := &steps{name: "lead", id: id, n: n, steps: [][][2]string{{{"expert", `{"task":"{task}"}`}}, {{"publish", `{}`}}}}
		a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(ask, publish))
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(memory.New())
		if err != nil {
			t.Fatal(err)
		}
		j, err := st.Journal(ctx, "turn")
		if err != nil {
			t.Fatal(err)
		}
		first, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "what does the ledger say"})
		var in *tool.Interrupted
		if !errors.As(err, &in) || len(in.Interrupts) != 1 {
			t.Fatalf("the first run ended %v, want it to ask about publishing", err)
		}
		rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := a.Run(agent.WithJournal(rctx, j), agent.Input{Text: "what does the ledger say"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.Answer, "expert(search done)") || tools.runs("publish") != 1 {
			t.Errorf("the lead answered %q and published %d times, want the expert's answer and one publish", out.Answer, tools.runs("publish"))
		}
		expertRequests, _ := expert.sent("")
		leadRequests, _ := lead.sent("")
		if expertRequests != 2 || tools.runs("search") != 1 {
			t.Errorf("the resident's model was asked %d times and search ran %d times, want 2 and 1: the resumed turn asked the resident again", expertRequests, tools.runs("search"))
		}
		// Each request bills 10 tokens in and 2 out.
		billed := provider.Usage{InputTokens: 10 * int64(expertRequests+leadRequests), OutputTokens: 2 * int64(expertRequests+leadRequests)}
		if got := out.TotalUsage(); got.InputTokens != billed.InputTokens || got.OutputTokens != billed.OutputTokens {
			t.Errorf("the turn reports %+v, the models billed %+v (the lead %d requests, the expert %d)", got, billed, leadRequests, expertRequests)
		}
		// The workers price the expert's requests at 10 tokens in and 2
		// out, the lead's model is unpriced: the turn costs what the
		// expert's did, all of it spent before the resume.
		if cost := 0.014 * float64(expertRequests); math.Abs(out.Cost-cost) > 1e-9 || math.Abs(out.EarlierCost-cost) > 1e-9 {
			t.Errorf("the turn reports it cost $%g ($%g of it earlier), the resident's model was billed $%g", out.Cost, out.EarlierCost, cost)
		}
		if got := first.TotalUsage(); got.InputTokens != 10*int64(expertRequests+2) {
			t.Errorf("the first run reports %+v, want the expert's %d requests and its own two, the second asking to publish", got, expertRequests)
		}
		if e := out.Earlier; e.InputTokens != 10*int64(expertRequests+2) {
			t.Errorf("the resumed run says its earlier runs spent %+v, want the first run's, the expert's included", e)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, want := range []string{"delegation expert@lead", "tool search@lead/expert", "model @lead/expert", "result expert@lead"} {
			if !w.paths[want] {
				t.Errorf("no check %q; the checks were %v", want, w.paths)
			}
		}
	})
}
