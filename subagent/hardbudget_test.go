package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// tenParts is the lead's turn that forks ten children, one a part.
func tenParts() fake.Reply {
	args := make([]string, 10)
	for i := range args {
		args[i] = fmt.Sprintf(`{"task":"Write part %d of the survey, in full."}`, i)
	}
	return spawns(args...)
}

// essay is a child's answer of about 500 tokens (2,000 bytes).
var essay = strings.Repeat("The survey finds what it was asked to find. ", 46)

// TestTenForksUnderATokenLimit forks ten children that each answer about
// 500 tokens under a lead limited to 3,000: the tree spends no more than
// its limit (the fake provider counts tokens as the estimate does, so
// the estimate is never short), the lead still answers, from a reserve
// it kept before the children got their shares, and each child's share
// went as the output bound of its call.
func TestTenForksUnderATokenLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, limit := range []int64{0, 3000} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			p := fake.NewProvider(tenParts().For("lead"), fake.Text("All ten parts are written.").For("lead"))
			for range 10 {
				p.Add(fake.Text(essay).For(subagent.DefaultForkName))
			}
			reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(10)})
			var opts []agent.Option
			if limit > 0 {
				opts = append(opts, agent.WithTokenLimit(limit))
			}
			out, err := lead(t, p, reg, opts...).Run(t.Context(), agent.Input{Text: "Write the ten parts of the survey."})
			if err != nil {
				t.Fatal(err)
			}
			var billed int64
			for _, r := range p.Requests() {
				billed += fake.Usage(r.Request, provider.Message{}).InputTokens
			}
			spent := out.TotalUsage().Tokens()
			t.Logf("spent %d tokens (%d in), %d model calls; answer %q, partial %v", spent, out.TotalUsage().InputTokens, p.Calls(), out.Answer, out.Partial)
			if limit == 0 {
				if spent < 3*3000 {
					t.Fatalf("unlimited, the tree spent %d tokens: the test needs children that would spend far more than 3,000", spent)
				}
				return
			}
			if spent > limit {
				t.Errorf("the tree spent %d tokens under a limit of %d", spent, limit)
			}
			if out.Answer != "All ten parts are written." {
				t.Errorf("the lead answered %q, want its own answer: its last call is paid from its reserve", out.Answer)
			}
			forks := p.RequestsFor(subagent.DefaultForkName)
			if len(forks) != 10 {
				t.Fatalf("%d calls of the children, want 10", len(forks))
			}
			for _, r := range forks {
				if r.MaxTokens <= 0 || int64(r.MaxTokens) > limit/10 {
					t.Errorf("a child's call asked for at most %d tokens out, want its share's bound (under %d)", r.MaxTokens, limit/10)
				}
			}
		})
	}
}

// TestTenValidatedForksUnderACostLimit forks ten children whose answers
// fail the report's shape, under a lead limited to $0.01: the tree costs
// no more than that; a child whose share cannot pay for its corrective
// retry does not make it, and answers partially, saying why.
func TestTenValidatedForksUnderACostLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const limit = 0.01
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-7, Output: 2e-5}})
	if err != nil {
		t.Fatal(err)
	}
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprint("limited ", limited), func(t *testing.T) {
			p := fake.NewProvider(tenParts().For("lead"), fake.Text("All ten parts are written.").For("lead"),
				fake.Text(essay).For(subagent.DefaultForkName)).Loop().Named("fake", "fake")
			reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(10), subagent.WithReport()})
			opts := []agent.Option{agent.WithPrices(prices)}
			if limited {
				opts = append(opts, agent.WithCostLimit(limit))
			}
			out, err := lead(t, p, reg, opts...).Run(t.Context(), agent.Input{Text: "Write the ten parts of the survey."})
			if err != nil {
				t.Fatal(err)
			}
			forks := len(p.RequestsFor(subagent.DefaultForkName))
			t.Logf("cost $%.4f, %d model calls (%d of the children); answer %q", out.Cost, p.Calls(), forks, out.Answer)
			if !limited {
				if out.Cost < 5*limit || forks != 20 {
					t.Fatalf("unlimited, the tree cost $%.4f in %d children's calls: the test needs children that retry and cost far more than $%.2f", out.Cost, forks, limit)
				}
				return
			}
			if out.Cost > limit {
				t.Errorf("the tree cost $%.4f under a limit of $%.2f", out.Cost, limit)
			}
			if forks > 10 {
				t.Errorf("the children made %d model calls: a corrective retry was made past a share that could not pay for it", forks)
			}
			if out.Answer != "All ten parts are written." {
				t.Errorf("the lead answered %q, want its own answer", out.Answer)
			}
			for _, c := range toolResults(out.Messages) {
				var r subagent.Report
				if err := json.Unmarshal([]byte(c), &r); err != nil || r.Status != subagent.ReportPartial || !strings.Contains(r.Summary, "budget could not pay for a corrective retry") {
					t.Errorf("a child's result is %q, want a partial report that says its budget could not pay for a retry", c)
				}
			}
		})
	}
}

