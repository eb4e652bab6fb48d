package unreachable_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/deputy-go/deputy/provider/internal/unreachable"
)

func TestIs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a closed port", refused, true},
		{"refused, wrapped", &url.Error{Op: "Post", URL: "http://" + addr, Err: fmt.Errorf("dial: %w", syscall.ECONNREFUSED)}, true},
		{"no such host", &net.DNSError{Err: "no such host", Name: "model.invalid", IsNotFound: true}, true},
		{"a DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "model.test", IsTimeout: true}, false},
		{"a reset", syscall.ECONNRESET, false},
		{"a deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
		{"other", errors.New("boom"), false},
	} {
		if got := unreachable.Is(tc.err); got != tc.want {
			t.Errorf("%s (%v): Is = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
