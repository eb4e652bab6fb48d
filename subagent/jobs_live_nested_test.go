package subagent_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
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

// nestedLiveModel is a lead that starts a background job ("dig") and
// calls "hold"; the job (a fork) starts a background job of its own
// ("deeper"), and once that one's first model call has ended, calls
// "park"; the job's job calls "dig2". It bills each by what it answers.
type nestedLiveModel struct {
	mu           sync.Mutex
	billed       provider.Usage // the job's and its job's
	deeperCalled chan struct{}  // closed when the job's job's first call ends
	once         sync.Once
	id           func(n int64, i int) string
	n            int64
}

func (m *nestedLiveModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.n++
	id := m.id(m.n, 0)
	m.mu.Unlock()
	u := provider.Usage{InputTokens: 7 * int64(len(req.Messages)), OutputTokens: 3, Requests: 1}
	call := func(name, args string) provider.Response {
		return provider.Response{Model: "m", Message: provider.AssistantMessage("", provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}), Usage: u}
	}
	results := toolResults(req.Messages)
	bill := func() {
		m.mu.Lock()
		m.billed = m.billed.Add(u)
		m.mu.Unlock()
	}
	switch {
	case isFork(req) && strings.Contains(req.Messages[0].Content, "deeper"):
		bill()
		defer m.once.Do(func() { close(m.deeperCalled) })
		if len(results) == 0 {
			return call("dig2", `{}`), nil
		}
		return provider.Response{Model: "m", Message: provider.AssistantMessage("deep"), Usage: u}, nil
	case isFork(req):
		switch len(results) {
		case 0:
			bill()
			return call(subagent.SpawnToolName, `{"task":"deeper","background":true}`), nil
		case 1:
			select { // its next step begins once its job has spent
			case <-m.deeperCalled:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
			bill()
			return call("park", `{}`), nil
		}
		bill()
		return provider.Response{Model: "m", Message: provider.AssistantMessage("dug"), Usage: u}, nil
	}
	switch len(results) {
	case 0:
		return call(subagent.SpawnToolName, `{"task":"dig","background":true}`), nil
	case 1:
		return call("hold", `{}`), nil
	}
	return provider.Response{Model: "m", Message: provider.AssistantMessage("ok"), Usage: u}, nil
}

// A job whose own background job runs says, in its status and its node in
// a Tree, what that job has spent so far, tokens as well as dollars:
// both are what the model billed the two of them, though the job parks
// as soon as its job's call returns, before that call is counted. (The
// status counted the running job's dollars but not its tokens, and then
// what had been counted at the job's last step only.) In the three id
// modes.
func TestJobsStatusCountsItsRunningJobsTokens(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &nestedLiveModel{deeperCalled: make(chan struct{}), id: mode.id}
			release := make(chan struct{})
			wait := func(ctx context.Context) (tool.Result, error) {
				select {
				case <-release:
					return tool.Result{Content: "done"}, nil
				case <-ctx.Done():
					return tool.Result{}, ctx.Err()
				}
			}
			var park, dig2 tool.Tool
			park = tool.Func{Def: tool.Definition{Name: "park", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) { return wait(ctx) }}
			dig2 = tool.Func{Def: tool.Definition{Name: "dig2", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) { return wait(ctx) }}
			holding := make(chan context.Context, 1)
			hold := tool.Func{Def: tool.Definition{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					holding <- ctx
					return wait(ctx)
				}}
			price := provider.Price{Input: 0.001, Output: 0.002}
			prices, err := provider.NewPrices(map[string]provider.Price{"m": price})
			if err != nil {
				t.Fatal(err)
			}
			reg, s := setup(t, m, true, []subagent.SpawnOption{subagent.WithBackground(), subagent.WithMaxDepth(2)}, park, dig2, hold)
			a := lead(t, m, reg, agent.WithPrices(prices))
			tree := subagent.NewTree(nil)
			done := make(chan error, 1)
			go func() {
				_, err := a.Run(event.WithSink(t.Context(), tree), agent.Input{Text: "start"})
				done <- err
			}()
			defer func() {
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}()
			var rctx context.Context
			select {
			case rctx = <-holding:
			case <-time.After(10 * time.Second):
				t.Fatal("the lead never held")
			}
			jobs := s.Jobs(rctx)
			// What the model billed and what the status says are read
			// again until they agree (the job and its own job keep
			// calling the model until both park): on the old code the
			// status never counted the running grandchild's tokens.
			billedNow := func() provider.Usage {
				m.mu.Lock()
				defer m.mu.Unlock()
				return m.billed
			}
			var st subagent.JobStatus
			var billed provider.Usage
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				billed = billedNow()
				if l := jobs.List(); len(l) == 1 {
					st = l[0]
				}
				if st.Step >= 2 && st.Usage == billed && billed == billedNow() || time.Now().After(deadline) {
					break // the job's second answer is counted: it parks
				}
			}
			if st.State != subagent.JobRunning || st.Step < 2 {
				t.Fatalf("the job is %+v, want it running at its second step", st)
			}
			if st.Usage != billed || math.Abs(st.Cost-price.Cost(billed)) > 1e-12 {
				t.Errorf("the job's status says %+v, $%.6f; the model billed it and its job %+v, $%.6f", st.Usage, st.Cost, billed, price.Cost(billed))
			}
			var node *subagent.Node
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				billed = billedNow()
				if roots := tree.Roots(); len(roots) == 1 {
					node = roots[0]
				}
				if node != nil && node.TotalUsage().Tokens() == billed.Tokens() || time.Now().After(deadline) {
					break
				}
			}
			got := node.TotalUsage()
			dollars, _ := node.Cost(nil)
			if got.InputTokens != billed.InputTokens || got.OutputTokens != billed.OutputTokens || math.Abs(dollars-price.Cost(billed)) > 1e-12 {
				t.Errorf("the job's node shows %+v, $%.6f; the model billed it and its job %+v, $%.6f", got, dollars, billed, price.Cost(billed))
			}
		})
	}
}
