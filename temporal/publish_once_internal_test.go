package temporal

import (
	"fmt"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
	"go.temporal.io/sdk/testsuite"
)

// sinkFunc is an EventSink that calls itself.
type sinkFunc func(tree string, e event.Event)

func (f sinkFunc) Emit(tree string, e event.Event) { f(tree, e) }

// A worker publishes the events of a local activity that runs again at
// the same place of the same run (a workflow task the server refused,
// run again: the speculative task of a program's StartJob) once; other
// events at that place, as a task that went another way publishes, are
// published. Before, the job a program started was announced twice.
func TestPublishJobEventsOnceAtAPlace(t *testing.T) {
	var mu sync.Mutex
	var got []string
	a := &Activities{rt: &Runtime{Events: sinkFunc(func(_ string, e event.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e.Name)
	})}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.PublishJobEvents)
	publish := func(name string) {
		t.Helper()
		in := JobEvents{Trace: &Trace{Tree: "tree"}, Events: []event.Event{{Type: event.Custom, Name: name}}}
		if _, err := env.ExecuteLocalActivity(a.PublishJobEvents, in); err != nil {
			t.Fatal(err)
		}
	}
	publish("deputy.job_started") // the task
	publish("deputy.job_started") // the task run again
	publish("deputy.job_ended")   // the task run another way
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[deputy.job_started deputy.job_ended]" {
		t.Errorf("the worker published %v, want each once", got)
	}
}

// A worker keeps the last publishedKeys keys it published, and lets the
// oldest go.
func TestRecentKeysAreBounded(t *testing.T) {
	var r recentKeys
	if !r.first("k") || r.first("k") {
		t.Fatal("a key is new once")
	}
	for i := range publishedKeys {
		if !r.first(fmt.Sprint(i)) {
			t.Fatalf("key %d is not new", i)
		}
	}
	if len(r.set) != publishedKeys || !r.first("k") {
		t.Errorf("%d keys kept, and the oldest kept still: want %d, the oldest let go", len(r.set), publishedKeys)
	}
	if !r.first("") || !r.first("") {
		t.Error("the key of no activity is new each time")
	}
}
