package agui

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/deputy-go/deputy/event"
)

// stream is the event sink of one response: it writes each event as an SSE
// frame and flushes it. Writes are serialized, because the children of a
// fan-out emit from their own goroutines. Once the run's terminal event is
// written, or a write fails, it drops whatever comes after.
type stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     []byte
	hide    bool
	timeout time.Duration
	done    bool
	cancel  context.CancelFunc
	log     *slog.Logger
}

func newStream(w http.ResponseWriter, hide bool, timeout time.Duration, cancel context.CancelFunc, log *slog.Logger) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512), hide: hide, timeout: timeout, cancel: cancel, log: log}
}

// open sends the response's headers.
func (s *stream) open() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	s.w.WriteHeader(http.StatusOK)
	s.flush()
}

// Emit writes an event of the agent's run. The agent's own run-level events
// are not sent: the handler's RUN_STARTED and RUN_FINISHED, which carry the
// request's ids, stand for them.
func (s *stream) Emit(e event.Event) {
	if e.Type.RunLevel() {
		return
	}
	if s.hide && (e.Type == event.SubagentStarted || e.Type == event.SubagentFinished || e.Type == event.SubagentError) {
		return
	}
	s.write(e)
}

// write sends e as one frame, stamped with the time.
func (s *stream) write(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(e)
}

// writeLocked is write with s.mu held.
func (s *stream) writeLocked(e event.Event) {
	if s.done {
		return
	}
	if e.Timestamp == 0 {
		e.Timestamp = time.Now().UnixMilli()
	}
	b := append(s.buf[:0], "data: "...)
	b, err := e.AppendJSON(b)
	if err != nil {
		s.log.Error("agui: an event cannot be encoded; it is left out", "type", e.Type, "err", err)
		return
	}
	b = append(b, '\n', '\n')
	s.buf = b
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	if _, err := s.w.Write(b); err != nil {
		s.gone()
		return
	}
	s.flush()
}

func (s *stream) flush() {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.gone()
	}
}

// gone stops the stream and the run after a failed write: the client has
// disconnected or stopped reading.
func (s *stream) gone() {
	s.done = true
	s.cancel()
}

// finish writes the run's terminal event and stops the stream, under one
// hold of the lock: an event of a job that outlives the run, emitted from
// its own goroutine, cannot slip in after the terminal event.
func (s *stream) finish(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(e)
	s.done = true
}

func (s *stream) close() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}
