package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A thread's kept job waits for a person's approval, and a turn that
// waited for it ended with the question; the thread's next turn cancels
// the job instead of answering. The cancel hands back a report that says
// so, and the job's usage, once; the turn resumed later with the
// approval does not wake it: the approved side effect never runs, no
// model answer is asked for again, and the job is counted in no other
// turn. In one process and across a restart before the answer.
func TestKeptJobCancelledWhileItWaitsWithdrawsItsQuestion(t *testing.T) {
	for _, restart := range []bool{false, true} {
		for _, mode := range callIDModes {
			name := map[bool]string{false: "in one process", true: "across a restart"}[restart] + "/" + mode.name
			t.Run(name, func(t *testing.T) {
				w := &keptWorld{t: t, open: keptStores[0].open(t, 0), id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), approve: true}
				close(w.dig)
				ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
				p := w.start()
				defer func() { p.stop(t) }()
				var children provider.Usage // what the turns count of their children
				out1, err := p.turnUnder(t, ctx, "turn-1", "cmd start")
				if err != nil {
					t.Fatal(err)
				}
				children = children.Add(out1.ChildUsage)
				job := waitState(t, p.s, ctx, subagent.JobSuspended)
				out2, err := p.turnUnder(t, ctx, "turn-2", "cmd wait "+job.ID)
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].ID != job.Questions[0].ID {
					t.Fatalf("the turn that waits for the job ended with %v, want its question", err)
				}
				children = children.Add(out2.ChildUsage)

				out3, err := p.turnUnder(t, ctx, "turn-3", "cmd cancel "+job.ID)
				if err != nil {
					t.Fatalf("the turn that cancels the job: %v", err)
				}
				children = children.Add(out3.ChildUsage)
				mustContain(t, out3.Answer, "lead: job "+job.ID+" cancelled while it waited for a person's answer")
				if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobCancelled || len(got[0].Questions) != 0 {
					t.Errorf("after the cancel the thread's jobs are %+v, want the one cancelled, asking nothing", got)
				}
				if restart {
					p.stop(t)
					p = w.start()
					if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobCancelled || len(got[0].Questions) != 0 {
						t.Errorf("after the restart the thread's jobs are %+v, want the one cancelled, asking nothing", got)
					}
				}

				rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
				if err != nil {
					t.Fatal(err)
				}
				out4, err := p.turnUnder(t, rctx, "turn-2", "cmd wait "+job.ID)
				if err != nil {
					t.Fatalf("the turn resumed with the answer: %v", err)
				}
				children = children.Add(out4.ChildUsage)
				if strings.Contains(out4.Answer, "found gold") {
					t.Errorf("the resumed turn answered %q: the cancelled job ran on", out4.Answer)
				}
				if e, n := w.effect.Load(), w.forks.Load(); e != 0 || n != 1 {
					t.Errorf("the effect ran %d times and the job's model answered %d times, want 0 and 1", e, n)
				}
				w.mu.Lock()
				billed := w.forkUsage
				w.mu.Unlock()
				if children != billed {
					t.Errorf("the turns count %+v of their children in all, want what the job's one call was billed, %+v", children, billed)
				}
				if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobCancelled {
					t.Errorf("after the resumed turn the thread's jobs are %+v, want the one cancelled", got)
				}
			})
		}
	}
}
