package provider

import (
	"fmt"
	"net/http"

	"github.com/deputy-go/deputy/provider/internal/unreachable"
)

// ErrorKind classifies a provider failure so that callers can decide what to
// do about it.
type ErrorKind int

// The kinds of provider failure.
const (
	// KindUnknown is a failure the provider could not classify.
	KindUnknown ErrorKind = iota
	// KindRateLimit: the provider asks the caller to slow down (HTTP 429).
	KindRateLimit
	// KindAuth: the credentials are missing, wrong or not allowed (401, 403).
	KindAuth
	// KindBadRequest: the request itself is wrong and repeating it will not help.
	KindBadRequest
	// KindTransient: the provider failed or is overloaded; a retry may succeed.
	KindTransient
	// KindContextWindow: the conversation no longer fits the model's context window.
	KindContextWindow
	// KindMalformed: the provider answered with something that could not be read.
	KindMalformed
	// KindResponseTooLarge: the reply went over one of the provider's size
	// limits (whole body, answer text or a tool call's arguments) and was
	// not read further. The Message names the limit and its option.
	KindResponseTooLarge
)

var kindNames = [...]string{"unknown", "rate limit", "auth", "bad request", "transient", "context window exceeded", "malformed response", "response too large"}

// String names the kind.
func (k ErrorKind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("ErrorKind(%d)", int(k))
	}
	return kindNames[k]
}

// Error is a failure reported by a model provider.
//
// Real providers return *Error for every failure other than the caller's own
// cancellation; the SDK's error stays in the chain through Unwrap.
type Error struct {
	// Provider names the provider, e.g. "openai".
	Provider string
	// StatusCode is the HTTP status, or 0 when no response was received.
	StatusCode int
	// Kind classifies the failure.
	Kind ErrorKind
	// Message is the provider's own explanation, when it gave one.
	Message string
	// Err is the underlying error.
	Err error
	// RateLimit is what the provider said of its rate limits with the
	// failure: for a 429, how long to wait (RetryAfter) and what is left.
	RateLimit RateLimit
}

// Error describes the failure and what to do about it.
func (e *Error) Error() string {
	s := e.Provider
	if s == "" {
		s = "provider"
	}
	s += ": " + e.Kind.String()
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		s += ": " + e.Message
	} else if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if hint := e.hint(); hint != "" {
		s += " (" + hint + ")"
	}
	return s
}

func (e *Error) hint() string {
	switch e.Kind {
	case KindRateLimit:
		return "slow down or raise the provider's max retries"
	case KindAuth:
		return "check the API key and the model's access"
	case KindContextWindow:
		return "shorten the conversation or bound the agent's history"
	case KindTransient:
		if unreachable.Is(e.Err) {
			if e.Message != "" {
				return "" // the provider's message says where it looked
			}
			return "check that the server runs at the provider's base URL"
		}
		return "retry later"
	case KindResponseTooLarge:
		return "ask for a shorter reply, e.g. with a lower MaxTokens, or raise the limit"
	}
	return ""
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether repeating the same request may succeed.
func (e *Error) Retryable() bool { return e.Kind == KindRateLimit || e.Kind == KindTransient }

// KindForStatus classifies an HTTP status code.
func KindForStatus(status int) ErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		return KindRateLimit
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return KindTransient
	case status == http.StatusRequestEntityTooLarge:
		return KindContextWindow
	case status >= 400:
		return KindBadRequest
	}
	return KindUnknown
}
