package a2a

import (
	"container/list"
	"context"
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

// WithSeenMessages bounds what the server remembers of the messages that
// started its tasks: at most n in memory (the oldest forgotten first), each
// for at most ttl. A message sent again with the messageId of one
// remembered, by the same owner and without a taskId, is answered with the
// task it started (see Server).
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
type seenMessages struct {
	max int
	ttl time.Duration
	st  *store.Store // nil: memory only
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	tasks map[string]*list.Element // of *seenTask, by seenKey
	order list.List                // of *seenTask, the oldest first
}

type seenTask struct {
	key  string
	Task sdk.TaskID `json:"task"`
	At   time.Time  `json:"at"`
}

func newSeenMessages(max int, ttl time.Duration, st *store.Store, log *slog.Logger) *seenMessages {
	return &seenMessages{max: max, ttl: ttl, st: st, log: log, now: time.Now, tasks: map[string]*list.Element{}}
}

// seenKey names owner's message id: each escaped, and so bounded
// (escapeKey), so that no owner's message reads as another's.
func seenKey(owner, messageID string) string {
	return escapeKey(owner) + "/" + escapeKey(messageID)
}

// seenPrefix is where, in the store, the first messages' tasks are kept.
const seenPrefix = "a2a/messages/"

// remember records that owner's message id started task. A message id
// already remembered keeps its first task.
func (s *seenMessages) remember(ctx context.Context, owner, id string, task sdk.TaskID) {
	if id == "" {
		return
	}
	k := seenKey(owner, id)
	now := s.now()
	s.mu.Lock()
	if e, ok := s.tasks[k]; ok && now.Sub(e.Value.(*seenTask).At) < s.ttl {
		s.mu.Unlock()
		return
	}
	s.put(&seenTask{key: k, Task: task, At: now})
	s.mu.Unlock()
	if s.st != nil {
		b, _ := json.Marshal(seenTask{Task: task, At: now})
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
	for s.order.Len() > s.max || t.At.Sub(s.order.Front().Value.(*seenTask).At) >= s.ttl {
		old := s.order.Remove(s.order.Front()).(*seenTask)
		delete(s.tasks, old.key)
	}
}

// task returns the task owner's message id started, if it is remembered
// and not older than the bound.
func (s *seenMessages) task(ctx context.Context, owner, id string) (sdk.TaskID, bool) {
	if id == "" {
		return "", false
	}
	k := seenKey(owner, id)
	now := s.now()
	s.mu.Lock()
	e, ok := s.tasks[k]
	if ok {
		t := e.Value.(*seenTask)
		if now.Sub(t.At) < s.ttl {
			s.mu.Unlock()
			return t.Task, true
		}
		s.order.Remove(e)
		delete(s.tasks, k)
	}
	s.mu.Unlock()
	if s.st == nil {
		return "", false
	}
	b, _, err := s.st.Get(ctx, seenPrefix+k)
	if err != nil {
		return "", false
	}
	var t seenTask
	if json.Unmarshal(b, &t) != nil || t.Task == "" || now.Sub(t.At) >= s.ttl {
		_ = s.st.Delete(ctx, seenPrefix+k)
		return "", false
	}
	t.key = k
	s.mu.Lock()
	if _, ok := s.tasks[k]; !ok {
		s.put(&t)
	}
	s.mu.Unlock()
	return t.Task, true
}

// forget forgets that owner's message id started task, so that the task
// a new try of it starts is remembered instead.
func (s *seenMessages) forget(ctx context.Context, owner, id string, task sdk.TaskID) {
	k := seenKey(owner, id)
	s.mu.Lock()
	if e, ok := s.tasks[k]; ok && e.Value.(*seenTask).Task == task {
		s.order.Remove(e)
		delete(s.tasks, k)
	}
	s.mu.Unlock()
	if s.st != nil {
		if err := s.st.Delete(ctx, seenPrefix+k); err != nil {
			s.log.Warn("a2a: forgetting the failed task a message started failed: sent again after a restart, it is answered with that task", "task", task, "error", err)
		}
	}
}
