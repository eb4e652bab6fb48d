package subagent

import (
	"context"
	"encoding/json"

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
