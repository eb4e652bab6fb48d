package openai

import (
	"context"
	"net/http"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// stream runs one streamed completion, passing deltas to onDelta (when it
// is not nil) until the reply is complete, onDelta fails, ctx ends or the
// stream fails.
func (p *Provider) stream(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta == nil {
		onDelta = func(provider.Delta) error { return nil }
	}
	params.StreamOptions.IncludeUsage = param.NewOpt(true)
	var httpResp *http.Response
	s := p.client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
	defer s.Close()

	var (
		r       reply
		byIndex = map[int64]int{} // the wire's tool-call index → position in r.calls
	)
	for s.Next() {
		if err := adapter.Canceled(Name, ctx); err != nil {
			return provider.Response{}, err
		}
		chunk := s.Current()
		if chunk.Model != "" {
			r.model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			r.usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // deputy asks for one choice
			}
			if ch.FinishReason != "" {
				r.finish = ch.FinishReason
			}
			d := ch.Delta
			if d.Content != "" {
				r.text += d.Content
				if err := onDelta(provider.Delta{Text: d.Content}); err != nil {
					return provider.Response{}, err
				}
			}
			if d.Refusal != "" {
				r.refusal += d.Refusal
				if err := onDelta(provider.Delta{Text: d.Refusal}); err != nil {
					return provider.Response{}, err
				}
			}
			for _, tc := range d.ToolCalls {
				td := provider.Delta{ToolCall: r.addToolCall(byIndex, tc)}
				if !td.HasToolCall() {
					continue // a fragment that adds nothing
				}
				if err := onDelta(td); err != nil {
					return provider.Response{}, err
				}
			}
		}
	}
	if err := s.Err(); err != nil {
		return provider.Response{}, failure(ctx, err, httpResp)
	}
	if err := adapter.Canceled(Name, ctx); err != nil {
		return provider.Response{}, err
	}
	if r.finish == "" {
		// The body ended without a finish reason: the connection was cut.
		return provider.Response{}, adapter.Incomplete(Name, statusOf(httpResp))
	}
	return r.response(), nil
}

// addToolCall folds a streamed tool-call fragment into r and returns the
// delta to report. The first fragment of a call carries its ID and name;
// later ones add to its arguments.
func (r *reply) addToolCall(byIndex map[int64]int, tc oai.ChatCompletionChunkChoiceDeltaToolCall) provider.ToolCallDelta {
	pos, ok := byIndex[tc.Index]
	if !ok || (tc.ID != "" && r.calls[pos].id != "" && tc.ID != r.calls[pos].id) {
		// A new call. Servers that reuse an index for every call still give
		// each call its own ID.
		pos = len(r.calls)
		byIndex[tc.Index] = pos
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
