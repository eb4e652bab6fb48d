package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// React is the ReAct loop: it calls the model, runs the tools the model asks
// for (in parallel when it asks for several), feeds the results back, and
// repeats until the model answers with text.
//
// A React keeps its conversation across runs, which is what a resident
// expert needs: a second question can build on the first answer. A run that
// fails or is cancelled leaves the conversation exactly as it was before it.
// React is safe for concurrent use; its runs are serialized, and a caller
// waiting its turn gives up when its context ends.
type React struct {
	p            provider.Provider
	name         string
	system       string
	model        string
	tools        *tool.Registry
	maxSteps     int
	toolRetries  int
	tokenLimit   int64
	historyLimit int
	maxTokens    int
	temperature  *float64

	turn    *semaphore.Weighted // held for a whole run
	mu      sync.Mutex          // guards history
	history []provider.Message
}

// NewReact returns a ReAct agent over p. It fails on a nil provider or a bad
// option value, saying which.
func NewReact(p provider.Provider, opts ...Option) (*React, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: pass a provider, such as fake.NewProvider(...) or openai.New()", ErrNilProvider)
	}
	r := &React{
		p:           p,
		name:        DefaultName,
		maxSteps:    DefaultMaxSteps,
		toolRetries: DefaultToolRetries,
		turn:        semaphore.NewWeighted(1),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Name returns the agent's name.
func (r *React) Name() string { return r.name }

// Tools returns the agent's tool registry (nil when it has no tools).
func (r *React) Tools() *tool.Registry { return r.tools }

// Provider returns the agent's provider.
func (r *React) Provider() provider.Provider { return r.p }

// SystemPrompt returns the agent's system prompt.
func (r *React) SystemPrompt() string { return r.system }

// Checkpoint returns a function that puts the conversation back as it is
// now. A caller that makes several runs one logical call (a sub-agent tool
// asking again after a rejected answer) uses it to undo them all when the
// call fails. Restoring is cheap: the kept conversation is never edited in
// place.
func (r *React) Checkpoint() (restore func()) {
	r.mu.Lock()
	saved := r.history
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.history = saved
		r.mu.Unlock()
	}
}

// History returns a copy of the conversation kept between runs.
func (r *React) History() []provider.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Message(nil), r.history...)
}

// Reset forgets the conversation. It waits for a run in progress to end.
func (r *React) Reset() {
	_ = r.turn.Acquire(context.Background(), 1)
	defer r.turn.Release(1)
	r.mu.Lock()
	r.history = nil
	r.mu.Unlock()
}

// CheckConversation reports the first reason a model API would refuse msgs:
// an unknown role or a system message, a tool call without an id or with
// the id of another, a tool result that answers no pending call, or a tool
// call left without its result.
func CheckConversation(msgs []provider.Message) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case provider.RoleUser, provider.RoleAssistant:
			if len(pending) > 0 {
				return fmt.Errorf("message %d (%s): tool calls %v have no result", i, m.Role, keys(pending))
			}
			for j, c := range m.ToolCalls {
				switch {
				case m.Role != provider.RoleAssistant:
					return fmt.Errorf("message %d: only assistant messages carry tool calls", i)
				case c.ID == "":
					return fmt.Errorf("message %d: tool call %d (%s) has no id for its result to name", i, j, c.Name)
				case pending[c.ID]:
					return fmt.Errorf("message %d: two tool calls share the id %q", i, c.ID)
				}
				pending[c.ID] = true
			}
		case provider.RoleTool:
			if !pending[m.ToolCallID] {
				return fmt.Errorf("message %d: tool result for %q answers no pending call", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		case provider.RoleSystem:
			return fmt.Errorf("message %d: a system message: the system prompt goes in WithSystemPrompt, not in the conversation", i)
		default:
			return fmt.Errorf("message %d: role %q is not user, assistant or tool", i, m.Role)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("tool calls %v have no result", keys(pending))
	}
	return nil
}

