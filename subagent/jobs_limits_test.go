package subagent_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A background job that would go past its cost limit (WithJobLimits)
// wraps up, and hands its parent a partial report, not a failure; one past
// its step limit hands back a partial report with its last words; what
// either spent stays within its limit and counts once.
func TestJobPastItsCostLimitReportsPartially(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits subagent.JobLimits
		want   []string
	}{
		{"cost", subagent.JobLimits{Cost: 0.002}, []string{"lead: dug ", "layers, no gold yet"}},
		{"steps", subagent.JobLimits{Steps: 3}, []string{"stopped at its limit", "its 3 steps (JobLimits.Steps)", "raise it with WithJobLimits", "at step 3", "partial report, its last words:\ndug layer 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobPastLimit(t, pastLimit{limits: tc.limits, wrapsUp: true, want: tc.want, tokens: tc.limits.Tokens, cost: tc.limits.Cost})
		})
	}
}

// A background job stopped by each of its limits, or, in a thread whose
// jobs outlive its turns, by the token and cost defaults a job gets when
// nothing else bounds it (DefaultJobTokens, DefaultJobCost), hands its
// parent a partial report: why it stopped, the step it reached, the
// tokens it spent (what its model billed) and its last words. What it
// spent stays within the limit and is counted once. Each names the
// setting that stopped it: the job's own limit (WithJobLimits), or its
// share of the lead's. Its model never
// answers when asked to wrap up, so that the limit, not an answer, ends
// it; without the defaults the jobs in a thread would run to their 50
// steps, ten times what the defaults let them spend.
func TestJobPastEachLimitReportsPartially(t *testing.T) {
	cut := func(limit, setting string) []string {
		return []string{"[the sub-agent reached its " + limit + " (" + setting + ") before it could answer; this is what it said last]\ndug layer "}
	}
	const own = ": raise it with WithJobLimits"
	stopped := []string{"stopped at its limit (", "partial report, its last words:\ndug layer "}
	for _, tc := range []struct {
		name string
		c    pastLimit
	}{
		{"cost", pastLimit{limits: subagent.JobLimits{Cost: 0.0006}, cost: 0.0006, want: cut("cost limit", "JobLimits.Cost"+own)}},
		{"tokens", pastLimit{limits: subagent.JobLimits{Tokens: 600}, tokens: 600, want: cut("token limit", "JobLimits.Tokens"+own)}},
		{"time", pastLimit{limits: subagent.JobLimits{Time: 300 * time.Millisecond}, slow: 40 * time.Millisecond, want: append(stopped, "past its time of 300ms (JobLimits.Time)"+own)}},
		{"default tokens in a thread", pastLimit{thread: true, input: 20_000, tokens: subagent.DefaultJobTokens, want: cut("token limit", "JobLimits.Tokens"+own)}},
		{"default cost in a thread", pastLimit{thread: true, price: 0.001, cost: subagent.DefaultJobCost, input: 200, want: cut("cost limit", "JobLimits.Cost"+own)}},
		{"own tokens under the lead's", pastLimit{limits: subagent.JobLimits{Tokens: 600}, lead: []agent.Option{agent.WithTokenLimit(100_000)}, tokens: 600,
			want: cut("token limit", "JobLimits.Tokens"+own)}},
		{"a member's own tokens under the lead's", pastLimit{member: true, limits: subagent.JobLimits{Tokens: 600}, lead: []agent.Option{agent.WithTokenLimit(100_000)}, tokens: 600,
			want: cut("token limit", "JobLimits.Tokens"+own)}},
		{"a member's tokens", pastLimit{member: true, limits: subagent.JobLimits{Tokens: 600}, tokens: 600,
			want: cut("token limit", "JobLimits.Tokens"+own)}},
		{"the lead's tokens for a member", pastLimit{member: true, limits: subagent.JobLimits{Tokens: 100_000}, lead: []agent.Option{agent.WithTokenLimit(3000)}, tokens: 3000,
			want: cut("token limit", "its share of its parent's WithTokenLimit")}},
		{"a member's own cost under the lead's", pastLimit{member: true, limits: subagent.JobLimits{Cost: 0.0006}, lead: []agent.Option{agent.WithCostLimit(1)}, cost: 0.0006,
			want: cut("cost limit", "JobLimits.Cost"+own)}},
		{"own cost under the lead's", pastLimit{limits: subagent.JobLimits{Cost: 0.0006}, lead: []agent.Option{agent.WithCostLimit(1)}, cost: 0.0006,
			want: cut("cost limit", "JobLimits.Cost"+own)}},
		{"the lead's tokens", pastLimit{limits: subagent.JobLimits{Tokens: 100_000}, lead: []agent.Option{agent.WithTokenLimit(3000)}, tokens: 3000,
			want: cut("token limit", "its share of its parent's WithTokenLimit")}},
		{"the lead's cost", pastLimit{limits: subagent.JobLimits{Cost: 1}, lead: []agent.Option{agent.WithCostLimit(0.003)}, cost: 0.003,
			want: cut("cost limit", "its share of its parent's WithCostLimit")}},
	} {
		t.Run(tc.name, func(t *testing.T) { jobPastLimit(t, tc.c) })
	}
}

