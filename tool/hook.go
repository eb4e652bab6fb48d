package tool

import "context"

// CallHook observes each call a Registry runs under a context that carries
// it (see WithCallHook). It receives the call's context and the call before
// the tool runs, and returns the context the tool runs under and a function
// that the Registry calls exactly once with the call's outcome: the Result
// the model will read and the Go error, if any, after panics and correctable
// errors have been sorted out. The calls of one model turn run in parallel,
// so a hook must be safe for concurrent use; each call gets its own context.
//
// Hooks are how an agent wraps every tool call in a tracing span whose
// context reaches the tool, and so the sub-agent a tool runs.
type CallHook func(ctx context.Context, call Call) (context.Context, func(Result, error))

type hookKey struct{}

// WithCallHook returns a context under which Registry.Execute passes each
// call through h. It replaces any hook ctx already carries; a nil h removes
// it. Without a hook a call costs one context lookup more.
func WithCallHook(ctx context.Context, h CallHook) context.Context {
	return context.WithValue(ctx, hookKey{}, h)
}

func hookFrom(ctx context.Context) CallHook {
	h, _ := ctx.Value(hookKey{}).(CallHook)
	return h
}
