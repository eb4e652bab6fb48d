package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// A reply that asks for more calls than what its run has left can pay to
// read the results of runs only those it can, in order; the others are
// answered that the budget could not pay for them, and the run's next
// call is its wrap-up, which answers. Under a journal the cut is the
// recorded one: a resumed turn — after an approval, after a crash in the
// wrap-up, under a larger limit — runs the same calls, each once, and
// never the ones cut, whatever ids the provider gives the calls.
func TestUnpaidCallsAreCutAlikeOnResume(t *testing.T) {
	const limit = 400
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, transfers, wrapUps atomic.Int64
			var notes [8]atomic.Int64
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				if crash, _ := ctx.Value(crashKey{}).(func()); crash != nil {
					crash()
					return provider.Response{}, ctx.Err()
				}
				n := modelCalls.Add(1)
				var results []string
				for _, m := range req.Messages {
					if m.Role == provider.RoleTool {
						results = append(results, m.Content)
					}
				}
				msg := provider.AssistantMessage("read: " + strings.Join(results, "; "))
				if len(req.Tools) == 0 {
					wrapUps.Add(1)
				} else if len(results) == 0 {
					// A transfer to approve, then eight notes.
					calls := []provider.ToolCall{{ID: mode.id(n), Name: "transfer", Arguments: json.RawMessage(`{"amount":100}`)}}
					for i := range notes {
						calls = append(calls, provider.ToolCall{ID: mode.id(n), Name: "note", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
					}
					msg = provider.AssistantMessage("", calls...)
				}
				return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
			})
			transfer := tool.RequireApproval(toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				transfers.Add(1)
				return tool.Result{Content: "moved 100"}, nil
			}), "moves money", 0)
			note := toolFunc("note", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				var args struct{ N int }
				if err := json.Unmarshal(c.Arguments, &args); err != nil || args.N < 0 || args.N >= len(notes) {
					return tool.Result{}, fmt.Errorf("bad arguments %s", c.Arguments)
				}
				notes[args.N].Add(1)
				return tool.Result{Content: "noted"}, nil
			})
			run := func(ctx context.Context, limit int64, crash bool) (agent.Output, error) {
				t.Helper()
				lead := newReact(t, model, agent.WithName("lead"), agent.WithTools(transfer, note), agent.WithTokenLimit(limit))
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				defer cancel()
				if crash {
					rctx = context.WithValue(rctx, crashKey{}, func() { cancel() })
				}
				return lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "pay, and take notes"})
			}
			// ran is how many times each note ran, in order.
			ran := func() []int64 {
				var got []int64
				for i := range notes {
					got = append(got, notes[i].Load())
				}
				return got
			}

			_, err := run(context.Background(), limit, false)
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("%v, want the transfer's question", err)
			}
			first := ran()
			cut := 0
			for cut < len(first) && first[cut] == 1 {
				cut++
			}
			if cut == 0 || cut == len(first) || strings.Trim(fmt.Sprint(first[cut:]), "[0 ]") != "" {
				t.Fatalf("notes run %v, want the first few once, the rest cut, not run: the test needs a limit that cuts some", first)
			}
			ctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			// Approved; the run crashes in its wrap-up, after the transfer
			// ran. Then it is recovered under ten times the limit: the cut
			// is the one recorded, not one worked out afresh.
			if _, err := run(ctx, limit, true); !errors.Is(err, context.Canceled) {
				t.Fatalf("the crashing run: %v, want it cancelled", err)
			}
			out, err := run(ctx, 10*limit, false)
			if err != nil {
				t.Fatalf("the recovered run: %v", err)
			}
			if got := transfers.Load(); got != 1 {
				t.Errorf("%d transfers for one approval, want 1", got)
			}
			if got := ran(); fmt.Sprint(got) != fmt.Sprint(first) {
				t.Errorf("notes run %v over every run, want %v: the resumed turn cut the reply elsewhere, or ran a call again", got, first)
			}
			if !out.Partial || wrapUps.Load() != 1 || modelCalls.Load() != 2 {
				t.Errorf("partial %v, %d wrap-ups in %d model calls answered; want the reply cut, then the wrap-up", out.Partial, wrapUps.Load(), modelCalls.Load())
			}
			// The wrap-up read the transfer's result, the notes run, and
			// that the others were not.
			want := "read: moved 100" + strings.Repeat("; noted", cut) + strings.Repeat("; not run: the budget could not pay for it", len(first)-cut)
			if out.Answer != want {
				t.Errorf("the answer is %q, want %q", out.Answer, want)
			}
			if spent := out.TotalUsage().Tokens(); spent > limit {
				t.Errorf("the turn spent %d tokens under a limit of %d", spent, limit)
			}
		})
	}
}