// keys returns the keys of m in order, so that errors read the same each time.
func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Run asks the agent in and returns its answer. On failure the Output still
// carries the run id, the messages so far and the usage spent.
func (r *React) Run(ctx context.Context, in Input) (Output, error) {
	if len(in.Messages) > 0 {
		if err := CheckConversation(in.Messages); err != nil {
			return Output{}, fmt.Errorf("agent %q: %w: %v", r.name, ErrBadMessages, err)
		}
	}
	if err := r.turn.Acquire(ctx, 1); err != nil {
		return Output{}, fmt.Errorf("agent %q: waiting for the previous run to end: %w", r.name, err)
	}
	defer r.turn.Release(1)

	r.mu.Lock()
	base := r.history
	r.mu.Unlock()

	runID := id.New("run_")
	ctx = WithRun(ctx, runID, r.name)
	info(ctx).scope.limit = r.tokenLimit
	s := &runState{r: r, ctx: ctx, runID: runID, events: event.Enabled(ctx)}
	s.msgs = make([]provider.Message, len(base), len(base)+len(in.Messages)+4)
	copy(s.msgs, base)
	s.msgs = append(s.msgs, in.Messages...)
	if in.Text != "" || len(in.Messages) == 0 {
		s.msgs = append(s.msgs, provider.UserMessage(in.Text))
	}
	start := len(base)

	if s.events {
		event.Emit(ctx, event.Event{Type: event.RunStarted, RunID: runID, ParentRunID: ParentRunID(ctx)})
	}
	answer, err := s.loop()
	s.child = s.child.Add(Finish(ctx))
	// Clipped, like the requests' messages: whoever appends to it gets a
	// slice of their own rather than writing into the agent's.
	out := Output{RunID: runID, Answer: answer, Messages: slices.Clip(s.msgs[start:]), Usage: s.usage, ChildUsage: s.child}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// Whatever else went wrong, the caller cancelled: say so first.
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		err = fmt.Errorf("agent %q: %w", r.name, err)
		if s.events {
			event.Emit(ctx, event.Event{Type: event.RunError, RunID: runID, Message: err.Error(), Code: ErrorCode(err)})
		}
		return out, err
	}
	r.mu.Lock()
	r.history = trimHistory(s.msgs, r.historyLimit)
	r.mu.Unlock()
	if s.events {
		res, _ := json.Marshal(answer)
		event.Emit(ctx, event.Event{Type: event.RunFinished, RunID: runID, Result: res})
	}
	return out, nil
}

// ErrorCode names the kind of a run's failure in a word, for events and logs.
func ErrorCode(err error) string {
	var pe *provider.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrMaxSteps):
		return "max_steps"
	case errors.Is(err, ErrToolRetries):
		return "tool_retries"
	case errors.Is(err, ErrUsageLimit):
		return "usage_limit"
	case errors.Is(err, ErrEmptyReply):
		return "empty_reply"
	case errors.As(err, &pe):
		return "provider_error"
	}
	return "error"
}

// runState is one run in progress.
type runState struct {
	r      *React
	ctx    context.Context
	runID  string
	events bool
	msgs   []provider.Message
	usage  provider.Usage
	child  provider.Usage
}

