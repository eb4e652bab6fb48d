package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/provider/internal/unreachable"
)

// Defaults of an Admission.
const (
	// DefaultAdmissionRetries is how many times Admission retries a call
	// that failed with a rate limit or a transient error.
	DefaultAdmissionRetries = 8
	// DefaultInitialInFlight is how many calls to a model Admission lets
	// run at once before it knows anything of the model's limits; the
	// bound then grows by one with each call that succeeds, doubling each
	// round trip, until the provider first says it is overloaded.
	DefaultInitialInFlight = 16
	// DefaultMaxInFlight bounds the calls to one model run at once when
	// no Limits.InFlight says otherwise.
	DefaultMaxInFlight = 4096
	// maxBackoff caps one wait before a retry that no Retry-After sets.
	maxBackoff = 30 * time.Second
	// maxRetryAfter caps what a provider may ask a caller to wait.
	maxRetryAfter = 10 * time.Minute
	// DefaultRetryTime bounds the time Admission spends trying a call
	// again after failures a retry may mend other than rate limits (see
	// WithRetryTime).
	DefaultRetryTime = 30 * time.Second
	// unreachableRetryTime is as much of it as a call gets whose server
	// could not be reached at all.
	unreachableRetryTime = 2 * time.Second
	// maxEventError bounds the text of a failure a retry event carries.
	maxEventError = 1 << 10
)

// AdmissionEvent is the name of the AG-UI CUSTOM event Admission emits
// when a call has to wait for admission ("queued"), when it goes
// ("admitted") and when it is tried again after a failure ("retry"); its
// value is a JSON object with "state", "model", "reason" (queued: "rate
// limit", "in flight" or "backoff", what holds the first call in the
// queue), "waitedMs" (admitted), and for a retry "retry" (its number,
// from 1), "waitMs" (the wait before it) and "error" (the failure it
// follows, at most 1 KiB).
const AdmissionEvent = "deputy.admission"

// Limits bound the calls to one model. A zero field means no bound of that
// kind is given: Admission then learns it from what the provider says.
type Limits struct {
	// RequestsPerMinute bounds requests started a minute.
	RequestsPerMinute int
	// TokensPerMinute bounds tokens a minute: the request's estimate
	// (about four bytes a token, plus its MaxTokens) is taken when it goes
	// and corrected to what it used when it ends.
	TokensPerMinute int
	// InFlight bounds the calls run at once.
	InFlight int
}

// Admission is admission control for the models of one provider: every
// call waits until the model's limits let it go, instead of failing with a
// rate limit. Give one Admission to every agent of a process that calls
// the same provider account (the real providers make one each unless
// given one: openai.WithAdmission, anthropic.WithAdmission), and a whole
// delegation tree, or several, runs as fast as the provider allows.
//
// Per model it keeps requests a minute, tokens a minute and calls in
// flight. Each is what Limits set, or what the provider said (RateLimit:
// its rate-limit headers and Retry-After), whichever is lower. The bound
// on calls in flight adapts: while calls succeed it grows, doubling each
// round trip until the provider first pushes back and by one a round trip
// after that, and it shrinks by 30% when the provider answers 429 or says
// it is overloaded. A call the provider refused for a rate limit, or that failed
// in a way a retry may mend, is tried again (WithRetries) after the wait
// the provider asked for, or a jittered backoff; a streamed call is not
// tried again once part of its reply has reached the caller. A call waits
// for as long as its context lives (when it ends, the call leaves the
// queue and returns an error wrapping the context's); while it waits, the
// context's event sink gets AdmissionEvent events.
//
// Calls to one model are admitted first come, first served: none asked
// after a call goes before it, whatever the trees sharing the Admission do,
// and a retry queues again at the end. So a tree that calls back to back
// cannot starve another's single call, but a thousand calls asked at once
// are ahead of every later one (bound such a fan-out with
// agent.WithParallelism when another tree's latency matters more), and a
// call whose token estimate does not fit the minute holds those behind it.
//
// An Admission is safe for concurrent use. The zero value is not usable:
// make one with NewAdmission.
type Admission struct {
	retries   int
	retryTime time.Duration
	log       *slog.Logger // nil: no logging
	mu        sync.RWMutex
	configed  map[string]Limits // by model; "" for every other
	gates     map[string]*gate
}

