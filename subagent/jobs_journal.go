package subagent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/mailbox"
)

// A job's invocation that finished is replayed whole when its turn runs
// again, without its loop, which is where a step's messages are found
// delivered (agent/inbox.go): so the invocation records, beside its own
// entry and before it, which messages it took and before which step, and
// its replay tells the job's mailbox, so that the parent's send, run
// again, gets the receipt of a message already delivered.

// mailKey is the journal key of the messages an invocation took.
func mailKey(key string) string { return key + "/mail" }

// recordMail records the messages the job's sub-agent took, if any.
func recordMail(ctx context.Context, js *journal.Scope, key string) error {
	box := mailbox.From(ctx)
	if box == nil {
		return nil
	}
	took := box.Taken()
	if len(took) == 0 {
		return nil
	}
	v, _ := json.Marshal(took) // strings and numbers: it cannot fail
	return js.J.Record(context.WithoutCancel(ctx), mailKey(key), journal.Entry{Value: v})
}

// replayMail tells the job's mailbox which messages the recorded
// invocation took.
func replayMail(ctx context.Context, js *journal.Scope, key string) {
	box := mailbox.From(ctx)
	if box == nil {
		return
	}
	e, ok := js.J.Lookup(mailKey(key))
	if !ok {
		return
	}
	var took []mailbox.Receipt
	if json.Unmarshal(e.Value, &took) == nil {
		box.Restore(took)
	}
}

// A job that stops to wait for a person (its sub-agent asked) under its
// turn's journal is run again by the turn resumed with the answers, from
// the journal of its sub-agent. The messages it had not taken yet are
// recorded as it suspends and put back in its new mailbox before it runs
// again, so that it takes them at its next step, once, whenever the
// parent's send runs again in the resumed turn (which then gets their
// receipt): left to that send, a job that ran on before it would never
// get them.

// suspendedMail is what a suspended job's mailbox held: the receipts of
// the messages it took, for their places, and those still waiting.
type suspendedMail struct {
	Taken   []mailbox.Receipt `json:"taken,omitempty"`
	Waiting []mailbox.Message `json:"waiting,omitempty"`
}

// waitingKey is the journal key of the messages a suspended invocation
// had not taken.
func waitingKey(key string) string { return key + "/waiting" }

// recordWaiting records the messages the suspended job's sub-agent had
// not taken, if any (or if an earlier run of the turn recorded some),
// and closes its mailbox to new ones. A record that does not land leaves
// them undelivered, as a job that ended leaves them.
func recordWaiting(ctx context.Context, js *journal.Scope, key string) {
	box := mailbox.From(ctx)
	if box == nil {
		return
	}
	box.Suspend(func(taken []mailbox.Receipt, waiting []mailbox.Message) bool {
		if _, had := js.J.Lookup(waitingKey(key)); len(waiting) == 0 && !had {
			return true
		}
		v, _ := json.Marshal(suspendedMail{Taken: taken, Waiting: waiting}) // strings and numbers: it cannot fail
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return js.J.Record(wctx, waitingKey(key), journal.Entry{Value: v}) == nil
	})
}

// requeueWaiting puts the messages an earlier run of the turn recorded
// as waiting when the job suspended back in its mailbox, after those it
// had taken, so that each keeps its place.
func requeueWaiting(ctx context.Context, js *journal.Scope, key string) {
	box := mailbox.From(ctx)
	if box == nil {
		return
	}
	e, ok := js.J.Lookup(waitingKey(key))
	if !ok {
		return
	}
	var m suspendedMail
	if json.Unmarshal(e.Value, &m) != nil {
		return
	}
	box.Restore(m.Taken)
	for _, w := range m.Waiting {
		_, _ = box.Requeue(w)
	}
}
