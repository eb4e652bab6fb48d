package adapter

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/provider"
)

func TestRateLimit(t *testing.T) {
	resetAt := time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   provider.RateLimit
	}{
		{"openai", map[string]string{
			"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-limit-tokens": "100000", "x-ratelimit-remaining-tokens": "99800", "x-ratelimit-reset-tokens": "6m0s",
		}, provider.RateLimit{Requests: 60, RequestsRemaining: 59, RequestsReset: time.Second, Tokens: 100000, TokensRemaining: 99800, TokensReset: 6 * time.Minute}},
		{"openai 429", map[string]string{"retry-after-ms": "1500", "Retry-After": "2"}, provider.RateLimit{RetryAfter: 1500 * time.Millisecond}},
		{"retry-after seconds", map[string]string{"Retry-After": "7"}, provider.RateLimit{RetryAfter: 7 * time.Second}},
		{"hostile values are left out", map[string]string{
			"x-ratelimit-limit-requests": "99999999999999999999999", "x-ratelimit-remaining-requests": "-5", "x-ratelimit-reset-requests": "forever",
			"Retry-After": "1e300", "retry-after-ms": "NaN",
		}, provider.RateLimit{}},
		{"negative retry-after", map[string]string{"Retry-After": "-3"}, provider.RateLimit{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			got := RateLimit(&http.Response{Header: h})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("anthropic", func(t *testing.T) {
		h := http.Header{}
		h.Set("anthropic-ratelimit-requests-limit", "50")
		h.Set("anthropic-ratelimit-requests-remaining", "49")
		h.Set("anthropic-ratelimit-requests-reset", resetAt)
		h.Set("anthropic-ratelimit-tokens-limit", "40000")
		h.Set("anthropic-ratelimit-tokens-remaining", "0")
		h.Set("anthropic-ratelimit-tokens-reset", "not a time")
		h.Set("Retry-After", "12")
		got := RateLimit(&http.Response{Header: h})
		if got.Requests != 50 || got.RequestsRemaining != 49 || got.Tokens != 40000 || got.TokensRemaining != 0 || got.TokensReset != 0 || got.RetryAfter != 12*time.Second {
			t.Errorf("got %+v", got)
		}
		if got.RequestsReset <= 25*time.Second || got.RequestsReset > 30*time.Second {
			t.Errorf("requests reset in %v, want about 30s", got.RequestsReset)
		}
	})
	if !RateLimit(nil).IsZero() {
		t.Error("a nil response says something")
	}
}

func TestRetryHint(t *testing.T) {
	for msg, want := range map[string]time.Duration{
		"Rate limit reached for requests. Please try again in 1.5s.": 1500 * time.Millisecond,
		"Please try again in 350ms.":                                 350 * time.Millisecond,
		"Please retry after 20 seconds":                              20 * time.Second,
		"Slow down.":                                                 0,
		// A hint past the part of the message that is read is not found,
		// and reading a huge message costs time linear in what is read.
		strings.Repeat("x", 1<<20) + " try again in 3s": 0,
	} {
		if got := RetryHint(msg); got != want {
			t.Errorf("RetryHint(%.40q…) = %v, want %v", msg, got, want)
		}
	}
}

func TestAdmission(t *testing.T) {
	given, _ := provider.NewAdmission()
	three := 3
	second := time.Second
	logger := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name       string
		c          AdmissionConfig
		wantAdm    bool
		wantSDK    int
		wantSet    bool
		wantErrSay string
	}{
		{"default", AdmissionConfig{}, true, 0, true, ""},
		{"retries set on its own admission", AdmissionConfig{Retries: &three}, true, 0, true, ""},
		{"retry time and logger on its own admission", AdmissionConfig{RetryTime: &second, Logger: logger}, true, 0, true, ""},
		{"given", AdmissionConfig{Given: given}, true, 0, true, ""},
		{"off", AdmissionConfig{Off: true}, false, 0, false, ""},
		{"off with the SDK's retries", AdmissionConfig{Off: true, Retries: &three}, false, 3, true, ""},
		{"given and off", AdmissionConfig{Given: given, Off: true}, false, 0, false, "WithAdmission and WithoutAdmission"},
		{"given and retries", AdmissionConfig{Given: given, Retries: &three}, false, 0, false, "WithMaxRetries and WithAdmission"},
		{"given and retry time", AdmissionConfig{Given: given, RetryTime: &second}, false, 0, false, "provider.WithRetryTime"},
		{"given and logger", AdmissionConfig{Given: given, Logger: logger}, false, 0, false, "provider.WithLogger"},
		{"off and retry time", AdmissionConfig{Off: true, RetryTime: &second}, false, 0, false, "WithRetryTime and WithoutAdmission"},
		{"off and logger", AdmissionConfig{Off: true, Logger: logger}, false, 0, false, "WithLogger and WithoutAdmission"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, sdk, set, err := Admission("x", tc.c)
			if tc.wantErrSay != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSay) {
					t.Fatalf("got %v, want an error naming %s", err, tc.wantErrSay)
				}
				return
			}
			if err != nil || (a != nil) != tc.wantAdm || sdk != tc.wantSDK || set != tc.wantSet {
				t.Errorf("got admission %v, SDK retries %d (set %v), %v", a != nil, sdk, set, err)
			}
			if tc.c.Given != nil && a != tc.c.Given {
				t.Error("the Admission given was not used")
			}
		})
	}
}
