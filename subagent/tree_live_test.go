package subagent_test

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// liveModel is a lead that starts a background job and then waits (for
// checked) before it answers, and a fork that calls dig, which waits,
// and then answers. It bills what it answers.
type liveModel struct {
	mu      sync.Mutex
	billed  provider.Usage // the fork's
	checked chan struct{}
	id      func(n int64, i int) string
	n       int64
}

func (m *liveModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.n++
	id := m.id(m.n, 0)
	m.mu.Unlock()
	u := provider.Usage{InputTokens: 7 * int64(len(req.Messages)), OutputTokens: 3, Requests: 1}
	call := func(name, args string) provider.Response {
		return provider.Response{Model: "m", Message: provider.AssistantMessage("", provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}), Usage: u}
	}
	if isFork(req) {
		m.mu.Lock()
		m.billed = m.billed.Add(u)
		m.mu.Unlock()
		if len(toolResults(req.Messages)) == 0 {
			return call("dig", `{}`), nil
		}
		return provider.Response{Model: "m", Message: provider.AssistantMessage("found gold"), Usage: u}, nil
	}
	if len(toolResults(req.Messages)) == 0 {
		return call(subagent.SpawnToolName, `{"task":"dig","background":true}`), nil
	}
	select {
	case <-m.checked:
	case <-ctx.Done():
		return provider.Response{}, ctx.Err()
	}
	return provider.Response{Model: "m", Message: provider.AssistantMessage("ok"), Usage: u}, nil
}

// A running job's node in a Tree shows what the job has spent so far, as
// each of its model calls ends, not only once it ends: the same tokens
// and dollars as the job's status, and as the model billed for the job
// by then. (The node showed nothing until the job's end.) In the three
// id modes.
func TestTreeShowsARunningJobsUsage(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &liveModel{checked: make(chan struct{}), id: mode.id}
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			dig := tool.Func{Def: tool.Definition{Name: "dig", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					once.Do(func() { close(entered) })
					select {
					case <-release:
						return tool.Result{Content: "dug"}, nil
					case <-ctx.Done():
						return tool.Result{}, ctx.Err()
					}
				}}
			price := provider.Price{Input: 0.001, Output: 0.002}
			prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
			if err != nil {
				t.Fatal(err)
			}
			reg, s := setup(t, m, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, dig)
			defer s.Close()
			a := lead(t, m, reg, agent.WithPrices(prices))
			ctx := agent.WithThread(t.Context(), "t1")
			tree := subagent.NewTree(nil)
			done := make(chan error, 1)
			go func() {
				_, err := a.Run(event.WithSink(ctx, tree), agent.Input{Text: "start"})
				done <- err
			}()
			<-entered // the fork's first call has ended; its tool waits
			m.mu.Lock()
			billed := m.billed
			m.mu.Unlock()
			var node *subagent.Node
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if roots := tree.Roots(); len(roots) == 1 {
					node = roots[0]
				}
				if node != nil && node.TotalUsage().Tokens() == billed.Tokens() || time.Now().After(deadline) {
					break
				}
			}
			st := s.Jobs(ctx).List()
			if len(st) != 1 || st[0].State != subagent.JobRunning {
				t.Fatalf("the thread's jobs are %+v, want one running", st)
			}
			if node == nil || node.State != subagent.StateRunning {
				t.Fatalf("the tree holds %+v, want the job's node, running", node)
			}
			got := node.TotalUsage()
			dollars, _ := node.Cost(nil)
			if got.InputTokens != billed.InputTokens || got.OutputTokens != billed.OutputTokens || math.Abs(dollars-price.Cost(billed)) > 1e-12 {
				t.Errorf("the running job's node shows %+v, $%.6f; the model billed the job %+v, $%.6f", got, dollars, billed, price.Cost(billed))
			}
			if st[0].Usage != billed || math.Abs(st[0].Cost-price.Cost(billed)) > 1e-12 {
				t.Errorf("the job's status says %+v, $%.6f; the model billed it %+v, $%.6f", st[0].Usage, st[0].Cost, billed, price.Cost(billed))
			}
			close(m.checked)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			close(release)
			if _, err := s.Jobs(ctx).Wait(t.Context(), subagent.WaitFor{Timeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
