// Package errcode names the kind of a run's failure in a word, for the
// RUN_ERROR and SUBAGENT_FINISHED events and for logs.
//
// A package's sentinel error carries its code from the start (New); Of
// finds it through any wrapping, and names the context's and a provider's
// errors, which carry none.
package errcode

import (
	"context"
	"errors"

	"github.com/deputy-go/deputy/provider"
)

// Error is a sentinel error with a code.
type Error struct {
	msg, code string
}

// New returns a sentinel error whose text is msg and whose code is code.
func New(code, msg string) *Error { return &Error{msg: msg, code: code} }

// Error returns the error's text.
func (e *Error) Error() string { return e.msg }

// Code returns the error's code.
func (e *Error) Code() string { return e.code }

// Of returns the code of err: "cancelled" or "timeout" for the context's
// errors, the code of the first Error in err's tree, "provider_error" for a
// provider's error, and "error" for anything else. Cancellation is named
// first: a run cancelled while its model call failed was cancelled.
func Of(err error) string {
	var (
		ce *Error
		pe *provider.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &pe):
		return "provider_error"
	}
	return "error"
}
