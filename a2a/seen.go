package a2a

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/store"
)

// Bounds on what a Server remembers of the messages that started tasks
// (WithSeenMessages).
const (
	// DefaultMaxSeenMessages bounds the first messages a Server remembers
	// in memory.
	DefaultMaxSeenMessages = 10000
	// DefaultSeenMessageTTL is how long a Server remembers one.
	DefaultSeenMessageTTL = 24 * time.Hour
)

// claimTTL bounds how long a claim on a message id (seenMessages.claim)
// holds off the copies of the message that wait for its task: a claim
// older than that, whose holder stopped before its task was stored (a
// server that died as it started it), is taken over by the next copy.
const claimTTL = 30 * time.Second

// WithSeenMessages bounds what the server remembers of the messages that
// started its tasks: at most n in memory (the oldest forgotten first), each
// for at most ttl. A message sent again with the messageId of one
// remembered, by the same owner and without a taskId, is answered with the
// task it started (see Server). At most n more are the messages whose
// tasks are starting, each claiming its id until its task is stored, so
// that a copy sent meanwhile waits for that task, and one owner holds at
// most three quarters of those claims, so that an owner's flood leaves
// room for the others' first messages: a first message past either bound
// is refused with an error that says to send it again shortly.
func WithSeenMessages(n int, ttl time.Duration) Option {
	return func(c *config) error {
		if n <= 0 || ttl <= 0 {
			return fmt.Errorf("a2a: WithSeenMessages(%d, %v): give a positive number and a positive time", n, ttl)
		}
		c.maxSeen, c.seenTTL = n, ttl
		return nil
	}
}

// seenMessages remembers, per owner, the task each first message started,
// by the message's id: in memory, bounded in number and time, and, when
// the server keeps its tasks in a store of the application's
// (WithStore), in that store as well, beside the task, so that a restart
// does not forget it.
//
// Before a first message starts its task, the copy that carries it claims
// the message's id (claim): a copy of the message that arrives while the
// task starts waits for the claim to settle, and is answered with the
// task, so that two copies sent at once start one task. With a store the
// claim is made in the store as well, as a record written only where none
// is, or over the very version read, so that copies sent at once to two
// servers on one store start one task too.
type seenMessages struct {
	max int
	ttl time.Duration
	st  *store.Store // nil: memory only
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	tasks map[string]*list.Element // of *seenTask, by seenKey
	order list.List                // of *seenTask, the oldest first
	// claims are the claims of the messages whose tasks are starting, by
	// seenKey, and claimOrder the same, the oldest (the stalest) first:
	// bounded apart from the tasks, so that no claim is forgotten while
	// its task starts, however many first messages come at once.
	claims     map[string]*claim
	claimOrder list.List // of *claim
	// claimsOf counts the claims of each owner, by escaped owner: one
	// owner holds at most ownerClaims of them (see WithSeenMessages).
	claimsOf map[string]int
}

// ownerClaims is how many of the claims of messages whose tasks are
// starting one owner may hold: three quarters of them, at least one, so
// that an owner who sends a flood of first messages at once leaves room
// for the others'.
func (s *seenMessages) ownerClaims() int { return max(1, s.max-s.max/4) }

// seenTask is what is remembered of one owner's message id: the task it
// started.
type seenTask struct {
	key  string
	task sdk.TaskID
	at   time.Time
}

// seenRecord is a seenTask as the store keeps it. A record that names
// neither a task nor a claim is a claim released: the id is free.
type seenRecord struct {
	Task  sdk.TaskID `json:"task,omitempty"`
	Claim string     `json:"claim,omitempty"`
	At    time.Time  `json:"at"`
}

func newSeenMessages(max int, ttl time.Duration, st *store.Store, log *slog.Logger) *seenMessages {
	return &seenMessages{max: max, ttl: ttl, st: st, log: log, now: time.Now, tasks: map[string]*list.Element{}, claims: map[string]*claim{}, claimsOf: map[string]int{}}
}

