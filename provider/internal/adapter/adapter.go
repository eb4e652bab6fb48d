// Package adapter holds the few pieces that the SDK-backed providers share:
// reporting cancellation, classifying failures that carry no API error body,
// and normalizing the JSON that crosses the vocabulary boundary.
package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/unreachable"
)

// Canceled returns the error to report once ctx is done, or nil while ctx is
// live. The error wraps ctx.Err(), so errors.Is(err, context.Canceled) and
// errors.Is(err, context.DeadlineExceeded) hold; it is deliberately not a
// *provider.Error, because the caller stopped the call, not the provider.
func Canceled(name string, ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Transport classifies an error that came without an API error body: a
// connection that failed or dropped, a per-attempt timeout, a stream cut
// short. status is the HTTP status when a response had started, else 0.
//
// A reply over a size limit, a stream line that is not JSON and a refused
// cross-origin redirect are not network trouble; they get their own kinds.
func Transport(name string, status int, err error) *provider.Error {
	if perr := classify(name, status, err); perr != nil {
		return perr
	}
	if unreachable.Is(err) {
		return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindTransient, Message: unreachableMessage(name, err), Err: err}
	}
	kind := provider.KindUnknown
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &netErr),
		errors.As(err, &urlErr),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED):
		kind = provider.KindTransient
	}
	return &provider.Error{Provider: name, StatusCode: status, Kind: kind, Err: err}
}

// unreachableMessage says where a call went that could not reach its
// server (a connection refused, a host name that does not resolve), and
// what to do.
func unreachableMessage(name string, err error) string {
	where := "the server"
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		where = urlErr.URL
	}
	why := "the connection was refused (nothing listens there)"
	var dns *net.DNSError
	if errors.As(err, &dns) {
		why = "the host name " + strconv.Quote(dns.Name) + " does not resolve"
	}
	return fmt.Sprintf("cannot reach %s: %s; start the server, or give the provider its URL with WithBaseURL or %s_BASE_URL", where, why, strings.ToUpper(name))
}

// ErrIncomplete is the cause of a stream that ended before the provider said
// the reply was complete.
var ErrIncomplete = errors.New("the stream ended before the reply was complete")

// Incomplete reports a stream that ended early. A retry may succeed, so the
// kind is transient.
func Incomplete(name string, status int) *provider.Error {
	return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindTransient, Message: ErrIncomplete.Error(), Err: ErrIncomplete}
}

// BadRequest reports a Request that the provider cannot send. The message
// should say what was wrong and what to do.
func BadRequest(name, format string, args ...any) *provider.Error {
	msg := fmt.Sprintf(format, args...)
	return &provider.Error{Provider: name, Kind: provider.KindBadRequest, Message: msg, Err: errors.New(msg)}
}

// Malformed reports a response body that could not be read.
func Malformed(name string, status int, err error) *provider.Error {
	return &provider.Error{Provider: name, StatusCode: status, Kind: provider.KindMalformed, Message: "could not read the response: " + err.Error(), Err: err}
}

// Arguments normalizes a tool call's argument text: empty becomes {}, valid
// JSON is compacted (so the same call reads the same whether it was streamed
// or not), and anything else is kept as the model wrote it for the tool to
// reject.
func Arguments(s []byte) json.RawMessage {
	if len(bytes.TrimSpace(s)) == 0 {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, s); err != nil {
		return json.RawMessage(bytes.Clone(s))
	}
	return json.RawMessage(buf.Bytes())
}

// Object decodes raw as a JSON object. Empty raw is an empty object.
func Object(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("got null, want a JSON object")
	}
	return m, nil
}

// IsObject reports whether raw is a JSON object.
func IsObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// MentionsContextWindow reports whether an API error message says that the
// prompt does not fit the model's context window.
func MentionsContextWindow(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "context length", "context window", "context_length", "maximum context", "too many tokens"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// CheckURL reports why s cannot be a provider's base URL: it must parse, use
// http or https, and name a host.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("the scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("the URL has no host")
	}
	return nil
}
