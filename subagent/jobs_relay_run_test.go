package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// topModel is a lead that calls its sub-agent "mid" with the task
// "start", then answers.
type topModel struct{}

func (topModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	u := provider.Usage{InputTokens: 1, OutputTokens: 1, Requests: 1}
	if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: u, Model: "m"}, nil
	}
	c := provider.ToolCall{ID: "call_top", Name: "mid", Arguments: json.RawMessage(`{"task":"start"}`)}
	return provider.Response{Message: provider.AssistantMessage("", c), Usage: u, Model: "m"}, nil
}

// runJobsLead returns an agent whose run starts a background job of its
// own run (WithBackground) over m, holding until hold is closed, and the
// spawner, and where the run's context is given once it holds (Jobs of
// the run's jobs). nested puts that run under a lead of its own, as the
// sub-agent "mid": its jobs are then a child's.
func runJobsLead(t *testing.T, m *chattyModel, hold <-chan struct{}, nested bool) (agent.Agent, *subagent.Spawner, <-chan context.Context) {
	t.Helper()
	s, err := subagent.NewSpawner(m, nil, subagent.WithBackground(), subagent.WithMaxDepth(2))
	holding := make(chan context.Context, 1)
	if err != nil {
		t.Fatal(err)
	}
	holder := tool.Func{Def: tool.Definition{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case holding <- ctx:
			default:
			}
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
	if !nested {
		return lead, s, holding
	}
	mid, err := subagent.FromAgent("mid", "starts a job", lead)
	if err != nil {
		t.Fatal(err)
	}
	top, err := agent.NewReact(topModel{}, agent.WithName("top"), agent.WithTools(mid))
	if err != nil {
		t.Fatal(err)
	}
	return top, s, holding
}

// afterEnd wraps sink: it reports an event that reached it after the
// run's terminal event.
func afterEnd(t *testing.T, sink event.Sink) event.Sink {
	var mu sync.Mutex
	ended := false
	return event.SinkFunc(func(e event.Event) {
		mu.Lock()
		late := ended
		ended = ended || e.Type == event.RunFinished || e.Type == event.RunError
		mu.Unlock()
		if late {
			t.Errorf("%s %s reached the sink after the run's end", e.Type, e.Name)
		}
		sink.Emit(e)
	})
}

// A sink cancels, or waits for, a job of the run (not a thread's) from
// within Emit, as it takes the job's first piece of text, at the top and
// in a sub-agent: the job ends (cancelled, or done past the relay's bound
// when it says more than that), the call returns, the run ends, no event
// after it, and no goroutine is left. (The job's own goroutine passed it
// the event: Cancel and Wait waited for that goroutine for ever.)
func TestSinkActsOnARunsJobFromEmit(t *testing.T) {
	for _, nested := range []bool{false, true} {
		for _, act := range []string{"cancel", "wait", "wait-long"} {
			for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
				t.Run(fmt.Sprint("nested=", nested, "/", act, "/ids=", mode), func(t *testing.T) {
					defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
					m := &chattyModel{ids: mode, n: 1, hang: act == "cancel"}
					if act == "wait-long" {
						m.n = 3 * 4096
					}
					acted := make(chan struct{})
					a, s, holding := runJobsLead(t, m, acted, nested)
					got := make(chan []subagent.JobResult, 1)
					sink := jobSink(func(id string) {
						defer close(acted)
						jobs := s.Jobs(<-holding)
						var res []subagent.JobResult
						if act == "cancel" {
							r, err := jobs.Cancel(t.Context(), id)
							if err != nil {
								t.Error(err)
							}
							res = append(res, r)
						} else {
							var err error
							if res, err = jobs.Wait(t.Context(), subagent.WaitFor{IDs: []string{id}, Timeout: 20 * time.Second}); err != nil {
								t.Error(err)
							}
						}
						got <- res
					})
					sink = afterEnd(t, sink)
					done := make(chan error, 1)
					go func() {
						_, err := a.Run(event.WithSink(t.Context(), sink), agent.Input{Text: "start"})
						done <- err
					}()
					select {
					case res := <-got:
						want, n := subagent.JobDone, m.n
						if act == "cancel" {
							want, n = subagent.JobCancelled, len(res[0].Result.Content)
						}
						if len(res) != 1 || res[0].State != want || len(res[0].Result.Content) != n {
							t.Errorf("%s returned %+v, want the job %s", act, res, want)
						}
					case <-time.After(30 * time.Second):
						t.Fatalf("the sink's %s, from within Emit, did not return", act)
					}
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the run did not end")
					}
				})
			}
		}
	}
}
