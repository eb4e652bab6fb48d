package agent

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/deputy-go/deputy/event"
)

// Stream runs a with in and yields its events as they happen, sub-agents'
// included, each stamped with the time: a success ends with RUN_FINISHED
// (Result: the answer as JSON), a failure with a zero Event and the error.
// The run has a goroutine of its own, which has ended when the loop stops;
// a panic in it is raised again in the caller. Run skips the events' work.
func Stream(ctx context.Context, a Agent, in Input) iter.Seq2[event.Event, error] {
	return func(yield func(event.Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p := &pipe{ch: make(chan event.Event, 16), stopped: make(chan struct{})}
		var (
			runErr error
			panicV any
			ended  bool // the run's goroutine has ended
		)
		go func() {
			defer p.close()
			defer func() { panicV = recover() }()
			_, runErr = a.Run(event.WithSink(ctx, p), in)
		}()
		// stop cancels the run and waits for its goroutine to end.
		stop := func() {
			close(p.stopped)
			cancel()
			for range p.ch {
			}
			ended = true
		}
		// A panic in the loop's body still stops the run.
		defer func() {
			if !ended {
				stop()
			}
		}()
		for e := range p.ch {
			if !yield(e, nil) {
				stop()
				break
			}
		}
		ended = true // the channel is closed: the goroutine is done
		if panicV != nil {
			panic(panicV)
		}
		if runErr != nil && !p.isStopped() {
			yield(event.Event{}, runErr)
		}
	}
}

// pipe is the sink of a streamed run: it hands events to the consumer until
// the consumer stops, and drops what a goroutine the run left behind emits
// after the run has ended.
type pipe struct {
	mu      sync.RWMutex // held for reading while sending; for writing to close
	closed  bool
	ch      chan event.Event
	stopped chan struct{} // closed when the consumer stops reading
}

func (p *pipe) Emit(e event.Event) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return
	}
	if e.Timestamp == 0 {
		e.Timestamp = time.Now().UnixMilli()
	}
	select {
	case p.ch <- e:
	case <-p.stopped:
	}
}

func (p *pipe) isStopped() bool {
	select {
	case <-p.stopped:
		return true
	default:
		return false
	}
}

func (p *pipe) close() {
	p.mu.Lock()
	p.closed = true
	close(p.ch)
	p.mu.Unlock()
}
