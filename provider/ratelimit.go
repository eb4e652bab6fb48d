package provider

import "time"

// RateLimit is what a provider said of its rate limits in one response:
// OpenAI's x-ratelimit-* headers, Anthropic's anthropic-ratelimit-*
// headers, Retry-After. Real providers put it on each Response and on a
// rate-limited *Error; Admission learns from it. A zero count means the
// provider did not say.
type RateLimit struct {
	// Requests is how many requests the provider allows a minute, and
	// RequestsRemaining how many of them are left now (meaningful only
	// when Requests is set). RequestsReset is how long until the count is
	// whole again.
	Requests          int64
	RequestsRemaining int64
	RequestsReset     time.Duration
	// Tokens is how many tokens the provider allows a minute, and
	// TokensRemaining how many are left now (meaningful only when Tokens is
	// set). TokensReset is how long until the count is whole again.
	Tokens          int64
	TokensRemaining int64
	TokensReset     time.Duration
	// RetryAfter is how long the provider asked the caller to wait before
	// the next request; zero when it did not ask.
	RetryAfter time.Duration
}

// IsZero reports whether r says nothing.
func (r RateLimit) IsZero() bool { return r == RateLimit{} }
