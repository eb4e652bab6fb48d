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

// A sink that sends to a job from within Emit does not deadlock when the
// goroutine passing it the event is one telling of a message to that
// job (its mailbox held): here the sink takes the job's deputy.job_message
// while a status asked meanwhile waits in the queue, and sends to the job
// when it takes that status, and again from within the message it sent.
func TestSinkSendsToAJobWhileItsMessageIsTold(t *testing.T) {
	for _, mode := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", mode), func(t *testing.T) {
			m := &gapModel{ids: mode, gate: make(chan struct{})}
			var (
				mu      sync.Mutex
				texts   []string
				errs    []error
				armed   atomic.Bool
				inFirst = make(chan string, 1) // the job's id, once the sink takes "first"
				release = make(chan struct{})
				third   = make(chan struct{}) // the sink has sent "third"
			)
			drive := func(s *subagent.Spawner) tool.Tool {
				return tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						jobs := s.Jobs(ctx)
						st, err := jobs.Start(ctx, subagent.Task{Task: "dig"})
						if err != nil {
							return tool.Result{}, err
						}
						if _, err := jobs.Send(ctx, st.ID, "first"); err != nil {
							return tool.Result{}, err
						}
						select { // the turn listens until the sink has acted
						case <-third:
						case <-time.After(10 * time.Second):
							return tool.Result{}, fmt.Errorf("the sink did not send the third message")
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
				var v struct {
					ID   string `json:"job_id"`
					Text string `json:"text"`
				}
				_ = json.Unmarshal(e.Value, &v)
				switch {
				case e.Name == subagent.JobMessageEvent:
					mu.Lock()
					texts = append(texts, v.Text)
					mu.Unlock()
					switch v.Text {
					case "first":
						inFirst <- v.ID
						<-release
					case "second":
						if _, err := s.Jobs(tctx).Send(tctx, v.ID, "third"); err != nil {
							fail(err)
						}
						close(third)
					}
				case e.Name == subagent.JobStatusEvent && armed.Swap(false):
					if _, err := s.Jobs(tctx).Send(tctx, v.ID, "second"); err != nil {
						fail(err)
					}
				}
			})
			done := make(chan error, 1)
			go func() {
				_, err := lead.Run(event.WithSink(tctx, sink), agent.Input{Text: "drive"})
				done <- err
			}()
			var id string
			select {
			case id = <-inFirst:
			case <-time.After(10 * time.Second):
				t.Fatal("the sink was never told of the first message")
			}
			asked := make(chan struct{})
			go func() {
				armed.Store(true)
				_, _ = s.Jobs(tctx).Status(id) // its event waits for "first" to be taken
				close(asked)
			}()
			select {
			case <-asked:
			case <-time.After(time.Second): // a relay that holds the caller while another event is passed on
			}
			close(release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("deadlocked: the sink sent to a job while a message to it was being told")
			}
			close(m.gate)
			if _, err := s.Jobs(tctx).Wait(tctx, subagent.WaitFor{Timeout: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, err := range errs {
				t.Error(err)
			}
			if want := []string{"first", "second", "third"}; fmt.Sprint(texts) != fmt.Sprint(want) {
				t.Errorf("the messages the sink was told of: %q, want %q", texts, want)
			}
		})
	}
}
