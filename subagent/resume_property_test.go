package subagent_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

var (
	schedules    = flag.Int("schedules", 200, "how many random schedules TestResumeSchedules runs")
	scheduleSeed = flag.Uint64("schedule-seed", 0, "the seed of TestResumeSchedules' first schedule (0: from the clock)")
)

// Invariants of the whole tree that known bugs still break. Each is
// checked once its switch is on; turn a switch on as its fix lands.
const (
	// ledgerAcrossResume: the Output (and Tree) of each run of a turn
	// covers the whole turn so far, the runs before it included. Off:
	// Output after a resume covers only the resumed run, so each run is
	// checked against what it alone billed.
	ledgerAcrossResume = true
	// budgetAcrossResume: a turn's token and cost limits hold over the
	// whole turn, each run's spending checked with the runs' before it.
	// Off: the limits start afresh at every resume, so each run is
	// checked alone.
	budgetAcrossResume = true
	// budgetHard: a run spends at most its limit plus one call, through
	// corrective retries, compaction and the wrap-up call, however many
	// runs spend at once. Off: the limit plus one call per run in flight.
	budgetHard = true
	// budgetAsDocumented: a run spends at most the bound WithTokenLimit
	// and WithCostLimit document: the limit plus the shortfall of the
	// estimate of one call, a few tokens here.
	// Off: only budgetHard's bound is checked.
	budgetAsDocumented = true
	// compactionPaidOnce: a compaction's summary is journaled and never
	// paid twice. Off: a summary forced by the model's "too long" refusal
	// is paid again when its turn goes on after a cancellation or a
	// resume, so a summary paid twice is let through.
	compactionPaidOnce = true
	// jobLedgerAcrossResume: what a background job spent in a run that
	// then stopped for a question or a cancellation is counted by the
	// runs after it, whether or not they replay it. Off: in a schedule
	// with a job the runs after the first are only checked to report no
	// more than was billed.
	jobLedgerAcrossResume = true
	// ledgerCountsUnreplayed: what a cancelled run paid for and recorded
	// counts in the runs after it even when they do not replay it. Off: a
	// resident's summary made in a run that was then cancelled is left
	// out when the resumed run, its resident built afresh with no history,
	// does not compact and so never reads the recorded summary; so in a
	// schedule with a resident the runs after a cancelled one are only
	// checked to report no more than was billed.
	ledgerCountsUnreplayed = true
	// admissionSettles: every call waiting in a provider.Admission's
	// queue is admitted once nothing is in flight. Off: about one
	// schedule in three thousand of those whose model calls pass an
	// Admission that meets 429s hangs, a call waiting in gate.acquire
	// with no other call in flight, so the schedules are drawn without
	// admission (RateLimited false).
	admissionSettles = true
)

// drawSchedule draws the schedule of seed, as the switches above let it.
func drawSchedule(seed uint64, background bool) resumetest.Schedule {
	s := resumetest.NewTreeSchedule(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), background)
	if !admissionSettles {
		s.RateLimited = false
	}
	return s
}

// TestResumeSchedules runs random trees (resumetest.NewTreeSchedule) to
// the end: approvals, validated children and their corrective runs, a
// resident that compacts (forced by its model's "too long" refusal, or
// due), token and cost limits, a background job, admission control that
// meets 429s, cancellation at random model calls, models that name their
// calls afresh, not at all or from call_0, and a re-run of a child once
// the turn is over. On each it checks what a person relies on: each
// approved call ran exactly once and a rejected one never, a plain call
// once; a question asked again (after a crash) keeps its id; no model
// answer was paid twice; what the models billed is what the Output, the
// subagent.Tree and a re-run's result report, in tokens and in money; and
// nothing spent more than its limit allows. It prints the number of
// schedules and the seed of a failure; -schedules and -schedule-seed run
// more, or one again.
func TestResumeSchedules(t *testing.T) {
	seed := *scheduleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	n := *schedules
	if testing.Short() {
		n = min(n, 50)
	}
	st := openStoreAt(t, filepath.Join(t.TempDir(), "deputy.db"))
	var c treeCounts
	for i := range n {
		s := seed + uint64(i)
		if !runSchedule(t, st, s, &c) {
			t.Fatalf("schedule with seed %d failed (rerun it: go test ./subagent -run '^TestResumeSchedules$' -schedules 1 -schedule-seed %d -v)", s, s)
		}
	}
	t.Logf("%d schedules passed, seeds %d to %d: %d runs, %d cancelled, %d questions, %d cut by a limit, %d re-runs, %d summaries, %d corrected answers",
		n, seed, seed+uint64(n)-1, c.runs, c.cancelled, c.questions, c.cut, c.reruns, c.summaries, c.corrected)
}

