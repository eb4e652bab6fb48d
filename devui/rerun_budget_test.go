package devui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// budgetTurn is a thread whose lead works under a limit until it runs
// out: at its first step it hands tasks a and b to helpers, at each step
// after it one more task; each helper does up to five steps of work (a
// tool call each) before it answers. Its models bill a token per four
// bytes, as the estimate counts them (the documented bound then adds
// nothing), at $0.001 a token, and never write past a request's output
// bound. It records what each model call billed, by who made it and at
// which of its steps, and how many times each step of work ran.
type budgetTurn struct {
	mu     sync.Mutex
	billed map[string]int64 // "lead/2", "helper a/3": tokens
	work   map[string]int   // "a/2": times run
	total  int64            // tokens billed
	n      atomic.Int64
}

// bounded is msg as a model that stops at req's output bound writes it.
func bounded(req provider.Request, msg provider.Message) (provider.Message, provider.StopReason) {
	if req.MaxTokens <= 0 || fake.Usage(req, msg).OutputTokens <= int64(req.MaxTokens) {
		return msg, provider.StopEndTurn
	}
	text := msg.Content + strings.Repeat(".", 4*req.MaxTokens)
	return provider.AssistantMessage(text[:4*req.MaxTokens]), provider.StopMaxTokens
}

func (b *budgetTurn) bill(who string, req provider.Request, msg provider.Message, model string) provider.Response {
	msg, stop := bounded(req, msg)
	u := fake.Usage(req, msg)
	b.mu.Lock()
	b.billed[who] += u.Tokens()
	b.total += u.Tokens()
	b.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, Model: model, StopReason: stop}
}

// sum is what the keys billed.
func (b *budgetTurn) sum(keys ...string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, k := range keys {
		n += b.billed[k]
	}
	return n
}

func steps(req provider.Request) int {
	n := 1
	for _, m := range req.Messages {
		if m.Role == provider.RoleAssistant {
			n++
		}
	}
	return n
}

