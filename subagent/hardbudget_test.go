package subagent_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
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
