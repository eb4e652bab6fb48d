package adapter

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestLimitBodyEdge: a body of exactly the limit is read whole; one byte
// more fails with the LimitError and tells the SDK not to retry.
func TestLimitBodyEdge(t *testing.T) {
	for _, tc := range []struct {
		size    int
		tooLong bool
	}{{0, false}, {9, false}, {10, false}, {11, true}, {1 << 20, true}} {
		resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", tc.size)))}
		got, _ := LimitBody(10, "WithMaxResponseBytes", nil, func(*http.Request) (*http.Response, error) { return resp, nil })
		data, err := io.ReadAll(got.Body)
		var le *LimitError
		if tc.tooLong != errors.As(err, &le) {
			t.Errorf("%d bytes: error %v; want a LimitError: %v", tc.size, err, tc.tooLong)
		}
		if !tc.tooLong && len(data) != tc.size {
			t.Errorf("%d bytes: read %d", tc.size, len(data))
		}
		if len(data) > 10 {
			t.Errorf("%d bytes: read %d, past the limit", tc.size, len(data))
		}
		if retry := got.Header.Get("X-Should-Retry"); (retry == "false") != tc.tooLong {
			t.Errorf("%d bytes: X-Should-Retry %q", tc.size, retry)
		}
	}
}

func TestSameOriginRedirects(t *testing.T) {
	req := func(s string) *http.Request {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{URL: u}
	}
	first := []*http.Request{req("https://api.example.com/v1/messages")}
	if err := SameOriginRedirects(req("https://api.example.com/v2/messages"), first); err != nil {
		t.Errorf("same origin: %v", err)
	}
	for _, to := range []string{"https://evil.example.com/v1/messages", "http://api.example.com/v1/messages", "https://api.example.com:8443/v1/messages"} {
		if err := SameOriginRedirects(req(to), first); !errors.Is(err, ErrCrossOriginRedirect) {
			t.Errorf("%s: %v; want ErrCrossOriginRedirect", to, err)
		}
	}
	var ten []*http.Request
	for range 10 {
		ten = append(ten, first[0])
	}
	if err := SameOriginRedirects(req("https://api.example.com/v1/messages"), ten); err == nil {
		t.Error("an 11th redirect was followed")
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 1 << 10: "1 KiB", 1500: "1500 bytes", 10: "10 bytes"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q; want %q", n, got, want)
		}
	}
}