func (b *budgetTurn) agent(ids string, limit []agent.Option) agui.Builder {
	id := func(i int) string {
		switch ids {
		case "afresh":
			return fmt.Sprintf("call_%d", b.n.Add(1))
		case "restarting":
			return fmt.Sprintf("call_%d", i)
		}
		return ""
	}
	lead := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		k := steps(req)
		msg := provider.AssistantMessage("Done as far as the budget went.")
		if len(req.Tools) > 0 {
			calls := []provider.ToolCall{{ID: id(0), Name: "helper", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"s%d"}`, k))}}
			if k == 1 {
				calls = []provider.ToolCall{
					{ID: id(0), Name: "helper", Arguments: json.RawMessage(`{"task":"a"}`)},
					{ID: id(1), Name: "helper", Arguments: json.RawMessage(`{"task":"b"}`)},
				}
			}
			msg = provider.AssistantMessage("Handing it on.", calls...)
		}
		return b.bill(fmt.Sprintf("lead/%d", k), req, msg, "lead-m"), nil
	})
	helperModel := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		j := steps(req)
		msg := provider.AssistantMessage("Did " + task + ".")
		if len(req.Tools) > 0 && j <= 5 {
			msg = provider.AssistantMessage("Working.", provider.ToolCall{ID: id(0), Name: "work", Arguments: json.RawMessage(fmt.Sprintf(`{"t":%q,"n":%d}`, task, j))})
		}
		return b.bill(fmt.Sprintf("helper %s/%d", task, j), req, msg, "helper-m"), nil
	})
	work := tool.Must(tool.New("work", "Does a step of work.", func(ctx context.Context, in struct {
		T string `json:"t"`
		N int    `json:"n"`
	}) (string, error) {
		b.mu.Lock()
		b.work[fmt.Sprintf("%s/%d", in.T, in.N)]++
		b.mu.Unlock()
		return "worked", nil
	}))
	prices, _ := provider.NewPrices(map[string]provider.Price{"lead-m": {Input: 1e-3, Output: 1e-3}, "helper-m": {Input: 1e-3, Output: 1e-3}})
	return func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		helper, err := subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(helperModel, agent.WithName("helper"), agent.WithModel("helper-m"), agent.WithTools(work))
		})
		if err != nil {
			return nil, err
		}
		return agent.NewReact(lead, append([]agent.Option{agent.WithName("lead"), agent.WithModel("lead-m"), agent.WithPrices(prices),
			agent.WithTools(helper), agent.WithMaxSteps(40)}, limit...)...)
	}
}

// TestRerunKeepsTheTurnsLimits re-runs, from the viewer's API, a turn
// that spent its whole limit (3,000 tokens, or $3 at $0.001 a token): from
// the lead's first call, its task edited, and from the third step of work
// of the helper that call started, its answer edited. The re-run goes on
// from what the turn had spent before that point, so that the turn — its
// part kept and the re-run — spends no more than its limit (its models'
// counts match the estimate: the documented bound adds nothing); before,
// the lead's limit started afresh and a helper re-run from inside had
// none. What the re-run's models billed is its RUN_FINISHED's usage, in
// tokens and dollars; no kept step of work runs again.
func TestRerunKeepsTheTurnsLimits(t *testing.T) {
	const limit = 3000
	for _, lim := range []struct {
		name string
		opts []agent.Option
	}{
		{"3,000 tokens", []agent.Option{agent.WithTokenLimit(limit)}},
		{"$3", []agent.Option{agent.WithCostLimit(limit * 1e-3)}},
	} {
		for _, ids := range []string{"afresh", "none", "restarting"} {
			for _, from := range []string{"lead", "helper"} {
				t.Run(lim.name+"/"+ids+"/"+from, func(t *testing.T) {
					rerunUnderLimit(t, lim.opts, ids, from, true, limit)
				})
			}
		}
	}
}

// TestRerunUnnamedKeepsTheTurnsLimits is TestRerunKeepsTheTurnsLimits
// with re-runs that name no recorded run (fromRunId) and no step, on a
// thread that has a second turn after the one re-run: the viewer finds
// the run the call is in, and the re-run goes on from what it had spent,
// as when the run is named; before, it counted nothing spent before the
// call, and refused a call inside a sub-agent.
func TestRerunUnnamedKeepsTheTurnsLimits(t *testing.T) {
	const limit = 3000
	for _, ids := range []string{"afresh", "none", "restarting"} {
		for _, from := range []string{"lead", "helper"} {
			t.Run(ids+"/"+from, func(t *testing.T) {
				rerunUnderLimit(t, []agent.Option{agent.WithTokenLimit(limit)}, ids, from, false, limit)
			})
		}
	}
}

// rerunUnderLimit re-runs the turn of budgetTurn from the lead's call or
// the helper's, naming the recorded run and the step (named) or not.
func rerunUnderLimit(t *testing.T, opts []agent.Option, ids, from string, named bool, limit int64) {
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := &budgetTurn{billed: map[string]int64{}, work: map[string]int{}}
	build := b.agent(ids, opts)
	srv := rerunViewer(t, st, build)
	status, first := post(t, srv.URL+"/run", runBody)
	if status != http.StatusOK {
		t.Fatalf("the run: %d", status)
	}
	if b.total > limit {
		t.Fatalf("the first run spent %d tokens under a limit of %d", b.total, limit)
	}
	type ev struct {
		Type, ToolCallID, ToolCallName, SubagentRunID, Delta, Name string
		Usage                                                      []struct {
			InputTokens, OutputTokens int64
			CostUsd                   float64
		}
	}
	var leadCall, helperRun, workCall string
	for _, raw := range first {
		var e ev
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		if e.Type == "TOOL_CALL_START" && e.SubagentRunID == "" && leadCall == "" {
			leadCall = e.ToolCallID // helper a's call
		}
		if e.Type == "TOOL_CALL_ARGS" && e.SubagentRunID != "" && e.Delta == `{"t":"a","n":3}` {
			helperRun, workCall = e.SubagentRunID, e.ToolCallID
		}
	}
	if leadCall == "" || workCall == "" {
		t.Fatalf("the first run made no call to helper a (%q) or helper a no third step of work (%q): billed %v, work %v", leadCall, workCall, b.billed, b.work)
	}
	if !named {
		// A second turn, which the re-run of the first must not take for
		// it.
		status, _ := post(t, srv.URL+"/run", `{"threadId":"t1","runId":"r1b","messages":[{"id":"m2","role":"user","content":"more"}]}`)
		if status != http.StatusOK {
			t.Fatalf("the second turn: %d", status)
		}
	}
	workBefore := map[string]int{}
	b.mu.Lock()
	for k, n := range b.work {
		workBefore[k] = n
	}
	b.mu.Unlock()

	// What the turn kept of the first run, as its models billed it: the
	// lead's first step, helper b's work; from inside helper a, its first
	// three steps too.
	kept := []string{"lead/1"}
	for j := 1; j <= 6; j++ {
		kept = append(kept, fmt.Sprintf("helper b/%d", j))
	}
	body := `{"threadId":"t1","runId":"r2","fromRunId":"r1","step":1,"toolCallId":"` + leadCall + `","task":"c"}`
	if from == "helper" {
		kept = append(kept, "helper a/1", "helper a/2", "helper a/3")
		body = `{"threadId":"t1","runId":"r2","fromRunId":"r1","subagentRunId":"` + helperRun + `","parentStep":1,"step":3,"toolCallId":"` + workCall + `","answer":"worked by hand"}`
	}
	if !named {
		body = `{"threadId":"t1","runId":"r2","toolCallId":"` + leadCall + `","task":"c"}`
		if from == "helper" {
			body = `{"threadId":"t1","runId":"r2","subagentRunId":"` + helperRun + `","parentStep":1,"step":3,"toolCallId":"` + workCall + `","answer":"worked by hand"}`
		}
	}
	before := b.sum(kept...)
	billed0 := b.total
	status, events := post(t, srv.URL+"/rerun", body)
	if status != http.StatusOK {
		t.Fatalf("the re-run: %d", status)
	}
	rerun := b.total - billed0
	var shown int64
	var shownCost float64
	end := ""
	for _, raw := range events {
		var e ev
		if json.Unmarshal(raw, &e) == nil && (e.Type == "RUN_FINISHED" || e.Type == "RUN_ERROR") && e.SubagentRunID == "" {
			end = string(raw)
			for _, u := range e.Usage {
				shown += u.InputTokens + u.OutputTokens
				shownCost += u.CostUsd
			}
		}
	}
	t.Logf("first run %d tokens; kept %d, re-run %d: %d in the turn (limit %d); the re-run ended %.200s", billed0, before, rerun, before+rerun, limit, end)
	if before == 0 || rerun == 0 {
		t.Fatalf("kept %d tokens, re-ran %d: the test needs both", before, rerun)
	}
	if before+rerun > limit {
		t.Errorf("the re-run turn spent %d tokens (%d kept, %d re-run) under a limit of %d (or $%v at $0.001 a token)", before+rerun, before, rerun, limit, float64(limit)*1e-3)
	}
	if shown != rerun || shownCost < float64(rerun)*1e-3-1e-9 || shownCost > float64(rerun)*1e-3+1e-9 {
		t.Errorf("the re-run's RUN_FINISHED shows %d tokens, $%v; its models billed %d, $%v", shown, shownCost, rerun, float64(rerun)*1e-3)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, n := range b.work {
		task, step, _ := strings.Cut(k, "/")
		keptWork := task == "b" || from == "helper" && task == "a" && step <= "3"
		if keptWork && n != workBefore[k] {
			t.Errorf("step of work %s ran %d times, %d before the re-run: a step the turn kept ran again", k, n, workBefore[k])
		}
		if n-workBefore[k] > 1 {
			t.Errorf("step of work %s ran %d times in the re-run", k, n-workBefore[k])
		}
	}
}