// seenKey names owner's message id: each escaped, and so bounded
// (escapeKey), so that no owner's message reads as another's.
func seenKey(owner, messageID string) string {
	return escapeKey(owner) + "/" + escapeKey(messageID)
}

// seenPrefix is where, in the store, the first messages' tasks are kept.
const seenPrefix = "a2a/messages/"

// claim is one copy's claim on its owner's message id, made before the
// task the message starts: it settles when the task is stored (resolve)
// or when the task did not start (release). Copies of the message that
// find it pending wait for done.
type claim struct {
	s       *seenMessages
	key     string
	owner   string    // escaped, as claimsOf counts it
	token   string    // names the claim in the store
	stale   time.Time // when copies stop waiting for it (claimTTL)
	version int64     // of its record in the store; 0: not in the store
	done    chan struct{}
	state   claimState    // guarded by s.mu
	elem    *list.Element // in s.claimOrder while in s.claims; guarded by s.mu
	// replace is the failed or cancelled task the id started, which the
	// claim's task takes the place of: "" for none.
	replace sdk.TaskID
}

type claimState int

const (
	claimPending claimState = iota // made; no run has taken it
	claimTaken                     // the run took it: it settles it
	claimSettled                   // resolved or released
)

type claimKey struct{}

// withClaim is ctx carrying c to the run of the request and to the
// storing of its task.
func withClaim(ctx context.Context, c *claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

func claimFrom(ctx context.Context) *claim {
	c, _ := ctx.Value(claimKey{}).(*claim)
	return c
}

// claim claims owner's message id for the task a first message is about
// to start. It returns the claim (mine) when the caller is to start that
// task; or the task the id started, unless that is replace (a failed or
// cancelled task, which the message sent again tries anew); or the claim
// of another copy, whose task is starting (other): wait for it, then
// claim again. It fails only when ctx ends while it waits for another
// server's claim.
func (s *seenMessages) claim(ctx context.Context, owner, id string, replace sdk.TaskID) (mine *claim, task sdk.TaskID, other *claim, err error) {
	k := seenKey(owner, id)
	now := s.now()
	s.mu.Lock()
	s.dropStaleClaims(now)
	if c, ok := s.claims[k]; ok {
		s.mu.Unlock()
		return nil, "", c, nil
	}
	if e, ok := s.tasks[k]; ok {
		if t := e.Value.(*seenTask); now.Sub(t.at) < s.ttl && t.task != replace {
			s.mu.Unlock()
			return nil, t.task, nil, nil
		}
	}
	if n := len(s.claims); n >= s.max {
		s.mu.Unlock()
		return nil, "", nil, fmt.Errorf("%w: the server has as many first messages starting their tasks as it keeps track of (%d, WithSeenMessages): send the message again shortly", sdk.ErrServerError, n)
	}
	who := escapeKey(owner)
	if n := s.claimsOf[who]; n >= s.ownerClaims() {
		s.mu.Unlock()
		return nil, "", nil, fmt.Errorf("%w: you have %d first messages starting their tasks, as many as the server keeps track of for one sender (three quarters of WithSeenMessages): send the message again shortly", sdk.ErrServerError, n)
	}
	c := &claim{s: s, key: k, owner: who, token: rand.Text(), stale: now.Add(s.claimTTL()), done: make(chan struct{}), replace: replace}
	s.claims[k], c.elem = c, s.claimOrder.PushBack(c)
	s.claimsOf[who]++
	s.mu.Unlock()
	if s.st == nil {
		return c, "", nil, nil
	}
	task, at, err := s.claimStored(ctx, c, replace)
	switch {
	case err != nil:
		c.release(ctx, false)
		return nil, "", nil, err
	case task != "":
		c.found(task, at)
		return nil, task, nil, nil
	}
	return c, "", nil, nil
}

// claimStored makes c's record in the store, where the id has none, or
// a free one, a stale claim, one damaged or expired, or the task replace.
// It returns the task the record names instead, when it names one; while
// it names another server's claim, it waits for that to settle. A store
// that fails leaves c in memory alone, exact within this server, and is
// logged.
func (s *seenMessages) claimStored(ctx context.Context, c *claim, replace sdk.TaskID) (sdk.TaskID, time.Time, error) {
	key := seenPrefix + c.key
	pause := 5 * time.Millisecond
	for {
		b, v, err := s.st.Get(ctx, key)
		var rec seenRecord
		switch {
		case errors.Is(err, store.ErrNotFound):
			v = 0
		case err != nil:
			return "", time.Time{}, s.unclaimed(ctx, err)
		default:
			_ = json.Unmarshal(b, &rec) // a damaged record is taken over
		}
		now := s.now()
		switch {
		case rec.Task != "" && now.Sub(rec.At) < s.ttl && rec.Task != replace:
			return rec.Task, rec.At, nil
		case rec.Task == "" && rec.Claim != "" && now.Sub(rec.At) < s.claimTTL():
			select {
			case <-ctx.Done():
				return "", time.Time{}, ctx.Err()
			case <-time.After(pause):
			}
			pause = min(2*pause, 200*time.Millisecond)
			continue
		}
		b, _ = json.Marshal(seenRecord{Claim: c.token, At: now})
		switch err := s.st.Put(ctx, key, b, v); {
		case err == nil:
			c.version = v + 1
			return "", time.Time{}, nil
		case errors.Is(err, store.ErrConflict):
			// Another server wrote it first: read what it wrote.
		default:
			return "", time.Time{}, s.unclaimed(ctx, err)
		}
	}
}

// claimTTL is how long a claim holds off the copies that wait for it:
// claimTTL, or the time a message is remembered when that is shorter.
func (s *seenMessages) claimTTL() time.Duration {
	return min(claimTTL, s.ttl)
}

// unclaimed is what claimStored returns when the store failed: ctx's
// error when it ended, and otherwise nil, having logged the failure.
func (s *seenMessages) unclaimed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.log.Warn("a2a: claiming a message's id in the store failed: copies of it sent at once to other servers on the store may each start a task", "error", err)
	return nil
}

