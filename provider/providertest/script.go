package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/deputy-go/deputy/provider"
)

// Reply is one scripted answer of the model behind a provider under test.
//
// Exactly one of these holds: Status is set (the call fails), Stall is set
// (the call hangs), or the reply answers with Text and ToolCalls.
type Reply struct {
	// Text is the reply's text. With Stall, a streamed reply sends it before
	// it stalls.
	Text string
	// ToolCalls are the calls the model makes, in order, with the IDs the
	// provider must report.
	ToolCalls []provider.ToolCall
	// Usage is what the model reports for the call: its InputTokens and
	// OutputTokens. A provider reports them with Requests set to 1.
	Usage provider.Usage
	// Status, when non-zero, makes the model fail the call with this HTTP
	// status and an error body in the vendor's format.
	Status int
	// Stall makes the model hold the call open, sending nothing more, until
	// the caller gives up.
	Stall bool
}

// Response returns the Response that a provider must produce for a reply
// that answers. Response.Model is left empty: the suite does not check it.
func (r Reply) Response() provider.Response {
	stop := provider.StopEndTurn
	if len(r.ToolCalls) > 0 {
		stop = provider.StopToolUse
	}
	u := r.Usage
	u.Requests = 1
	return provider.Response{
		Message:    provider.AssistantMessage(r.Text, slices.Clone(r.ToolCalls)...),
		StopReason: stop,
		Usage:      u,
	}
}

// Script is the model's side of one check: the replies it gives, in order,
// and the requests it has received.
//
// The backend of a provider under test calls Next once for every model call
// it receives, in the order it receives them, and answers as the returned
// Reply says. A Script is safe for concurrent use.
type Script struct {
	t         testing.TB
	mu        sync.Mutex
	replies   []Reply
	received  []provider.Request
	stalled   chan struct{}
	stallOnce sync.Once
}

// NewScript returns a Script that gives replies in order. Run makes the
// scripts for its checks; NewScript is for a backend's own tests.
func NewScript(t testing.TB, replies ...Reply) *Script {
	return &Script{t: t, replies: replies, stalled: make(chan struct{})}
}

// Next records req as received by the model and returns the reply to give.
//
// req is the request as the model saw it: a backend speaking a wire format
// decodes the body it received into the provider vocabulary. When the
// provider makes more calls than the check scripted, Next fails the test and
// returns a reply with status 500.
func (s *Script) Next(req provider.Request) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Messages = slices.Clone(req.Messages)
	req.Tools = slices.Clone(req.Tools)
	s.received = append(s.received, req)
	n := len(s.received)
	if n > len(s.replies) {
		s.t.Errorf("providertest: the provider made model call %d, but the check scripted %d; a provider under test must not retry (construct it with retries off)", n, len(s.replies))
		return Reply{Status: http.StatusInternalServerError}
	}
	r := s.replies[n-1]
	if r.Stall {
		s.stallOnce.Do(func() { close(s.stalled) })
	}
	return r
}

// Received returns the requests the model has received, oldest first.
func (s *Script) Received() []provider.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

// Err returns the error a provider reports for a reply with a Status: a
// *provider.Error with that status and the kind provider.KindForStatus gives.
func (r Reply) Err() error {
	if r.Status == 0 {
		return nil
	}
	return &provider.Error{
		Provider:   "providertest",
		StatusCode: r.Status,
		Kind:       provider.KindForStatus(r.Status),
		Message:    fmt.Sprintf("scripted failure %d %s", r.Status, http.StatusText(r.Status)),
	}
}

// Complete answers a model call in memory as r says. It is the reference
// behaviour that an in-memory provider under test (such as a scripted fake)
// can use:
//
//	provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
//		return providertest.Complete(ctx, s.Next(req))
//	})
func Complete(ctx context.Context, r Reply) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	switch {
	case r.Status != 0:
		return provider.Response{}, r.Err()
	case r.Stall:
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	}
	return r.Response(), nil
}

// Stream streams the answer to a model call in memory as r says: it calls
// onDelta with the text in pieces, then with each tool call (its ID and
// name, then its arguments in pieces), and returns the Response. It is the
// streaming counterpart of Complete.
func Stream(ctx context.Context, r Reply, onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta == nil {
		onDelta = func(provider.Delta) error { return nil }
	}
	send := func(d provider.Delta) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return onDelta(d)
	}
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	if r.Status != 0 {
		return provider.Response{}, r.Err()
	}
	for _, piece := range Split(r.Text) {
		if err := send(provider.Delta{Text: piece}); err != nil {
			return provider.Response{}, err
		}
	}
	if r.Stall {
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	}
	for i, c := range r.ToolCalls {
		if err := send(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name}}); err != nil {
			return provider.Response{}, err
		}
		for _, piece := range Split(string(c.Arguments)) {
			if err := send(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, Arguments: piece}}); err != nil {
				return provider.Response{}, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	return r.Response(), nil
}

// Split cuts s in two pieces on a rune boundary (or returns no pieces for an
// empty s), so that a streaming backend sends text and arguments in more
// than one fragment, as real models do.
func Split(s string) []string {
	if s == "" {
		return nil
	}
	mid := len(s) / 2
	for mid > 0 && !utf8.RuneStart(s[mid]) {
		mid--
	}
	if mid == 0 {
		return []string{s}
	}
	return []string{s[:mid], s[mid:]}
}

// WeatherTool is the tool the suite's checks offer the model.
func WeatherTool() provider.ToolDef {
	return provider.ToolDef{
		Name:        "get_weather",
		Description: "Get the current weather in a city.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"The city's name."}},"required":["city"],"additionalProperties":false}`),
	}
}

// Conversation returns a request that uses every part of the vocabulary: a
// system prompt, a user question, an assistant turn with two parallel tool
// calls, their two results (the second a failure), the assistant's answer
// and a follow-up question. Providers' tests send it to check that a
// conversation built anywhere replays on them.
func Conversation() provider.Request {
	return provider.Request{
		System: "You are a travel assistant. Use the tools to answer.",
		Messages: []provider.Message{
			provider.UserMessage("What is the weather in Paris and in Rome?"),
			provider.AssistantMessage("Let me check both cities.",
				provider.ToolCall{ID: "call_paris", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
				provider.ToolCall{ID: "call_rome", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
			),
			provider.ToolMessage("call_paris", "Sunny, 21°C.", false),
			provider.ToolMessage("call_rome", "weather service unavailable", true),
			provider.AssistantMessage("Paris is sunny at 21°C. I could not get the weather in Rome."),
			provider.UserMessage("Thanks. Please try Rome again."),
		},
		Tools:     []provider.ToolDef{WeatherTool()},
		MaxTokens: 512,
	}
}
