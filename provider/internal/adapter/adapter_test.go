package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

func TestArguments(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "{}"},
		{"  ", "{}"},
		{`{"city": "Paris"}`, `{"city":"Paris"}`},
		{`{"city": "Par`, `{"city": "Par`},
		{`[1, 2]`, `[1,2]`},
	} {
		if got := string(Arguments([]byte(tc.in))); got != tc.want {
			t.Errorf("Arguments(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		keys int
	}{
		{"", true, 0},
		{`{"type":"object"}`, true, 1},
		{`null`, false, 0},
		{`[1]`, false, 0},
		{`{`, false, 0},
	} {
		m, err := Object([]byte(tc.in))
		if (err == nil) != tc.ok || len(m) != tc.keys {
			t.Errorf("Object(%q) = %v, %v", tc.in, m, err)
		}
		if IsObject([]byte(tc.in)) != (tc.ok && tc.in != "") {
			t.Errorf("IsObject(%q) = %v", tc.in, !tc.ok)
		}
	}
}

func TestMentionsContextWindow(t *testing.T) {
	for msg, want := range map[string]bool{
		"prompt is too long: 210000 tokens > 200000 maximum":                      true,
		"This model's maximum context length is 128000 tokens. However, your ...": true,
		"Invalid value for 'temperature'":                                         false,
	} {
		if got := MentionsContextWindow(msg); got != want {
			t.Errorf("MentionsContextWindow(%q) = %v", msg, got)
		}
	}
}

func TestTransport(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind provider.ErrorKind
	}{
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), provider.KindTransient},
		{context.DeadlineExceeded, provider.KindTransient},
		{errors.New("middleware said no"), provider.KindUnknown},
	} {
		got := Transport("x", 0, tc.err)
		if got.Kind != tc.kind || !errors.Is(got, tc.err) {
			t.Errorf("Transport(%v) = %v; want kind %v wrapping the cause", tc.err, got, tc.kind)
		}
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := Canceled("x", ctx); err != nil {
		t.Errorf("Canceled on a live context = %v", err)
	}
	cancel()
	if err := Canceled("x", ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Canceled = %v; want it to wrap context.Canceled", err)
	}
}
