package subagent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/subagent"
)

// A job takes at most mailbox.MaxMessages messages in its life: sent them
// in batches its steps take, and the last batch still waiting, it refuses
// the next with an error that says so and what to do; the batch waiting
// is not lost, and the job sees every message it took once, in order. A
// message sent again by id still gets its receipt. In the three id modes.
func TestJobTakesAtMostMaxMessages(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		const batch = mailbox.MaxQueued / 2 // the last one waiting leaves room in the queue
		const batches = mailbox.MaxMessages / batch
		w.moreDigs = batches // a batch is sent during each dig, the last one taken after the refusal
		ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
		p := w.start()
		defer p.stop(t)
		p.run(t, ctx, "cmd start")
		jobs := p.s.Jobs(ctx)
		job := jobs.List()[0].ID
		var want []string
		for b := range batches {
			select {
			case <-w.inDig:
			case <-time.After(30 * time.Second):
				t.Fatalf("the job never reached dig %d", b+1)
			}
			for range batch {
				text := fmt.Sprintf("m%04d", len(want)+1)
				want = append(want, text)
				if r, err := jobs.Send(ctx, job, text); err != nil || r.State != subagent.MessageQueued {
					t.Fatalf("sending %s: %+v, %v", text, r, err)
				}
			}
			if b < batches-1 {
				w.dig <- struct{}{}
			}
		}
		_, err := jobs.Send(ctx, job, "one too many")
		if !errors.Is(err, mailbox.ErrTooMany) || !strings.Contains(err.Error(), job) || !strings.Contains(err.Error(), fmt.Sprint(mailbox.MaxMessages, " messages")) {
			t.Errorf("the message past %d was answered %v, want the job named and mailbox.ErrTooMany", mailbox.MaxMessages, err)
		}
		st := jobs.List()[0]
		if n := len(st.Messages); n != mailbox.MaxReceipts || st.Messages[n-1].Seq != mailbox.MaxMessages || st.Messages[n-1].State != subagent.MessageQueued {
			t.Fatalf("after the refusal the job lists %d receipts, the last %+v; want %d, the last message %d still queued", n, st.Messages[n-1], mailbox.MaxReceipts, mailbox.MaxMessages)
		}
		close(w.dig)
		if out := p.run(t, ctx, "cmd wait "+job); !strings.HasPrefix(out.Answer, "lead: found gold") {
			t.Errorf("the wait answered %q", out.Answer)
		}
		w.mu.Lock()
		var got []string
		for _, m := range inbound(w.lastFork) {
			for _, line := range strings.Split(m, "\n") {
				if len(line) == 5 && line[0] == 'm' {
					got = append(got, line)
				}
			}
		}
		w.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Errorf("the job saw %d messages, want the %d sent, each once, in order", len(got), len(want))
		}
		st = jobs.List()[0]
		if st.State != subagent.JobDone || len(st.Messages) != mailbox.MaxReceipts || st.Dropped != mailbox.MaxMessages-mailbox.MaxReceipts {
			t.Errorf("after the wait the job is %s listing %d receipts, %d dropped; want done, %d, %d", st.State, len(st.Messages), st.Dropped, mailbox.MaxReceipts, mailbox.MaxMessages-mailbox.MaxReceipts)
		}
		for _, r := range st.Messages {
			if r.State != subagent.MessageDelivered {
				t.Errorf("receipt %+v, want delivered", r)
				break
			}
		}
		if n, e := w.forks.Load(), w.effect.Load(); n != batches+3 || e != 1 {
			t.Errorf("the job made %d model calls and ran its effect %d times, want %d and 1", n, e, batches+3)
		}
	})
}