// AdmissionOption configures NewAdmission.
type AdmissionOption func(*Admission) error

// WithLimits sets the limits of model, or of every model not named by
// another WithLimits when model is "".
func WithLimits(model string, l Limits) AdmissionOption {
	return func(a *Admission) error {
		if l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.InFlight < 0 {
			return fmt.Errorf("provider: WithLimits(%q, %+v): a limit cannot be negative; give 0 to learn it from the provider", model, l)
		}
		a.configed[model] = l
		return nil
	}
}

// WithRetries sets how many times a call is tried again after a rate limit
// or a failure a retry may mend (default DefaultAdmissionRetries); 0 tries
// each call once.
func WithRetries(n int) AdmissionOption {
	return func(a *Admission) error {
		if n < 0 {
			return fmt.Errorf("provider: WithRetries(%d): the count cannot be negative; give 0 to try each call once", n)
		}
		a.retries = n
		return nil
	}
}

// WithRetryTime bounds how long a call is tried again after failures a
// retry may mend other than rate limits (a 5xx, an overload, a dropped
// connection, a timeout): the time from its first such failure, the
// retries and the waits before them counted, the waits for admission
// not. A retry whose wait would end past d is not made, and the call
// returns its last failure. Default DefaultRetryTime; 0 tries such a call
// once. A server that cannot be reached at all (a connection refused, a
// host name that does not resolve) gets at most 2 seconds of it: a
// server that restarts comes back within them, and a wrong URL or a
// stopped server fails the first call within seconds. A rate-limited call
// waits as the provider asks, up to WithRetries times.
func WithRetryTime(d time.Duration) AdmissionOption {
	return func(a *Admission) error {
		if d < 0 {
			return fmt.Errorf("provider: WithRetryTime(%v): the time cannot be negative; give 0 to try each failing call once", d)
		}
		a.retryTime = d
		return nil
	}
}

// WithLogger logs each retry to l at Warn, with the model, the retry's
// number, the wait before it and the failure it follows; the same goes to
// the event sink of the call's context as an AdmissionEvent of state
// "retry". A nil l logs nothing, the default.
func WithLogger(l *slog.Logger) AdmissionOption {
	return func(a *Admission) error {
		a.log = l
		return nil
	}
}

