package wiretest

import (
	"context"
	"errors"
	"testing"

	"github.com/deputy-go/deputy/provider"
)

// StreamStopsEarly checks that a callback that fails ends p's stream, a
// reply of several deltas, without further deltas, and that Stream returns
// the callback's error.
func StreamStopsEarly(t *testing.T, p provider.Streamer, req provider.Request) {
	t.Helper()
	stop := errors.New("seen enough")
	n := 0
	_, err := p.Stream(t.Context(), req, func(provider.Delta) error {
		n++
		return stop
	})
	if n != 1 {
		t.Errorf("got %d deltas; want 1", n)
	}
	if !errors.Is(err, stop) {
		t.Errorf("Stream returned %v; want the callback's error %q", err, stop)
	}
}

// CancelBeforeSending checks that a call whose context has ended fails
// with an error that wraps context.Canceled and is not reported as a
// provider failure.
func CancelBeforeSending(t *testing.T, p provider.Provider, req provider.Request) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := p.Complete(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	var perr *provider.Error
	if errors.As(err, &perr) {
		t.Errorf("cancellation reported as a provider failure: %v", err)
	}
}
