package provider_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/provider"
)

func TestNewAdmissionRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]provider.AdmissionOption{
		"negative limit":   provider.WithLimits("m", provider.Limits{RequestsPerMinute: -1}),
		"negative retries": provider.WithRetries(-1),
		"negative time":    provider.WithRetryTime(-time.Second),
	} {
		if _, err := provider.NewAdmission(opt); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s: got %v, want an error that says the value is negative", name, err)
		}
	}
}

// instant answers at once and counts its calls.
func instant(calls *atomic.Int64) provider.Func {
	return func(ctx context.Context, req provider.Request) (provider.Response, error) {
		calls.Add(1)
		return provider.Response{Message: provider.AssistantMessage("ok"), Usage: provider.Usage{InputTokens: 10, OutputTokens: 10, Requests: 1}}, nil
	}
}

// TestAdmissionKeepsConfiguredLimits checks that limits given by the user
// hold: 30 calls at 6 requests a minute take (30-6)×10s, and no more than
// InFlight run at once.
func TestAdmissionKeepsConfiguredLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := provider.NewAdmission(provider.WithLimits("m", provider.Limits{RequestsPerMinute: 6}))
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		p := provider.Admit(instant(&calls), a)
		start := time.Now()
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				if _, err := p.Complete(t.Context(), provider.Request{Model: "m"}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		if want := 24 * 10 * time.Second; took < want || took > want*23/20 {
			t.Errorf("30 calls at 6 a minute took %v, want about %v", took, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission(provider.WithLimits("", provider.Limits{InFlight: 3}))
		var now, most atomic.Int64
		slow := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Second)
			now.Add(-1)
			return provider.Response{}, nil
		})
		p := provider.Admit(slow, a)
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() { _, _ = p.Complete(t.Context(), provider.Request{Model: "other"}) })
		}
		wg.Wait()
		if most.Load() != 3 {
			t.Errorf("at most %d calls ran at once, want 3 (InFlight)", most.Load())
		}
	})
}

// TestAdmissionRetries checks what is tried again: a rate limit, after
// the wait it asked for; not a bad request; not a stream that has
// already passed part of its reply on; and no more than WithRetries.
func TestAdmissionRetries(t *testing.T) {
	limited := &provider.Error{Kind: provider.KindRateLimit, StatusCode: 429, RateLimit: provider.RateLimit{RetryAfter: 3 * time.Second}}
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission()
		var calls atomic.Int64
		p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if calls.Add(1) == 1 {
				return provider.Response{}, limited
			}
			return provider.Response{Message: provider.AssistantMessage("ok")}, nil
		}), a)
		start := time.Now()
		if _, err := p.Complete(t.Context(), provider.Request{}); err != nil {
			t.Fatal(err)
		}
		// Not much later either: one 429 with nothing before it says
		// nothing of the pace the provider allows.
		if took := time.Since(start); calls.Load() != 2 || took < 3*time.Second || took > 4*time.Second {
			t.Errorf("%d calls after %v; want the 429 retried once, after its Retry-After of 3s", calls.Load(), took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission(provider.WithRetries(2))
		var calls atomic.Int64
		always := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			calls.Add(1)
			return provider.Response{}, limited
		})
		_, err := provider.Admit(always, a).Complete(t.Context(), provider.Request{})
		if !errors.Is(err, limited) || calls.Load() != 3 {
			t.Errorf("got %v after %d calls; want the 429 after 1 + 2 retries", err, calls.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission()
		var calls atomic.Int64
		bad := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			calls.Add(1)
			return provider.Response{}, &provider.Error{Kind: provider.KindBadRequest, StatusCode: 400}
		})
		if _, err := provider.Admit(bad, a).Complete(t.Context(), provider.Request{}); err == nil || calls.Load() != 1 {
			t.Errorf("got %v after %d calls; want a bad request returned at once", err, calls.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission()
		var calls atomic.Int64
		p := provider.Admit(cutStream{&calls}, a)
		var got []string
		_, err := p.(provider.Streamer).Stream(t.Context(), provider.Request{}, func(d provider.Delta) error {
			got = append(got, d.Text)
			return nil
		})
		if err == nil || calls.Load() != 1 || len(got) != 1 {
			t.Errorf("got %v after %d calls and deltas %q; want the cut stream's error, not retried, its one delta passed on once", err, calls.Load(), got)
		}
	})
}

// cutStream passes one delta on, then fails as a dropped connection would.
type cutStream struct{ calls *atomic.Int64 }

func (c cutStream) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return c.Stream(ctx, req, nil)
}

func (c cutStream) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	c.calls.Add(1)
	if onDelta != nil {
		_ = onDelta(provider.Delta{Text: "half"})
	}
	return provider.Response{}, &provider.Error{Kind: provider.KindTransient, StatusCode: 200}
}