// NewAdmission returns admission control configured by opts.
func NewAdmission(opts ...AdmissionOption) (*Admission, error) {
	a := &Admission{retries: DefaultAdmissionRetries, retryTime: DefaultRetryTime, configed: map[string]Limits{}, gates: map[string]*gate{}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// StreamFunc makes one call of a provider, streamed when onDelta is not
// nil: Streamer.Stream's shape, which Complete has with a nil onDelta.
type StreamFunc func(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error)

// Call makes the call call(ctx, req, onDelta) once admission lets it go,
// learns from its reply or failure what the provider said of its limits,
// and tries it again as the Admission says. req.Model picks the model's
// limits: a provider that fills in a default model passes req with it set
// (as provider/openai and provider/anthropic do), so that a model's
// limits hold for every call it answers. Call returns the last reply or
// failure, or an error wrapping ctx.Err() when ctx ends while the call
// waits.
func (a *Admission) Call(ctx context.Context, req Request, onDelta func(Delta) error, call StreamFunc) (Response, error) {
	return a.call(ctx, req.Model, req, onDelta, call)
}

// call is Call under the limits of model.
func (a *Admission) call(ctx context.Context, model string, req Request, onDelta func(Delta) error, call StreamFunc) (Response, error) {
	g := a.gate(model)
	var (
		est    int64
		queued time.Duration
		// failing is the time the call has spent failing in a way a retry
		// may mend, since the first such failure: the retries and the
		// waits before them, not the waits for admission.
		failing time.Duration
		retried bool // after such a failure
	)
	for attempt := 0; ; attempt++ {
		if g.tokensKnown() && est == 0 {
			est = estimateTokens(&req)
		}
		tk, waited, err := g.acquire(ctx, model, est)
		queued += waited
		if err != nil {
			return Response{}, err
		}
		began := time.Now()
		resp, delivered, err := g.attempt(ctx, tk, req, onDelta, call)
		perr, failed := asError(err)
		if err == nil || !failed || delivered || attempt >= a.retries || !perr.Retryable() || ctx.Err() != nil {
			if err == nil {
				resp.Queued = queued
			}
			return resp, err
		}
		// The wait before the retry: the pause every call now keeps, or
		// this call's own back-off, as long as the provider asked or a
		// jittered while.
		d := min(perr.RateLimit.RetryAfter, maxRetryAfter)
		if d <= 0 && !pauses(perr) {
			d = backoff(attempt)
		}
		if perr.Kind != KindRateLimit {
			// A rate limit is the provider asking to wait, and the call
			// waits as admission does; other failures are tried again
			// for a bounded time, and a server that cannot be reached at
			// all for a moment only: a wrong URL or a stopped server
			// fails the call at once, a restarting one comes back.
			if retried {
				failing += time.Since(began)
			}
			retried = true
			budget := a.retryTime
			if unreachable.Is(err) {
				budget = min(budget, unreachableRetryTime)
			}
			if failing+d > budget {
				return resp, err
			}
			failing += d
		}
		a.retrying(ctx, model, attempt+1, d, perr)
		if !pauses(perr) {
			queued += d
			if err := sleep(ctx, d); err != nil {
				return Response{}, fmt.Errorf("waiting to retry after %v: %w", perr, err)
			}
		}
	}
}

// retrying logs and emits retry number n of a call to model, after the
// failure perr and a wait of d.
func (a *Admission) retrying(ctx context.Context, model string, n int, d time.Duration, perr *Error) {
	msg := textcap.Cap(perr.Error(), maxEventError)
	if l := a.log; l != nil && l.Enabled(ctx, slog.LevelWarn) {
		l.LogAttrs(ctx, slog.LevelWarn, "deputy: model call failed; trying it again",
			slog.String("model", model), slog.Int("retry", n), slog.Duration("wait", d), slog.String("error", msg))
	}
	em := event.From(ctx)
	if !em.Enabled() {
		return
	}
	b, _ := json.Marshal(struct {
		State  string `json:"state"`
		Model  string `json:"model"`
		Retry  int    `json:"retry"`
		WaitMs int64  `json:"waitMs"`
		Error  string `json:"error"`
	}{"retry", model, n, d.Milliseconds(), msg})
	em.Emit(event.Event{Type: event.Custom, Name: AdmissionEvent, Value: b})
}

// attempt makes one admitted call and counts it out, whatever way it ends:
// a call that panics is counted out as a failure that says nothing of
// load, and the panic goes on up.
func (g *gate) attempt(ctx context.Context, tk ticket, req Request, onDelta func(Delta) error, call StreamFunc) (resp Response, delivered bool, err error) {
	released := false
	defer func() {
		if !released {
			g.release(tk, &Response{}, nil, outcomeUnknown)
		}
	}()
	if onDelta != nil {
		resp, delivered, err = stream(ctx, req, onDelta, call)
	} else {
		resp, err = call(ctx, req, nil)
	}
	released = true
	switch perr, failed := asError(err); {
	case err == nil:
		g.release(tk, &resp, nil, outcomeSuccess)
	case failed:
		g.release(tk, &resp, perr, outcomeFailed)
	default:
		g.release(tk, &resp, nil, outcomeUnknown)
	}
	return resp, delivered, err
}

// How a call ended, as release learns from it.
type outcome int

const (
	outcomeSuccess outcome = iota // a reply
	outcomeFailed                 // a failure the provider reported (*Error)
	outcomeUnknown                // anything else: a panic, a cancellation, an error of the caller's
)

// pauses reports whether a failure pauses every call to the model (see
// release): a rate limit, or an overload the provider said how long to
// wait after.
func pauses(e *Error) bool {
	return overload(e) && (e.Kind == KindRateLimit || e.RateLimit.RetryAfter > 0)
}

// stream makes a streamed call and reports whether any of its reply
// reached onDelta.
func stream(ctx context.Context, req Request, onDelta func(Delta) error, call StreamFunc) (resp Response, delivered bool, err error) {
	resp, err = call(ctx, req, func(d Delta) error { delivered = true; return onDelta(d) })
	return resp, delivered, err
}

// asError returns the *Error in err's chain, if any.
func asError(err error) (*Error, bool) {
	if err == nil {
		return nil, false
	}
	var perr *Error
	ok := errors.As(err, &perr)
	return perr, ok
}

// Admit returns p with each of its calls made through a, keeping what p
// can do (Streamer, Namer), for a provider that does not take an
// Admission of its own.
//
// A call keeps to the limits of the model its request names or, when it
// names none, of the model p answers with by default, as p's Model method
// says (the real providers, fake.Provider and what Wrap returns have one):
// WithLimits("gpt-5.4-mini", …) holds for every call p makes to that model,
// named or not. The request reaches p as it was given. A call that names
// no model to a provider without a Model method keeps to the limits of
// every other model (WithLimits("", …)).
func Admit(p Provider, a *Admission) Provider {
	call := func(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error) {
		if onDelta != nil {
			return p.(Streamer).Stream(ctx, req, onDelta)
		}
		return p.Complete(ctx, req)
	}
	w := admitted{wrapped: wrapped{p: p}, a: a, call: call}
	w.def, _ = p.(interface{ Model() string })
	if _, ok := p.(Streamer); ok {
		return streamingAdmitted{w}
	}
	return w
}

type admitted struct {
	wrapped
	a    *Admission
	call StreamFunc
	def  interface{ Model() string } // p's, when it says its default model
}

// model is the model whose limits req keeps to.
func (w admitted) model(req *Request) string {
	if req.Model == "" && w.def != nil {
		return w.def.Model()
	}
	return req.Model
}

func (w admitted) Complete(ctx context.Context, req Request) (Response, error) {
	return w.a.call(ctx, w.model(&req), req, nil, w.call)
}

type streamingAdmitted struct{ admitted }

func (w streamingAdmitted) Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error) {
	if onDelta == nil {
		onDelta = func(Delta) error { return nil }
	}
	return w.a.call(ctx, w.model(&req), req, onDelta, w.call)
}

// gate returns the gate of model, making it on first use.
func (a *Admission) gate(model string) *gate {
	a.mu.RLock()
	g := a.gates[model]
	a.mu.RUnlock()
	if g != nil {
		return g
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if g = a.gates[model]; g == nil {
		l, ok := a.configed[model]
		if !ok {
			l = a.configed[""]
		}
		g = newGate(l)
		a.gates[model] = g
	}
	return g
}

// gate is the admission state of one model.
type gate struct {
	mu       sync.Mutex
	limits   Limits // as configured
	inflight int
	window   float64 // adaptive bound on inflight
	ceiling  float64 // what window may grow to
	ssthresh float64 // window below which it doubles each round trip
	epoch    uint64  // counts decreases; a call admitted before one does not decrease again
	strikes  int     // rate limits in a row, for the backoff when no Retry-After says
	requests bucket
	tokens   bucket
	paused   time.Time // no call goes before
	// minute counts the calls that succeeded in each of the last 60
	// seconds, so that a 429 that does not say the limit can be read as
	// one of about as many requests a minute as went through.
	minute [60]int32
	minSec [60]int64
	heard  bool // the provider has said its request limit
	// admits counts the calls admitted; paceSeq is the count when a 429
	// set the pace a minute (inferRequests), at paceAt: a call admitted
	// before it that succeeds after it was taken by the provider in the
	// minute the pace was read from, and raises the pace by one.
	admits  uint64
	paced   bool
	paceSeq uint64
	paceAt  time.Time
	// head and tail are the calls waiting for admission, in the order
	// they asked; queued counts them.
	head, tail *waiter
	queued     int
	tokKnown   atomic.Bool      // tokens.cap > 0, read without the lock
	now        func() time.Time // time.Now; blocked's clock
}

// bucket is a per-minute allowance that refills continuously.
type bucket struct {
	cap, avail float64 // cap 0: no bound known
	configured float64
	last       time.Time
}

func (b *bucket) refill(now time.Time) {
	if b.cap == 0 {
		return
	}
	if !b.last.IsZero() {
		b.avail = min(b.cap, b.avail+now.Sub(b.last).Seconds()*b.cap/60)
	}
	b.last = now
}

// need returns how long until n can be taken (0: now).
func (b *bucket) need(n float64) time.Duration {
	if b.cap == 0 {
		return 0
	}
	n = min(n, b.cap) // a request larger than the whole allowance goes when it is full
	if b.avail >= n {
		return 0
	}
	// The wait is bounded, whatever a provider said of its limits: a
	// hostile figure costs at most maxRetryAfter a call.
	return time.Duration(min((n-b.avail)/(b.cap/60), maxRetryAfter.Seconds()) * float64(time.Second))
}

// learn takes what the provider said: its limit a minute, and what is
// left of it now.
func (b *bucket) learn(now time.Time, limit, remaining int64) {
	if limit <= 0 {
		return
	}
	c := float64(limit)
	if b.configured > 0 {
		c = min(c, b.configured)
	}
	if b.cap == 0 {
		b.avail, b.last = c, now
	}
	b.refill(now)
	b.cap = c
	b.avail = min(b.avail, float64(max(remaining, 0)))
}

func newGate(l Limits) *gate {
	g := &gate{limits: l, window: DefaultInitialInFlight, ceiling: DefaultMaxInFlight, ssthresh: math.Inf(1), now: time.Now}
	if l.InFlight > 0 {
		g.ceiling = float64(l.InFlight)
		g.window = min(g.window, g.ceiling)
		if l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 {
			g.window = g.ceiling // the user said how many: no need to find out
		}
	}
	if l.RequestsPerMinute > 0 {
		g.requests = bucket{cap: float64(l.RequestsPerMinute), avail: float64(l.RequestsPerMinute), configured: float64(l.RequestsPerMinute)}
	}
	if l.TokensPerMinute > 0 {
		g.tokens = bucket{cap: float64(l.TokensPerMinute), avail: float64(l.TokensPerMinute), configured: float64(l.TokensPerMinute)}
		g.tokKnown.Store(true)
	}
	return g
}

func (g *gate) tokensKnown() bool { return g.tokKnown.Load() }

// ticket is one admitted call.
type ticket struct {
	epoch  uint64
	tokens float64
	seq    uint64    // its number among the gate's admitted calls
	at     time.Time // when it was admitted
}

// waiter is a call waiting in a gate's queue.
type waiter struct {
	est        int64
	poke       chan struct{} // capacity 1: admitted, or now first and to wait for a time
	admitted   bool          // set under g.mu by dispatch, with tk
	tk         ticket
	prev, next *waiter
}

// acquire waits until a call of est tokens may go, and counts it in. Calls
// go in the order they asked: one that finds others waiting waits behind
// them, whatever the limits would let it do.
func (g *gate) acquire(ctx context.Context, model string, est int64) (ticket, time.Duration, error) {
	g.mu.Lock()
	if g.head == nil {
		if _, reason := g.blocked(est); reason == "" {
			tk := g.admit(est)
			g.mu.Unlock()
			return tk, 0, nil
		}
	}
	w := &waiter{est: est, poke: make(chan struct{}, 1)}
	g.push(w)
	wait, reason := g.blocked(g.head.est)
	if reason == "" {
		// The first may go: its time came and it has not looked yet, or,
		// when w is the first, it came since the look above (a pause or a
		// refill a moment long), and no timer or call ending would wake w.
		g.dispatch()
		if w.admitted {
			g.mu.Unlock()
			return w.tk, 0, nil
		}
		wait, reason = g.blocked(g.head.est)
	}
	if g.head != w {
		wait = 0 // only the first waits for a time; the others wait their turn
	}
	g.mu.Unlock()
	queued := time.Now()
	admissionEvent(ctx, model, "queued", reason, 0)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var tc <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return ticket{}, 0, g.leave(w, model, ctx.Err())
		case <-w.poke:
		case <-tc:
		}
		g.mu.Lock()
		wait = 0
		if !w.admitted && g.head == w {
			var r string
			if wait, r = g.blocked(w.est); r == "" {
				g.dispatch()
			}
		}
		if w.admitted {
			g.mu.Unlock()
			waited := time.Since(queued)
			admissionEvent(ctx, model, "admitted", "", waited)
			return w.tk, waited, nil
		}
		g.mu.Unlock()
	}
}

