package agui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
)

// WithThreads keeps each thread's conversation in st, on the server, so
// that a client may send only its new message and a restarted server, or
// another replica sharing the store, continues the thread.
//
// For each request the handler takes the thread's lock in the store, reads
// the stored conversation, and hands the agent that conversation followed
// by the request's new user messages (those after the last message of
// another role; a client that sends the whole conversation each time is
// served the same way) as Input.Messages. When the run succeeds the whole
// conversation, the run's part included, is stored before RUN_FINISHED is
// sent; a run that fails, is cancelled or whose server dies stores nothing.
// A run on a thread that already has one in progress, here or on another
// replica, is refused with 409 Conflict.
//
// It works with NewPerRequest, whose agent starts each request with no
// conversation of its own, and replaces the InputFunc (WithInput is
// refused with it). Handler.DeleteThread forgets a thread, and
// Handler.Threads serves listing, reading and deleting over HTTP.
func WithThreads(st *store.Store) Option {
	return func(c *config) error {
		if st == nil {
			return errors.New("WithThreads(nil): pass a store, such as store.New(sqlite.Open(path))")
		}
		c.threads = st
		return nil
	}
}

// threadTurn is one run on a stored thread.
type threadTurn struct {
	st   *store.Store
	th   thread
	lock *store.Lock
	conv store.Conversation
	in   []provider.Message // what the agent was handed

	turn      string         // the journal's name
	suspended *suspendedRun  // the run this one resumes or replaces, if any
	journal   *store.Journal // opened by resumable, else by runContext
}

// threadError is an error whose HTTP status is known.
type threadError struct {
	status int
	err    error
}

func (e *threadError) Error() string { return e.err.Error() }
func (e *threadError) Unwrap() error { return e.err }

// threadStatus is the HTTP status of an error of beginThread.
func threadStatus(err error) int {
	var te *threadError
	if errors.As(err, &te) {
		return te.status
	}
	return http.StatusInternalServerError
}

// beginThread takes the thread's lock and builds the agent's input from the
// stored conversation and the request's new messages.
func (h *Handler) beginThread(ctx context.Context, in *RunInput) (*threadTurn, agent.Input, error) {
	st := h.cfg.threads
	var news []provider.Message
	for i := len(in.Messages) - 1; i >= 0 && in.Messages[i].Role == "user"; i-- {
		news = append([]provider.Message{provider.UserMessage(in.Messages[i].Content)}, news...)
	}
	if len(news) == 0 && len(in.Resume) == 0 {
		return nil, agent.Input{}, &threadError{http.StatusBadRequest, errors.New("messages ends with no user message: send the new user message (the server keeps the thread's earlier messages)")}
	}
	th := thread{in.Owner, in.ThreadID}
	if err := th.check(); err != nil {
		return nil, agent.Input{}, err
	}
	key := th.key()
	lock, err := st.TryLock(ctx, key)
	if err != nil {
		return nil, agent.Input{}, storeError(in.ThreadID, err)
	}
	conv, err := st.Conversation(ctx, key)
	if err != nil {
		lock.Unlock()
		return nil, agent.Input{}, storeError(in.ThreadID, err)
	}
	susp, err := loadSuspended(ctx, st, th)
	if err != nil {
		lock.Unlock()
		return nil, agent.Input{}, err
	}
	msgs, turn, err := beginResume(in, th, susp, news, conv.Messages)
	if err != nil {
		lock.Unlock()
		return nil, agent.Input{}, err
	}
	return &threadTurn{st: st, th: th, lock: lock, conv: conv, in: msgs, turn: turn, suspended: susp}, agent.Input{Messages: msgs}, nil
}

// save stores the thread after a successful run.
func (t *threadTurn) save(ctx context.Context, out agent.Output) error {
	thread := out.Messages
	if len(thread) < len(t.in) {
		// An agent that does not report its input in Output.Messages: the
		// turn is its answer.
		thread = append(t.in[:len(t.in):len(t.in)], provider.AssistantMessage(out.Answer))
	}
	// The run is over; a client leaving now does not undo it.
	ctx = context.WithoutCancel(ctx)
	if n := len(t.conv.Messages); len(thread) >= n && slices.EqualFunc(thread[:n], t.conv.Messages, sameMessage) {
		// The thread only grew: the store writes what the run added.
		conv := t.conv
		return t.st.AppendConversation(ctx, t.th.key(), &conv, thread[n:])
	}
	return t.st.SaveConversation(ctx, t.th.key(), thread, t.conv.Version)
}

func sameMessage(a, b provider.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.ToolCallID == b.ToolCallID && a.IsError == b.IsError &&
		slices.EqualFunc(a.ToolCalls, b.ToolCalls, func(x, y provider.ToolCall) bool {
			return x.ID == y.ID && x.Name == y.Name && bytes.Equal(x.Arguments, y.Arguments)
		})
}

// end releases the thread's lock. One it could not give back refuses the
// thread's next run as in progress until its lease runs out: log says why.
func (t *threadTurn) end(log *slog.Logger) {
	if err := t.lock.Unlock(); err != nil {
		log.Warn("agui: the thread's lock", "threadId", t.th.id, "err", err)
	}
}

// storeError gives a store failure its HTTP status and what to do.
func storeError(threadID string, err error) error {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, store.ErrBusy):
		status = http.StatusConflict
		err = fmt.Errorf("thread %q has a run in progress: wait for it to finish, then send the message again", threadID)
	case errors.Is(err, store.ErrUnavailable):
		status = http.StatusServiceUnavailable
	case errors.Is(err, store.ErrCorrupt):
		err = fmt.Errorf("thread %q cannot be read: %w (agui.DeleteThread starts it afresh)", threadID, err)
	case errors.Is(err, store.ErrBadKey):
		status = http.StatusBadRequest
		err = fmt.Errorf("threadId: %w", err)
	}
	return &threadError{status, err}
}

// threadInput stands for the InputFunc under WithThreads, where
// beginThread makes the input.
func threadInput(*RunInput) (agent.Input, error) { return agent.Input{}, nil }
