// Package provider is deputy's model vocabulary: the messages, tool calls,
// requests and responses that pass between an agent and a language model, and
// the one-method Provider interface that model adapters implement.
//
// Users rarely implement Provider themselves: provider/openai and
// provider/anthropic adapt the vendors' official SDKs, provider/fromenv
// picks one from the environment, and package fake supplies a scripted
// Provider for tests. A new adapter proves itself with
// provider/providertest.Run.
//
// # Messages and requests
//
// A Request holds the conversation (Messages, each with a Role: made with
// UserMessage, AssistantMessage and ToolMessage), the tools the model may
// call (ToolDef), and the model's settings. A Response is the model's
// Message, which may ask for ToolCalls, its StopReason, the Model that
// answered and its Usage; ModelUsage is usage of one provider and model.
//
// # Providers
//
// Provider's one method, Complete, answers a Request; Func makes a
// Provider of a function. A Provider that can stream implements Streamer,
// whose Stream reports each Delta (text, or a ToolCallDelta) as it comes;
// one that can name itself implements Namer. Wrap puts a Middleware around
// a Provider's calls (Next calls the one it wraps), streamed or not.
//
// # Errors and limits
//
// Real providers report failures as *Error, with an ErrorKind
// (KindForStatus classifies an HTTP status) that says whether a retry may
// help. They bound what they read from a server: DefaultMaxResponseBytes,
// DefaultMaxTextBytes, DefaultMaxArgumentBytes and DefaultIdleTimeout,
// each with an option of the provider's to change it.
//
// # Admission
//
// Admission is admission control for the models of one provider: a call
// waits until the model's Limits (requests and tokens a minute, calls in
// flight; given, or learned from the RateLimit a provider reports with its
// replies and failures) let it go, and a rate-limited call is tried again
// after the wait the provider asked for. Calls to one model are admitted
// first come, first served. A model's limits hold for the calls that name
// it and for those that name no model to a provider whose default it is.
// Other failures a retry may mend are tried again for a bounded time
// (WithRetryTime, DefaultRetryTime), a server that cannot be reached for 2
// seconds only; each retry is logged (WithLogger) and emitted. The real
// providers go through one of their own, or one given them; Admit puts one
// around any Provider.
// While a call waits, the context's event sink gets AdmissionEvent events.
//
// # Prices
//
// A Price is what a model charges per token (input, output, and input read
// from or written to the prompt cache) and its context window; Prices is a
// table of them by provider and model, made with NewPrices or read with
// ReadPrices from a file in the format of LiteLLM's
// model_prices_and_context_window.json, within DefaultMaxPriceBytes and
// MaxPriceEntries (ErrBadPrices says what is wrong). Its Cost prices
// ModelUsage. deputy ships no prices of its own.
package provider

import (
	"context"
	"encoding/json"
	"time"
)

// Role says who wrote a Message.
type Role string

// The roles of a conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation.
//
// An assistant message may carry ToolCalls; each is answered by a tool
// message whose ToolCallID names the call and whose Content is the tool's
// result (IsError set when the tool failed). Messages are values: code that
// keeps a conversation appends to it and never edits a message it has
// already sent.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	IsError    bool       `json:"is_error,omitempty"`
}

// UserMessage returns a user message with the given text.
func UserMessage(text string) Message { return Message{Role: RoleUser, Content: text} }

// AssistantMessage returns an assistant message with text and optional tool calls.
func AssistantMessage(text string, calls ...ToolCall) Message {
	return Message{Role: RoleAssistant, Content: text, ToolCalls: calls}
}

// ToolMessage returns the message that answers the tool call id.
func ToolMessage(callID, content string, isError bool) Message {
	return Message{Role: RoleTool, ToolCallID: callID, Content: content, IsError: isError}
}

