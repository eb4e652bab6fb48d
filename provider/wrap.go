package provider

import "context"

// Next is the rest of a call's way to the provider, as a Middleware is
// handed it: calling it makes the call, streamed when the caller streams.
type Next func(ctx context.Context, req Request) (Response, error)

// Middleware runs around each call of a provider (Wrap): it may look at or
// change the request, call next (or not), and look at or change the
// response: count usage, log, retry, rate-limit.
type Middleware func(ctx context.Context, req Request, next Next) (Response, error)

// Wrap returns p with mw around each of its calls, keeping what p can do:
// when p streams (Streamer), so does the result, mw running around the
// whole streamed call while the deltas flow to the caller as p sends them;
// when p names its vendor (Namer), so does the result. A struct that
// embeds a Provider and overrides Complete loses both, since the loop
// finds Stream and Name only on the value it is given: wrap with Wrap
// instead.
func Wrap(p Provider, mw Middleware) Provider {
	w := wrapped{p: p, mw: mw}
	if s, ok := p.(Streamer); ok {
		return streamingWrapped{w, s}
	}
	return w
}

type wrapped struct {
	p  Provider
	mw Middleware
}

func (w wrapped) Complete(ctx context.Context, req Request) (Response, error) {
	return w.mw(ctx, req, w.p.Complete)
}

// Name is p's, or "" when p does not say.
func (w wrapped) Name() string {
	if n, ok := w.p.(Namer); ok {
		return n.Name()
	}
	return ""
}

// Model is p's, for a provider that says which model it calls.
func (w wrapped) Model() string {
	if m, ok := w.p.(interface{ Model() string }); ok {
		return m.Model()
	}
	return ""
}

type streamingWrapped struct {
	wrapped
	s Streamer
}

func (w streamingWrapped) Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error) {
	return w.mw(ctx, req, func(ctx context.Context, req Request) (Response, error) {
		return w.s.Stream(ctx, req, onDelta)
	})
}