// scheduleTimeout bounds one schedule: far more than one takes.
const scheduleTimeout = 2 * time.Minute

// treeCounts is what the schedules did, over all of them: so that a run
// of the test shows that it tried each thing.
type treeCounts struct {
	runs, cancelled, questions, cut, reruns, summaries, corrected int
}

// runSchedule runs one schedule to its end, reporting each broken
// invariant, and whether all held.
func runSchedule(t *testing.T, st *store.Store, seed uint64, c *treeCounts) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x51ed))
	s := drawSchedule(seed, true)
	// A schedule that hangs would end only with the test's timeout,
	// which names no seed.
	watchdog := time.AfterFunc(scheduleTimeout, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "schedule with seed %d (%v) has not ended in %v (rerun it: go test ./subagent -run '^TestResumeSchedules$' -schedules 1 -schedule-seed %d -v)\n%s", seed, s, scheduleTimeout, seed, buf)
		os.Exit(2)
	})
	defer watchdog.Stop()
	w := resumetest.New(s)
	lead, err := w.Lead()
	if err != nil {
		t.Fatal(err)
	}
	turn := fmt.Sprint("schedule-", seed)
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (%v): %s", seed, s, fmt.Sprintf(format, args...))
		ok = false
	}
	verbose := testing.Verbose() && *schedules == 1
	if verbose {
		w.Log = func(line string) { t.Log(line) }
	}
	var q resumetest.Questions
	answers := context.Background()
	var out agent.Output
	cut := false
	// The Tree of the turn: one over all its runs, as a viewer of the
	// turn's events builds it (until ledgerAcrossResume, one per run).
	var tree *subagent.Tree
	cancelledBefore := c.cancelled
	for round := 0; ; round++ {
		if round > 40 {
			fail("no end after %d runs", round)
			return false
		}
		j, err := st.Journal(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(answers)
		w.Crash = cancel
		crashAt := int64(0)
		if r.IntN(3) == 0 {
			crashAt = 1 + r.Int64N(int64(2*s.Levels+4))
		}
		w.NextRun(crashAt)
		if tree == nil || !ledgerAcrossResume {
			tree = subagent.NewTree(nil)
		}
		before := w.Billed()
		out, err = lead.Run(agent.WithJournal(event.WithSink(ctx, tree), j), agent.Input{Text: "go"})
		cancel()
		billed := w.Billed().Sub(before)
		c.runs++
		if verbose {
			t.Logf("run %d (crash at %d): %q %v; billed %v; output %+v $%v", round, crashAt, out.Answer, err, billed, out.TotalUsage(), out.Cost)
		}
		// Each run reports, and is limited by, the whole turn so far (or,
		// until the switches are on, itself alone).
		ledgerBill, budgetBill := billed, billed
		if ledgerAcrossResume {
			ledgerBill = w.Billed()
		}
		if budgetAcrossResume {
			budgetBill = w.Billed()
		}
		lenient := s.Background && round > 0 && !jobLedgerAcrossResume || s.Resident > 0 && c.cancelled > cancelledBefore && !ledgerCountsUnreplayed
		if lenient {
			if got := out.TotalUsage(); got.Tokens() > ledgerBill.Usage.Tokens() || got.Requests > ledgerBill.Usage.Requests {
				fail("run %d: the models billed %v; Output.Usage + ChildUsage say more, %+v", round, ledgerBill, got)
			}
		} else {
			checkLedger(fail, fmt.Sprintf("run %d", round), ledgerBill, out, tree)
			if ledgerAcrossResume {
				checkNodes(fail, fmt.Sprintf("run %d", round), s, tree, nil, 1, w.BilledAt)
			}
		}
		checkBudget(fail, fmt.Sprintf("run %d", round), s, budgetBill, tree)
		var in *tool.Interrupted
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			c.cancelled++
			continue // recovered: the same turn, the same answers
		case errors.As(err, &in):
			c.questions += len(in.Interrupts)
			given, problems := q.Answer(r, in.Interrupts)
			for _, p := range problems {
				fail("%s", p)
			}
			if answers, err = tool.Resume(context.Background(), in, given...); err != nil {
				t.Fatal(err)
			}
			continue
		case s.Limited() && errors.Is(err, agent.ErrUsageLimit):
			cut = true
		default:
			fail("run %d: %v", round, err)
			return false
		}
		break
	}
	if cut || out.Partial || out.Refused > 0 {
		c.cut++
	}
	c.summaries += w.Summaries()
	c.corrected += w.Corrections()
	// Under a limit a child may have answered in part, or not started:
	// a tool call may not have been made.
	for _, p := range w.Check(&q, out.Answer, cut || s.Limited()) {
		fail("%s", p)
	}
	checkPaidOnce(fail, w.PaidTwice())
	_ = st.DeleteJournal(context.Background(), turn)
	if level := s.RerunLevel(); level > 0 && !cut {
		c.reruns++
		checkRerun(fail, w, level)
	}
	return ok
}

