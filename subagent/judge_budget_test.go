package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// TestJudgeDrawsOnTheCallsShare: a judge model checks a child's answer
// (an output guardrail made with Judge) inside the lead's tool call, with
// agent.Run, and spends of the call's share of the lead's token limit as
// a corrective run of the child would: what the child left of it. The judge would write its verdict and 2,000 tokens of blanks,
// and writes what its output bound lets it. Under a limit of 3,000 the
// tree spends 1,064 tokens (the fake counts tokens as the estimate does),
// the judge's 743 count in the lead's ChildUsage with the child's 104, and
// each figure is the one the shares give. (Before, the judge drew on what
// the call's share had left after the child took all of it: nothing, and
// under any token limit it could not make its call.)
// With models that name their calls afresh, not at all, and from call_0.
func TestJudgeDrawsOnTheCallsShare(t *testing.T) {
	const limit = 3000
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			n := runJudgedNote(t, ids, false, agent.WithTokenLimit(limit))
			out, err, billed, maxTokens := n.out, n.err, n.billed, n.maxTokens
			if err != nil {
				t.Fatal(err)
			}
			total := billed["lead"].Add(billed["kid"]).Add(billed["judge"])
			if out.Answer != "Done." || len(toolResults(out.Messages)) != 1 || toolResults(out.Messages)[0] != essay[:400] {
				t.Errorf("the lead answered %q, reading %q: want the child's note, passed by the judge", out.Answer, toolResults(out.Messages))
			}
			// The call's share is 1,410 tokens. The child, whose answer
			// its parent reads, is bound to half of what is left after
			// its input: (1,410 - 4) / 2 = 703, and writes its 100. The
			// judge gets what the child left, 1,306, and is bound to half
			// of it after its input: (1,306 - 180) / 2 = 563, all of
			// which it writes.
			want := map[string]provider.Usage{
				"lead":  {Requests: 2, InputTokens: 207, OutputTokens: 10},
				"kid":   {Requests: 1, InputTokens: 4, OutputTokens: 100},
				"judge": {Requests: 1, InputTokens: 180, OutputTokens: 563},
			}
			for who, u := range want {
				if billed[who] != u {
					t.Errorf("%s billed %+v, want %+v", who, billed[who], u)
				}
			}
			if got := fmt.Sprint(maxTokens["kid"], maxTokens["judge"]); got != "[703] [563]" {
				t.Errorf("output bounds of the child and the judge %s, want [703] [563]", got)
			}
			if total.Tokens() != 1064 || total.Tokens() > limit {
				t.Errorf("the tree spent %d tokens under a limit of %d", total.Tokens(), limit)
			}
			if got := out.Usage.Add(out.ChildUsage); got != total {
				t.Errorf("Output counts %+v, the models billed %+v", got, total)
			}
			if want := (provider.Usage{Requests: 2, InputTokens: 184, OutputTokens: 663}); out.ChildUsage != want {
				t.Errorf("ChildUsage %+v, want the child's and the judge's %+v", out.ChildUsage, want)
			}
		})
	}
}

func TestJudgeSpendCountsInTheCallsCostShare(t *testing.T) {
	const limit = 0.003 // $1e-6 a token: 3,000 tokens' worth
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 1e-6}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			n := runJudgedNote(t, ids, true, agent.WithPrices(prices), agent.WithCostLimit(limit))
			out, err, billed, maxTokens := n.out, n.err, n.billed, n.maxTokens
			total := billed["lead"].Add(billed["kid"]).Add(billed["judge"])
			if err != nil || out.Answer != "Done." || n.verdicts != 2 {
				t.Fatalf("the lead answered %q (err %v) after %d verdicts: want its answer after the judge failed the first note and passed the second", out.Answer, err, n.verdicts)
			}
			// A token costs $1e-6 either way, so a call's tokens are its
			// cost in millionths of a dollar. The call's share is $0.001413.
			// The child, bound to half of it after its input, (1,413 -
			// 4) / 2 = 704, writes its 100; the judge, given what the child
			// left, 1,309, is bound to (1,309 - 180) / 2 = 564 and writes it
			// all (744 in all), failing the note. The corrective run gets
			// what both left, 1,413 - 104 - 744 = 565, and is bound to (565 -
			// 135) / 2 = 215 (before: what the child alone left, bound to
			// 587, and the call spent 1,710, past its share); the judge,
			// given what is left after it, 330, is bound to (330 - 237) / 2
			// = 46.
			if got := fmt.Sprint(maxTokens["kid"], maxTokens["judge"]); got != "[704 215] [564 46]" {
				t.Errorf("output bounds of the child's two runs and the judge's two checks %s, want [704 215] [564 46]", got)
			}
			if call := billed["kid"].Add(billed["judge"]).Tokens(); call > 1413 {
				t.Errorf("the call's runs and checks spent $%.6f, past its share of $0.001413", float64(call)*1e-6)
			}
			if want := float64(total.Tokens()) * 1e-6; math.Abs(out.Cost-want) > 1e-12 || out.Cost > limit {
				t.Errorf("the lead's Output costs $%.6f, the models billed $%.6f under a limit of $%v", out.Cost, want, limit)
			}
			if got := out.Usage.Add(out.ChildUsage); got != total {
				t.Errorf("Output counts %+v, the models billed %+v", got, total)
			}
		})
	}
}