// leave takes w out of the queue when its context ended (cause) while it
// waited, or gives back its place if it was admitted meanwhile, and
// returns the error the call ends with.
func (g *gate) leave(w *waiter, model string, cause error) error {
	g.mu.Lock()
	if w.admitted {
		// Never sent: the call takes nothing of the limits.
		g.inflight--
		if g.requests.cap > 0 {
			g.requests.avail = min(g.requests.cap, g.requests.avail+1)
		}
		if g.tokens.cap > 0 {
			g.tokens.avail = min(g.tokens.cap, g.tokens.avail+w.tk.tokens)
		}
	} else {
		g.remove(w)
	}
	g.dispatch()
	g.mu.Unlock()
	return fmt.Errorf("waiting for admission to model %q: %w", model, cause)
}

// admit counts a call of est tokens in. Called with g.mu held.
func (g *gate) admit(est int64) ticket {
	g.inflight++
	if g.requests.cap > 0 {
		g.requests.avail--
	}
	if g.tokens.cap > 0 {
		g.tokens.avail -= float64(est)
	}
	g.admits++
	return ticket{epoch: g.epoch, tokens: float64(est), seq: g.admits, at: time.Now()}
}

// dispatch admits the waiting calls, first come first, while the limits
// let the first go; a first that must wait for a time is woken to set its
// timer. Called with g.mu held, after anything that may let a call go.
func (g *gate) dispatch() {
	for w := g.head; w != nil; w = g.head {
		wait, reason := g.blocked(w.est)
		if reason != "" {
			if wait > 0 {
				poke(w)
			}
			return
		}
		g.remove(w)
		w.tk, w.admitted = g.admit(w.est), true
		poke(w)
	}
}

