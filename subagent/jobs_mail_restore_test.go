package subagent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/subagent"
)

// A kept job sent more messages in its life than its box queues at once
// (mailbox.MaxQueued), most of them taken before its process stops and
// the rest still waiting, continues after the restart: the messages it
// took are found taken, the waiting ones reach it, and it sees each once,
// in the order sent. In the three id modes.
func TestKeptJobRestartsAfterManyMessages(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		w.moreDigs = 2 // digs three times, taking a batch before the second and the third, and after it
		const batches, batch = 3, 40
		const all = batches * batch
		if batch > mailbox.MaxQueued || all <= mailbox.MaxQueued {
			t.Fatalf("the batches do not test what they mean to")
		}
		ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
		p := w.start()
		p.run(t, ctx, "cmd start")
		job := p.s.Jobs(ctx).List()[0].ID
		var want []string
		for b := range batches {
			select {
			case <-w.inDig: // the step before took the messages sent so far
			case <-time.After(30 * time.Second):
				t.Fatalf("the job never reached dig %d", b+1)
			}
			for range batch {
				text := fmt.Sprintf("m%03d", len(want)+1)
				want = append(want, text)
				if r, err := p.s.Jobs(ctx).Send(ctx, job, text); err != nil || r.State != subagent.MessageQueued {
					t.Fatalf("sending %s: %+v, %v", text, r, err)
				}
			}
			if b < batches-1 {
				w.dig <- struct{}{}
			}
		}
		p.stop(t) // in the third dig: the last batch waits
		if n := w.forks.Load(); n != 4 {
			t.Fatalf("before the restart the job made %d model calls, want 4", n)
		}

		close(w.dig)
		p = w.start()
		defer p.stop(t)
		if out := p.run(t, ctx, "cmd wait "+job); !strings.HasPrefix(out.Answer, "lead: found gold") {
			t.Errorf("the wait after the restart answered %q", out.Answer)
		}
		w.mu.Lock()
		var got []string // the lines of the messages, which a step takes together
		for _, m := range inbound(w.lastFork) {
			for _, line := range strings.Split(m, "\n") {
				if len(line) == 4 && line[0] == 'm' {
					got = append(got, line)
				}
			}
		}
		w.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Errorf("the job's last step saw %d messages %q, want the %d sent, each once, in order", len(got), got, all)
		}
		if n, e := w.forks.Load(), w.effect.Load(); n != 5 || e != 1 {
			t.Errorf("the job made %d model calls and ran its effect %d times, want 5 (one after the restart) and 1", n, e)
		}
		st := p.s.Jobs(ctx).List()
		if len(st) != 1 || st[0].State != subagent.JobDone || len(st[0].Messages) != mailbox.MaxReceipts || st[0].Dropped != all-mailbox.MaxReceipts {
			t.Fatalf("after the wait the thread's jobs are %+v, want the one done, listing the last %d of its %d messages", st, mailbox.MaxReceipts, all)
		}
		for i, r := range st[0].Messages {
			if r.State != subagent.MessageDelivered || r.Seq != all-mailbox.MaxReceipts+i+1 {
				t.Errorf("receipt %d is %+v, want message %d delivered", i, r, all-mailbox.MaxReceipts+i+1)
			}
		}
	})
}
