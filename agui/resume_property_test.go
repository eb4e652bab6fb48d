package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

var (
	aguiSchedules    = flag.Int("agui-schedules", 60, "how many random schedules TestAGUIResumeSchedules runs")
	aguiScheduleSeed = flag.Uint64("agui-schedule-seed", 0, "the seed of TestAGUIResumeSchedules' first schedule (0: from the clock)")
)

// TestAGUIResumeSchedules runs the random trees of the resume property
// test through the AG-UI handler, as a chat client does: each round of
// questions is answered with a resume body; a resumed run is cut at a
// random model call by its client going away, and sent again; between
// rounds the server is sometimes restarted on the same store. On every
// schedule: each approved call ran exactly once and a rejected one never;
// a question asked again keeps its id; no model answer is asked for or
// paid twice; a turn under a limit spends, over all its runs, no more
// than the limit and the bound its options document; and when the
// thread's turn has ended, nothing of it is left in the store but the
// thread.
func TestAGUIResumeSchedules(t *testing.T) {
	seed := *aguiScheduleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	n := *aguiSchedules
	if testing.Short() {
		n = min(n, 15)
	}
	path := filepath.Join(t.TempDir(), "deputy.db")
	var c scheduleCounts
	for i := range n {
		s := seed + uint64(i)
		if !aguiSchedule(t, path, s, &c) {
			t.Fatalf("schedule with seed %d failed (rerun it: -run TestAGUIResumeSchedules -agui-schedules 1 -agui-schedule-seed %d)", s, s)
		}
	}
	t.Logf("%d schedules passed (%d runs, %d of them cut by their client, %d server restarts), seeds %d to %d", n, c.runs, c.cut, c.restarts, seed, seed+uint64(n)-1)
}

// scheduleCounts is what the schedules did, over all of them.
type scheduleCounts struct{ runs, cut, restarts int }

// scheduleServer serves the world's lead on threads kept in the store at
// path, built afresh for every request.
func scheduleServer(t *testing.T, path string, w *resumetest.World) (url string, st *store.Store, stop func()) {
	st = sqliteStore(t, path)
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return w.Lead()
	}, agui.WithThreads(st)))
	srv := serve(t, h)
	return srv.URL, st, func() { srv.Close(); st.Close() }
}

func aguiSchedule(t *testing.T, path string, seed uint64, c *scheduleCounts) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// Half the schedules are whole trees (validated children, a resident
	// that compacts, limits, admission that meets 429s), whose models
	// count tokens as a tokenizer would and are priced: on those,
	// RUN_FINISHED's usage is checked against what the models billed.
	var w *resumetest.World
	if r.IntN(2) == 0 {
		w = resumetest.New(resumetest.NewTreeSchedule(r, true))
	} else {
		w = resumetest.New(resumetest.NewSchedule(r, true))
	}
	url, st, stop := scheduleServer(t, path, w)
	defer func() { stop() }()
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (%v): %s", seed, w.S, fmt.Sprintf(format, args...))
		ok = false
	}
	thread := fmt.Sprint("thread-", seed)
	var q resumetest.Questions
	var usage provider.Usage
	var resume []tool.Answer
	var runs []string
	aborted := 0
	answer := ""
	limited := false // the turn ended at its limit (ErrUsageLimit)
	for round := 0; ; round++ {
		if round > 40 {
			fail("no end after %d runs", round)
			return false
		}
		runID := fmt.Sprint("run-", round)
		runs = append(runs, runID)
		ctx, cancel := context.WithCancel(context.Background())
		w.Crash = cancel
		crashAt := int64(0)
		if resume != nil && r.IntN(3) == 0 {
			// A new run cut short is sent again as a new run, which does
			// its work again: only a resumed run's work is kept for it.
			crashAt = 1 + r.Int64N(int64(w.ModelAnswers()))
		}
		w.NextRun(crashAt)
		evs, cut := postRun(t, ctx, url, runBody(thread, runID, resume))
		cancel()
		c.runs++
		if p := overBudget(w.S, w.Billed()); p != "" {
			fail("run %d: %s", round, p)
		}
		if testing.Verbose() && *aguiSchedules == 1 {
			t.Logf("run %d (crash at %d, cut %v): %d events, answers %d", round, crashAt, cut, len(evs), w.Answers())
			for _, e := range evs {
				if e.Type == event.RunFinished || e.Type == event.RunError || e.Type == event.ToolCallResult {
					t.Logf("  %s %s %s %s", e.Type, e.Content, e.Outcome, e.Result)
				}
			}
		}
		if cut {
			aborted++
			c.cut++
			continue // the client sends the same resume again
		}
		if len(evs) == 0 {
			fail("run %d: no events", round)
			return false
		}
		last := evs[len(evs)-1]
		if last.Type == event.RunError && w.S.Limited() && strings.Contains(last.Message, agent.ErrUsageLimit.Error()) {
			limited = true
			break
		}
		if last.Type != event.RunFinished {
			fail("run %d ended with %s %s", round, last.Type, last.Message)
			return false
		}
		// Each run reports the whole turn so far: the last one all of it.
		usage = provider.Usage{}
		var cost float64
		for _, u := range usageOf(t, last.Usage) {
			usage.InputTokens += u.Input
			usage.OutputTokens += u.Output
			usage.Requests += u.Input / 10 // each answer is 10 tokens in
			cost += u.Cost
		}
		if w.S.Tree() {
			// What the models billed over the whole turn so far, the runs
			// its client left included.
			if b := w.Billed(); usage.InputTokens != b.Usage.InputTokens || usage.OutputTokens != b.Usage.OutputTokens || cost != b.Cost {
				fail("run %d: the models billed %v; RUN_FINISHED says %d in, %d out, $%v", round, b, usage.InputTokens, usage.OutputTokens, cost)
			}
		}
		var o runOutcome
		if len(last.Outcome) > 0 {
			if err := json.Unmarshal(last.Outcome, &o); err != nil {
				t.Fatal(err)
			}
		}
		if o.Type != "interrupt" {
			var res string
			_ = json.Unmarshal(last.Result, &res)
			answer = res
			break
		}
		given, problems := q.Answer(r, o.Interrupts)
		for _, p := range problems {
			fail("%s", p)
		}
		resume = given
		if r.IntN(4) == 0 {
			stop()
			url, st, stop = scheduleServer(t, path, w)
			c.restarts++
		}
	}
	// What a cut run paid never reached its client: then the usage
	// reported counts each answer at most once. (A whole tree's is checked
	// against the bill above, run by run.)
	problems := w.Check(&q, answer, limited || w.S.Limited())
	if !w.S.Tree() {
		problems = append(problems, w.CheckUsage(usage, aborted == 0)...)
	} else {
		problems = append(problems, w.PaidTwice()...)
	}
	for _, p := range problems {
		fail("%s", p)
	}
	if limited {
		// A run that failed keeps its turn to be run again: what is left
		// is the server's to sweep.
		return ok
	}
	for _, run := range runs {
		if n := entries(t, st, thread, run); n != 0 {
			fail("the ended turn left %d journal entries under %s", n, run)
		}
	}
	if keys, err := st.Keys(context.Background(), "", "", store.MaxPage); err != nil {
		t.Fatal(err)
	} else {
		for _, k := range keys {
			if strings.Contains(k, thread) && !strings.HasPrefix(k, "thread/") {
				fail("the ended turn left %q in the store", k)
			}
		}
	}
	return ok
}