func poke(w *waiter) {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// push puts w at the end of the queue. Called with g.mu held.
func (g *gate) push(w *waiter) {
	w.prev = g.tail
	if g.tail != nil {
		g.tail.next = w
	} else {
		g.head = w
	}
	g.tail = w
	g.queued++
}

// remove takes w out of the queue. Called with g.mu held.
func (g *gate) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		g.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		g.tail = w.prev
	}
	w.prev, w.next = nil, nil
	g.queued--
}

// blocked says whether a call of est tokens must wait, why, and for how
// long (0: until a call ends). Called with g.mu held.
func (g *gate) blocked(est int64) (time.Duration, string) {
	if g.requests.cap == 0 && g.tokens.cap == 0 && g.paused.IsZero() {
		if float64(g.inflight) >= g.window {
			return 0, "in flight"
		}
		return 0, ""
	}
	now := g.now()
	if now.Before(g.paused) {
		return g.paused.Sub(now), "backoff"
	}
	if float64(g.inflight) >= g.window {
		return 0, "in flight"
	}
	g.requests.refill(now)
	g.tokens.refill(now)
	if d := max(g.requests.need(1), g.tokens.need(float64(est))); d > 0 {
		return d, "rate limit"
	}
	return 0, ""
}

// release counts a call out and learns from how it ended (how): resp
// when it succeeded, perr when it failed as the provider said. A call that
// ended otherwise teaches nothing.
func (g *gate) release(tk ticket, resp *Response, perr *Error, how outcome) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if how == outcomeUnknown {
		g.dispatch()
		return
	}
	failed := how == outcomeFailed
	var rl RateLimit
	if failed {
		rl = perr.RateLimit
	} else {
		rl = resp.RateLimit
	}
	if !rl.IsZero() || g.tokens.cap > 0 {
		now := time.Now()
		if !failed && tk.tokens > 0 && g.tokens.cap > 0 && rl.Tokens == 0 {
			// Correct the estimate taken to what the call used, when the
			// provider did not say what is left (which counts the call).
			// A reply's count is untrusted: it costs at most the whole
			// allowance.
			used := min(float64(max(resp.Usage.Tokens(), 0)), g.tokens.cap)
			g.tokens.avail = min(g.tokens.cap, g.tokens.avail+tk.tokens-used)
		}
		g.requests.learn(now, rl.Requests, rl.RequestsRemaining)
		g.tokens.learn(now, rl.Tokens, rl.TokensRemaining)
		g.tokens.avail = max(g.tokens.avail, -g.tokens.cap)
		g.requests.avail = max(g.requests.avail, -g.requests.cap)
		if g.tokens.cap > 0 {
			g.tokKnown.Store(true)
		}
	}
	if rl.Requests > 0 {
		g.heard = true
	}
	switch {
	case failed && overload(perr):
		if perr.Kind == KindRateLimit && !g.heard {
			g.inferRequests()
		}
		if tk.epoch == g.epoch {
			g.epoch++
			g.ssthresh = max(1, math.Floor(g.window*0.7))
			g.window = g.ssthresh
		}
		// A rate limit, or a provider that says how long to wait, pauses
		// every call; an overload that says nothing only narrows the bound
		// on calls in flight, and the call backs off alone.
		if pauses(perr) {
			wait := min(rl.RetryAfter, maxRetryAfter)
			g.strikes++
			if wait <= 0 {
				wait = backoff(g.strikes - 1)
			}
			if until := time.Now().Add(wait); until.After(g.paused) {
				g.paused = until
			}
		}
	case !failed:
		if !g.heard {
			now := time.Now()
			sec := now.Unix()
			if i := sec % 60; g.minSec[i] != sec {
				g.minSec[i], g.minute[i] = sec, 1
			} else {
				g.minute[i]++
			}
			if g.paced && tk.seq <= g.paceSeq && g.paceAt.Sub(tk.at) < time.Minute && g.requests.cap > 0 {
				// Sent before the 429 that set the pace, and taken: the
				// provider's minute held it too, and the 429 came back
				// before its answer (a refusal is quick, an answer
				// takes a while).
				g.requests.cap++
				if g.requests.configured > 0 {
					g.requests.cap = min(g.requests.cap, g.requests.configured)
				}
			}
		}
		g.strikes = 0
		switch {
		case float64(g.inflight+1) < g.window/2:
			// The bound was not used: calls that end at once never
			// filled it, and it does not grow past what they showed the
			// provider takes, or the first overload would meet a crowd.
		case g.window < g.ssthresh:
			g.window++
		default:
			g.window += 1 / g.window
		}
		g.window = min(g.window, g.ceiling)
	}
	g.dispatch()
}

