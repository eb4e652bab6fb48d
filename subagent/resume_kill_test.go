//go:build unix

package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

var killSchedules = flag.Int("kill-schedules", 40, "how many random schedules TestResumeSurvivesSIGKILL runs, each in processes it kills")

// killRound is what the parent tells the process that runs one round of a
// schedule, and what that process reports back.
type killRound struct {
	Seed    uint64            `json:"seed"`
	CrashAt int64             `json:"crashAt"` // the model call at which the process kills itself (0: none)
	Store   string            `json:"store"`
	Log     string            `json:"log"`
	Pending *tool.Interrupted `json:"pending,omitempty"` // what the last round asked
	Answers []tool.Answer     `json:"answers,omitempty"` // the answers to it

	// Reported by the round.
	Answer      string            `json:"answer,omitempty"`
	Err         string            `json:"err,omitempty"`
	Interrupted *tool.Interrupted `json:"interrupted,omitempty"`
	Usage       provider.Usage    `json:"usage"`
	Cost        float64           `json:"cost"`
	Cut         bool              `json:"cut,omitempty"` // ended by a limit (agent.ErrUsageLimit)
}

const killRoundEnv = "DEPUTY_TEST_KILL_ROUND"

// TestResumeSurvivesSIGKILL runs random schedules (as TestResumeSchedules
// does) in processes of their own, each round a new process over the same
// SQLite file, killed with SIGKILL at random model calls: each approved
// call ran exactly once and a rejected one never, a question asked again
// keeps its id, and no model answer was asked for twice, counted in a log
// that outlives the processes. The agents call their tools and their
// sub-agents in separate steps (world.apart), so that no kill falls
// between a tool's effect and its record, where the tool runs again.
func TestResumeSurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(killRoundEnv); spec != "" {
		runKillRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	seed := *scheduleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	var processes, kills int
	for i := range *killSchedules {
		s := seed + uint64(i)
		if !killSchedule(t, s, &processes, &kills) {
			t.Fatalf("schedule with seed %d failed (rerun it: -run TestResumeSurvivesSIGKILL -kill-schedules 1 -schedule-seed %d)", s, s)
		}
	}
	if kills == 0 {
		t.Fatal("no process was killed: the test tried nothing")
	}
	t.Logf("%d schedules passed over %d processes, %d of them killed; seeds %d to %d", *killSchedules, processes, kills, seed, seed+uint64(*killSchedules)-1)
}

