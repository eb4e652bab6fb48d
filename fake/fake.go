// Package fake provides a scripted model provider for tests, examples and
// benchmarks: a working in-memory implementation of provider.Provider and
// provider.Streamer, like httptest is for net/http.
//
// A script is a list of replies. Each model call takes the next one: text,
// one or several tool calls, an error, or a function of the request. A reply
// marked For an agent name goes only to that agent (the name given with
// agent.WithName), so that a parent and its sub-agents can share one
// provider and a test of delegation reads like the story it tells:
//
//	p := fake.NewProvider(
//		fake.Call("researcher", `{"task":"find X"}`).For("lead"),
//		fake.Text("X is 42").For("researcher"),
//		fake.Text("The answer is 42.").For("lead"),
//	)
//
// Children that run in parallel share their name, and so their replies:
// the sub-agents of one fan-out (every FromReact child of one tool, every
// fork of the spawn tool, named subagent.DefaultForkName) take replies
// For that name in whatever order their calls arrive. A test that needs
// each child to answer its own task scripts one Respond reply for the
// name, which reads the task from the request and answers it, and Loop
// keeps that reply for every call (see the example of Respond).
//
// A child built per call (FromFactory) can instead be given a name of its
// own, from its arguments, with agent.WithName, and scripted with For.
//
// Usage is synthetic but deterministic: about one token per four bytes in and
// out, and one request per call. PromptCache makes it account for a
// vendor's prompt cache too, as the vendor documents it. A reply that would
// count more output tokens than the request's MaxTokens stops there, as a
// real model's does: cut, its tool calls dropped, StopMaxTokens.
//
// A tool call without an ID gets one that is unique across providers, as a
// real model's are: "call_", a random tag drawn once per provider, "_" and
// a count (such as "call_x7k2q9_1"). A conversation that outlives one
// provider, such as an AG-UI thread served by an agent built per request,
// never sees an id twice.
package fake

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// ErrScriptExhausted is returned by a call for which the script has no reply
// left. The error names the agent and the request.
var ErrScriptExhausted = errors.New("fake: script exhausted")

// Reply is one scripted answer of the model.
type Reply struct {
	text  string
	calls []provider.ToolCall
	args  []string // the calls' arguments as text, for Stream
	err   error
	fn    func(ctx context.Context, req provider.Request) (provider.Response, error)
	delay time.Duration
	agent string
	usage *provider.Usage
}

// Text is a reply with this text and no tool calls: a final answer.
func Text(text string) Reply { return Reply{text: text} }

// Call is a reply calling one tool with these JSON arguments.
func Call(name, args string) Reply {
	return Reply{calls: []provider.ToolCall{{Name: name, Arguments: []byte(args)}}, args: []string{args}}
}

// Calls is a reply calling several tools at once. A call without an ID gets
// one. The calls are copied.
func Calls(calls ...provider.ToolCall) Reply {
	r := Reply{calls: slices.Clone(calls), args: make([]string, len(calls))}
	for i, c := range r.calls {
		r.args[i] = string(c.Arguments)
		r.calls[i].Arguments = []byte(r.args[i])
	}
	return r
}

// Error is a reply that fails the model call with err.
func Error(err error) Reply { return Reply{err: err} }

// Respond is a reply computed from the request.
func Respond(fn func(ctx context.Context, req provider.Request) (provider.Response, error)) Reply {
	return Reply{fn: fn}
}

// For returns r reserved for the agent named name.
func (r Reply) For(name string) Reply { r.agent = name; return r }

// After returns r delayed by d. The delay ends early, with the context's
// error, when the call's context is done.
func (r Reply) After(d time.Duration) Reply { r.delay = d; return r }

// Saying returns r with text alongside its tool calls.
func (r Reply) Saying(text string) Reply { r.text = text; return r }

// WithUsage returns r reporting u instead of the synthetic usage, or
// instead of the usage a Respond function gives.
func (r Reply) WithUsage(u provider.Usage) Reply { r.usage = &u; return r }

type queue struct {
	replies []Reply
	next    int
}

// Provider is a scripted provider. It is safe for concurrent use. The zero
// value is a provider with an empty script.
type Provider struct {
	mu       sync.Mutex
	queues   map[string]*queue // by agent name; "" holds the shared replies
	requests []Request
	calls    int
	ids      int
	tag      string // the random part of the ids, drawn at the first one
	loop     bool
	noRecord bool
	name     string // Named; "" is "fake"
	model    string // Named; "" is "fake"

	cacheKind Cache               // set by PromptCache
	cached    map[cacheEntry]bool // the prefixes in the prompt cache
}

