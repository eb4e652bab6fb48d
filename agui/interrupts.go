package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/outcome"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// A run on a stored thread (WithThreads) runs under a journal of its
// sub-agent invocations. When a tool at any depth asks for outside input
// (tool.Ask, tool.RequireApproval), the run ends with RUN_FINISHED whose
// outcome is "interrupt" and the thread keeps the suspended run: its
// journal, the input it was handed and the interrupts it waits for. The
// next request on the thread answers them in RunAgentInput.resume; the
// handler runs the same turn again under the journal with the answers, so
// finished children are not run again, the suspended ones continue under
// the same subagentRunId, and the calls that asked get their answers. The
// agents' ReAct loops replay their own model calls from the journal.

// suspendedRun is a thread's run waiting for answers, as stored.
type suspendedRun struct {
	// Turn names the run's journal.
	Turn string `json:"turn"`
	// Input is what the agent was handed; the resumed run gets the same.
	Input []provider.Message `json:"input"`
	// Pending is what the run waits for.
	Pending tool.Interrupted `json:"pending"`
}

// loadSuspended returns the thread's suspended run, or nil.
func loadSuspended(ctx context.Context, st *store.Store, th thread) (*suspendedRun, error) {
	threadID := th.id
	data, _, err := st.Get(ctx, th.suspendedKey())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeError(threadID, err)
	}
	var s suspendedRun
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, &threadError{http.StatusInternalServerError, fmt.Errorf("thread %q: its suspended run cannot be read: %v (agui.DeleteThread starts the thread afresh)", threadID, err)}
	}
	return &s, nil
}

// resumeStatus gives a refused resume its HTTP status.
func resumeStatus(err error) int {
	switch {
	case errors.Is(err, tool.ErrNothingSuspended):
		return http.StatusConflict
	case errors.Is(err, tool.ErrExpired):
		return http.StatusGone
	}
	return http.StatusBadRequest
}

// beginResume checks a request against the thread's suspended run s (nil:
// none) and returns the input and journal turn of the run to make.
func beginResume(in *RunInput, th thread, s *suspendedRun, news []provider.Message, conv []provider.Message) (msgs []provider.Message, turn string, err error) {
	if len(in.Resume) == 0 {
		if s != nil {
			return nil, "", &threadError{http.StatusConflict, fmt.Errorf("thread %q has a run waiting for answers to interrupts %s: send them in resume (status resolved or cancelled)",
				in.ThreadID, interruptIDs(&s.Pending))}
		}
		if len(news) == 0 {
			return nil, "", &threadError{http.StatusBadRequest, errors.New("messages ends with no user message: send the new user message (the server keeps the thread's earlier messages)")}
		}
		msgs = make([]provider.Message, 0, len(conv)+len(news))
		return append(append(msgs, conv...), news...), th.journalName(in.RunID), nil
	}
	if s == nil {
		err := fmt.Errorf("thread %q: %w (the answers may have been given already): send a new message without resume", in.ThreadID, tool.ErrNothingSuspended)
		return nil, "", &threadError{resumeStatus(err), err}
	}
	if _, err := tool.Resume(context.Background(), &s.Pending, in.Resume...); err != nil {
		return nil, "", &threadError{resumeStatus(err), fmt.Errorf("resume: %w", err)}
	}
	return s.Input, s.Turn, nil
}

func interruptIDs(p *tool.Interrupted) string {
	ids := make([]string, len(p.Interrupts))
	for i, it := range p.Interrupts {
		ids[i] = it.ID
	}
	return strings.Join(ids, ", ")
}

// runContext returns ctx with the turn's journal and, on a resume, its
// answers.
func (t *threadTurn) runContext(ctx context.Context, in *RunInput) (context.Context, error) {
	j := t.journal
	if j == nil {
		var err error
		if j, err = t.st.Journal(ctx, t.turn); err != nil {
			return ctx, fmt.Errorf("agui: opening the journal of thread %q: %w", in.ThreadID, err)
		}
	}
	ctx = agent.WithJournal(ctx, j)
	if t.suspended != nil && len(in.Resume) > 0 {
		return tool.Resume(ctx, &t.suspended.Pending, in.Resume...)
	}
	return ctx, nil
}

