package subagent_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

var (
	schedules    = flag.Int("schedules", 200, "how many random schedules TestResumeSchedules runs")
	scheduleSeed = flag.Uint64("schedule-seed", 0, "the seed of TestResumeSchedules' first schedule (0: from the clock)")
)

// TestResumeSchedules runs random schedules to the end and checks, on
// each, what a person relies on: each approved call ran exactly once and a
// rejected one never, a plain call once; a question asked again (after a
// crash) keeps its id; every model answer was asked for once over all the
// runs, and paid once. It prints the number of schedules and the seed of
// a failure; -schedules and -schedule-seed run more, or one again.
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
	for i := range n {
		s := seed + uint64(i)
		if !runSchedule(t, st, s) {
			t.Fatalf("schedule with seed %d failed (rerun it: -run TestResumeSchedules -schedules 1 -schedule-seed %d)", s, s)
		}
	}
	t.Logf("%d schedules passed, seeds %d to %d", n, seed, seed+uint64(n)-1)
}

// runSchedule runs one schedule to its end, reporting each broken
// invariant, and whether all held.
func runSchedule(t *testing.T, st *store.Store, seed uint64) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := resumetest.New(resumetest.NewSchedule(r, true))
	lead, err := w.Lead()
	if err != nil {
		t.Fatal(err)
	}
	turn := fmt.Sprint("schedule-", seed)
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (%v): %s", seed, w.S, fmt.Sprintf(format, args...))
		ok = false
	}
	var q resumetest.Questions
	var usage provider.Usage
	answers := context.Background()
	var out agent.Output
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
			crashAt = 1 + r.Int64N(int64(w.ModelAnswers()))
		}
		w.NextRun(crashAt)
		out, err = lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
		if testing.Verbose() && *schedules == 1 {
			t.Logf("run %d (crash at %d): %q %v; answers %d", round, crashAt, out.Answer, err, w.Answers())
		}
		cancel()
		// Each run reports the whole turn so far: the last one all of it.
		usage = out.TotalUsage()
		var in *tool.Interrupted
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			continue // recovered: the same turn, the same answers
		case errors.As(err, &in):
			given, problems := q.Answer(r, in.Interrupts)
			for _, p := range problems {
				fail("%s", p)
			}
			if answers, err = tool.Resume(context.Background(), in, given...); err != nil {
				t.Fatal(err)
			}
			continue
		default:
			fail("run %d: %v", round, err)
			return false
		}
		break
	}
	for _, p := range append(w.Check(&q, out.Answer), w.CheckUsage(usage, true)...) {
		fail("%s", p)
	}
	_ = st.DeleteJournal(context.Background(), turn)
	return ok
}
