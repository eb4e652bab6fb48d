package agent

import (
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/spans"
	"github.com/deputy-go/deputy/provider"
)

// system is the system prompt the run's model calls send: a context
// fork's parent's, else the agent's.
func (s *runState) system() string {
	if s.fork != nil {
		return s.fork.System
	}
	return s.r.system
}

// tools are the tool definitions the run's model calls offer: a context
// fork's parent's, as the parent offered them, else those of the agent's
// registry available under the run's context.
func (s *runState) tools() []provider.ToolDef {
	if s.fork != nil {
		return s.fork.Tools
	}
	return s.r.tools.Definitions(s.ctx)
}

// request is the step's model request, over the conversation so far.
func (s *runState) request(tools []provider.ToolDef, pl callPlan) provider.Request {
	r := s.r
	req := provider.Request{
		Model:          r.model,
		System:         r.system,
		Messages:       slices.Clip(s.msgs), // a provider that appends must not write where the next message goes
		Tools:          tools,
		MaxTokens:      pl.maxTokens,
		Temperature:    r.temperature,
		ResponseSchema: s.schema,
		CacheKey:       s.cacheKey,
	}
	if f := s.fork; f != nil {
		req.System, req.SharedPrefix = f.System, len(f.Messages)
		if f.Model != "" {
			req.Model = f.Model // the cache is the model's
		}
	}
	if note := pl.note; note != "" {
		// The note changes from call to call, so it goes last, after the
		// conversation, where it leaves the cached prefix as it was; it is
		// not kept in the conversation.
		req.Messages = append(req.Messages, provider.UserMessage(note))
	}
	return req
}

// complete makes one model call: streamed when the provider streams and
// someone listens to events, plain otherwise; inside a chat span when traced.
// A provider that panics fails the run with ErrProviderPanic instead of
// taking the program down.
func (s *runState) complete(req provider.Request, msgID string) (resp provider.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = provider.Response{}, fmt.Errorf("%w: %v", ErrProviderPanic, p)
		}
	}()
	return s.call(req, msgID)
}

func (s *runState) call(req provider.Request, msgID string) (resp provider.Response, err error) {
	ctx := s.ctx
	if s.tracer != nil {
		var span trace.Span
		providerName, _ := s.r.spanIdentity()
		ctx, span = startChatSpan(ctx, s.tracer, req.Model, providerName, s.sent)
		defer func() {
			dollars, saved, priced := s.price(req, resp)
			spans.EndChat(span, resp, err, dollars, saved, priced)
		}()
	}
	if !s.events {
		return s.r.p.Complete(ctx, req)
	}
	if st := s.r.streamer; st != nil {
		sr := &streamReply{em: s.em, msgID: msgID, taken: s.callIDs, msgs: s.msgs}
		defer sr.closeAll() // on a panic too
		resp, err = st.Stream(ctx, req, sr.delta)
		s.callIDs = sr.taken // with the set, if it made one
		if err != nil {
			return provider.Response{}, err
		}
		resp.Message.ToolCalls = sr.finish(resp.Message.ToolCalls)
		return resp, nil
	}
	resp, err = s.r.p.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	// The calls get their ids now, so that the events announce them.
	resp.Message.ToolCalls = withIDs(resp.Message.ToolCalls, &s.callIDs, s.msgs)
	m := resp.Message
	em := s.em
	parent := ""
	if m.Content != "" {
		parent = msgID
		em.Emit(event.Event{Type: event.TextMessageStart, MessageID: msgID, Role: "assistant"})
		em.Emit(event.Event{Type: event.TextMessageContent, MessageID: msgID, Delta: m.Content})
		em.Emit(event.Event{Type: event.TextMessageEnd, MessageID: msgID})
	}
	for i := range m.ToolCalls {
		emitCall(em, &m.ToolCalls[i], parent)
	}
	return resp, nil
}