// TestTenForksTooSmallToStart forks ten children under a lead limited so
// tightly that no child's share can pay for its first model call: no
// child calls its model, each answers the lead, out of its share, that
// its budget could not pay for one, and the lead answers from what it
// kept back for its wrap-up, within its limit; what the models billed is
// what Output counts. Plain forks and forks that report (WithReport),
// under a token limit and a cost limit (a dollar a million tokens, in and
// out: $0.0013 is 1,300 tokens), with models that name their calls
// afresh, not at all, and from call_0. Each child's answer is the line the
// lead's floor counts (run.UnstartedLine, run.UnstartedReport): counting
// 112 bytes for it instead, the lead could not pay to read ten under
// 1,300 tokens, and left one not run.
func TestTenForksTooSmallToStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 1e-6}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		report, cost bool
		limit        int64
	}{{false, false, 1300}, {true, false, 1300}, {false, true, 1300}} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("report %v, cost %v, ids %d", tc.report, tc.cost, ids), func(t *testing.T) {
				var (
					mu                    sync.Mutex
					billed                provider.Usage
					leadCalls, childCalls int
					fresh                 atomic.Int64
				)
				bill := func(req provider.Request, msg provider.Message, n *int) provider.Response {
					u := fake.Usage(req, msg)
					mu.Lock()
					defer mu.Unlock()
					billed = billed.Add(u)
					*n++
					return provider.Response{Message: msg, Usage: u, Model: "fake"}
				}
				leadModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
					if len(req.Tools) == 0 || len(req.Messages) > 1 {
						return bill(req, provider.AssistantMessage("Not written."), &leadCalls), nil
					}
					calls := make([]provider.ToolCall, 10)
					for i := range calls {
						calls[i] = spawn(fmt.Sprintf(`{"task":"Write part %d of the survey, in full."}`, i))
					}
					resumetest.NameCalls(ids, calls, &fresh)
					return bill(req, provider.AssistantMessage("", calls...), &leadCalls), nil
				}
				childModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
					text := essay
					if n := 4 * req.MaxTokens; n > 0 && n < len(text) {
						text = text[:n]
					}
					return bill(req, provider.AssistantMessage(text), &childCalls), nil
				}
				p := fake.NewProvider(fake.Respond(leadModel).For("lead"), fake.Respond(childModel).For(subagent.DefaultForkName)).Loop().DontRecord().Named("fake", "fake")
				opts := []subagent.SpawnOption{subagent.WithMaxSpawns(10)}
				if tc.report {
					opts = append(opts, subagent.WithReport())
				}
				reg, _ := setup(t, p, false, opts)
				limit := agent.WithTokenLimit(tc.limit)
				if tc.cost {
					limit = agent.WithCostLimit(float64(tc.limit) * 1e-6)
				}
				out, err := lead(t, p, reg, agent.WithPrices(prices), limit).Run(t.Context(), agent.Input{Text: "Write the ten parts of the survey."})
				mu.Lock()
				defer mu.Unlock()
				t.Logf("billed %d tokens in %d calls of the lead and %d of the children; answer %q, partial %v", billed.Tokens(), leadCalls, childCalls, out.Answer, out.Partial)
				if err != nil {
					t.Fatalf("the lead failed: %v; want it to answer from what it kept back for its wrap-up", err)
				}
				if out.Answer != "Not written." || leadCalls != 2 || childCalls != 0 {
					t.Errorf("the lead answered %q in %d model calls, the children made %d; want its answer in 2, and none", out.Answer, leadCalls, childCalls)
				}
				if got := out.Usage.Add(out.ChildUsage); got != billed {
					t.Errorf("Output counts %+v, the models billed %+v", got, billed)
				}
				if billed.Tokens() > tc.limit {
					t.Errorf("the tree spent %d tokens under a limit of %d", billed.Tokens(), tc.limit)
				}
				results := toolResults(out.Messages)
				if len(results) != 10 {
					t.Fatalf("the lead read %d results, want 10", len(results))
				}
				for _, c := range results {
					// What the lead's floor counts is what it reads.
					want := run.UnstartedLine
					if tc.report {
						want = run.UnstartedReport
					}
					var r subagent.Report
					if c != want || len(c) > run.RefusalBytes || tc.report && (json.Unmarshal([]byte(c), &r) != nil || r.Status != subagent.ReportPartial) {
						t.Errorf("a child's result is %q, want %q, a partial answer that says its budget could not pay for a model call", c, want)
					}
				}
			})
		}
	}
}

