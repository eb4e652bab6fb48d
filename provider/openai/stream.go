package openai

import (
	"context"
	"net/http"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// stream runs one streamed completion, passing deltas to onDelta (when it
// is not nil) until the reply is complete, onDelta fails, ctx ends, the
// stream fails, goes over a limit or stays idle for the idle timeout.
func (p *Provider) stream(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta == nil {
		onDelta = func(provider.Delta) error { return nil }
	}
	params.StreamOptions.IncludeUsage = param.NewOpt(true)
	sctx, idle := adapter.WatchIdle(ctx, p.limits.IdleTimeout)
	defer idle.Stop()
	var httpResp *http.Response
	s := p.client.Chat.Completions.NewStreaming(sctx, params, option.WithResponseInto(&httpResp))
	defer s.Close()

	a := assembly{limits: p.limits, byIndex: map[int64]int{}}
	events := 0
	for s.Next() {
		if err := adapter.Canceled(Name, ctx); err != nil {
			return provider.Response{}, err
		}
		events++
		chunk := s.Current()
		progress, err := a.add(&chunk, adapter.Status(httpResp), onDelta)
		if err != nil {
			return provider.Response{}, err
		}
		if progress {
			idle.Progress()
		}
	}
	// The reply is whole once a chunk gave its finish reason.
	if err := adapter.StreamEnd(ctx, Name, httpResp, idle, s.Err(), events, a.r.finish != "", func(err error) error { return failure(ctx, err, httpResp) }); err != nil {
		return provider.Response{}, err
	}
	resp := a.response()
	resp.RateLimit = adapter.RateLimit(httpResp)
	return resp, nil
}

// assembly builds a reply from stream chunks in time and memory linear in
// the reply's size, and holds it to the limits.
type assembly struct {
	limits        adapter.Limits
	r             reply
	text, refusal strings.Builder
	byIndex       map[int64]int // the wire's tool-call index → position in r.calls
}

// add folds one chunk into the reply and passes its deltas to onDelta. It
// reports whether the chunk carried anything of the reply.
func (a *assembly) add(chunk *oai.ChatCompletionChunk, status int, onDelta func(provider.Delta) error) (progress bool, err error) {
	r := &a.r
	if chunk.Model != "" {
		r.model = chunk.Model
	}
	if chunk.JSON.Usage.Valid() {
		r.usage = chunk.Usage
		progress = true
	}
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue // deputy asks for one choice
		}
		if ch.FinishReason != "" {
			r.finish = ch.FinishReason
			progress = true
		}
		d := ch.Delta
		if d.Content != "" || d.Refusal != "" {
			progress = true
		}
		if err := a.addText(&a.text, d.Content, status, onDelta); err != nil {
			return progress, err
		}
		if err := a.addText(&a.refusal, d.Refusal, status, onDelta); err != nil {
			return progress, err
		}
		for _, tc := range d.ToolCalls {
			td := provider.Delta{ToolCall: a.addToolCall(tc)}
			if !td.HasToolCall() {
				continue // a fragment that adds nothing
			}
			progress = true
			if c := &r.calls[td.ToolCall.Index]; len(c.args) > a.limits.MaxArgumentBytes {
				return progress, adapter.ArgumentLimit(Name, status, c.name, a.limits.MaxArgumentBytes, "WithMaxArgumentBytes")
			}
			if err := onDelta(td); err != nil {
				return progress, err
			}
		}
	}
	return progress, nil
}

// addText appends s to b, the reply's text or its refusal, and passes it on,
// unless the two together would go over the text limit.
func (a *assembly) addText(b *strings.Builder, s string, status int, onDelta func(provider.Delta) error) error {
	if s == "" {
		return nil
	}
	if a.text.Len()+a.refusal.Len()+len(s) > a.limits.MaxTextBytes {
		return adapter.TextLimit(Name, status, a.limits.MaxTextBytes, "WithMaxTextBytes")
	}
	b.WriteString(s)
	return onDelta(provider.Delta{Text: s})
}

// response returns the assembled reply.
func (a *assembly) response() provider.Response {
	a.r.text, a.r.refusal = a.text.String(), a.refusal.String()
	return a.r.response()
}

// addToolCall folds a streamed tool-call fragment into the reply and
// returns the delta to report. The first fragment of a call carries its ID
// and name; later ones add to its arguments.
func (a *assembly) addToolCall(tc oai.ChatCompletionChunkChoiceDeltaToolCall) provider.ToolCallDelta {
	r := &a.r
	pos, ok := a.byIndex[tc.Index]
	if !ok || (tc.ID != "" && r.calls[pos].id != "" && tc.ID != r.calls[pos].id) {
		// A new call. Servers that reuse an index for every call still give
		// each call its own ID.
		pos = len(r.calls)
		a.byIndex[tc.Index] = pos
		r.calls = append(r.calls, call{})
	}
	c := &r.calls[pos]
	d := provider.ToolCallDelta{Index: pos, Arguments: tc.Function.Arguments}
	if c.id == "" && tc.ID != "" {
		c.id, d.ID = tc.ID, tc.ID
	}
	if c.name == "" && tc.Function.Name != "" {
		c.name, d.Name = tc.Function.Name, tc.Function.Name
	}
	c.args = append(c.args, tc.Function.Arguments...)
	return d
}