// ToolCall is a model's request to run a tool.
//
// Arguments is the JSON text the model produced. It is not guaranteed to be
// valid JSON: tools validate it before use.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolDef describes a tool to a model: its name, what it is for, and the JSON
// Schema of its arguments.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one call to a model.
type Request struct {
	// Model names the model; empty means the provider's configured default.
	Model string
	// System is the system prompt. Providers place it where their API wants it.
	System string
	// Messages is the conversation so far, oldest first. It never contains
	// system messages: the system prompt travels in System.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []ToolDef
	// MaxTokens caps the reply's length; zero means the provider's default.
	MaxTokens int
	// Temperature, when set, overrides the model's default sampling temperature.
	Temperature *float64
	// ResponseSchema, when set, asks for a reply that is a JSON value matching
	// this JSON Schema (structured output), on providers that support it.
	ResponseSchema json.RawMessage
	// CacheKey, when set, names the conversation this request continues (a
	// resident expert, a thread), for providers whose prompt cache takes a
	// hint where to look. Requests that repeat a conversation keep System,
	// Tools and the earlier Messages byte for byte the same, so that the
	// provider can read that prefix from its cache; whatever changes from
	// call to call goes at the end.
	CacheKey string
	// SharedPrefix is how many of Messages, from the first, this request
	// shares byte for byte with others sent about the same time, System
	// and Tools being the same too: the parent's conversation that each
	// context fork of a step starts from. A provider whose prompt cache is
	// marked by breakpoints (Anthropic) marks the end of them, so that each
	// of those requests reads them from the cache; zero marks nothing.
	SharedPrefix int
}

// StopReason says why a model stopped producing its reply.
type StopReason string

// The stop reasons providers report.
const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
	StopRefusal   StopReason = "refusal"
	StopOther     StopReason = "other"
)

// Response is a model's reply to one Request.
type Response struct {
	// Message is the reply, always with RoleAssistant.
	Message Message
	// Usage is what this call cost.
	Usage Usage
	// StopReason says why the reply ended.
	StopReason StopReason
	// Model is the model that answered, as the provider reports it.
	Model string
	// RateLimit is what the provider said of its rate limits with this
	// reply, on providers that say (provider/openai, provider/anthropic).
	RateLimit RateLimit
	// Queued is how long the call waited for admission control
	// (Admission) before it went, the waits before its retries included;
	// zero when it went at once.
	Queued time.Duration
}

// Provider is a language model behind a single call.
//
// Complete must be safe for concurrent use, must return promptly once ctx is
// done (with an error wrapping ctx.Err()), and reports provider failures as
// *Error so that callers can branch on the kind.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Func adapts an ordinary function to Provider.
type Func func(ctx context.Context, req Request) (Response, error)

// Complete calls f(ctx, req).
func (f Func) Complete(ctx context.Context, req Request) (Response, error) { return f(ctx, req) }

// Delta is one piece of a streamed reply, handed to the callback of
// Streamer.Stream as it arrives: a fragment of the reply's text, or of one of
// its tool calls. A Delta is a plain value; a consumer may keep it.
type Delta struct {
	// Text is a fragment of the reply's text.
	Text string
	// ToolCall is a fragment of a tool call (see HasToolCall): the first
	// fragment of a call has its ID and Name; later ones add to its
	// Arguments. It is the zero value in a text delta.
	ToolCall ToolCallDelta
}

// HasToolCall reports whether d carries a fragment of a tool call: one with
// an ID, a name or a piece of arguments. A fragment with none of them says
// nothing, and a consumer may skip it.
func (d Delta) HasToolCall() bool {
	c := &d.ToolCall
	return c.ID != "" || c.Name != "" || c.Arguments != ""
}

// ToolCallDelta is a fragment of a streamed tool call.
type ToolCallDelta struct {
	// Index is the call's position in the tool calls of the Response that
	// Stream returns, from 0, whatever numbering the vendor's wire uses.
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Streamer is the optional capability of a Provider that can stream replies.
//
// Stream answers req as Complete does, with the same Response and the same
// errors, and meanwhile calls onDelta with each piece of the reply as it
// arrives, in order, one call at a time, all before it returns: a provider
// that reads the reply in another goroutine stops it before returning. The
// Response it returns is the whole reply, assembled, with usage. When
// onDelta returns an error, Stream stops reading the reply and returns that
// error as it is, with no Response (the tokens the reply had used so far are
// not reported). onDelta may be nil; Stream then answers as Complete does.
// Like Complete, Stream must be safe for concurrent use and return promptly
// once ctx is done.
type Streamer interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error)
}

// Namer is implemented by a provider that says which model vendor's API it
// speaks, for telemetry: Name is the OpenTelemetry gen_ai.provider.name,
// such as "openai" or "anthropic". It returns the same value on every call
// and must be safe for concurrent use.
type Namer interface {
	Name() string
}