// Request is a request the provider received, with the agent that made it.
type Request struct {
	// Agent is the name of the agent that made the request (agent.Name of
	// the call's context), or "" outside an agent.
	Agent string
	provider.Request
}

// NewProvider returns a provider that answers with replies, in order.
func NewProvider(replies ...Reply) *Provider {
	p := &Provider{queues: map[string]*queue{}}
	p.Add(replies...)
	return p
}

// Add appends replies to the script.
func (p *Provider) Add(replies ...Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queues == nil {
		p.queues = map[string]*queue{}
	}
	for _, r := range replies {
		q := p.queues[r.agent]
		if q == nil {
			q = &queue{}
			p.queues[r.agent] = q
		}
		q.replies = append(q.replies, r)
	}
}

// Loop makes the script start over when it runs out, for benchmarks and
// load tests. It returns p.
func (p *Provider) Loop() *Provider {
	p.mu.Lock()
	p.loop = true
	p.mu.Unlock()
	return p
}

// DontRecord stops the provider from keeping requests (Requests and
// RequestsFor then return none). A provider keeps every request it answers,
// so that a test can read what each agent was sent; one that loops through
// millions of calls in a benchmark or a load test would grow without bound.
// It returns p.
func (p *Provider) DontRecord() *Provider {
	p.mu.Lock()
	p.noRecord = true
	p.mu.Unlock()
	return p
}

// Named makes the provider say it is the provider name (its Name, as
// provider.Namer) serving model (the Model of its replies), instead of
// "fake" and "fake", so that a test can tell two providers apart in usage
// reports and traces. It returns p.
func (p *Provider) Named(name, model string) *Provider {
	p.mu.Lock()
	p.name, p.model = name, model
	p.mu.Unlock()
	return p
}

// Name returns the provider's name (provider.Namer): "fake", or the name
// given to Named.
func (p *Provider) Name() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.name == "" {
		return "fake"
	}
	return p.name
}

// Model returns the model the provider answers as when a request names
// none: "fake", or the model given to Named. Like the real providers'
// Model, it lets admission control (provider.Admit) apply a model's
// limits to the requests that name no model.
func (p *Provider) Model() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.model == "" {
		return "fake"
	}
	return p.model
}

// Requests returns the requests received so far, oldest first.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// RequestsFor returns the requests the agent named name made.
func (p *Provider) RequestsFor(name string) []provider.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Request
	for _, r := range p.requests {
		if r.Agent == name {
			out = append(out, r.Request)
		}
	}
	return out
}

// Calls returns the number of model calls made so far.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Remaining returns the number of scripted replies not yet used.
func (p *Provider) Remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.queues {
		n += len(q.replies) - q.next
	}
	return n
}

// take picks the reply for a call and gives its tool calls ids.
func (p *Provider) take(ctx context.Context, req provider.Request) (Reply, error) {
	name := run.Name(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if !p.noRecord {
		p.requests = append(p.requests, Request{Agent: name, Request: req})
	}
	q := p.queues[name]
	if q == nil || q.next >= len(q.replies) && !p.loop {
		q = p.queues[""]
	}
	if q == nil || len(q.replies) == 0 || q.next >= len(q.replies) && !p.loop {
		return Reply{}, fmt.Errorf("%w: call %d by agent %q (last message: %q) has no reply left%s: add one to the script",
			ErrScriptExhausted, p.calls, name, lastText(req.Messages), p.leftFor())
	}
	if q.next >= len(q.replies) {
		q.next = 0
	}
	r := q.replies[q.next]
	q.next++
	if len(r.calls) > 0 {
		calls := make([]provider.ToolCall, len(r.calls))
		copy(calls, r.calls)
		for i := range calls {
			if calls[i].ID == "" {
				if p.tag == "" {
					p.tag = randomTag()
				}
				p.ids++
				calls[i].ID = "call_" + p.tag + "_" + strconv.Itoa(p.ids)
			}
		}
		r.calls = calls
	}
	return r, nil
}

// randomTag is six random base-36 digits: with the count after it, the
// ids of two providers of one process differ but for a 1 in 2 billion
// chance.
func randomTag() string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 6)
	for i := range b {
		b[i] = digits[rand.IntN(len(digits))]
	}
	return string(b)
}

