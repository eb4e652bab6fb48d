package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// turnUnder runs one turn of the thread of ctx under the journal name, as
// a served thread does: the journal is deleted once the turn ends
// unsuspended, and kept while it waits for a person.
func (p *process) turnUnder(t *testing.T, ctx context.Context, name, text string) (agent.Output, error) {
	t.Helper()
	j, err := p.st.Journal(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.a.Run(agent.WithJournal(ctx, j), agent.Input{Text: text})
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		if derr := p.st.DeleteJournal(ctx, name); derr != nil {
			t.Fatal(derr)
		}
	}
	return out, err
}

// waitState waits until the thread's job is in state.
func waitState(t *testing.T, s *subagent.Spawner, ctx context.Context, state string) subagent.JobStatus {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if l := s.Jobs(ctx).List(); len(l) == 1 && l[0].State == state {
			return l[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is %+v, want it %s", s.Jobs(ctx).List(), state)
		}
	}
}

// A thread's kept job whose sub-agent asks a person (an approval) waits
// for the answer across a restart of its process: the next process finds
// it still waiting, with its question; the thread's turn that waits for it
// ends with the question, attributed to the job's sub-agent, and the turn
// resumed with the answer runs the approved side effect once (a declined
// one never), asks no model answer twice, and collects the job's answer.
func TestKeptJobWaitingForAPersonSurvivesARestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		for _, approve := range []bool{true, false} {
			for _, mode := range callIDModes {
				name := map[bool]string{false: "in one process", true: "across a restart"}[restart] + "/" +
					map[bool]string{true: "approved", false: "declined"}[approve] + "/" + mode.name
				t.Run(name, func(t *testing.T) {
					w := &keptWorld{t: t, open: keptStores[0].open(t, 0), id: mode.id, dig: make(chan struct{}), inDig: make(chan struct{}, 1), approve: true}
					close(w.dig)
					ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
					p := w.start()
					if _, err := p.turnUnder(t, ctx, "turn-1", "cmd start"); err != nil {
						t.Fatal(err)
					}
					job := waitState(t, p.s, ctx, subagent.JobSuspended)
					if len(job.Questions) != 1 || w.effect.Load() != 0 {
						t.Fatalf("the job waits with the questions %+v, its effect run %d times; want one question, no effect", job.Questions, w.effect.Load())
					}
					if restart {
						p.stop(t)
						p = w.start()
						if got := waitState(t, p.s, ctx, subagent.JobSuspended); len(got.Questions) != 1 || got.Questions[0].ID != job.Questions[0].ID {
							t.Fatalf("after the restart the job waits with %+v, want the question %+v", got.Questions, job.Questions)
						}
					}
					defer func() { p.stop(t) }()
					_, err := p.turnUnder(t, ctx, "turn-2", "cmd wait "+job.ID)
					var in *tool.Interrupted
					if !errors.As(err, &in) || len(in.Interrupts) != 1 || in.Interrupts[0].ID != job.Questions[0].ID {
						t.Fatalf("the turn that waits for the job ended with %v, want its question %s", err, job.Questions[0].ID)
					}
					if notes := notesIn(w.firstReq); len(notes) != 1 || !strings.Contains(notes[0], "waits for a person's answer") {
						t.Errorf("the turn after the job asked is told %q, want that it waits for a person", notes)
					}
					payload := `{"approved":` + map[bool]string{true: "true", false: "false"}[approve] + `}`
					rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(payload)})
					if err != nil {
						t.Fatal(err)
					}
					out, err := p.turnUnder(t, rctx, "turn-2", "cmd wait "+job.ID)
					if err != nil {
						t.Fatalf("the resumed turn: %v", err)
					}
					want := int64(0)
					if approve {
						want = 1
					}
					if !strings.HasPrefix(out.Answer, "lead: found gold") {
						t.Errorf("the resumed turn answered %q, want the job's answer", out.Answer)
					}
					if e, n := w.effect.Load(), w.forks.Load(); e != want || n != 3 {
						t.Errorf("the effect ran %d times and the job's model answered %d times, want %d and 3", e, n, want)
					}
					w.mu.Lock()
					billed := w.forkUsage
					w.mu.Unlock()
					if out.ChildUsage != billed {
						t.Errorf("the resumed turn counts %+v of its children, want what the job's calls were billed, %+v", out.ChildUsage, billed)
					}
					if got := p.s.Jobs(ctx).List(); len(got) != 1 || got[0].State != subagent.JobDone {
						t.Errorf("after the resumed turn the thread's jobs are %+v, want the one done", got)
					}
				})
			}
		}
	}
}