func (s *runState) loop() (string, error) {
	r := s.r
	failures := 0
	for step := 1; ; step++ {
		if step > r.maxSteps {
			return "", fmt.Errorf("%w: no answer after %d model calls: raise WithMaxSteps or give a narrower task", ErrMaxSteps, r.maxSteps)
		}
		if err := s.ctx.Err(); err != nil {
			return "", err
		}
		stepName := ""
		if s.events {
			stepName = s.runID + "/step-" + strconv.Itoa(step)
			event.Emit(s.ctx, event.Event{Type: event.StepStarted, StepName: stepName})
		}
		req := provider.Request{
			Model:       r.model,
			System:      s.systemPrompt(),
			Messages:    slices.Clip(s.msgs), // a provider that appends must not write where the next message goes
			Tools:       r.tools.Definitions(s.ctx),
			MaxTokens:   r.maxTokens,
			Temperature: r.temperature,
		}
		resp, err := s.complete(req, step)
		s.usage = s.usage.Add(resp.Usage)
		if err != nil {
			return "", err
		}
		if err := s.ctx.Err(); err != nil {
			// A reply that arrives after cancellation is not acted on.
			return "", err
		}
		msg := resp.Message
		msg.Role = provider.RoleAssistant
		if msg.Content == "" && len(msg.ToolCalls) == 0 {
			return "", fmt.Errorf("%w (stop reason %q): check the model and its max tokens", ErrEmptyReply, resp.StopReason)
		}
		s.msgs = append(s.msgs, msg)
		if err := s.checkLimit(); err != nil {
			return "", err
		}
		if len(msg.ToolCalls) == 0 {
			if s.events {
				event.Emit(s.ctx, event.Event{Type: event.StepFinished, StepName: stepName})
			}
			return msg.Content, nil
		}

		results, err := r.tools.Execute(s.ctx, msg.ToolCalls)
		var failed error
		for i, res := range results {
			s.child = s.child.Add(res.Usage)
			call := msg.ToolCalls[i]
			s.msgs = append(s.msgs, provider.ToolMessage(call.ID, res.Content, res.IsError))
			if res.IsError {
				failed = res.Err
				if failed == nil {
					failed = errors.New(res.Content)
				}
			}
			if s.events {
				event.Emit(s.ctx, event.Event{Type: event.ToolCallResult, MessageID: s.runID + "/result-" + call.ID, ToolCallID: call.ID, Content: res.Content, Role: "tool"})
			}
		}
		if err != nil {
			return "", err
		}
		if failed != nil {
			failures++
			if failures > r.toolRetries {
				return "", fmt.Errorf("%w: %d steps in a row had a failed tool call, the last: %w", ErrToolRetries, failures, failed)
			}
		} else {
			failures = 0
		}
		if err := s.checkLimit(); err != nil {
			return "", err
		}
		if s.events {
			event.Emit(s.ctx, event.Event{Type: event.StepFinished, StepName: stepName})
		}
	}
}

// systemPrompt is the agent's system prompt, followed, once a token limit is
// nearly reached, by a note that tells the model to wrap up, so that it can
// return what it has instead of losing the work to ErrUsageLimit.
func (s *runState) systemPrompt() string {
	lim := s.r.tokenLimit
	if lim == 0 {
		return s.r.system
	}
	used := s.usage.Add(s.child).Tokens()
	if used*5 < lim*4 {
		return s.r.system
	}
	note := "Budget note: you have used " + strconv.FormatInt(used, 10) + " of your " + strconv.FormatInt(lim, 10) +
		" tokens. Finish now: answer with what you have, and say plainly what is unfinished (status \"partial\" if you report a status)."
	if s.r.system == "" {
		return note
	}
	return s.r.system + "\n\n" + note
}

func (s *runState) checkLimit() error {
	if lim := s.r.tokenLimit; lim > 0 {
		used := s.usage.Add(s.child).Tokens()
		info(s.ctx).scope.used.Store(used)
		if used > lim {
			return fmt.Errorf("%w: %d tokens used, the limit is %d: raise WithTokenLimit or give a smaller task", ErrUsageLimit, used, lim)
		}
	}
	return nil
}

// complete makes one model call: streamed when the provider streams and
// someone listens to events, plain otherwise. A provider that panics fails
// the run with ErrProviderPanic instead of taking the program down.
//
// Every tool call of the reply has an id, unique in the reply, before any
// event names it.
func (s *runState) complete(req provider.Request, step int) (resp provider.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = provider.Response{}, fmt.Errorf("%w: %v", ErrProviderPanic, p)
		}
	}()
	return s.call(req, step)
}

func (s *runState) call(req provider.Request, step int) (provider.Response, error) {
	if !s.events {
		resp, err := s.r.p.Complete(s.ctx, req)
		resp.Message.ToolCalls = withIDs(resp.Message.ToolCalls)
		return resp, err
	}
	msgID := s.runID + "/msg-" + strconv.Itoa(step)
	if st, ok := s.r.p.(provider.Streamer); ok {
		return stream(s.ctx, st, req, msgID)
	}
	resp, err := s.r.p.Complete(s.ctx, req)
	resp.Message.ToolCalls = withIDs(resp.Message.ToolCalls)
	if err != nil {
		return resp, err
	}
	m := resp.Message
	if m.Content != "" {
		event.Emit(s.ctx, event.Event{Type: event.TextMessageStart, MessageID: msgID, Role: "assistant"})
		event.Emit(s.ctx, event.Event{Type: event.TextMessageContent, MessageID: msgID, Delta: m.Content})
		event.Emit(s.ctx, event.Event{Type: event.TextMessageEnd, MessageID: msgID})
	}
	for _, c := range m.ToolCalls {
		event.Emit(s.ctx, event.Event{Type: event.ToolCallStart, ToolCallID: c.ID, ToolCallName: c.Name, ParentMessageID: msgID})
		if len(c.Arguments) > 0 {
			event.Emit(s.ctx, event.Event{Type: event.ToolCallArgs, ToolCallID: c.ID, Delta: string(c.Arguments)})
		}
		event.Emit(s.ctx, event.Event{Type: event.ToolCallEnd, ToolCallID: c.ID})
	}
	return resp, nil
}

