package subagent_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/tool"
)

// What a background job paid for in a run that then stopped (for a
// question, here) counts in every later run of the turn, whether that run
// replays the job, is stopped before it starts the job again (cancelled
// as it starts), or is stopped while the job runs again (cancelled at
// its first model call): each run's Output is what the models billed over
// the whole turn so far, and each tool runs once. With models that name
// their calls afresh, not at all, and from call_0.
func TestJobSpendingCountsInEveryLaterRun(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids ", ids), func(t *testing.T) {
			s := resumetest.Schedule{Levels: 1, Tools: [][]string{{"g0_0"}, {"p1_0", "p1_1"}}, IDs: ids, Background: true}
			w := resumetest.New(s)
			lead, err := w.Lead()
			if err != nil {
				t.Fatal(err)
			}
			st := newStore(t)
			var q resumetest.Questions
			r := rand.New(rand.NewPCG(1, 2))
			answers := context.Background()
			var out agent.Output
			for round, how := range []string{"asks", "cancelled as it starts", "cancelled at its first model call", "answers"} {
				j, err := st.Journal(context.Background(), "job-ledger")
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(answers)
				w.Crash = cancel
				w.NextRun(0)
				switch how {
				case "cancelled as it starts":
					ctx = event.WithSink(ctx, event.SinkFunc(func(e event.Event) {
						if e.Type == event.RunStarted {
							cancel()
						}
					}))
				case "cancelled at its first model call":
					w.NextRun(1)
				}
				out, err = lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
				cancel()
				billed := w.Billed()
				if got := out.TotalUsage(); got != billed.Usage {
					t.Errorf("run %d (%s): the models billed %v; Output.Usage + ChildUsage say %+v", round, how, billed, got)
				}
				var in *tool.Interrupted
				switch {
				case how == "asks" && errors.As(err, &in):
					given, problems := q.Answer(r, in.Interrupts)
					for _, p := range problems {
						t.Error(p)
					}
					if answers, err = tool.Resume(context.Background(), in, given...); err != nil {
						t.Fatal(err)
					}
				case how == "answers" && err == nil:
				case how != "asks" && how != "answers" && errors.Is(err, context.Canceled):
				default:
					t.Fatalf("run %d (%s): %v", round, how, err)
				}
			}
			for _, p := range w.Check(&q, out.Answer, false) {
				t.Error(p)
			}
		})
	}
}
