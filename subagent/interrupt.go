package subagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/tool"
)

// An invocation under a journal is the same invocation each time its turn
// is run: its interrupts and its sub-agent run id are derived from its
// journal key, so that a resumed turn finds the answers to the questions
// its children asked and re-announces the run ids the client saw.

// journalInvocation returns the context an invocation keyed key in js runs
// under, with its children's journal scope (under which tool.Ask derives
// its interrupts' ids), and its stable run id.
func journalInvocation(ctx context.Context, js *journal.Scope, key string) (context.Context, string) {
	return journal.With(ctx, js.Child(key)), id.FromHash("sub_", js.Sum(key))
}

// job returns the job id and the sub-agent run id of the background job
// started by the parent's tool call callID: the same each time the turn is
// run (a call id the model repeats in a later step counts up). salt is
// the turn's (turnSalt) for a thread's job, "" for a run's.
func jobIDs(s *journal.Scope, callID, salt string) (jobID, runID string) {
	sum := sha256.Sum256([]byte(s.J.Turn() + "\x1f" + salt + s.Key("job", []byte(callID))))
	return "job_" + hex.EncodeToString(sum[:8]), id.FromHash("sub_", sum[8:16])
}

// suspend reports whether err is an interrupt; if so it attributes the
// interrupts asked by the invocation's own tools to runID and returns their
// ids (none when only a descendant asked).
func suspend(err error, runID string) (own []string, ok bool) {
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		return nil, false
	}
	for i := range in.Interrupts {
		if in.Interrupts[i].SubagentRunID == "" {
			in.Interrupts[i].SubagentRunID = runID
			own = append(own, in.Interrupts[i].ID)
		}
	}
	return own, true
}

// interrupted reports whether err is an interrupt: it is not the child's
// failure, and goes up to the top-level run as it is.
func interrupted(err error) bool {
	if err == nil {
		return false // before in, which escapes: no allocation
	}
	var in *tool.Interrupted
	return errors.As(err, &in)
}
