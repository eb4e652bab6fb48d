package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// decodeMessage reads a Messages response body.
func decodeMessage(raw []byte, status int, lim adapter.Limits) (provider.Response, error) {
	var msg ant.Message
	if err := json.Unmarshal(raw, &msg); err != nil {
		return provider.Response{}, adapter.Malformed(Name, status, err)
	}
	if msg.Type != "message" {
		return provider.Response{}, adapter.Malformed(Name, status, errors.New("the body is not a message"))
	}
	r := reply{model: msg.Model, stop: msg.StopReason, usage: msg.Usage}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			r.calls = append(r.calls, call{id: b.ID, name: b.Name, args: b.Input})
		}
	}
	r.text = text.String()
	if len(r.text) > lim.MaxTextBytes {
		return provider.Response{}, adapter.TextLimit(Name, status, lim.MaxTextBytes, "WithMaxTextBytes")
	}
	for _, c := range r.calls {
		if len(c.args) > lim.MaxArgumentBytes {
			return provider.Response{}, adapter.ArgumentLimit(Name, status, c.name, lim.MaxArgumentBytes, "WithMaxArgumentBytes")
		}
	}
	return r.response(), nil
}

// reply is a model's answer as both Complete and Stream see it, so that the
// two return the same Response.
type reply struct {
	model string
	text  string
	calls []call
	stop  ant.StopReason
	usage ant.Usage
}

type call struct {
	id, name string
	args     []byte
}

// response converts the reply into deputy's vocabulary.
func (r *reply) response() provider.Response {
	out := provider.Message{Role: provider.RoleAssistant, Content: r.text}
	for _, c := range r.calls {
		out.ToolCalls = append(out.ToolCalls, provider.ToolCall{
			ID:        c.id,
			Name:      c.name,
			Arguments: adapter.Arguments(c.args),
		})
	}
	u := r.usage
	return provider.Response{
		Message:    out,
		StopReason: stopReason(r.stop),
		Model:      r.model,
		Usage: provider.Usage{
			InputTokens:      u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
			OutputTokens:     u.OutputTokens,
			CacheReadTokens:  u.CacheReadInputTokens,
			CacheWriteTokens: u.CacheCreationInputTokens,
			Requests:         1,
		},
	}
}

func stopReason(r ant.StopReason) provider.StopReason {
	switch r {
	case ant.StopReasonEndTurn, ant.StopReasonStopSequence:
		return provider.StopEndTurn
	case ant.StopReasonToolUse:
		return provider.StopToolUse
	case ant.StopReasonMaxTokens, ant.StopReasonModelContextWindowExceeded:
		return provider.StopMaxTokens
	case ant.StopReasonRefusal:
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
	var aerr *ant.Error
	if errors.As(err, &aerr) {
		if httpResp == nil {
			httpResp = aerr.Response
		}
		kind := kindOf(aerr)
		rl := adapter.RateLimit(httpResp)
		if kind == provider.KindRateLimit && rl.RetryAfter == 0 {
			rl.RetryAfter = adapter.RetryHint(aerr.Message)
		}
		return &provider.Error{Provider: Name, StatusCode: aerr.StatusCode, Kind: kind, Message: aerr.Message, Err: err, RateLimit: rl}
	}
	if strings.HasPrefix(err.Error(), "no Anthropic credentials found") {
		return &provider.Error{Provider: Name, Kind: provider.KindAuth, Message: "no API key: set ANTHROPIC_API_KEY or pass anthropic.WithAPIKey", Err: err}
	}
	return adapter.Transport(Name, adapter.Status(httpResp), err)
}

// kindOf classifies an API error by its status or, for an error event inside
// a stream whose status was 200, by its type.
func kindOf(aerr *ant.Error) provider.ErrorKind {
	typ := string(aerr.Type())
	if (aerr.StatusCode == http.StatusBadRequest || aerr.StatusCode == http.StatusRequestEntityTooLarge || typ == "invalid_request_error") &&
		adapter.MentionsContextWindow(aerr.Message) {
		return provider.KindContextWindow
	}
	if aerr.StatusCode >= 400 {
		return provider.KindForStatus(aerr.StatusCode)
	}
	switch typ {
	case "overloaded_error", "api_error", "timeout_error":
		return provider.KindTransient
	case "rate_limit_error":
		return provider.KindRateLimit
	case "authentication_error", "permission_error":
		return provider.KindAuth
	case "invalid_request_error", "not_found_error":
		return provider.KindBadRequest
	case "request_too_large":
		return provider.KindContextWindow
	}
	return provider.KindUnknown
}
