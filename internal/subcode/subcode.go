// Package subcode names the failure of a sub-agent's run in a word, for
// its SUBAGENT_ERROR, in process (package subagent) and on Temporal (the
// temporal module's Runtime factories), and holds the sentinel errors of
// package subagent that the word is read from.
package subcode

import (
	"errors"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/tool"
)

// The sentinel errors of package subagent that name a code of their own.
var (
	ErrBusy    = errors.New("subagent: busy")
	ErrNoJSON  = errors.New("subagent: answer is not JSON")
	ErrTimeout = errors.New("subagent: timed out")
)

// Of returns the code of the error a sub-agent's run ended with:
// "timeout", "busy", "invalid_output", "guardrail" or "panic" for those
// failures, else errcode.Of's.
func Of(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrNoJSON):
		return "invalid_output"
	case errors.Is(err, policy.ErrGuardrail):
		return "guardrail"
	case errors.Is(err, tool.ErrPanic), errors.Is(err, agent.ErrProviderPanic):
		return "panic"
	}
	return errcode.Of(err)
}
