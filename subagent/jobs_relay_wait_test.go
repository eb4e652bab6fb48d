package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// chattyModel is a lead that starts a background job ("start"), calls
// the tool "hold", and answers; the job streams n pieces of text, then
// answers with them, or, with hang, waits until it is cancelled. streamed
// counts the pieces.
type chattyModel struct {
	ids      int
	fresh    atomic.Int64
	n        int
	hang     bool
	streamed atomic.Int64
}

func (m *chattyModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	return m.Stream(ctx, req, nil)
}

func (m *chattyModel) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
		for range m.n {
			m.streamed.Add(1)
			if onDelta != nil {
				if err := onDelta(provider.Delta{Text: "x"}); err != nil {
					return provider.Response{}, err
				}
			}
		}
		if m.hang {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}
		return provider.Response{Message: provider.AssistantMessage(strings.Repeat("x", m.n)), Usage: u, Model: "m"}, nil
	}
	var cs []provider.ToolCall
	switch last := req.Messages[len(req.Messages)-1]; {
	case last.Role == provider.RoleUser && last.Content == "start":
		cs = []provider.ToolCall{{Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"dig","background":true}`)}}
	case last.Role == provider.RoleTool && last.Content != "held":
		cs = []provider.ToolCall{{Name: "hold", Arguments: json.RawMessage(`{}`)}}
	default:
		return provider.Response{Message: provider.AssistantMessage("ok"), Usage: u, Model: "m"}, nil
	}
	resumetest.NameCalls(m.ids, cs, &m.fresh)
	return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u, Model: "m"}, nil
}

// jobSink is a sink that calls act, once, on the goroutine passing it the
// first piece of text of the thread's job, with the job's id.
func jobSink(act func(id string)) event.Sink {
	var mu sync.Mutex
	jobOf := map[string]string{} // the job of each sub-agent run
	var once sync.Once
	return event.SinkFunc(func(e event.Event) {
		if e.Type == event.Custom && e.Name == subagent.JobStartedEvent {
			var v struct {
				ID    string `json:"job_id"`
				RunID string `json:"subagent_run_id"`
			}
			_ = json.Unmarshal(e.Value, &v)
			mu.Lock()
			jobOf[v.RunID] = v.ID
			mu.Unlock()
		}
		if e.Type != event.TextMessageContent || e.SubagentRunID == "" {
			return
		}
		mu.Lock()
		id := jobOf[e.SubagentRunID]
		mu.Unlock()
		if id != "" {
			once.Do(func() { act(id) })
		}
	})
}

// chattyLead returns a lead over m whose jobs belong to thread t1, its
// spawner and the thread's context. Its turn holds until hold is closed:
// the jobs' events reach its sink until then.
func chattyLead(t *testing.T, m *chattyModel, hold <-chan struct{}) (*agent.React, *subagent.Spawner, context.Context) {
	t.Helper()
	s, err := subagent.NewSpawner(m, nil, subagent.WithJobsAcrossTurns(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	holder := tool.Func{Def: tool.Definition{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-hold:
				return tool.Result{Content: "held"}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}}
	lead, err := agent.NewReact(m, agent.WithName("lead"), agent.WithTools(s, s.JobsTool(), holder))
	if err != nil {
		t.Fatal(err)
	}
	return lead, s, agent.WithThread(t.Context(), "t1")
}

// A sink cancels a thread's job from within Emit, as it takes the job's
// first piece of text: the job ends, cancelled, and the turn too.
func TestSinkCancelsAJobFromEmit(t *testing.T) {
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &chattyModel{ids: mode, n: 1, hang: true}
			acted := make(chan struct{})
			lead, s, tctx := chattyLead(t, m, acted)
			cancelled := make(chan subagent.JobResult, 1)
			sink := jobSink(func(id string) {
				defer close(acted)
				res, err := s.Jobs(tctx).Cancel(tctx, id)
				if err != nil {
					t.Error(err)
				}
				cancelled <- res
			})
			done := make(chan error, 1)
			go func() {
				_, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: "start"})
				done <- err
			}()
			select {
			case res := <-cancelled:
				if res.State != subagent.JobCancelled {
					t.Errorf("the job is %s, want %s", res.State, subagent.JobCancelled)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the sink's Cancel, from within Emit, did not return")
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the turn did not end")
			}
		})
	}
}

// A sink waits for a thread's job from within Emit, as it takes the job's
// first piece of text: the job goes on to its end, past the relay's
// bound when it says more than that, and the wait returns it.
func TestSinkWaitsForAJobFromEmit(t *testing.T) {
	for _, n := range []int{1, 3 * 4096} {
		for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprint("pieces=", n, "/ids=", mode), func(t *testing.T) {
				m := &chattyModel{ids: mode, n: n}
				acted := make(chan struct{})
				lead, s, tctx := chattyLead(t, m, acted)
				waited := make(chan []subagent.JobResult, 1)
				sink := jobSink(func(id string) {
					defer close(acted)
					res, err := s.Jobs(tctx).Wait(tctx, subagent.WaitFor{IDs: []string{id}, Timeout: 20 * time.Second})
					if err != nil {
						t.Error(err)
					}
					waited <- res
				})
				done := make(chan error, 1)
				go func() {
					_, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: "start"})
					done <- err
				}()
				select {
				case res := <-waited:
					if len(res) != 1 || res[0].State != subagent.JobDone || len(res[0].Result.Content) != n {
						t.Errorf("the wait returned %+v, want the job done with its %d pieces", res, n)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the sink's Wait, from within Emit, did not return")
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the turn did not end")
				}
			})
		}
	}
}

// A sink that does not return slows the thread's jobs down (their events
// wait for it past the relay's bound) and holds the turn's end, which
// must not pass it more; cancelling the turn ends it at once, the jobs
// then go on with no one listening, and the spawner closes. The goroutine
// taking the events to the sink ends when the sink returns.
func TestSinkThatNeverReturns(t *testing.T) {
	const n = 3 * 4096
	m := &chattyModel{ids: resumetest.IDsFresh, n: n}
	hold := make(chan struct{})
	lead, s, tctx := chattyLead(t, m, hold)
	stuck, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	sink := jobSink(func(string) {
		close(stuck)
		<-release
	})
	rctx, cancel := context.WithCancel(tctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := lead.Run(event.WithSink(rctx, sink), agent.Input{Text: "start"})
		done <- err
	}()
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("the sink was never given the job's text")
	}
	// The job stops streaming while the sink is held: its pieces queue up
	// to the relay's bound, then wait.
	last := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		now := m.streamed.Load()
		if now == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job streamed on to %d pieces while the sink was held", now)
		}
		last = now
	}
	if last >= n {
		t.Fatalf("the job streamed all its %d pieces while the sink was held on the first", n)
	}
	close(hold) // the turn ends: it waits for the events on their way to its sink
	select {
	case err := <-done:
		t.Fatalf("the turn ended (%v) while the sink still had the job's events to take", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn, cancelled, did not end while its sink was held")
	}
	res, err := s.Jobs(tctx).Wait(tctx, subagent.WaitFor{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].State != subagent.JobDone {
		t.Fatalf("after the turn: %+v, want the job done", res)
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the spawner did not close while the sink was held")
	}
}

// A thread's job, like a foreground child, is announced to the sink
// (SUBAGENT_STARTED) before the spawning call's result, its receipt.
func TestThreadJobStartedBeforeReceipt(t *testing.T) {
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &chattyModel{ids: mode, n: 1}
			go1 := make(chan struct{})
			close(go1)
			lead, s, tctx := chattyLead(t, m, go1)
			var mu sync.Mutex
			var events []event.Event
			sink := event.SinkFunc(func(e event.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			})
			if _, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: "start"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Jobs(tctx).Wait(tctx, subagent.WaitFor{Timeout: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			started, receipt := -1, -1
			for i, e := range events {
				if e.Type == event.SubagentStarted && started < 0 {
					started = i
				}
				if started >= 0 && e.Type == event.ToolCallResult && e.ToolCallID == events[started].ParentToolCallID {
					receipt = i
				}
			}
			if started < 0 || receipt < 0 {
				for i, e := range events {
					if e.Type == event.ToolCallResult {
						receipt = i
						break
					}
				}
				t.Fatalf("SUBAGENT_STARTED at %d, the spawning call's result at %d: want the one before the other", started, receipt)
			}
		})
	}
}
