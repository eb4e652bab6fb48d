package provider

import "time"

// Default limits of the real providers (provider/openai, provider/anthropic).
// A model's reply is untrusted input: each provider stops reading a reply
// that goes over one of these and returns a *Error of KindResponseTooLarge,
// and ends a stream that stays silent for DefaultIdleTimeout. Each provider
// has an option per limit to change it.
const (
	// DefaultMaxResponseBytes bounds the bytes read from one HTTP response
	// body, streamed or not, error bodies included.
	DefaultMaxResponseBytes = 64 << 20
	// DefaultMaxTextBytes bounds the text of one reply.
	DefaultMaxTextBytes = 4 << 20
	// DefaultMaxArgumentBytes bounds the arguments of one tool call.
	DefaultMaxArgumentBytes = 1 << 20
	// DefaultIdleTimeout ends a streamed reply during which the server sent
	// nothing of the reply (keep-alives do not count) for this long.
	DefaultIdleTimeout = 10 * time.Minute
)
