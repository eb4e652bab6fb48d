package fake

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
)

// Faults says how often a Faulty provider misbehaves. Each rate is a
// probability from 0 to 1, drawn per call.
type Faults struct {
	// Seed makes the faults repeatable: the same seed and the same requests
	// give the same faults, whatever order concurrent calls arrive in.
	Seed uint64
	// Error fails the call with a *provider.Error of a random kind.
	Error float64
	// Latency delays the call by up to MaxLatency (honouring the context).
	Latency    float64
	MaxLatency time.Duration
	// Truncate cuts the arguments of the reply's tool calls in half, as a
	// stream broken mid-call would.
	Truncate float64
	// Empty replaces the reply with one that has neither text nor tool calls.
	Empty float64
	// Panic makes the call panic.
	Panic float64
	// Cancel calls CancelFn (when it is set) during the call: the caller's
	// run is cancelled at a random point.
	Cancel float64
	// CancelFn is the function Cancel calls, usually the cancel function of
	// the context the run was given.
	CancelFn context.CancelFunc
}

// Faulty wraps a provider and injects faults, for chaos tests. It keeps the
// total usage of the responses it returned, the ground truth that an
// agent's usage accounting must match. It is safe for concurrent use.
type Faulty struct {
	p provider.Provider
	f Faults

	mu       sync.Mutex
	usage    provider.Usage
	injected map[string]int
}

// NewFaulty returns a provider that passes each call to p and injects the
// faults f describes.
func NewFaulty(p provider.Provider, f Faults) *Faulty {
	return &Faulty{p: p, f: f, injected: map[string]int{}}
}

// Usage returns the total usage of every response returned so far.
func (f *Faulty) Usage() provider.Usage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usage
}

// Injected returns how many faults of each kind were injected.
func (f *Faulty) Injected() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.injected))
	for k, v := range f.injected {
		out[k] = v
	}
	return out
}

func (f *Faulty) note(kind string) {
	f.mu.Lock()
	f.injected[kind]++
	f.mu.Unlock()
}

// rng derives the call's randomness from the seed and the request, so that
// a replay with the same seed meets the same faults.
func (f *Faulty) rng(ctx context.Context, req provider.Request) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], f.f.Seed)
	h.Write(b[:])
	h.Write([]byte(run.Name(ctx)))
	h.Write([]byte(req.System))
	for _, m := range req.Messages {
		h.Write([]byte(m.Role))
		h.Write([]byte(m.Content))
		for _, c := range m.ToolCalls {
			h.Write([]byte(c.Name))
			h.Write(c.Arguments)
		}
	}
	return rand.New(rand.NewPCG(f.f.Seed, h.Sum64()))
}

// injectedError returns a provider failure of the n-th kind (n mod 6).
func injectedError(n int) *provider.Error {
	kinds := [...]provider.ErrorKind{provider.KindRateLimit, provider.KindAuth, provider.KindBadRequest, provider.KindTransient, provider.KindContextWindow, provider.KindMalformed}
	statuses := [...]int{429, 401, 400, 503, 400, 200}
	i := n % len(kinds)
	return &provider.Error{Provider: "fake", StatusCode: statuses[i], Kind: kinds[i], Message: "injected fault", Err: errors.New("injected")}
}

// Complete calls the wrapped provider, misbehaving as the Faults say.
func (f *Faulty) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	r := f.rng(ctx, req)
	if f.f.CancelFn != nil && r.Float64() < f.f.Cancel {
		f.note("cancel")
		f.f.CancelFn()
	}
	if r.Float64() < f.f.Panic {
		f.note("panic")
		panic("fake: injected panic")
	}
	if r.Float64() < f.f.Latency && f.f.MaxLatency > 0 {
		f.note("latency")
		t := time.NewTimer(time.Duration(r.Int64N(int64(f.f.MaxLatency))))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return provider.Response{}, ctx.Err()
		}
	}
	if r.Float64() < f.f.Error {
		e := injectedError(r.IntN(6))
		f.note("error:" + e.Kind.String())
		return provider.Response{}, e
	}
	resp, err := f.p.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	switch {
	case r.Float64() < f.f.Empty:
		f.note("empty")
		resp.Message = provider.Message{Role: provider.RoleAssistant}
	case len(resp.Message.ToolCalls) > 0 && r.Float64() < f.f.Truncate:
		f.note("truncate")
		calls := make([]provider.ToolCall, len(resp.Message.ToolCalls))
		for i, c := range resp.Message.ToolCalls {
			c.Arguments = c.Arguments[:len(c.Arguments)/2]
			calls[i] = c
		}
		resp.Message.ToolCalls = calls
	}
	f.mu.Lock()
	f.usage = f.usage.Add(resp.Usage)
	f.mu.Unlock()
	return resp, nil
}
