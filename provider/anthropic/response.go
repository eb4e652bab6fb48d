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
func decodeMessage(raw []byte, status int) (provider.Response, error) {
	var msg ant.Message
	if err := json.Unmarshal(raw, &msg); err != nil {
		return provider.Response{}, adapter.Malformed(Name, status, err)
	}
	if msg.Type != "message" {
		return provider.Response{}, adapter.Malformed(Name, status, errors.New("the body is not a message"))
	}
	return response(&msg), nil
}

// response converts a whole message, received or assembled from a stream,
// into deputy's vocabulary.
func response(msg *ant.Message) provider.Response {
	out := provider.Message{Role: provider.RoleAssistant}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			out.ToolCalls = append(out.ToolCalls, provider.ToolCall{
				ID:        b.ID,
				Name:      b.Name,
				Arguments: adapter.Arguments(b.Input),
			})
		}
	}
	out.Content = text.String()
	u := msg.Usage
	return provider.Response{
		Message:    out,
		StopReason: stopReason(msg.StopReason),
		Model:      msg.Model,
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
		return &provider.Error{Provider: Name, StatusCode: aerr.StatusCode, Kind: kindOf(aerr), Message: aerr.Message, Err: err}
	}
	if strings.HasPrefix(err.Error(), "no Anthropic credentials found") {
		return &provider.Error{Provider: Name, Kind: provider.KindAuth, Message: "no API key: set ANTHROPIC_API_KEY or pass anthropic.WithAPIKey", Err: err}
	}
	return adapter.Transport(Name, statusOf(httpResp), err)
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