// A roster member's background job names the token limit that stopped
// it: its own (JobLimits.Tokens), when that is smaller than its share of
// the lead's WithTokenLimit, else that share; and neither lets it spend
// past it. With models that name their calls afresh, not at all, and
// from call_0.
func TestMemberJobNamesTheTokenLimitThatStopsIt(t *testing.T) {
	cut := func(setting string) []string {
		return []string{"[the sub-agent reached its token limit (" + setting + ") before it could answer; this is what it said last]\ndug layer "}
	}
	for _, ids := range []struct {
		name string
		mode int
	}{{"fresh ids", resumetest.IDsFresh}, {"no ids", resumetest.IDsNone}, {"ids restarting at call_0", resumetest.IDsRestart}} {
		for _, tc := range []struct {
			name string
			c    pastLimit
		}{
			{"its own, under a wider share", pastLimit{limits: subagent.JobLimits{Tokens: 600}, lead: []agent.Option{agent.WithTokenLimit(100_000)}, tokens: 600,
				want: cut("JobLimits.Tokens: raise it with WithJobLimits")}},
			{"its share, under a wider limit of its own", pastLimit{limits: subagent.JobLimits{Tokens: 100_000}, lead: []agent.Option{agent.WithTokenLimit(3000)}, tokens: 3000,
				want: cut("its share of its parent's WithTokenLimit")}},
		} {
			t.Run(ids.name+", "+tc.name, func(t *testing.T) {
				tc.c.member, tc.c.ids = true, ids.mode
				jobPastLimit(t, tc.c)
			})
		}
	}
}

// pastLimit is a background job that goes on digging until a limit
// stops it (jobPastLimit).
type pastLimit struct {
	limits  subagent.JobLimits
	wrapsUp bool          // its model answers when asked to wrap up (else it says nothing)
	slow    time.Duration // each of its model calls takes
	thread  bool          // it is a thread's job, that may outlive its turn
	input   int64         // the input tokens of a model call (0: 100)
	price   float64       // of a token, in or out (0: $0.000001)
	want    []string      // in the lead's answer
	tokens  int64         // the most it may spend (0: no bound checked)
	cost    float64
	lead    []agent.Option // the lead's options
	member  bool           // the job is a roster member's, not a fork's
	ids     int            // how its models name their calls (resumetest.IDsFresh, the zero value, and the others)
}