// checkPaidOnce reports the requests a model answered, and billed, more
// than once.
func checkPaidOnce(fail func(string, ...any), twice []string) {
	for _, fp := range twice {
		if !compactionPaidOnce && strings.Contains(fp, resumetest.SummaryRequest) {
			continue
		}
		fail("a model answer paid again: %s", fp)
	}
}

// checkLedger reports where what the models billed over a run (or the
// whole turn) differs from what its Output says, and, given the run's
// Tree, from what the Tree says of its sub-agents.
func checkLedger(fail func(string, ...any), what string, billed resumetest.Bill, out agent.Output, tree *subagent.Tree) {
	if got := out.TotalUsage(); got != billed.Usage {
		fail("%s: the models billed %v; Output.Usage + ChildUsage say %+v", what, billed, got)
	}
	if out.Cost != billed.Cost {
		fail("%s: the models billed $%v; Output.Cost says $%v", what, billed.Cost, out.Cost)
	}
	if tree == nil {
		return
	}
	var nodes provider.Usage
	var cost float64
	for _, n := range tree.Roots() { // one node per invocation, over every run of the turn
		nodes = nodes.Add(n.TotalUsage())
		d, _ := n.Cost(nil)
		cost += d
	}
	child := out.ChildUsage
	child.Requests = 0 // the Tree's events carry tokens, not requests
	if nodes != child {
		fail("%s: the Tree's sub-agents spent %+v; Output.ChildUsage says %+v", what, nodes, child)
	}
	if want, _ := resumetest.Prices.Cost(provider.ModelUsage{Model: resumetest.Model, Usage: out.ChildUsage}); cost != want {
		fail("%s: the Tree's sub-agents cost $%v; Output.ChildUsage is worth $%v", what, cost, want)
	}
}

// checkNodes reports where what each node of a run's Tree spent itself —
// its usage less its children's, in tokens and in money — differs from
// what the models of its level billed (billed): the nodes of a level,
// from first (the level of the Tree's roots) down, are the invocations
// of one sub-agent tool, whose agents alone call that level's model, and
// the background job's child is the one agent at level Levels. Each level
// has one node, but a resident's, which has two, and a validated child's
// corrective run is its node's: the sum over a level's nodes is each
// node's own but for the resident's two, which are checked together (its
// model cannot tell which of them a compaction's summary is for). The
// cost is the one the events carried, or, given prices, the usage priced
// at them (a re-run's Tree: its events carry no cost).
func checkNodes(fail func(string, ...any), what string, s resumetest.Schedule, tree *subagent.Tree, prices *provider.Prices, first int, billed func(level int) resumetest.Bill) {
	own := map[int]provider.Usage{}
	cost := map[int]float64{}
	nodes := map[int]int{}
	var walk func(depth int, ns []*subagent.Node)
	walk = func(depth int, ns []*subagent.Node) {
		for _, n := range ns {
			level := depth
			if n.Name == subagent.DefaultForkName { // the background job's child
				level = s.Levels
			}
			u := n.TotalUsage()
			d, _ := n.Cost(prices)
			for _, c := range n.Children {
				cu := c.TotalUsage()
				u = provider.Usage{InputTokens: u.InputTokens - cu.InputTokens, OutputTokens: u.OutputTokens - cu.OutputTokens,
					CacheReadTokens: u.CacheReadTokens - cu.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens - cu.CacheWriteTokens}
				cd, _ := c.Cost(prices)
				d -= cd
			}
			own[level] = own[level].Add(u)
			cost[level] += d
			nodes[level]++
			walk(depth+1, n.Children)
		}
	}
	walk(first, tree.Roots())
	last := s.Levels - 1
	if s.Background && first == 1 {
		last = s.Levels
	}
	for level := first; level <= last; level++ {
		b := billed(level)
		want := b.Usage
		want.Requests = 0 // the Tree's events carry tokens, not requests
		if own[level] != want || cost[level] != b.Cost {
			fail("%s: the Tree's %d node(s) of level %d spent %+v ($%v) themselves; the level's model billed %v",
				what, nodes[level], level, own[level], cost[level], b)
		}
	}
}