// wait waits for c to settle, or to grow stale, or for ctx to end.
func (c *claim) wait(ctx context.Context) error {
	t := time.NewTimer(c.stale.Sub(c.s.now()))
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("a2a: waiting for the task a copy of this message is starting: %w", ctx.Err())
	}
}

// take is the run's taking of c as it starts the task: it reports false
// when c was released first (the request ended before the run began),
// and the run is then not to start.
func (c *claim) take() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.state == claimSettled {
		return false
	}
	c.state = claimTaken
	return true
}

// found settles c, in memory, with the task the store names for its id.
func (c *claim) found(task sdk.TaskID, at time.Time) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.state = claimSettled
	if s.claims[c.key] == c {
		s.dropClaim(c)
		s.put(&seenTask{key: c.key, task: task, at: at})
	}
	close(c.done)
}

// resolve records that c's message started task: the copies waiting for
// c answer with it, and so does every copy after them.
func (c *claim) resolve(ctx context.Context, task sdk.TaskID) {
	s := c.s
	now := s.now()
	s.mu.Lock()
	if c.state == claimSettled {
		s.mu.Unlock()
		return
	}
	c.state = claimSettled
	// Its task, unless another copy's claim or task took the id since
	// this claim grew stale (the failed task it replaces is no other's).
	_, claimed := s.claims[c.key]
	e, known := s.tasks[c.key]
	known = known && e.Value.(*seenTask).task != c.replace
	if s.claims[c.key] == c || !claimed && !known {
		s.dropClaim(c)
		s.put(&seenTask{key: c.key, task: task, at: now})
	}
	close(c.done)
	s.mu.Unlock()
	if s.st == nil {
		return
	}
	b, _ := json.Marshal(seenRecord{Task: task, At: now})
	err := s.st.Put(ctx, seenPrefix+c.key, b, c.version)
	if err != nil && (c.version > 0 || !errors.Is(err, store.ErrConflict)) {
		s.log.Warn("a2a: storing the task a message started failed: sent again after a restart, it starts another", "task", task, "error", err)
	}
}