// overBudget says how a turn that billed what billed, over all its runs
// (those their client left too), spent past the bound WithTokenLimit and
// WithCostLimit document for its lead: the limit plus the estimate's
// shortfall on the last call of each run spending at once, the lead and
// at most 2·Levels+2 sub-agent invocations, which against the models
// here (that count a token per four bytes and one more) is at most
// scheduleShortfall tokens each; "" when it did not, or has no limit.
func overBudget(s resumetest.Schedule, billed resumetest.Bill) string {
	runs := int64(1 + 2*s.Levels + 2)
	over := runs * scheduleShortfall
	if lim := s.TokenLimit; lim > 0 && billed.Usage.Tokens() > lim+over {
		return fmt.Sprintf("spent %d tokens under a limit of %d, past the bound of %d (%d runs short by at most %d tokens)",
			billed.Usage.Tokens(), lim, lim+over, runs, scheduleShortfall)
	}
	if lim := s.CostLimit; lim > 0 {
		// Priced at the output's price, the dearer.
		per, _ := resumetest.Prices.Cost(provider.ModelUsage{Model: resumetest.Model, Usage: provider.Usage{OutputTokens: over}})
		if billed.Cost > lim+per {
			return fmt.Sprintf("spent $%v under a limit of $%v, past the bound of $%v (%d runs short by at most %d tokens)",
				billed.Cost, lim, lim+per, runs, scheduleShortfall)
		}
	}
	return ""
}

// scheduleShortfall is how many tokens the agents' estimate of one call's
// input may fall short of what the schedules' models count: the token
// they add, and the ids and rounding the estimate leaves out (as the
// in-process property test allows).
const scheduleShortfall = 16

// postRun posts a run and reads its events, checking their framing, or
// reports cut when ctx was cancelled before the stream ended. A thread still busy with the run its
// client left is asked again until it is free.
func postRun(t *testing.T, ctx context.Context, url, body string) (evs []event.Event, cut bool) {
	t.Helper()
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, true
			}
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusConflict && try < 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "run in progress") {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			t.Fatalf("409: %s", b)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			if ctx.Err() != nil {
				return nil, true // the client went away mid-stream
			}
			t.Fatal(err)
		}
		return events(readFrames(t, bytes.NewReader(body))), false
	}
}