// TestAdmissionLearnsFromHeaders checks that what a reply says of the
// limits paces the calls after it: a provider that says 2 requests are
// left of 60 a minute gets 2 calls at once, then one a second.
func TestAdmissionLearnsFromHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission()
		var calls atomic.Int64
		p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			calls.Add(1)
			return provider.Response{RateLimit: provider.RateLimit{Requests: 60, RequestsRemaining: 2}}, nil
		}), a)
		if _, err := p.Complete(t.Context(), provider.Request{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range 5 {
			if _, err := p.Complete(t.Context(), provider.Request{}); err != nil {
				t.Fatal(err)
			}
		}
		// Each reply says 2 are left, so the bucket never holds more;
		// 5 calls take at least 3 refills of a second.
		if took := time.Since(start); took < 3*time.Second || took > 5*time.Second {
			t.Errorf("5 calls took %v, want 3 to 5 seconds at one a second after the 2 left", took)
		}
	})
}

func TestAdmissionWaitHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := provider.NewAdmission(provider.WithLimits("", provider.Limits{RequestsPerMinute: 1}))
		var calls atomic.Int64
		p := provider.Admit(instant(&calls), a)
		if _, err := p.Complete(t.Context(), provider.Request{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := p.Complete(ctx, provider.Request{})
		if !errors.Is(err, context.DeadlineExceeded) || calls.Load() != 1 {
			t.Errorf("got %v after %d calls, want the wait to end with the context", err, calls.Load())
		}
	})
}

// BenchmarkAdmission is admission control's cost per model call on a
// provider that sets no limits: the wait and the release around a call
// that returns at once.
func BenchmarkAdmission(b *testing.B) {
	a, _ := provider.NewAdmission()
	var calls atomic.Int64
	p := provider.Admit(instant(&calls), a)
	ctx := b.Context()
	req := provider.Request{Model: "m", Messages: []provider.Message{provider.UserMessage("hi")}}
	b.ReportAllocs()
	defer benchcpu.Report(b)()
	for b.Loop() {
		if _, err := p.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmissionLimited is BenchmarkAdmission on a model with a bound
// on each of requests a minute, tokens a minute and calls in flight, all
// far above what the benchmark reaches: an uncontended call through the
// queue's checks, the refill of both allowances, the estimate of the
// request's tokens and its correction when the call ends.
func BenchmarkAdmissionLimited(b *testing.B) {
	a, err := provider.NewAdmission(provider.WithLimits("m", provider.Limits{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 40, InFlight: 64}))
	if err != nil {
		b.Fatal(err)
	}
	var calls atomic.Int64
	p := provider.Admit(instant(&calls), a)
	ctx := b.Context()
	req := provider.Request{Model: "m", Messages: []provider.Message{provider.UserMessage("hi")}}
	b.ReportAllocs()
	defer benchcpu.Report(b)()
	for b.Loop() {
		if _, err := p.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmissionContended is admission control under contention: 64
// callers at a time (SetParallelism) share a model whose bound on calls in
// flight is 4, each call yielding once, so that most calls wait in the
// queue. Beside the cost per call it reports the fairness between the
// callers: jain, Jain's index of the calls each made (1 when all made as
// many, 1/64 when one made them all), and min/mean, the share of the
// caller that made fewest over the mean.
func BenchmarkAdmissionContended(b *testing.B) {
	a, _ := provider.NewAdmission(provider.WithLimits("m", provider.Limits{InFlight: 4}))
	p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		runtime.Gosched()
		return provider.Response{}, nil
	}), a)
	ctx := b.Context()
	defer benchcpu.Report(b)()
	var (
		mu    sync.Mutex
		calls []float64 // by caller
	)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			if _, err := p.Complete(ctx, provider.Request{Model: "m"}); err != nil {
				b.Error(err)
				return
			}
			n++
		}
		mu.Lock()
		calls = append(calls, float64(n))
		mu.Unlock()
	})
	var sum, squares, least float64
	least = math.Inf(1)
	for _, n := range calls {
		sum, squares, least = sum+n, squares+n*n, min(least, n)
	}
	if squares > 0 {
		b.ReportMetric(sum*sum/(float64(len(calls))*squares), "jain")
		b.ReportMetric(least/(sum/float64(len(calls))), "min/mean")
	}
}

