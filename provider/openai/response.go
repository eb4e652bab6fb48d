package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// reply is a model's answer as both Complete and Stream see it, so that the
// two assemble the same Response.
type reply struct {
	model   string
	text    string
	refusal string
	calls   []call
	finish  string
	usage   oai.CompletionUsage
}

type call struct {
	id, name string
	args     []byte
}

// decodeCompletion reads a Chat Completions response body.
func decodeCompletion(raw []byte, status int, lim adapter.Limits) (provider.Response, error) {
	var cc oai.ChatCompletion
	if err := json.Unmarshal(raw, &cc); err != nil {
		return provider.Response{}, adapter.Malformed(Name, status, err)
	}
	if len(cc.Choices) == 0 {
		return provider.Response{}, adapter.Malformed(Name, status, errors.New("the response has no choices"))
	}
	ch := cc.Choices[0]
	r := reply{
		model:   cc.Model,
		text:    ch.Message.Content,
		refusal: ch.Message.Refusal,
		finish:  ch.FinishReason,
		usage:   cc.Usage,
	}
	r.calls = make([]call, 0, len(ch.Message.ToolCalls))
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type == "custom" {
			continue // deputy never offers custom tools
		}
		r.calls = append(r.calls, call{id: tc.ID, name: tc.Function.Name, args: []byte(tc.Function.Arguments)})
	}
	if n := len(r.text) + len(r.refusal); n > lim.MaxTextBytes {
		return provider.Response{}, adapter.TextLimit(Name, status, lim.MaxTextBytes, "WithMaxTextBytes")
	}
	for _, c := range r.calls {
		if len(c.args) > lim.MaxArgumentBytes {
			return provider.Response{}, adapter.ArgumentLimit(Name, status, c.name, lim.MaxArgumentBytes, "WithMaxArgumentBytes")
		}
	}
	return r.response(), nil
}

// response converts the reply into deputy's vocabulary.
func (r *reply) response() provider.Response {
	msg := provider.Message{Role: provider.RoleAssistant, Content: r.text + r.refusal}
	for i := range r.calls {
		c := &r.calls[i]
		id := c.id
		if id == "" {
			// Some compatible servers leave the ID out; a tool result must
			// name its call, so give it one that is unique in the reply.
			id = fmt.Sprintf("call_%d", i)
		}
		msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{
			ID:        id,
			Name:      c.name,
			Arguments: adapter.Arguments(c.args),
		})
	}
	return provider.Response{
		Message:    msg,
		StopReason: stopReason(r.finish, r.refusal != "", len(msg.ToolCalls) > 0),
		Model:      r.model,
		Usage: provider.Usage{
			InputTokens:     r.usage.PromptTokens,
			OutputTokens:    r.usage.CompletionTokens,
			CacheReadTokens: r.usage.PromptTokensDetails.CachedTokens,
			Requests:        1,
		},
	}
}

func stopReason(finish string, refused, calledTools bool) provider.StopReason {
	switch {
	case refused:
		return provider.StopRefusal
	case calledTools && (finish == "stop" || finish == ""):
		// Some compatible servers report "stop" for a reply that calls tools.
		return provider.StopToolUse
	}
	switch finish {
	case "stop":
		return provider.StopEndTurn
	case "length":
		return provider.StopMaxTokens
	case "tool_calls", "function_call":
		return provider.StopToolUse
	case "content_filter":
		return provider.StopRefusal
	}
	return provider.StopOther
}

// failure turns an error from the SDK into the error Complete and Stream
// report.
func failure(ctx context.Context, err error, httpResp *http.Response) error {
	if cerr := adapter.Canceled(Name, ctx); cerr != nil {
		return cerr
	}
	var aerr *oai.Error
	if errors.As(err, &aerr) {
		kind := provider.KindForStatus(aerr.StatusCode)
		if aerr.StatusCode == http.StatusBadRequest || aerr.StatusCode == http.StatusRequestEntityTooLarge {
			if aerr.Code == "context_length_exceeded" || adapter.MentionsContextWindow(aerr.Message) {
				kind = provider.KindContextWindow
			}
		}
		if httpResp == nil {
			httpResp = aerr.Response
		}
		rl := adapter.RateLimit(httpResp)
		if kind == provider.KindRateLimit && rl.RetryAfter == 0 {
			rl.RetryAfter = adapter.RetryHint(aerr.Message)
		}
		return &provider.Error{Provider: Name, StatusCode: aerr.StatusCode, Kind: kind, Message: aerr.Message, Err: err, RateLimit: rl}
	}
	var serr *ssestream.StreamError
	if errors.As(err, &serr) {
		return streamFailure(adapter.Status(httpResp), serr)
	}
	return adapter.Transport(Name, adapter.Status(httpResp), err)
}

// streamFailure classifies an error event that arrived inside a stream, after
// the HTTP status had already said all was well.
func streamFailure(status int, serr *ssestream.StreamError) error {
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(serr.Event.Data, &body)
	e := body.Error
	code := fmt.Sprint(e.Code)
	kind := provider.KindUnknown
	switch {
	case code == "context_length_exceeded" || adapter.MentionsContextWindow(e.Message):
		kind = provider.KindContextWindow
	case strings.Contains(e.Type, "rate_limit") || strings.Contains(code, "rate_limit"):
		kind = provider.KindRateLimit
	case e.Type == "server_error" || strings.Contains(e.Type, "overloaded") || strings.Contains(code, "overloaded"):
		kind = provider.KindTransient
	case e.Type == "invalid_request_error":
		kind = provider.KindBadRequest
	case e.Type == "authentication_error" || e.Type == "permission_error":
		kind = provider.KindAuth
	}
	msg := e.Message
	if msg == "" {
		msg = serr.Message
	}
	return &provider.Error{Provider: Name, StatusCode: status, Kind: kind, Message: msg, Err: serr}
}