// leftFor names the agents that still have replies, to point at a reply
// reserved For the wrong name. Call it with p.mu held.
func (p *Provider) leftFor() string {
	var names []string
	for name, q := range p.queues {
		if name != "" && q.next < len(q.replies) {
			names = append(names, fmt.Sprintf("%q (%d)", name, len(q.replies)-q.next))
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return " (replies are left only for " + strings.Join(names, ", ") + ")"
}

// lastText is the start of the last message, cut on a character boundary.
func lastText(msgs []provider.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	s := msgs[len(msgs)-1].Content
	const max = 60
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Complete answers req with the next scripted reply.
func (p *Provider) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, _, err := p.respond(ctx, req)
	return resp, err
}

// respond answers req with the next scripted reply and, when the script
// says what the tool calls' arguments are, gives them as text too.
func (p *Provider) respond(ctx context.Context, req provider.Request) (provider.Response, []string, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, nil, err
	}
	r, err := p.take(ctx, req)
	if err != nil {
		return provider.Response{}, nil, err
	}
	if r.delay > 0 {
		t := time.NewTimer(r.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return provider.Response{}, nil, ctx.Err()
		}
	}
	switch {
	case r.err != nil:
		return provider.Response{}, nil, r.err
	case r.fn != nil:
		resp, err := r.fn(ctx, req)
		if err == nil {
			if r.usage != nil {
				resp.Usage = *r.usage
			}
			stopAt(req, &resp)
		}
		return resp, nil, err
	}
	resp := provider.Response{
		Message:    provider.Message{Role: provider.RoleAssistant, Content: r.text, ToolCalls: r.calls},
		StopReason: provider.StopEndTurn,
		Model:      "fake",
	}
	p.mu.Lock()
	if p.model != "" {
		resp.Model = p.model
	}
	p.mu.Unlock()
	if len(r.calls) > 0 {
		resp.StopReason = provider.StopToolUse
	}
	if r.usage != nil {
		resp.Usage = *r.usage
	} else {
		resp.Usage = Usage(req, resp.Message)
		p.mu.Lock()
		resp.Usage.CacheReadTokens, resp.Usage.CacheWriteTokens = p.cacheUsage(req)
		p.mu.Unlock()
	}
	if stopAt(req, &resp) {
		return resp, nil, nil
	}
	return resp, r.args, nil
}

// stopAt makes resp what a model stopped at req.MaxTokens returns, as a
// real provider does: when its output counts more tokens than that, it
// counts req.MaxTokens, its text is cut to four bytes a token (on a
// character boundary), its tool calls, left unfinished, are dropped, and
// it stopped for StopMaxTokens. It reports whether it cut.
func stopAt(req provider.Request, resp *provider.Response) bool {
	limit := int64(req.MaxTokens)
	if limit <= 0 || resp.Usage.OutputTokens <= limit {
		return false
	}
	resp.Usage.OutputTokens = limit
	text := resp.Message.Content
	if n := 4 * limit; int64(len(text)) > n {
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	resp.Message.Content = text
	resp.Message.ToolCalls = nil
	resp.StopReason = provider.StopMaxTokens
	return true
}

// Usage is the synthetic usage of a call: one token per four bytes of the
// request (system prompt, messages, tool definitions) and of the reply,
// rounded up, and one request.
func Usage(req provider.Request, reply provider.Message) provider.Usage {
	in := len(req.System)
	for _, m := range req.Messages {
		in += len(m.Content)
		for _, c := range m.ToolCalls {
			in += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		in += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	out := len(reply.Content)
	for _, c := range reply.ToolCalls {
		out += len(c.Name) + len(c.Arguments)
	}
	return provider.Usage{InputTokens: int64(in+3) / 4, OutputTokens: int64(out+3) / 4, Requests: 1}
}

// Stream answers req like Complete, and meanwhile passes onDelta the text
// a word at a time and each tool call in two pieces (its id, its name and
// the first half of its arguments, then the rest of them, unless that is
// empty). An error from onDelta ends the call with that error.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	resp, args, err := p.respond(ctx, req)
	if err != nil || onDelta == nil {
		return resp, err
	}
	for text := resp.Message.Content; text != ""; {
		w := nextWord(text)
		text = text[len(w):]
		if err := onDelta(provider.Delta{Text: w}); err != nil {
			return provider.Response{}, err
		}
	}
	for i, c := range resp.Message.ToolCalls {
		var a string
		if args != nil {
			a = args[i]
		} else {
			a = string(c.Arguments)
		}
		half := len(a) / 2
		if err := onDelta(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: a[:half]}}); err != nil {
			return provider.Response{}, err
		}
		if a[half:] == "" {
			continue
		}
		if err := onDelta(provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, Arguments: a[half:]}}); err != nil {
			return provider.Response{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	return resp, nil
}

// nextWord returns s up to and including its first space, or all of s:
// the words of a streamed text keep every byte.
func nextWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i+1]
	}
	return s
}
