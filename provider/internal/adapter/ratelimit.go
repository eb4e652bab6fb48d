package adapter

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// RateLimit reads what a response's headers say of the provider's rate
// limits: OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*,
// retry-after-ms and Retry-After (seconds or an HTTP date). Values that
// cannot be read are left out. A nil response says nothing.
func RateLimit(resp *http.Response) provider.RateLimit {
	if resp == nil {
		return provider.RateLimit{}
	}
	h := resp.Header
	var r provider.RateLimit
	if v := h.Get("x-ratelimit-limit-requests"); v != "" {
		r.Requests = count(v)
		r.RequestsRemaining = count(h.Get("x-ratelimit-remaining-requests"))
		r.RequestsReset = duration(h.Get("x-ratelimit-reset-requests"))
	}
	if v := h.Get("x-ratelimit-limit-tokens"); v != "" {
		r.Tokens = count(v)
		r.TokensRemaining = count(h.Get("x-ratelimit-remaining-tokens"))
		r.TokensReset = duration(h.Get("x-ratelimit-reset-tokens"))
	}
	if v := h.Get("anthropic-ratelimit-requests-limit"); v != "" {
		r.Requests = count(v)
		r.RequestsRemaining = count(h.Get("anthropic-ratelimit-requests-remaining"))
		r.RequestsReset = until(h.Get("anthropic-ratelimit-requests-reset"))
	}
	if v := h.Get("anthropic-ratelimit-tokens-limit"); v != "" {
		r.Tokens = count(v)
		r.TokensRemaining = count(h.Get("anthropic-ratelimit-tokens-remaining"))
		r.TokensReset = until(h.Get("anthropic-ratelimit-tokens-reset"))
	}
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e9 {
			r.RetryAfter = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := h.Get("Retry-After"); v != "" && r.RetryAfter == 0 {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			if s > 0 && s < 1e6 {
				r.RetryAfter = time.Duration(s * float64(time.Second))
			}
		} else if t, err := http.ParseTime(v); err == nil {
			r.RetryAfter = max(time.Until(t), 0)
		}
	}
	return r
}

// tryAgain finds the wait an error message asks for, as in OpenAI's
// "Please try again in 1.5s" or "in 350ms".
var tryAgain = regexp.MustCompile(`(?i)(?:try again|retry) (?:in|after) (\d{1,6}(?:\.\d{1,6})?) ?(ms|s|seconds?)\b`)

// RetryHint reads the wait a rate-limited response's message asks for,
// when its headers said none; 0 when it asks for none.
func RetryHint(msg string) time.Duration {
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	m := tryAgain.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0
	}
	if m[2] == "ms" {
		return time.Duration(v * float64(time.Millisecond))
	}
	return time.Duration(v * float64(time.Second))
}

func count(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// duration reads OpenAI's reset times: "1s", "6m0s", "20ms".
func duration(s string) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// until reads Anthropic's reset times, RFC 3339 instants.
func until(s string) time.Duration {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return 0
	}
	return max(time.Until(t), 0)
}

// Admission settles a provider's admission control from its options: the
// Admission given (nil: none), whether it was turned off, and the retries
// asked for (nil: none). It returns the Admission to call through (nil
// when off) and the retries the SDK's own loop makes (0 under admission,
// which retries itself), or an error naming the options that clash.
func Admission(name string, given *provider.Admission, off bool, retries *int) (*provider.Admission, int, bool, error) {
	switch {
	case off && given != nil:
		return nil, 0, false, fmt.Errorf("%s: WithAdmission and WithoutAdmission both given: keep one", name)
	case off:
		if retries != nil {
			return nil, *retries, true, nil
		}
		return nil, 0, false, nil // the SDK's default
	case retries != nil && given != nil:
		return nil, 0, false, fmt.Errorf("%s: WithMaxRetries and WithAdmission both given: set the retries on the Admission (provider.WithRetries)", name)
	case given != nil:
		return given, 0, true, nil
	}
	var opts []provider.AdmissionOption
	if retries != nil {
		opts = append(opts, provider.WithRetries(*retries))
	}
	a, err := provider.NewAdmission(opts...)
	return a, 0, true, err
}
