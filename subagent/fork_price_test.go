package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// quietModel is an auditModel that names its provider and its default
// model, and names no model in its replies: it bills each reply at the
// model its request names, or at its default.
type quietModel struct {
	*auditModel
	prices *provider.Prices

	mu     sync.Mutex
	billed provider.Usage
	cost   float64
}

func (*quietModel) Name() string  { return "acme" }
func (*quietModel) Model() string { return "acme-small" }

func (q *quietModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, err := q.auditModel.Complete(ctx, req)
	model := req.Model
	if model == "" {
		model = q.Model()
	}
	d, _ := q.prices.Cost(provider.ModelUsage{Provider: "acme", Model: model, Usage: resp.Usage})
	q.mu.Lock()
	defer q.mu.Unlock()
	q.billed = q.billed.Add(resp.Usage)
	q.cost += d
	return resp, err
}

func (q *quietModel) bill() (provider.Usage, float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.billed, q.cost
}

// A context fork asks the model its parent asked (the one whose cache
// holds the prefix), here not its provider's default; the provider names
// no model in its replies. The turn stops for approvals inside the forks
// and resumes: the forks' answers replayed count under the model they
// were paid at, so the whole turn's Output reports what the provider
// billed, in tokens and in money — not the forks' first answers twice
// (once as replayed at the default model, once as paid at the parent's
// and taken for not replayed), whatever ids the model gives its calls.
func TestResumedForkCountsWhatItsModelBilled(t *testing.T) {
	prices := mk(provider.NewPrices(map[string]provider.Price{
		"acme-big":   {Input: 16.0 / (1 << 20), Output: 64.0 / (1 << 20)},
		"acme-small": {Input: 1.0 / (1 << 20), Output: 4.0 / (1 << 20)},
	}))(t)
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			p := &quietModel{auditModel: &auditModel{ids: ids}, prices: prices}
			lookup, del := &counted{name: "lookup"}, &counted{name: "delete"}
			reg := mk(tool.NewRegistry(lookup, tool.RequireApproval(del, "deletes data", 0)))(t)
			sp := mk(subagent.NewSpawner(p, reg, subagent.WithContextForks()))(t)
			if err := reg.Register(sp); err != nil {
				t.Fatal(err)
			}
			lead := mk(agent.NewReact(p, agent.WithName("lead"), agent.WithModel("acme-big"), agent.WithRegistry(reg),
				agent.WithSystemPrompt("You audit sites."), agent.WithPrices(prices)))(t)
			st := newStore(t)
			runTurn := func(ctx context.Context) (agent.Output, error) {
				j := mk(st.Journal(ctx, "turn-1"))(t)
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "audit every site"})
			}
			first, err := runTurn(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 2 {
				t.Fatalf("first run: want two approvals asked, got %v", err)
			}
			if u, cost := p.bill(); first.TotalUsage() != u || first.Cost != cost {
				t.Errorf("the first run reports %+v, $%v; the provider billed %+v, $%v", first.TotalUsage(), first.Cost, u, cost)
			}
			var answers []tool.Answer
			for _, it := range in.Interrupts {
				answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			}
			out, err := runTurn(mk(tool.Resume(context.Background(), in, answers...))(t))
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			if del.runs() != 2 || p.count() != 7 {
				t.Errorf("delete ran %d times, the model answered %d times; want 2 and 7", del.runs(), p.count())
			}
			if u, cost := p.bill(); out.TotalUsage() != u || out.Cost != cost {
				t.Errorf("the last run reports the whole turn at %+v, $%v; the provider billed %+v, $%v", out.TotalUsage(), out.Cost, u, cost)
			}
		})
	}
}