// inferRequests takes a 429 from a provider that does not say its limits
// as a limit of about as many requests a minute as went through in the
// last one, and paces calls to that from now on. Called with g.mu held.
func (g *gate) inferRequests() {
	now := time.Now()
	sec := now.Unix()
	var n int32
	for i := range g.minSec {
		if sec-g.minSec[i] < 60 {
			n += g.minute[i]
		}
	}
	if n < 2 {
		return // too few to read a pace from: the pause and the backoff do
	}
	if g.requests.cap > 0 && float64(n) >= g.requests.cap {
		return // the pace already set is no faster
	}
	g.requests = bucket{cap: float64(n), configured: g.requests.configured, last: now}
	if g.requests.configured > 0 {
		g.requests.cap = min(g.requests.cap, g.requests.configured)
	}
	g.paced, g.paceSeq, g.paceAt = true, g.admits, now
}

// overload reports whether a failure says the provider is over its limits
// or its capacity: a 429, a 503 or Anthropic's 529.
func overload(e *Error) bool {
	return e.Kind == KindRateLimit || e.StatusCode == 503 || e.StatusCode == 529
}

// backoff is the wait before retry number attempt (from 0) that no
// Retry-After sets: full jitter over an exponential bound.
func backoff(attempt int) time.Duration {
	bound := min(maxBackoff, 500*time.Millisecond<<min(attempt, 16))
	return bound/2 + rand.N(bound/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// estimateTokens guesses the tokens a request takes of a per-minute
// allowance: about four bytes a token of what it sends, and the reply's
// bound.
func estimateTokens(req *Request) int64 {
	n := len(req.System)
	for i := range req.Messages {
		m := &req.Messages[i]
		n += len(m.Content) + 8
		for j := range m.ToolCalls {
			n += len(m.ToolCalls[j].Name) + len(m.ToolCalls[j].Arguments)
		}
	}
	for i := range req.Tools {
		n += len(req.Tools[i].Name) + len(req.Tools[i].Description) + len(req.Tools[i].Parameters)
	}
	return int64(n/4+1) + int64(max(req.MaxTokens, 0))
}

func admissionEvent(ctx context.Context, model, state, reason string, waited time.Duration) {
	em := event.From(ctx)
	if !em.Enabled() {
		return
	}
	v := map[string]any{"state": state, "model": model}
	if reason != "" {
		v["reason"] = reason
	}
	if state == "admitted" {
		v["waitedMs"] = waited.Milliseconds()
	}
	b, _ := json.Marshal(v)
	em.Emit(event.Event{Type: event.Custom, Name: AdmissionEvent, Value: b})
}
