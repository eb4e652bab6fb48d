package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A sink that acts on a thread's jobs from within Emit, as a relay
// reacting to their events does (it asks their status, lists them, sends
// them messages, starts a follow-up job when one ends, cancels it), does
// not deadlock: its actions take effect, and their events reach it too.
func TestSinkActsOnJobsFromEmit(t *testing.T) {
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &gapModel{ids: mode, gate: make(chan struct{})}
			close(m.gate)
			var (
				mu       sync.Mutex
				seen     = map[string]int{}
				followed atomic.Bool
				sent     atomic.Bool
				errs     []error
				follow   string                // the follow-up job's id
				acted    = make(chan struct{}) // the sink has seen its follow-up end
			)
			// The turn starts a job and waits until the sink has acted on
			// its end, so that the sink sees it.
			drive := func(s *subagent.Spawner) tool.Tool {
				return tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						jobs := s.Jobs(ctx)
						st, err := jobs.Start(ctx, subagent.Task{Task: "dig"})
						if err != nil {
							return tool.Result{}, err
						}
						if _, err := jobs.Wait(ctx, subagent.WaitFor{IDs: []string{st.ID}}); err != nil {
							return tool.Result{}, err
						}
						select {
						case <-acted:
						case <-time.After(10 * time.Second):
							return tool.Result{}, fmt.Errorf("the sink did not act on the job's end")
						}
						return tool.Result{Content: "driven"}, nil
					}}
			}
			lead, s, tctx := gapLead(t, m, nil, drive)
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			sink := event.SinkFunc(func(e event.Event) {
				if e.Type != event.Custom {
					return
				}
				mu.Lock()
				seen[e.Name]++
				mu.Unlock()
				var v struct {
					ID string `json:"job_id"`
				}
				_ = json.Unmarshal(e.Value, &v)
				jobs := s.Jobs(tctx)
				switch e.Name {
				case subagent.JobStartedEvent:
					_ = jobs.List()
					if _, err := jobs.Status(v.ID); err != nil {
						fail(err)
					}
					if !sent.Swap(true) {
						_, _ = jobs.Send(tctx, v.ID, "look again") // it may have answered already
					}
				case subagent.JobMessageEvent, subagent.JobDeliveredEvent:
					if _, err := jobs.Status(v.ID); err != nil {
						fail(err)
					}
				case subagent.JobEndedEvent:
					_ = jobs.List()
					if !followed.Swap(true) {
						st, err := jobs.Start(tctx, subagent.Task{Task: "follow up"})
						if err != nil {
							fail(err)
							return
						}
						mu.Lock()
						follow = st.ID
						mu.Unlock()
						if _, err := jobs.Cancel(tctx, st.ID); err != nil {
							fail(err)
						}
						return
					}
					mu.Lock()
					last := v.ID == follow
					mu.Unlock()
					if last {
						close(acted)
					}
				}
			})
			done := make(chan error, 1)
			go func() {
				_, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: "drive"})
				if err == nil {
					_, err = s.Jobs(tctx).Wait(tctx, subagent.WaitFor{Timeout: 10 * time.Second})
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("deadlocked: the turn did not end while its sink acted on its jobs from Emit")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, err := range errs {
				t.Error(err)
			}
			if !followed.Load() {
				t.Errorf("the sink never saw a job end: %v", seen)
			}
			if seen[subagent.JobStatusEvent] == 0 || seen[subagent.JobStartedEvent] != 2 || seen[subagent.JobEndedEvent] != 2 {
				t.Errorf("the events the sink saw: %v; want its own status asks, and both jobs' starts and ends among them", seen)
			}
		})
	}
}
