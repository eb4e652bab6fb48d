// Package toolcall holds what the packages that make tools share about a
// call: whether a name can be a tool's, a call's arguments ready to check,
// and the error of a call that panicked.
package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrPanic marks a call that panicked; package tool exports it.
var ErrPanic = errors.New("tool: call panicked")

// panicError is a recovered panic: its text reads as a failure of the tool,
// and errors.Is finds ErrPanic.
type panicError struct{ msg string }

func (e panicError) Error() string        { return e.msg }
func (e panicError) Is(target error) bool { return target == ErrPanic }

// Panicked returns the error for a tool (or sub-agent) named name that
// panicked with value v; errors.Is(err, ErrPanic) holds for it.
func Panicked(name string, v any) error {
	return panicError{fmt.Sprintf("tool %s failed: it panicked: %v", name, v)}
}

// Arguments returns a call's arguments ready to validate and decode: raw
// itself, or the empty object {} when raw is empty or only white space, as
// models send for a tool that takes no arguments. It does not check that
// raw is JSON; validation does that.
func Arguments(raw json.RawMessage) json.RawMessage {
	for _, c := range raw {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return raw
		}
	}
	return json.RawMessage("{}")
}

// CheckName reports whether name can be a tool's name in model APIs: 1 to
// 64 letters, digits, '_' or '-'.
func CheckName(name string) error {
	if name == "" {
		return errors.New("tool: empty name: give the tool a name the model can call, like \"search\"")
	}
	if len(name) > 64 || strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0 {
		return fmt.Errorf("tool: name %q is not allowed: use at most 64 letters, digits, '_' or '-' (what model APIs accept)", name)
	}
	return nil
}