// resumable refuses, before any stream, a resume of a React agent whose
// journal is gone: the resumed run would do again, and pay for again,
// everything the run that asked had done, and might not reach the calls
// its answers are for. Other agents keep their own account of where they
// stopped.
func (t *threadTurn) resumable(ctx context.Context, in *RunInput, a agent.Agent) error {
	if t.suspended == nil || len(in.Resume) == 0 {
		return nil
	}
	j, err := t.st.Journal(ctx, t.turn)
	if err != nil {
		return storeError(in.ThreadID, err)
	}
	t.journal = j
	if _, react := a.(*agent.React); !react || j.Len() > 0 {
		return nil
	}
	return &threadError{http.StatusConflict, fmt.Errorf("agui: thread %q: %w: the journal of the run that asked %s is gone (deleted, or swept as a crashed run's), and without it the resumed run would run again what was done: send the message again without resume (agui.Handler.DeleteThread starts the thread afresh)",
		in.ThreadID, tool.ErrUnusedAnswer, interruptIDs(&t.suspended.Pending))}
}

// suspend stores the run as waiting for in's interrupts.
func (t *threadTurn) suspend(ctx context.Context, in *tool.Interrupted) error {
	threadID := t.th.id
	data, err := json.Marshal(suspendedRun{Turn: t.turn, Input: t.in, Pending: *in})
	if err == nil {
		// Fenced by the thread's lock: a stalled replica cannot overwrite
		// the next run's state.
		err = t.lock.Put(context.WithoutCancel(ctx), t.th.suspendedKey(), data, store.AnyVersion)
	}
	if err != nil {
		return fmt.Errorf("agui: storing the suspended run of thread %q (it cannot be resumed: send the message again): %w", threadID, err)
	}
	return nil
}

// abandoned forgets the journal of a run that ended without being
// suspended and whose journal no suspended run needs: a new run, which
// failed or whose client went away (its runId is not used again). A
// resumed run that failed keeps the journal of the run it resumes, which
// still waits for its answers.
func (t *threadTurn) abandoned(ctx context.Context) {
	if t.suspended == nil {
		_ = t.st.DeleteJournal(context.WithoutCancel(ctx), t.turn)
	}
}

// finished forgets the suspended run and the journal of a turn that ended.
func (t *threadTurn) finished(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if t.suspended != nil {
		_ = t.st.Delete(ctx, t.th.suspendedKey())
	}
	_ = t.st.DeleteJournal(ctx, t.turn)
}

// interruptEvent returns RUN_FINISHED for a run that waits for in.
func interruptEvent(threadID, runID string, in *tool.Interrupted, usage json.RawMessage) event.Event {
	its := make([]tool.Interrupt, len(in.Interrupts))
	for i, it := range in.Interrupts {
		// The call that asked, as the stream names it.
		it.ToolCallID = event.CallID(it.SubagentRunID, it.ToolCallID)
		its[i] = it
	}
	b, _ := json.Marshal(its) // strings, times and valid JSON only
	return event.Event{Type: event.RunFinished, ThreadID: threadID, RunID: runID, Outcome: outcome.Interrupt(b), Usage: usage}
}

// asInterrupted finds the interrupts a run ended with.
func asInterrupted(err error) (*tool.Interrupted, bool) {
	var in *tool.Interrupted
	return in, errors.As(err, &in)
}

// forgetSuspended deletes the thread's suspended run and its journal.
func forgetSuspended(ctx context.Context, st *store.Store, th thread) error {
	s, err := loadSuspended(ctx, st, th)
	if err != nil || s == nil {
		return err
	}
	if err := st.DeleteJournal(ctx, s.Turn); err != nil {
		return err
	}
	return st.Delete(ctx, th.suspendedKey())
}
