package anthropic

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// stream runs one streamed message, passing deltas to onDelta (when it is
// not nil) until the reply is complete, onDelta fails, ctx ends, the stream
// fails, goes over a limit or stays idle for the idle timeout.
func (p *Provider) stream(ctx context.Context, params ant.MessageNewParams, onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta == nil {
		onDelta = func(provider.Delta) error { return nil }
	}
	sctx, idle := adapter.WatchIdle(ctx, p.limits.IdleTimeout)
	defer idle.Stop()
	var httpResp *http.Response
	s := p.client.Messages.NewStreaming(sctx, params, option.WithResponseInto(&httpResp))
	defer s.Close()

	a := assembly{limits: p.limits}
	events := 0
	for s.Next() {
		if err := adapter.Canceled(Name, ctx); err != nil {
			return provider.Response{}, err
		}
		events++
		ev := s.Current()
		if err := a.add(&ev, adapter.Status(httpResp), onDelta); err != nil {
			return provider.Response{}, err
		}
		// The SDK passes no keep-alive (ping) on: every event is progress.
		idle.Progress()
	}
	// The reply is whole once its message_stop came.
	if err := adapter.StreamEnd(ctx, Name, httpResp, idle, s.Err(), events, a.stopped, func(err error) error { return failure(ctx, err, httpResp) }); err != nil {
		return provider.Response{}, err
	}
	a.r.text = a.text.String()
	resp := a.r.response()
	resp.RateLimit = adapter.RateLimit(httpResp)
	return resp, nil
}

// assembly builds a reply from stream events in time and memory linear in
// the reply's size, and holds it to the limits. It keeps a tool call's
// arguments as the model wrote them, so that arguments that are not JSON
// reach the tool, which tells the model so.
type assembly struct {
	limits  adapter.Limits
	r       reply
	text    strings.Builder
	blocks  []int  // per content block: its tool call's position in r.calls, or -1
	started []bool // per tool call: a delta has replaced the input of its start event
	stopped bool
}

// add folds one event into the reply and passes its deltas to onDelta.
func (a *assembly) add(ev *ant.MessageStreamEventUnion, status int, onDelta func(provider.Delta) error) error {
	r := &a.r
	var d provider.Delta
	switch ev.Type {
	case "message_start":
		r.model = ev.Message.Model
		r.usage = ev.Message.Usage
	case "message_delta":
		r.stop = ev.Delta.StopReason
		// Usage counts here are whole-message totals; those left out keep
		// message_start's value.
		u := ev.Usage
		r.usage.OutputTokens = u.OutputTokens
		if u.JSON.InputTokens.Valid() {
			r.usage.InputTokens = u.InputTokens
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			r.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			r.usage.CacheReadInputTokens = u.CacheReadInputTokens
		}
	case "content_block_start":
		if ev.Index != int64(len(a.blocks)) {
			return adapter.Malformed(Name, status, fmt.Errorf("content block %d started where block %d was due", ev.Index, len(a.blocks)))
		}
		switch cb := ev.ContentBlock; cb.Type {
		case "text":
			a.blocks = append(a.blocks, -1)
			d.Text = cb.Text
		case "tool_use":
			pos := len(r.calls)
			a.blocks = append(a.blocks, pos)
			r.calls = append(r.calls, call{id: cb.ID, name: cb.Name, args: []byte(cb.JSON.Input.Raw())})
			a.started = append(a.started, false)
			d.ToolCall = provider.ToolCallDelta{Index: pos, ID: cb.ID, Name: cb.Name}
		default:
			a.blocks = append(a.blocks, -1) // thinking and others: not part of the reply's vocabulary
		}
	case "content_block_delta":
		if ev.Index < 0 || ev.Index >= int64(len(a.blocks)) {
			return adapter.Malformed(Name, status, fmt.Errorf("a delta for content block %d, which has not started", ev.Index))
		}
		switch ev.Delta.Type {
		case "text_delta":
			d.Text = ev.Delta.Text
		case "input_json_delta":
			pos := a.blocks[ev.Index]
			if pos < 0 || ev.Delta.PartialJSON == "" {
				break
			}
			c := &r.calls[pos]
			if !a.started[pos] {
				c.args, a.started[pos] = c.args[:0], true // the deltas replace the start's empty input
			}
			if len(c.args)+len(ev.Delta.PartialJSON) > a.limits.MaxArgumentBytes {
				return adapter.ArgumentLimit(Name, status, c.name, a.limits.MaxArgumentBytes, "WithMaxArgumentBytes")
			}
			c.args = append(c.args, ev.Delta.PartialJSON...)
			d.ToolCall = provider.ToolCallDelta{Index: pos, Arguments: ev.Delta.PartialJSON}
		}
	case "message_stop":
		a.stopped = true
	}
	if d.Text != "" {
		if a.text.Len()+len(d.Text) > a.limits.MaxTextBytes {
			return adapter.TextLimit(Name, status, a.limits.MaxTextBytes, "WithMaxTextBytes")
		}
		a.text.WriteString(d.Text)
	}
	if d.Text != "" || d.HasToolCall() {
		return onDelta(d)
	}
	return nil
}
