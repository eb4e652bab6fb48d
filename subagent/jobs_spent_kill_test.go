//go:build unix

package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// jobKillRound is what the parent tells the process that runs one round
// of TestJobSpendingSurvivesSIGKILL, and what that process reports back.
type jobKillRound struct {
	IDs int `json:"ids"`
	// CrashAt is the model call of the job's child at which the process
	// kills itself (0: none); Cancel cancels the run as it starts.
	CrashAt int64  `json:"crashAt"`
	Cancel  bool   `json:"cancel,omitempty"`
	Store   string `json:"store"`
	Log     string `json:"log"`

	// Reported by the round.
	Answer string         `json:"answer,omitempty"`
	Err    string         `json:"err,omitempty"`
	Usage  provider.Usage `json:"usage"`
	Cost   float64        `json:"cost"`
}

const jobKillRoundEnv = "DEPUTY_TEST_JOB_KILL_ROUND"

// jobKillSchedule is the turn of TestJobSpendingSurvivesSIGKILL: a lead
// that runs a tool and starts a background job, whose child runs two
// tools and answers, and waits for it; its models count tokens by bytes
// and are priced.
func jobKillSchedule(ids int) resumetest.Schedule {
	return resumetest.Schedule{Levels: 1, Tools: [][]string{{"p0_0"}, {"p1_0", "p1_1"}}, IDs: ids, Background: true}.WholeTree()
}

// What a background job paid for counts in every later run of its turn
// even when the process running it was killed with SIGKILL before the job
// could record what it had paid for: the job's first model call is
// answered, billed and journaled, and the process dies at its second; the
// next run is cancelled as it starts, before it starts the job again, and
// the one after runs the turn to its end. Each run reports what the
// models billed over the whole turn so far, in tokens and in money; each
// tool ran once and no journaled answer was paid for twice. With models
// that name their calls afresh, not at all, and from call_0.
func TestJobSpendingSurvivesSIGKILL(t *testing.T) {
	if spec := os.Getenv(jobKillRoundEnv); spec != "" {
		runJobKillRound(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("starts a process per round")
	}
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			dir := t.TempDir()
			round := jobKillRound{IDs: ids, Store: filepath.Join(dir, "deputy.db"), Log: filepath.Join(dir, "effects.log")}
			out := filepath.Join(dir, "round.json")
			for n, how := range []string{"killed at the job's second model call", "cancelled as it starts", "runs to the end"} {
				round.CrashAt, round.Cancel = 0, false
				switch n {
				case 0:
					round.CrashAt = 2
				case 1:
					round.Cancel = true
				}
				got, killed := startRound[jobKillRound](t, "TestJobSpendingSurvivesSIGKILL", round, out, jobKillRoundEnv, "DEPUTY_TEST_JOB_KILL_OUT="+out)
				data, err := os.ReadFile(round.Log)
				if err != nil {
					t.Fatal(err)
				}
				log, err := resumetest.ReadLog(data)
				if err != nil {
					t.Fatal(err)
				}
				if killed != (n == 0) {
					t.Fatalf("round %d (%s): killed %v", n, how, killed)
				}
				if killed {
					if log.Billed.Usage.Requests < 2 {
						t.Fatalf("round %d (%s): the models billed %v before the kill; the job's first answer was not among them", n, how, log.Billed)
					}
					continue
				}
				if got.Usage != log.Billed.Usage || got.Cost != log.Billed.Cost {
					t.Errorf("round %d (%s): the models billed %v over the turn; the run reports %+v, $%v", n, how, log.Billed, got.Usage, got.Cost)
				}
				switch {
				case n == 1 && got.Err == "":
					t.Errorf("round %d (%s): it ended without the cancellation's error", n, how)
				case n == 2 && got.Err != "":
					t.Errorf("round %d (%s): %s", n, how, got.Err)
				case n == 2 && got.Answer != "L0[L1[ran p1_0;ran p1_1];ran p0_0]":
					t.Errorf("round %d (%s): the answer %q", n, how, got.Answer)
				}
				if n < 2 {
					continue
				}
				for _, name := range []string{"p0_0", "p1_0", "p1_1"} {
					if log.Ran[name] != 1 {
						t.Errorf("%s ran %d times, want once", name, log.Ran[name])
					}
				}
				for _, fp := range log.PaidTwice {
					t.Errorf("a model answer paid again: %s", fp)
				}
			}
		})
	}
}

// runJobKillRound is the process that runs one round.
func runJobKillRound(t *testing.T, spec string) {
	var round jobKillRound
	if err := json.Unmarshal([]byte(spec), &round); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(round.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s := jobKillSchedule(round.IDs)
	w := resumetest.New(s)
	var recorded atomic.Int64 // model answers the journal holds
	w.Crash = func() {
		// The lead's model call beside the job's may have been answered
		// and not yet recorded: a kill then loses what it paid, as no
		// journal can help. And the lead's tool p0_0 runs beside the job:
		// killed after its effect and before its result is recorded, it
		// runs again in the next run, as agent.WithJournal says. Die once
		// every answer given is recorded and the lead's second, the job's
		// wait, is among them: the lead asks for it only once its first
		// step's results are recorded, and then waits for the job, so no
		// other answer comes.
		const answers = 3 // the lead's two and the job's child's first
		for deadline := time.Now().Add(30 * time.Second); (recorded.Load() < answers || recorded.Load() < w.Answers()) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	w.CrashIn = func(level int) bool { return level == s.Levels } // the job's child
	w.Log = func(line string) { _, _ = logf.WriteString(line + "\n") }
	w.IDPrefix = strconv.Itoa(os.Getpid()) + "_"
	w.NextRun(round.CrashAt)
	b, err := sqlite.Open(round.Store)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(answerCounter{Backend: b, n: &recorded}, store.WithLeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, err := st.Journal(context.Background(), "job-killed-turn")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if round.Cancel {
		ctx = event.WithSink(ctx, event.SinkFunc(func(e event.Event) {
			if e.Type == event.RunStarted {
				cancel()
			}
		}))
	}
	lead, err := w.Lead()
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	report := jobKillRound{Answer: out.Answer, Usage: out.TotalUsage(), Cost: out.Cost}
	if err != nil {
		report.Err = err.Error()
	}
	data, _ := json.Marshal(report)
	if err := os.WriteFile(os.Getenv("DEPUTY_TEST_JOB_KILL_OUT"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// answerCounter counts the model answers (journal entries under a step's
// key, ".../m3") its store has written.
type answerCounter struct {
	store.Backend
	n *atomic.Int64
}

func (b answerCounter) Put(ctx context.Context, writes ...store.Write) error {
	err := b.Backend.Put(ctx, writes...)
	if err == nil {
		for _, w := range writes {
			last := w.Key[strings.LastIndexByte(w.Key, '/')+1:]
			if len(last) > 1 && last[0] == 'm' && strings.Trim(last[1:], "0123456789") == "" {
				b.n.Add(1)
			}
		}
	}
	return err
}