// TestTightLimitsStillAnswer sweeps the token (and cost) limit of a lead
// that forks as many of ten children as its reply's output bound lets it
// write (each child writes what its own bound lets it), from 400 tokens
// to 1,500 by 10: at every limit the tree spends no more than its limit,
// billed what Output counts, and the lead answers. Its reply's bound
// leaves room to read the reply again and wrap up, and the calls whose
// results what is left cannot pay to read are not run (the lead reads
// that they were not), so that it is never left at its limit unable to
// answer (before, from 620 to 1,140 it ended with ErrUsageLimit). With
// models that name their calls afresh, not at all, and from call_0.
func TestTightLimitsStillAnswer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 1e-6}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cost := range []bool{false, true} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			cut := 0 // runs where the lead did not run every call it asked for
			for limit := int64(400); limit <= 1500; limit += 10 {
				var (
					mu                    sync.Mutex
					billed                provider.Usage
					leadCalls, childCalls int
					asked                 int
					fresh                 atomic.Int64
				)
				bill := func(req provider.Request, msg provider.Message, n *int) provider.Response {
					u := fake.Usage(req, msg)
					stop := provider.StopEndTurn
					if req.MaxTokens > 0 && u.OutputTokens > int64(req.MaxTokens) {
						// What a real model does: it stops at the bound.
						text := msg.Content[:4*req.MaxTokens]
						msg, stop = provider.AssistantMessage(text), provider.StopMaxTokens
						u = fake.Usage(req, msg)
					}
					mu.Lock()
					defer mu.Unlock()
					billed = billed.Add(u)
					*n++
					return provider.Response{Message: msg, Usage: u, Model: "fake", StopReason: stop}
				}
				leadModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
					if len(req.Tools) == 0 || len(req.Messages) > 1 {
						return bill(req, provider.AssistantMessage("Here is what was written."), &leadCalls), nil
					}
					// As many forks as its bound lets it ask for.
					var calls []provider.ToolCall
					for i := range 10 {
						c := spawn(fmt.Sprintf(`{"task":"Write part %d of the survey, in full."}`, i))
						if next := append(calls, c); req.MaxTokens == 0 || fake.Usage(provider.Request{}, provider.AssistantMessage("", next...)).OutputTokens <= int64(req.MaxTokens) {
							calls = next
						}
					}
					if len(calls) == 0 {
						return bill(req, provider.AssistantMessage("I could not fork the parts."), &leadCalls), nil
					}
					resumetest.NameCalls(ids, calls, &fresh)
					mu.Lock()
					asked = len(calls)
					mu.Unlock()
					return bill(req, provider.AssistantMessage("", calls...), &leadCalls), nil
				}
				childModel := func(_ context.Context, req provider.Request) (provider.Response, error) {
					return bill(req, provider.AssistantMessage(essay), &childCalls), nil
				}
				p := fake.NewProvider(fake.Respond(leadModel).For("lead"), fake.Respond(childModel).For(subagent.DefaultForkName)).Loop().DontRecord().Named("fake", "fake")
				reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(10)})
				lim := agent.WithTokenLimit(limit)
				if cost {
					lim = agent.WithCostLimit(float64(limit) * 1e-6)
				}
				out, err := lead(t, p, reg, agent.WithPrices(prices), lim).Run(t.Context(), agent.Input{Text: "Write the ten parts of the survey."})
				mu.Lock()
				if billed.Tokens() > limit {
					t.Errorf("cost %v, ids %d: the tree spent %d tokens under a limit of %d", cost, ids, billed.Tokens(), limit)
				}
				if got := out.Usage.Add(out.ChildUsage); got != billed {
					t.Errorf("cost %v, ids %d, limit %d: Output counts %+v, the models billed %+v", cost, ids, limit, got, billed)
				}
				if err != nil {
					t.Errorf("cost %v, ids %d, limit %d: the lead failed after %d model calls of its own and %d of the children, billed %d: %v",
						cost, ids, limit, leadCalls, childCalls, billed.Tokens(), err)
				}
				if results := toolResults(out.Messages); len(results) > asked {
					t.Errorf("cost %v, ids %d, limit %d: the lead read %d results of %d calls", cost, ids, limit, len(results), asked)
				} else if strings.Contains(strings.Join(results, "\n"), "not run: the budget could not pay for it") || len(results) < asked {
					cut++
				}
				mu.Unlock()
			}
			if cut == 0 {
				t.Errorf("cost %v, ids %d: no limit cut the lead's calls: the sweep does not reach the limits it is for", cost, ids)
			}
		}
	}
}
