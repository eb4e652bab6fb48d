package temporal

import (
	"fmt"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	enumspb "go.temporal.io/api/enums/v1"
	sdktemporal "go.temporal.io/sdk/temporal"
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
	for range 2 {
		if !r.first("") {
			t.Error("the key of no activity is not new each time")
		}
	}
}

// The events an update's handler publishes are named by the update, not
// by their local activity's place: a refused task of the update runs
// again after what came in meanwhile, which may have put other local
// activities before it. Other events are named by their place, and any
// two publications that differ in what they publish differ.
func TestPublishKeyOfAnUpdatesEvents(t *testing.T) {
	started := []event.Event{{Type: event.Custom, Name: "deputy.job_started"}}
	ended := []event.Event{{Type: event.Custom, Name: "deputy.job_ended"}}
	byUpdate := JobEvents{Trace: &Trace{Tree: "tree"}, Events: started, Update: "u1"}
	other := JobEvents{Trace: &Trace{Tree: "tree"}, Events: started}
	for _, c := range []struct {
		what string
		a, b string
		same bool
	}{
		{"an update's events, run again at another place", publishKeyOf("r", "3", byUpdate), publishKeyOf("r", "5", byUpdate), true},
		{"an update's events in another run", publishKeyOf("r", "3", byUpdate), publishKeyOf("s", "3", byUpdate), false},
		{"other events at one place", publishKeyOf("r", "3", other), publishKeyOf("r", "3", other), true},
		{"other events at two places", publishKeyOf("r", "3", other), publishKeyOf("r", "5", other), false},
		{"two publications at one place", publishKeyOf("r", "3", other), publishKeyOf("r", "3", JobEvents{Trace: other.Trace, Events: ended}), false},
	} {
		if (c.a == c.b) != c.same {
			t.Errorf("%s: keys %q and %q, want the same: %v", c.what, c.a, c.b, c.same)
		}
	}
}

// A factory's agent whose attempts all timed out fails with what its
// journal says they spent (withUsage), and its code is still "timeout",
// as its SUBAGENT_ERROR says; before, the usage it carried made it
// "error".
func TestTimeoutCarryingUsageIsATimeout(t *testing.T) {
	err := sdktemporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	carried := withUsage(RunOutput{Usage: provider.Usage{Requests: 1, InputTokens: 10}}, err)
	if usageOf(carried).Requests != 1 {
		t.Fatalf("the error carries %+v, want the journal's request", usageOf(carried))
	}
	if got := codeOf(carried); got != "timeout" {
		t.Errorf("codeOf = %q, want timeout", got)
	}
}