// release gives c up: its task did not start. The copies waiting for it
// claim the id again, and one of them starts the task. With unlessTaken,
// a claim a run took is left to that run.
func (c *claim) release(ctx context.Context, unlessTaken bool) {
	s := c.s
	s.mu.Lock()
	if c.state == claimSettled || (unlessTaken && c.state == claimTaken) {
		s.mu.Unlock()
		return
	}
	c.state = claimSettled
	s.dropClaim(c)
	close(c.done)
	s.mu.Unlock()
	if s.st == nil || c.version == 0 {
		return
	}
	b, _ := json.Marshal(seenRecord{At: s.now()})
	if err := s.st.Put(context.WithoutCancel(ctx), seenPrefix+c.key, b, c.version); err != nil && !errors.Is(err, store.ErrConflict) {
		s.log.Warn("a2a: releasing the claim on a message whose task did not start failed: copies of it on other servers wait for the claim to grow stale", "error", err)
	}
}

// remember records that owner's message id started task, for a message
// that started it unclaimed. A message id already remembered, or claimed,
// keeps its first task.
func (s *seenMessages) remember(ctx context.Context, owner, id string, task sdk.TaskID) {
	if id == "" {
		return
	}
	k := seenKey(owner, id)
	now := s.now()
	s.mu.Lock()
	s.dropStaleClaims(now)
	if _, ok := s.claims[k]; ok {
		s.mu.Unlock()
		return
	}
	if e, ok := s.tasks[k]; ok && now.Sub(e.Value.(*seenTask).at) < s.ttl {
		s.mu.Unlock()
		return
	}
	s.put(&seenTask{key: k, task: task, at: now})
	s.mu.Unlock()
	if s.st != nil {
		b, _ := json.Marshal(seenRecord{Task: task, At: now})
		if err := s.st.Put(ctx, seenPrefix+k, b, 0); err != nil && !errors.Is(err, store.ErrConflict) {
			s.log.Warn("a2a: storing the task a message started failed: sent again after a restart, it starts another", "task", task, "error", err)
		}
	}
}

// put adds t, dropping an entry of the same key, then the oldest past the
// bound. s.mu is held.
func (s *seenMessages) put(t *seenTask) {
	if e, ok := s.tasks[t.key]; ok {
		s.order.Remove(e)
	}
	s.tasks[t.key] = s.order.PushBack(t)
	for s.order.Len() > s.max || t.at.Sub(s.order.Front().Value.(*seenTask).at) >= s.ttl {
		old := s.order.Remove(s.order.Front()).(*seenTask)
		delete(s.tasks, old.key)
	}
}

// dropClaim forgets c, if it is its id's claim still. s.mu is held.
func (s *seenMessages) dropClaim(c *claim) {
	if s.claims[c.key] == c {
		delete(s.claims, c.key)
		s.claimOrder.Remove(c.elem)
		if s.claimsOf[c.owner]--; s.claimsOf[c.owner] <= 0 {
			delete(s.claimsOf, c.owner)
		}
	}
}

// dropStaleClaims forgets the claims grown stale by now: their holders
// stopped before their tasks were stored, and the next copy of each
// message claims its id anew. s.mu is held.
func (s *seenMessages) dropStaleClaims(now time.Time) {
	for e := s.claimOrder.Front(); e != nil; e = s.claimOrder.Front() {
		c := e.Value.(*claim)
		if now.Before(c.stale) {
			return
		}
		s.dropClaim(c)
	}
}
