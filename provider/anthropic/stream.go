package anthropic

import (
	"context"
	"net/http"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// stream runs one streamed message, passing deltas to onDelta (when it is
// not nil) until the reply is complete, onDelta fails, ctx ends or the
// stream fails.
func (p *Provider) stream(ctx context.Context, params ant.MessageNewParams, onDelta func(provider.Delta) error) (provider.Response, error) {
	var httpResp *http.Response
	s := p.client.Messages.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
	defer s.Close()

	var (
		msg     ant.Message
		toolPos = map[int64]int{} // content block index → tool call ordinal
		stopped bool
	)
	for s.Next() {
		if err := adapter.Canceled(Name, ctx); err != nil {
			return provider.Response{}, err
		}
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return provider.Response{}, adapter.Malformed(Name, statusOf(httpResp), err)
		}
		var d provider.Delta
		switch ev.Type {
		case "content_block_start":
			switch cb := ev.ContentBlock; cb.Type {
			case "text":
				d.Text = cb.Text
			case "tool_use":
				pos := len(toolPos)
				toolPos[ev.Index] = pos
				d.ToolCall = provider.ToolCallDelta{Index: pos, ID: cb.ID, Name: cb.Name}
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				d.Text = ev.Delta.Text
			case "input_json_delta":
				if pos, ok := toolPos[ev.Index]; ok && ev.Delta.PartialJSON != "" {
					d.ToolCall = provider.ToolCallDelta{Index: pos, Arguments: ev.Delta.PartialJSON}
				}
			}
		case "message_stop":
			stopped = true
		}
		if onDelta != nil && (d.Text != "" || d.HasToolCall()) {
			if err := onDelta(d); err != nil {
				return provider.Response{}, err
			}
		}
	}
	if err := s.Err(); err != nil {
		return provider.Response{}, failure(ctx, err, httpResp)
	}
	if err := adapter.Canceled(Name, ctx); err != nil {
		return provider.Response{}, err
	}
	if !stopped {
		return provider.Response{}, adapter.Incomplete(Name, statusOf(httpResp))
	}
	return response(&msg), nil
}
