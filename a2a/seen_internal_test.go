package a2a

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
)

// The claims of first messages whose tasks are starting are kept apart
// from the tasks remembered, and bounded on their own: a first message
// past the bound is refused with an error that says to send it again,
// and a copy of a message whose task is starting still finds its claim
// and waits for that task. (Before, the claims shared the tasks' bound,
// the oldest forgotten first: the third first message at once, at a
// bound of two, forgot the first's claim, and a copy of the first started
// a second task.) A claim grown stale is taken over by the next copy.
func TestClaimsOfTasksStartingAreKept(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := newSeenMessages(2, time.Hour, nil, slog.New(slog.DiscardHandler))
	s.now = func() time.Time { return now }
	claimed := func(id string) *claim {
		t.Helper()
		mine, task, other, err := s.claim(ctx, "ann", id, "")
		if err != nil || mine == nil {
			t.Fatalf("the first message %s: claim %v, task %q, another's claim %v, error %v; want its claim", id, mine, task, other, err)
		}
		return mine
	}
	c1 := claimed("m-1")
	claimed("m-2")
	_, _, _, err := s.claim(ctx, "ann", "m-3", "")
	if !errors.Is(err, sdk.ErrServerError) || !strings.Contains(err.Error(), "send the message again") {
		t.Errorf("a third first message while two tasks start: error %v, want one saying to send it again", err)
	}
	if mine, _, other, err := s.claim(ctx, "ann", "m-1", ""); mine != nil || other != c1 || err != nil {
		t.Errorf("a copy of m-1 while its task starts: claim %v, another's %v, error %v; want m-1's claim to wait for", mine, other, err)
	}
	// m-1's task is stored: its copies are answered with it, and a new
	// first message may claim its id.
	c1.resolve(ctx, "task-1")
	if _, task, _, _ := s.claim(ctx, "ann", "m-1", ""); task != "task-1" {
		t.Errorf("a copy of m-1 once its task started: task %q, want task-1", task)
	}
	claimed("m-3")
	// m-2's holder stopped before storing its task: past the claim's
	// time, the next copy claims the id anew.
	now = now.Add(claimTTL)
	claimed("m-2")
	// Many first messages, one after another, each task stored: memory
	// stays within the bounds.
	for i := range 10000 {
		id := "flood-" + strconv.Itoa(i)
		mine, _, _, err := s.claim(ctx, "bob", id, "")
		if err != nil {
			t.Fatalf("first message %d: %v", i, err)
		}
		mine.resolve(ctx, sdk.TaskID("task-"+id))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claims) > s.max || len(s.tasks) > s.max || s.order.Len() != len(s.tasks) || s.claimOrder.Len() != len(s.claims) {
		t.Errorf("%d claims and %d tasks kept (lists of %d and %d), want at most %d each", len(s.claims), len(s.tasks), s.claimOrder.Len(), s.order.Len(), s.max)
	}
}

// A message sent again in place of its failed task, whose new task was
// slow to start (its claim grew stale and was dropped as other messages
// came), is answered with that new task once it starts: a copy sent
// after it does not start a third. (Before, the failed task, still
// remembered beside the claim, kept the new one from being remembered.)
func TestStaleClaimReplacingAFailedTaskResolves(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := newSeenMessages(10, time.Hour, nil, slog.New(slog.DiscardHandler))
	s.now = func() time.Time { return now }
	s.remember(ctx, "ann", "m-1", "task-failed")
	mine, _, _, err := s.claim(ctx, "ann", "m-1", "task-failed")
	if err != nil || mine == nil {
		t.Fatalf("m-1 sent again in place of its failed task: claim %v, error %v; want its claim", mine, err)
	}
	now = now.Add(claimTTL)
	if _, _, _, err := s.claim(ctx, "bob", "m-2", ""); err != nil { // drops the stale claim
		t.Fatal(err)
	}
	mine.resolve(ctx, "task-2")
	if _, task, other, err := s.claim(ctx, "ann", "m-1", ""); task != "task-2" {
		t.Errorf("a copy of m-1 after its new task started: task %q, claim %v, error %v; want task-2", task, other, err)
	}
}

// One sender who sends a flood of first messages at once holds at most
// three quarters of the claims of tasks starting: the others' first
// messages still start theirs, and a sender past the share is told to
// send again. Claims settled, or grown stale, give the share back.
func TestOneSendersClaimsLeaveRoomForOthers(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := newSeenMessages(8, time.Hour, nil, slog.New(slog.DiscardHandler))
	s.now = func() time.Time { return now }
	var flood []*claim
	for i := range 6 {
		mine, _, _, err := s.claim(ctx, "mallory", "m-"+strconv.Itoa(i), "")
		if err != nil || mine == nil {
			t.Fatalf("mallory's first message %d: claim %v, error %v", i, mine, err)
		}
		flood = append(flood, mine)
	}
	if _, _, _, err := s.claim(ctx, "mallory", "m-6", ""); !errors.Is(err, sdk.ErrServerError) || !strings.Contains(err.Error(), "for one sender") {
		t.Errorf("mallory's seventh first message while six tasks start: error %v, want one saying she has as many as one sender may", err)
	}
	for _, id := range []string{"a-1", "a-2"} {
		if mine, _, _, err := s.claim(ctx, "ann", id, ""); err != nil || mine == nil {
			t.Fatalf("ann's first message %s while mallory's flood starts: claim %v, error %v; want her task to start", id, mine, err)
		}
	}
	if _, _, _, err := s.claim(ctx, "ann", "a-3", ""); !errors.Is(err, sdk.ErrServerError) || !strings.Contains(err.Error(), "as many first messages starting") {
		t.Errorf("a first message past all the server keeps track of: error %v, want one saying so", err)
	}
	flood[0].resolve(ctx, "task-m-0")
	if mine, _, _, err := s.claim(ctx, "mallory", "m-6", ""); err != nil || mine == nil {
		t.Errorf("mallory's message once one of her tasks started: claim %v, error %v; want her task to start", mine, err)
	}
	now = now.Add(claimTTL) // every holder stopped: the claims grow stale
	if mine, _, _, err := s.claim(ctx, "bob", "b-1", ""); err != nil || mine == nil {
		t.Fatalf("bob's first message once the claims grew stale: claim %v, error %v", mine, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claimsOf) != 1 || s.claimsOf[escapeKey("bob")] != 1 {
		t.Errorf("the claims counted per sender are %v, want bob's one", s.claimsOf)
	}
}
