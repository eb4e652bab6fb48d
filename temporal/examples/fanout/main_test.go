package main

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/temporal"
)

// The SDK's test environment hashes the test binary for a worker's
// default build id when the first activity is scheduled, inside the
// lead's coroutine: about 100 ms of CPU under the race detector, counted
// against the one second the SDK's deadlock detector allows a workflow
// task, and several times that in wall time on a loaded machine. A worker
// hashes it as it is made, before any workflow task; the test names it.
func init() { worker.SetBinaryChecksum("deputy-fanout-test") }

// The fan-out the workers serve, run in the SDK's in-memory test
// environment: the lead spawns the three researchers, each a child
// workflow, and writes its answer from theirs. Every figure printed is
// checked: the answer whole, the usage of the lead (two model calls) and of
// its children (one each) exactly, and the wall time against the
// researchers' 300 ms.
func TestFanout(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	temporal.Register(env, runtime())
	start := time.Now()
	env.ExecuteWorkflow(temporal.AgentWorkflowName, leadInput())
	var res temporal.RunOutput
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	report(&out, res, time.Since(start))
	wall := regexp.MustCompile(`wall ([0-9.]+m?s)\n$`)
	m := wall.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no wall time:\n%s", out.String())
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 300*time.Millisecond {
		t.Errorf("wall %s: want at least a researcher's 300 ms", m[1])
	}
	want := `Yes, in stages. What the team found:
- historian: the eastern line pays for itself within fifteen years.
- economist: the eastern line pays for itself within fifteen years.
- planner: the eastern line pays for itself within fifteen years.

usage: own 2 req, 349 in, 123 out, children 3 req, 105 in, 50 out, wall T
`
	got := wall.ReplaceAllString(out.String(), "wall T\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
