package temporal

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/api/enums/v1"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
)

// teeSink publishes to a hub and keeps every event a worker publishes, of
// every tree, in the order published.
type teeSink struct {
	hub *Hub
	raw *recorder
}

func (s teeSink) Emit(tree string, e event.Event) {
	s.raw.Emit(e)
	s.hub.Emit(tree, e)
}

func (r *recorder) snapshot() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// A run cancelled on a real server during its last model call ends that
// step once, and its stream ends with its RUN_FINISHED or RUN_ERROR: the
// run waits for the call. A reply that comes back after the cancel (the
// call "replies", as one already on its way does) is the run's answer,
// and its model activity ends the step with it; a call that ends
// cancelled (it "stops") ends the run cancelled, and the workflow ends
// the step. Either way the run reports what the model billed. (The run
// ended at once, ending the step, and a reply that came back after ended
// it again, after the run's end, and went uncounted.)
func TestCancelDuringLastModelCallEndsItsStepOnce(t *testing.T) {
	for _, stops := range []bool{false, true} {
		name := "the call replies"
		if stops {
			name = "the call stops"
		}
		t.Run(name, func(t *testing.T) {
			hub := NewHub()
			var raw recorder
			entered, release := make(chan struct{}), make(chan struct{})
			p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
				rs := resultsOf(req)
				if len(rs) == 0 {
					return provider.AssistantMessage("", provider.ToolCall{ID: "a", Name: "add", Arguments: json.RawMessage(`{"x":1,"y":2}`)}), nil
				}
				close(entered) // the last call, made once
				if stops {
					<-ctx.Done()
					return provider.Message{}, ctx.Err()
				}
				<-release
				return provider.AssistantMessage("sum: " + rs[0]), nil
			}}
			ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: addTool(t), Events: teeSink{hub, &raw}})
			a := &Agent{Client: c, TaskQueue: queue, Spec: Spec{Name: "lead", Provider: "m", Tools: []string{"add"}}, Events: hub}
			var rec eventcheck.Recorder
			type result struct {
				out agent.Output
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := a.Run(event.WithSink(ctx, &rec), agent.Input{Text: "add 1 and 2"})
				done <- result{out, err}
			}()
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("the last model call was never made")
			}
			id := rec.Events()[0].RunID
			if err := c.CancelWorkflow(ctx, id, ""); err != nil {
				t.Fatal(err)
			}
			if !stops {
				// The reply comes back once the cancel has reached the
				// run: its model call is asked to stop, or it has ended.
				for {
					d, err := describeRun(ctx, c, id)
					if err != nil {
						t.Fatal(err)
					}
					if d.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING ||
						len(d.GetPendingActivities()) == 1 && d.GetPendingActivities()[0].GetState() == enums.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				close(release)
			}
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("Run did not return")
			}
			last := id + "/step-2"
			if !stops {
				// Until the model activity has published the reply: its
				// text, and after it the step's end.
				for published := false; !published; {
					evs := raw.snapshot()
					i := slices.IndexFunc(evs, func(e event.Event) bool { return e.Type == event.TextMessageEnd && e.MessageID == last })
					published = i >= 0 && slices.ContainsFunc(evs[i:], func(e event.Event) bool { return e.Type == event.StepFinished && e.StepName == last })
					if !published {
						select {
						case <-ctx.Done():
							t.Fatal("the reply was never published")
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
				if r.err != nil || r.out.Answer != "sum: 3" {
					t.Errorf("Run returned %q, %v; want the reply that came back, %q", r.out.Answer, r.err, "sum: 3")
				}
			} else if r.err == nil {
				t.Errorf("Run returned %q, want the run cancelled", r.out.Answer)
			}
			_, billed := p.total()
			if got := r.out.TotalUsage(); got != billed {
				t.Errorf("Run reported %+v, the model billed %+v", got, billed)
			}
			steps := func(evs []event.Event) (started, finished map[string]int) {
				started, finished = map[string]int{}, map[string]int{}
				for _, e := range evs {
					switch e.Type {
					case event.StepStarted:
						started[e.StepName]++
					case event.StepFinished:
						finished[e.StepName]++
					}
				}
				return started, finished
			}
			want := map[string]int{id + "/step-1": 1, last: 1}
			for what, evs := range map[string][]event.Event{"the workers published": raw.snapshot(), "Run's stream has": rec.Events()} {
				started, finished := steps(evs)
				if d := cmp.Diff(want, started); d != "" {
					t.Errorf("%s these steps started (-want +got):\n%s", what, d)
				}
				if d := cmp.Diff(want, finished); d != "" {
					t.Errorf("%s these steps finished (-want +got): each once\n%s", what, d)
				}
			}
			// Nothing after RUN_FINISHED or RUN_ERROR, and a stream a UI
			// can render.
			for _, p := range eventcheck.Check(rec.Events(), eventcheck.Options{}) {
				t.Error(p)
			}
		})
	}
}