// stream consumes a streamed reply, emitting text and tool-call events as
// the pieces arrive, and returns the assembled response.
//
// It is a function of ctx rather than a method: the loop body of a range over
// an iterator is a closure that escapes, and capturing the run's state there
// would move that state to the heap on every run, events on or off.
func stream(ctx context.Context, st provider.Streamer, req provider.Request, msgID string) (provider.Response, error) {
	textOpen := false
	openCall := "" // id of the tool call whose events are open
	ids := map[int]string{}
	closeText := func() {
		if textOpen {
			event.Emit(ctx, event.Event{Type: event.TextMessageEnd, MessageID: msgID})
			textOpen = false
		}
	}
	closeCall := func() {
		if openCall != "" {
			event.Emit(ctx, event.Event{Type: event.ToolCallEnd, ToolCallID: openCall})
			openCall = ""
		}
	}
	for d, err := range st.Stream(ctx, req) {
		if err != nil {
			closeText()
			closeCall()
			return provider.Response{}, err
		}
		if d.Text != "" {
			closeCall()
			if !textOpen {
				event.Emit(ctx, event.Event{Type: event.TextMessageStart, MessageID: msgID, Role: "assistant"})
				textOpen = true
			}
			event.Emit(ctx, event.Event{Type: event.TextMessageContent, MessageID: msgID, Delta: d.Text})
		}
		if tc := d.ToolCall; tc != nil {
			closeText()
			callID, seen := ids[tc.Index]
			if !seen {
				callID = tc.ID
				if callID == "" {
					callID = id.New("call_")
				}
				ids[tc.Index] = callID
				closeCall()
				event.Emit(ctx, event.Event{Type: event.ToolCallStart, ToolCallID: callID, ToolCallName: tc.Name, ParentMessageID: msgID})
				openCall = callID
			}
			if tc.Arguments != "" && openCall == callID {
				event.Emit(ctx, event.Event{Type: event.ToolCallArgs, ToolCallID: callID, Delta: tc.Arguments})
			}
		}
		if d.Response != nil {
			closeText()
			closeCall()
			resp := *d.Response
			// The calls keep the ids their events announced.
			calls := resp.Message.ToolCalls
			if slices.ContainsFunc(calls, func(c provider.ToolCall) bool { return c.ID == "" }) {
				calls = slices.Clone(calls)
				for i := range calls {
					if id, ok := ids[i]; ok && calls[i].ID == "" {
						calls[i].ID = id
					}
				}
			}
			resp.Message.ToolCalls = withIDs(calls)
			return resp, nil
		}
	}
	closeText()
	closeCall()
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	return provider.Response{}, errors.New("stream ended without a final response: the provider's Stream broke its contract")
}

// withIDs returns calls with an id on each call that has none or repeats an
// earlier call's, so that every result can name its call. It copies calls
// before changing them: the slice belongs to the provider.
func withIDs(calls []provider.ToolCall) []provider.ToolCall {
	copied := false
	for i := range calls {
		if calls[i].ID != "" && !hasID(calls[:i], calls[i].ID) {
			continue
		}
		if !copied {
			calls = slices.Clone(calls)
			copied = true
		}
		calls[i].ID = id.New("call_")
	}
	return calls
}

func hasID(calls []provider.ToolCall, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

// trimHistory bounds msgs to about limit messages, cutting only where a user
// turn starts.
func trimHistory(msgs []provider.Message, limit int) []provider.Message {
	if limit <= 0 || len(msgs) <= limit {
		return msgs
	}
	cut := len(msgs) - limit
	for i := cut; i < len(msgs); i++ {
		if msgs[i].Role == provider.RoleUser {
			return msgs[i:]
		}
	}
	for i := cut - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			return msgs[i:]
		}
	}
	return msgs
}