// judgedNote is what runJudgedNote saw: the lead's Output and error, what
// each model (lead, kid, judge) billed, the output bounds each was sent,
// and how many verdicts the judge gave.
type judgedNote struct {
	out       agent.Output
	err       error
	billed    map[string]provider.Usage
	maxTokens map[string][]int
	verdicts  int64
}

// runJudgedNote runs a lead, under limits, that has a child ("kid") write
// a note, which a judge model checks (an output guardrail made with Judge;
// with failFirst, it fails the first note and the guardrail retries). The
// child and the judge write what their output bounds let them: the note
// (100 tokens), and the verdict followed by 2,000 tokens of blanks.
func runJudgedNote(t *testing.T, ids int, failFirst bool, limits ...agent.Option) judgedNote {
	t.Helper()
	var (
		mu       sync.Mutex
		n        = judgedNote{billed: map[string]provider.Usage{}, maxTokens: map[string][]int{}}
		fresh    atomic.Int64
		verdicts atomic.Int64
	)
	bill := func(who string, req provider.Request, msg provider.Message) provider.Response {
		u := fake.Usage(req, msg)
		mu.Lock()
		defer mu.Unlock()
		n.billed[who] = n.billed[who].Add(u)
		n.maxTokens[who] = append(n.maxTokens[who], req.MaxTokens)
		return provider.Response{Message: msg, Usage: u, Model: "fake"}
	}
	upTo := func(req provider.Request, text string) string { // a real model stops at its bound
		if n := 4 * req.MaxTokens; n > 0 && n < len(text) {
			return text[:n]
		}
		return text
	}
	lead := func(_ context.Context, req provider.Request) (provider.Response, error) {
		if len(req.Messages) > 1 {
			return bill("lead", req, provider.AssistantMessage("Done.")), nil
		}
		calls := []provider.ToolCall{{Name: "kid", Arguments: json.RawMessage(`{"task":"Write the note."}`)}}
		resumetest.NameCalls(ids, calls, &fresh)
		return bill("lead", req, provider.AssistantMessage("", calls...)), nil
	}
	kid := func(_ context.Context, req provider.Request) (provider.Response, error) {
		return bill("kid", req, provider.AssistantMessage(upTo(req, essay[:400]))), nil
	}
	judge := func(_ context.Context, req provider.Request) (provider.Response, error) {
		verdict := `{"pass": true}`
		if verdicts.Add(1) == 1 && failFirst {
			verdict = `{"pass": false, "problem": "It is rude."}`
		}
		return bill("judge", req, provider.AssistantMessage(upTo(req, verdict+strings.Repeat(" ", 8000)))), nil
	}
	p := fake.NewProvider(fake.Respond(lead).For("lead"), fake.Respond(kid).For("kid"), fake.Respond(judge).For("judge")).
		Loop().DontRecord().Named("fake", "fake")
	check, err := subagent.Judge(p, "Fail a note that is rude.")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := subagent.FromFactory("kid", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("kid"))
	}, subagent.WithGuardrails(policy.Guardrail{Name: "polite", Stage: policy.Output, Check: check, Retry: failFirst}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := agent.NewReact(p, append([]agent.Option{agent.WithName("lead"), agent.WithTools(tl)}, limits...)...)
	if err != nil {
		t.Fatal(err)
	}
	n.out, n.err = l.Run(t.Context(), agent.Input{Text: "Have the note written."})
	mu.Lock()
	defer mu.Unlock()
	n.verdicts = verdicts.Load()
	return n
}
