package adapter

import (
	"fmt"
	"log/slog"
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

// AdmissionConfig is what a provider's options say of its admission
// control.
type AdmissionConfig struct {
	Given     *provider.Admission // WithAdmission; nil: none given
	Off       bool                // WithoutAdmission
	Retries   *int                // WithMaxRetries; nil: not given
	RetryTime *time.Duration      // WithRetryTime; nil: not given
	Logger    *slog.Logger        // WithLogger; nil: not given
}

// Admission settles a provider's admission control from its options. It
// returns the Admission to call through (nil when off) and the retries the
// SDK's own loop makes (0 under admission, which retries itself; set
// reports whether to pass them to the SDK), or an error naming the options
// that clash.
func Admission(name string, c AdmissionConfig) (adm *provider.Admission, sdkRetries int, set bool, err error) {
	// The options that configure the provider's own Admission.
	var own []string
	if c.RetryTime != nil {
		own = append(own, "WithRetryTime")
	}
	if c.Logger != nil {
		own = append(own, "WithLogger")
	}
	switch {
	case c.Off && c.Given != nil:
		return nil, 0, false, fmt.Errorf("%s: WithAdmission and WithoutAdmission both given: keep one", name)
	case c.Off && len(own) > 0:
		return nil, 0, false, fmt.Errorf("%s: %s and WithoutAdmission both given: %s configures admission control's retries, and WithoutAdmission the SDK retries, silently (WithMaxRetries); keep one", name, own[0], own[0])
	case c.Off:
		if c.Retries != nil {
			return nil, *c.Retries, true, nil
		}
		return nil, 0, false, nil // the SDK's default
	case c.Given != nil && c.Retries != nil:
		return nil, 0, false, fmt.Errorf("%s: WithMaxRetries and WithAdmission both given: set the retries on the Admission (provider.WithRetries)", name)
	case c.Given != nil && len(own) > 0:
		return nil, 0, false, fmt.Errorf("%s: %s and WithAdmission both given: set it on the Admission (provider.%s)", name, own[0], own[0])
	case c.Given != nil:
		return c.Given, 0, true, nil
	}
	var opts []provider.AdmissionOption
	if c.Retries != nil {
		opts = append(opts, provider.WithRetries(*c.Retries))
	}
	if c.RetryTime != nil {
		opts = append(opts, provider.WithRetryTime(*c.RetryTime))
	}
	if c.Logger != nil {
		opts = append(opts, provider.WithLogger(c.Logger))
	}
	a, err := provider.NewAdmission(opts...)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%s: %w", name, err)
	}
	return a, 0, true, nil
}
