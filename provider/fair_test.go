package provider_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// TestAdmissionIsFirstComeFirstServed runs two trees on one Admission: one
// calls back to back from eight goroutines, the other makes a single call
// with a 5 s deadline while the first keeps the model's bound full. The
// single call goes before every call asked after it, and well within its
// deadline: the calls ahead of it are those in flight or already waiting
// when it asked.
func TestAdmissionIsFirstComeFirstServed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits provider.Limits
		warmup time.Duration // until the hogs use up what the limit allows
	}{
		{"in flight", provider.Limits{InFlight: 4}, time.Second},
		{"rate limit", provider.Limits{RequestsPerMinute: 600}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				testTwoTreesOneCall(t, tc.limits, tc.warmup)
			})
		})
	}
}

func testTwoTreesOneCall(t *testing.T, l provider.Limits, warmup time.Duration) {
	const hogs = 8
	a, err := provider.NewAdmission(provider.WithLimits("m", l))
	if err != nil {
		t.Fatal(err)
	}
	// What the provider saw: when each hog call went, and the single call.
	type went struct {
		asked int64 // the hog call's number, in the order they asked
		at    time.Time
	}
	var (
		mu          sync.Mutex
		hogCalls    []went
		singleAt    time.Time
		askedBefore int64 // the hog calls asked before the single call
		asked       atomic.Int64
		stop        atomic.Bool
	)
	p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		mu.Lock()
		if req.CacheKey == "single" {
			singleAt = time.Now()
		} else {
			n, _ := strconv.ParseInt(req.CacheKey, 10, 64)
			hogCalls = append(hogCalls, went{n, time.Now()})
		}
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	}), a)

	var wg sync.WaitGroup
	for range hogs {
		wg.Go(func() {
			for !stop.Load() {
				n := asked.Add(1)
				if _, err := p.Complete(t.Context(), provider.Request{Model: "m", CacheKey: strconv.FormatInt(n, 10)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(warmup)
	synctest.Wait() // every hog is waiting or calling: none asks while the single call does
	askedBefore = asked.Load()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = p.Complete(ctx, provider.Request{Model: "m", CacheKey: "single"})
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	// A call went before the single one if the provider saw it at an
	// earlier instant: the calls admitted together start in any order.
	end := singleAt
	if end.IsZero() {
		end = start.Add(took)
	}
	var overtook, meanwhile int
	for _, c := range hogCalls {
		if c.at.After(start) && c.at.Before(end) {
			meanwhile++
			if c.asked > askedBefore {
				overtook++
			}
		}
	}
	t.Logf("the single call took %v; %d hog calls went while it waited, %d of them asked after it", took, meanwhile, overtook)
	if err != nil {
		t.Fatalf("the single call failed after %v: %v; want it admitted in its turn", took, err)
	}
	if overtook != 0 {
		t.Errorf("%d calls asked after the single call went before it; want none", overtook)
	}
	if meanwhile > hogs {
		t.Errorf("%d calls went while the single call waited; want at most the %d that were in flight or waiting when it asked", meanwhile, hogs)
	}
}

// TestAdmissionWaiterLeavesWithItsContext checks that a call whose context
// ends while it waits leaves the queue: it returns the context's error,
// the calls behind it keep their order, and once every waiter has left a
// new call goes at once.
func TestAdmissionWaiterLeavesWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := provider.NewAdmission(provider.WithLimits("m", provider.Limits{InFlight: 1}))
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		var (
			mu    sync.Mutex
			order []string
		)
		p := provider.Admit(provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			mu.Lock()
			order = append(order, req.CacheKey)
			mu.Unlock()
			if req.CacheKey == "long" {
				<-release
			}
			return provider.Response{}, nil
		}), a)
		call := func(ctx context.Context, name string) error {
			_, err := p.Complete(ctx, provider.Request{Model: "m", CacheKey: name})
			return err
		}
		var wg sync.WaitGroup
		wg.Go(func() { _ = call(t.Context(), "long") })
		synctest.Wait()
		errs := make([]error, 4)
		cancels := make([]context.CancelFunc, 4)
		for i, name := range []string{"a", "b", "c", "d"} {
			ctx, cancel := context.WithCancel(t.Context())
			cancels[i] = cancel
			wg.Go(func() { errs[i] = call(ctx, name) })
			synctest.Wait() // each asks after the one before
		}
		cancels[1]() // b leaves from the middle
		cancels[3]() // d from the end
		synctest.Wait()
		close(release)
		wg.Wait()
		for _, c := range cancels {
			c()
		}
		for i, want := range []bool{false, true, false, true} {
			if got := errors.Is(errs[i], context.Canceled); got != want {
				t.Errorf("call %d ended with %v; want cancelled: %v", i, errs[i], want)
			}
		}
		if got := strings.Join(order, " "); got != "long a c" {
			t.Errorf("the provider saw %q; want long a c: the waiters that stayed, in the order they asked", got)
		}

		// Nothing is left of the waiters that left: a call goes at once.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := call(ctx, "e"); err != nil || time.Since(start) != 0 {
			t.Errorf("a call after every waiter left: %v after %v; want it to go at once", err, time.Since(start))
		}
	})
}
