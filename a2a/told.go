package a2a

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/deputy-go/deputy/store"
)

// What a client is told of a failure. deputy's store names its records in
// its errors (a journal, a task, a resident's conversation, under keys made
// of owners and contexts); those names are the server's business, not a
// client's. A failure that involves the store is told in plain words and
// logged whole for the operator.

// errStoreFailed is what a client is told of a store that failed.
const errStoreFailed = "the server could not read or write its records (it logged what happened): send the message again later"

// errBusy is what a client is told of a record another request holds.
const errBusy = "another request of this context is being answered: send the message again once it has ended"

// told is the text a client reads for err, a failure of task t's run: err's
// own, but for a failure of the store, and with the run's thread named by
// the client's contextId.
func told(log *slog.Logger, t Task, err error) string {
	msg := err.Error()
	if fromStore(err) {
		log.Error("a2a: a task failed on the server's store", "task", t.TaskID, "err", msg)
		if errors.Is(err, store.ErrBusy) {
			return errBusy
		}
		return errStoreFailed
	}
	if t.Thread != "" && t.Thread != t.ContextID {
		msg = strings.ReplaceAll(msg, t.Thread, t.ContextID)
	}
	return msg
}

// fromStore reports whether err is, or wraps, an error of deputy's store,
// whose text all begin with "store: ".
func fromStore(err error) bool {
	for _, target := range []error{store.ErrNotFound, store.ErrConflict, store.ErrTooLarge, store.ErrCorrupt, store.ErrSchemaTooNew,
		store.ErrBusy, store.ErrUnavailable, store.ErrBadKey, store.ErrClosed, store.ErrLockLost} {
		if errors.Is(err, target) {
			return true
		}
	}
	return strings.Contains(err.Error(), "store: ")
}

// hiddenError is an error of the store that a client reads in plain words,
// its whole text kept for errors.Is and As, and for the log.
type hiddenError struct {
	err error
	msg string
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }

// hide returns err as the SDK hands it to a client: a failure of the store
// in plain words, logged whole.
func hide(log *slog.Logger, what string, err error) error {
	log.Error("a2a: "+what, "err", err)
	return &hiddenError{err: err, msg: "a2a: " + what + ": " + errStoreFailed}
}