func jobPastLimit(t *testing.T, c pastLimit) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	price := provider.Price{Input: cmp.Or(c.price, 1e-6), Output: cmp.Or(c.price, 1e-6)}
	prices, err := provider.NewPrices(map[string]provider.Price{"fake/fake": price, "fake": price})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var billed, childBilled provider.Usage
	var childCalls int
	var fresh atomic.Int64
	named := func(u provider.Usage, said string, calls ...provider.ToolCall) (provider.Response, error) {
		resumetest.NameCalls(c.ids, calls, &fresh)
		return provider.Response{Usage: u, Message: provider.AssistantMessage(said, calls...)}, nil
	}
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: cmp.Or(c.input, 100), OutputTokens: 20, Requests: 1}
		if req.MaxTokens > 0 {
			u.OutputTokens = min(u.OutputTokens, int64(req.MaxTokens)) // stops at its bound, as a real model does
		}
		child := strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20])
		if child && c.slow > 0 {
			select {
			case <-time.After(c.slow):
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		billed = billed.Add(u)
		if child {
			childBilled = childBilled.Add(u)
			childCalls++
			if len(req.Tools) == 0 && c.wrapsUp { // asked to wrap up
				return provider.Response{Usage: u, Message: provider.AssistantMessage(fmt.Sprintf("dug %d layers, no gold yet", childCalls-1))}, nil
			}
			said := fmt.Sprintf("dug layer %d", childCalls)
			if len(req.Tools) == 0 {
				said = "" // asked to wrap up, it digs on, saying nothing
			}
			return named(u, said, provider.ToolCall{Name: "lookup", Arguments: json.RawMessage(`{}`)})
		}
		switch len(toolResults(req.Messages)) {
		case 0:
			if c.member {
				return named(u, "", spawn(`{"task":"dig for ever","agent":"digger","background":true}`))
			}
			return named(u, "", spawn(`{"task":"dig for ever","background":true}`))
		case 1:
			return named(u, "", provider.ToolCall{Name: subagent.JobsToolName,
				Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":600,"job_id":"` + latestJob(req.Messages) + `"}`)})
		}
		return provider.Response{Usage: u, Message: provider.AssistantMessage("lead: " + toolResults(req.Messages)[1])}, nil
	})
	opts := []subagent.SpawnOption{subagent.WithBackground(), subagent.WithJobLimits(c.limits)}
	if c.member {
		// A member the model answers as it does a fork, by its prompt.
		tools, err := tool.NewRegistry(lookup())
		if err != nil {
			t.Fatal(err)
		}
		digger, err := agent.NewReact(model, agent.WithName("digger"), agent.WithSystemPrompt(subagent.DefaultForkPrompt), agent.WithRegistry(tools))
		if err != nil {
			t.Fatal(err)
		}
		m, err := subagent.FromAgent("digger", "Digs.", digger)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, subagent.WithRoster(m))
	}
	ctx := t.Context()
	if c.thread {
		opts = append(opts, subagent.WithJobsAcrossTurns(nil))
		ctx = agent.WithThread(ctx, "t1")
	}
	reg, s := setup(t, model, true, opts)
	defer s.Close()
	rec := &recorder{}
	out, err := lead(t, model, reg, append(c.lead, agent.WithPrices(prices))...).Run(event.WithSink(ctx, rec), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.want {
		if !strings.Contains(out.Answer, w) {
			t.Errorf("the lead read %q: want a partial report, with %q", out.Answer, w)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(out.Answer, "stopped at its limit") {
		if want := fmt.Sprintf("(%d tokens spent)", childBilled.Tokens()); !strings.Contains(out.Answer, want) {
			t.Errorf("the lead read %q: want %q, what the job's model billed", out.Answer, want)
		}
	}
	if ended := rec.custom(subagent.JobEndedEvent); len(ended) != 1 {
		t.Errorf("%d %s events, want 1", len(ended), subagent.JobEndedEvent)
	} else {
		var st subagent.JobStatus
		if err := json.Unmarshal(ended[0].Value, &st); err != nil {
			t.Fatal(err)
		}
		if st.Usage != childBilled || math.Abs(st.Cost-price.Cost(childBilled)) > 1e-9 {
			t.Errorf("the job ended having spent %+v, $%.6f; its model billed %+v, $%.6f", st.Usage, st.Cost, childBilled, price.Cost(childBilled))
		}
	}
	spent := price.Cost(childBilled)
	if c.tokens > 0 && childBilled.Tokens() > c.tokens || c.cost > 0 && spent > c.cost+1e-12 || childCalls < 3 {
		t.Errorf("the job made %d model calls, %d tokens, $%.6f: want at least 3, within %d tokens and $%g", childCalls, childBilled.Tokens(), spent, c.tokens, c.cost)
	}
	if got := out.TotalUsage(); got != billed {
		t.Errorf("the run counts %+v, the model billed %+v", got, billed)
	}
}

// The jobs alive in one owner's threads are capped (WithMaxOwnerJobs): a
// spawn past the cap is refused, with an event, while another owner's
// thread starts its own.
func TestOwnerJobsAreCapped(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, _ := threadLead(t, m, subagent.WithMaxOwnerJobs(1))
	ann := func(th string) context.Context { return agent.WithOwner(agent.WithThread(t.Context(), th), "ann") }
	if _, err := a.Run(ann("t1"), agent.Input{Text: "cmd start"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	out, err := a.Run(event.WithSink(ann("t2"), rec), agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	refused := rec.custom(subagent.RefusedEvent)
	if out.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_owner_jobs"`) {
		t.Errorf("Output.Refused %d, refusals %+v: want one, max_owner_jobs", out.Refused, refused)
	}
	if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) {
		t.Errorf("the lead read %q", out.Answer)
	}
	bob := agent.WithOwner(agent.WithThread(t.Context(), "t1"), "bob")
	out, err = a.Run(bob, agent.Input{Text: "cmd start"})
	if err != nil || out.Refused != 0 {
		t.Errorf("another owner's spawn: refused %d, %v", out.Refused, err)
	}
	close(m.dig)
}

// The jobs alive in one thread are capped (WithMaxBackground), across
// its turns: a spawn past the cap, in a later turn while the first
// turn's job works on, is refused, with an event, and the model reads
// why; another thread starts its own.
func TestThreadJobsAreCapped(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := &threadModel{dig: make(chan struct{})}
	a, s := threadLead(t, m, subagent.WithMaxBackground(1))
	thread := func(th string) context.Context { return agent.WithThread(t.Context(), th) }
	if _, err := a.Run(thread("t1"), agent.Input{Text: "cmd start"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	out, err := a.Run(event.WithSink(thread("t1"), rec), agent.Input{Text: "cmd start"})
	if err != nil {
		t.Fatal(err)
	}
	refused := rec.custom(subagent.RefusedEvent)
	if out.Refused != 1 || len(refused) != 1 || !strings.Contains(string(refused[0].Value), `"max_background"`) {
		t.Errorf("Output.Refused %d, refusals %+v: want one, max_background", out.Refused, refused)
	}
	if !strings.Contains(out.Answer, subagent.ErrMaxBackground.Error()) || !strings.Contains(out.Answer, "one thread") {
		t.Errorf("the lead read %q: want why, the most one thread may have", out.Answer)
	}
	if n := len(s.Jobs(thread("t1")).List()); n != 1 {
		t.Errorf("thread t1 has %d jobs, want 1", n)
	}
	out, err = a.Run(thread("t2"), agent.Input{Text: "cmd start"})
	if err != nil || out.Refused != 0 {
		t.Errorf("another thread's spawn: refused %d, %v", out.Refused, err)
	}
	close(m.dig)
}