// BenchmarkNoAdmission is the same call with no admission control, the
// floor BenchmarkAdmission is measured against.
func BenchmarkNoAdmission(b *testing.B) {
	var calls atomic.Int64
	p := provider.Provider(instant(&calls))
	ctx := b.Context()
	req := provider.Request{Model: "m", Messages: []provider.Message{provider.UserMessage("hi")}}
	b.ReportAllocs()
	defer benchcpu.Report(b)()
	for b.Loop() {
		if _, err := p.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdmissionHoldsAgainstBadReplies checks what a provider's failures
// and untrusted figures cannot do to the gate: a transient failure that
// asks for a wait is retried after it; a call that panics gives its place
// back; a reply that says how many tokens are left is not credited again
// with the estimate; and a usage figure past reason blocks the model for
// no more than maxRetryAfter.
func TestAdmissionHoldsAgainstBadReplies(t *testing.T) {
	t.Run("transient failure with Retry-After", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _ := provider.NewAdmission()
			var at []time.Duration
			start := time.Now()
			p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				at = append(at, time.Since(start))
				if len(at) < 3 {
					return provider.Response{}, &provider.Error{Kind: provider.KindTransient, StatusCode: 500, RateLimit: provider.RateLimit{RetryAfter: 5 * time.Second}}
				}
				return provider.Response{}, nil
			}), a)
			if _, err := p.Complete(t.Context(), provider.Request{Model: "m"}); err != nil {
				t.Fatal(err)
			}
			if len(at) != 3 || at[1] < 5*time.Second || at[2]-at[1] < 5*time.Second {
				t.Errorf("attempts at %v; want each retry 5s after the failure that asked for it", at)
			}
		})
	})
	t.Run("a call that panics", func(t *testing.T) {
		a, _ := provider.NewAdmission(provider.WithLimits("m", provider.Limits{InFlight: 1}))
		n := 0
		p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if n++; n == 1 {
				panic("boom")
			}
			return provider.Response{}, nil
		}), a)
		func() {
			defer func() { _ = recover() }() // as the agent loop recovers a provider's panic
			_, _ = p.Complete(context.Background(), provider.Request{Model: "m"})
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := p.Complete(ctx, provider.Request{Model: "m"}); err != nil {
			t.Errorf("the call after a panic: %v; want the panicked call's place given back", err)
		}
	})
	t.Run("tokens left as the provider says", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, _ := provider.NewAdmission(provider.WithLimits("m", provider.Limits{TokensPerMinute: 100_000}))
			p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				return provider.Response{Usage: provider.Usage{InputTokens: 50, OutputTokens: 50},
					RateLimit: provider.RateLimit{Tokens: 100_000, TokensRemaining: 1000}}, nil
			}), a)
			req := provider.Request{Model: "m", MaxTokens: 50_000}
			if _, err := p.Complete(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := p.Complete(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			// 1,000 left, 50,001 wanted: about 29s of refill.
			if waited := time.Since(start); waited < 25*time.Second {
				t.Errorf("the second call waited %v; want about 29s, the provider having said 1,000 tokens are left", waited)
			}
		})
	})
	t.Run("a usage figure past reason", func(t *testing.T) {
		for _, used := range []int64{1e11, 1e15, 1 << 62} {
			synctest.Test(t, func(t *testing.T) {
				a, _ := provider.NewAdmission(provider.WithLimits("m", provider.Limits{TokensPerMinute: 100_000}))
				p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					return provider.Response{Usage: provider.Usage{InputTokens: used}}, nil
				}), a)
				if _, err := p.Complete(t.Context(), provider.Request{Model: "m"}); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if _, err := p.Complete(t.Context(), provider.Request{Model: "m"}); err != nil {
					t.Fatal(err)
				}
				if waited := time.Since(start); waited <= 0 || waited > 12*time.Minute {
					t.Errorf("after a reply that said it used %d tokens, the next call waited %v; want a bounded wait", used, waited)
				}
			})
		}
	})
}

// TestAdmissionLimitsTheDefaultModel checks that a limit named for a model
// holds for the requests that name no model, when the provider says that
// model is its default: 12 calls to a fake provider (model "fake") under
// WithLimits("fake", 6 a minute) take a minute, as do those to one Named
// "m1" under m1's limit, and a request that names another model does not
// wait for them.
func TestAdmissionLimitsTheDefaultModel(t *testing.T) {
	for _, tc := range []struct {
		model string
		p     *fake.Provider
	}{
		{"fake", fake.NewProvider(fake.Text("ok")).Loop()},
		{"m1", fake.NewProvider(fake.Text("ok")).Loop().Named("vendor", "m1")},
	} {
		t.Run(tc.model, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, err := provider.NewAdmission(provider.WithLimits(tc.model, provider.Limits{RequestsPerMinute: 6}))
				if err != nil {
					t.Fatal(err)
				}
				p := provider.Admit(tc.p, a)
				start := time.Now()
				for range 12 {
					if _, err := p.Complete(t.Context(), provider.Request{}); err != nil {
						t.Fatal(err)
					}
				}
				if took, want := time.Since(start), 6*10*time.Second; took < want {
					t.Errorf("12 calls naming no model took %v; want at least %v, the limit of %q, the provider's default model", took, want, tc.model)
				}
				start = time.Now()
				if _, err := p.Complete(t.Context(), provider.Request{Model: "other"}); err != nil || time.Since(start) != 0 {
					t.Errorf("a call to another model: %v after %v; want it to go at once", err, time.Since(start))
				}
			})
		})
	}
}