// killSchedule runs one schedule to its end, a process per round.
func killSchedule(t *testing.T, seed uint64, processes, killed *int) bool {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, seed^0x51ed))
	s := drawSchedule(seed, false)
	w := resumetest.New(s)
	w.Apart = true
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("seed %d (%v): %s", seed, s, fmt.Sprintf(format, args...))
		ok = false
	}
	round := killRound{Seed: seed, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "effects.log")}
	var q resumetest.Questions
	var last killRound
	var logged int // bytes of the log read so far
	kills, cut := 0, false
	for n := 0; ; n++ {
		if n > 40 {
			fail("no end after %d rounds", n)
			return false
		}
		round.CrashAt = 0
		if r.IntN(2) == 0 {
			round.CrashAt = 1 + r.Int64N(int64(2*s.Levels+4))
		}
		got, wasKilled := startKillRound(t, dir, round)
		*processes++
		// What the models billed in the round's process.
		data, err := os.ReadFile(round.Log)
		if err != nil {
			t.Fatal(err)
		}
		billed, err := resumetest.ReadLog(data[logged:])
		if err != nil {
			t.Fatal(err)
		}
		sofar, err := resumetest.ReadLog(data)
		if err != nil {
			t.Fatal(err)
		}
		logged = len(data)
		if wasKilled {
			*killed++
			kills++
			continue // the same round again, in a new process
		}
		last = got
		// Each round reports, and is limited by, the whole turn so far,
		// the killed processes' work included (or, until the switches
		// are on, its own alone, when no process before it was killed).
		what := fmt.Sprintf("round %d", n)
		ledgerBill, budgetBill := billed.Billed, billed.Billed
		if ledgerAcrossResume {
			ledgerBill = sofar.Billed
		}
		if budgetAcrossResume {
			budgetBill = sofar.Billed
		}
		if s.Resident > 0 && kills > 0 && !ledgerCountsUnreplayed {
			if got.Usage.Tokens() > ledgerBill.Usage.Tokens() || got.Usage.Requests > ledgerBill.Usage.Requests {
				fail("%s: the models billed %v; the round reported more, %+v", what, ledgerBill, got.Usage)
			}
		} else {
			checkLedger(fail, what, ledgerBill, agent.Output{Usage: got.Usage, Cost: got.Cost}, nil)
		}
		checkBudget(fail, what, s, budgetBill, nil)
		if got.Cut {
			cut = true
			break
		}
		if got.Err != "" {
			fail("round %d: %s", n, got.Err)
			return false
		}
		if got.Interrupted == nil {
			break
		}
		round.Pending = got.Interrupted
		var problems []string
		round.Answers, problems = q.Answer(r, got.Interrupted.Interrupts)
		for _, p := range problems {
			fail("%s", p)
		}
	}
	data, err := os.ReadFile(round.Log)
	if err != nil {
		t.Fatal(err)
	}
	log, err := resumetest.ReadLog(data)
	if err != nil {
		t.Fatal(err)
	}
	for l, names := range s.Tools {
		for _, name := range names {
			want := s.Runs(l)
			approved, asked := q.Approved[name]
			if name[0] == 'g' && !approved {
				want = 0
			}
			if got := log.Ran[name]; got != want && !(s.Limited() && got < want && !(name[0] == 'g' && asked)) {
				fail("level %d: %s ran %d times across %d killed processes, want %d (approved %v, asked %v)", l, name, got, kills, want, approved, asked)
			}
		}
	}
	checkPaidOnce(fail, log.PaidTwice)
	if !cut && !strings.HasPrefix(last.Answer, "L0[") {
		fail("the answer %q", last.Answer)
	}
	return ok
}

// startKillRound runs one round in a process of its own and returns its
// report, or killed when it was killed.
func startKillRound(t *testing.T, dir string, round killRound) (killRound, bool) {
	out := filepath.Join(dir, "round.json")
	return startRound[killRound](t, "TestResumeSurvivesSIGKILL", round, out, killRoundEnv, "DEPUTY_TEST_KILL_OUT="+out)
}

// startRound runs test in a process of its own, the round's spec (round
// as JSON) in the environment variable env and env... added, and returns
// the report it wrote to out, or killed when SIGKILL ended it.
func startRound[R any](t *testing.T, test string, round any, out, env string, extra ...string) (report R, killed bool) {
	t.Helper()
	return resumetest.StartRound[R](t, test, round, out, env, nil, extra...)
}

// runKillRound is the process that runs one round.
func runKillRound(t *testing.T, spec string) {
	var round killRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(round.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	w := resumetest.New(drawSchedule(round.Seed, false))
	w.Crash = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	w.Log = func(line string) { _, _ = logf.WriteString(line + "\n") }
	w.IDPrefix = strconv.Itoa(os.Getpid()) + "_"
	w.Apart = true
	w.NextRun(round.CrashAt)
	st := openStoreAt(t, round.Store)
	j, err := st.Journal(context.Background(), "killed-turn")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if round.Pending != nil {
		if ctx, err = tool.Resume(ctx, round.Pending, round.Answers...); err != nil {
			t.Fatal(err)
		}
	}
	lead, err := w.Lead()
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	report := killRound{Answer: out.Answer, Usage: out.TotalUsage(), Cost: out.Cost}
	var in *tool.Interrupted
	switch {
	case errors.As(err, &in):
		report.Interrupted = in
	case errors.Is(err, agent.ErrUsageLimit):
		report.Cut = true
	case err != nil:
		report.Err = err.Error()
	}
	data, _ := json.Marshal(report)
	if err := os.WriteFile(os.Getenv("DEPUTY_TEST_KILL_OUT"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// openStoreAt opens the store in the SQLite file at path, with a lease
// short enough that a killed process's locks are soon free and long enough
// that a holder's renewals keep it on a loaded machine (as openStore's in
// the package's own tests); the test closes it.
func openStoreAt(t testing.TB, path string) *store.Store {
	t.Helper()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b, store.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