// checkBudget reports a run (or a turn) that billed more than its limits
// allow. With budgetAsDocumented, the bound WithTokenLimit and
// WithCostLimit document: the limit plus the shortfall of the estimate
// of one call, which against the models here, that count a token per
// four bytes and one more, is a few tokens: shortfall tokens. With budgetHard, the limit plus
// one call. Else the bound documented before: the limit plus one call for
// each run in flight (each one that validates runs twice).
func checkBudget(fail func(string, ...any), what string, s resumetest.Schedule, billed resumetest.Bill, tree *subagent.Tree) {
	if !s.Limited() {
		return
	}
	runs := 1 + int64(countNodes(tree, s))
	over, how := int64(shortfall), fmt.Sprintf("one call short by at most %d tokens", shortfall)
	switch {
	case budgetAsDocumented:
	case budgetHard:
		over, how = billed.MaxCall, fmt.Sprintf("one call of at most %d tokens", billed.MaxCall)
	default:
		calls := 1 + 2*(runs-1)
		over, how = calls*billed.MaxCall, fmt.Sprintf("%d calls of at most %d tokens", calls, billed.MaxCall)
	}
	if lim := s.TokenLimit; lim > 0 {
		if bound := lim + over; billed.Usage.Tokens() > bound {
			fail("%s: spent %d tokens under a limit of %d, past the bound of %d (%s)", what, billed.Usage.Tokens(), lim, bound, how)
		}
	}
	if lim := s.CostLimit; lim > 0 {
		// Priced at the output's price, the dearer.
		per, _ := resumetest.Prices.Cost(provider.ModelUsage{Model: resumetest.Model, Usage: provider.Usage{OutputTokens: over}})
		if bound := lim + per; billed.Cost > bound {
			fail("%s: spent $%v under a limit of $%v, past the bound of $%v (%s)", what, billed.Cost, lim, bound, how)
		}
	}
}

// shortfall is how many tokens the agents' estimate of one call's input
// may fall short of what the models here count: the token they add, and
// the ids and rounding the estimate leaves out.
const shortfall = 16

// countNodes counts the sub-agent invocations of a run's Tree, or, with
// none, the most a schedule's turn makes.
func countNodes(tree *subagent.Tree, s resumetest.Schedule) int {
	if tree == nil {
		return 2*s.Levels + 2
	}
	var count func([]*subagent.Node) int
	count = func(nodes []*subagent.Node) int {
		n := len(nodes)
		for _, c := range nodes {
			n += count(c.Children)
		}
		return n
	}
	return count(tree.Roots())
}

// checkRerun re-runs the child at level once the turn has ended: what the
// models billed for it is its result's usage and its Tree's, and each tool
// of its subtree ran once more (the resident's twice).
func checkRerun(fail func(string, ...any), w *resumetest.World, level int) {
	before := w.Billed()
	atLevel := map[int]resumetest.Bill{}
	for l := level; l < w.S.Levels; l++ {
		atLevel[l] = w.BilledAt(l)
	}
	ran := map[string]int{}
	for _, names := range w.S.Tools[level:w.S.Levels] {
		for _, name := range names {
			ran[name] = w.Ran(name)
		}
	}
	w.NextRun(0)
	tree := subagent.NewTree(nil)
	res, err := w.Rerun(event.WithSink(context.Background(), tree), level)
	if err != nil {
		fail("re-run of level %d: %v", level, err)
		return
	}
	billed := w.Billed().Sub(before)
	if res.Usage != billed.Usage {
		fail("re-run of level %d: the models billed %v; its result's usage says %+v", level, billed, res.Usage)
	}
	roots := tree.Roots()
	if len(roots) != 1 {
		fail("re-run of level %d: the Tree has %d roots, want the one invocation", level, len(roots))
		return
	}
	u := billed.Usage
	u.Requests = 0
	if got := roots[0].TotalUsage(); got != u {
		fail("re-run of level %d: the models billed %v; its Tree node says %+v", level, billed, got)
	}
	if cost, _ := roots[0].Cost(resumetest.Prices); cost != billed.Cost {
		fail("re-run of level %d: the models billed $%v; its Tree node says $%v", level, billed.Cost, cost)
	}
	levels := map[int]resumetest.Bill{}
	for l := level; l < w.S.Levels; l++ {
		levels[l] = w.BilledAt(l).Sub(atLevel[l])
	}
	checkNodes(fail, fmt.Sprintf("re-run of level %d", level), w.S, tree, resumetest.Prices, level, func(l int) resumetest.Bill { return levels[l] })
	for name, was := range ran {
		if got, want := w.Ran(name)-was, w.S.Runs(resumetest.Level(name)); got != want {
			fail("re-run of level %d: %s ran %d more times, want %d", level, name, got, want)
		}
	}
}
