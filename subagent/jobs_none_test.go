package subagent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// Spawner.Jobs outside a run, or of a spawner built without
// WithBackground, is nil: it lists no jobs, and each of its actions
// returns an error that says where jobs are, not a panic.
func TestNoJobsOutsideARunSaySo(t *testing.T) {
	p := fake.NewProvider()
	for _, background := range []bool{true, false} {
		var opts []subagent.SpawnOption
		if background {
			opts = append(opts, subagent.WithBackground())
		}
		_, s := setup(t, p, background, opts)
		js := s.Jobs(context.Background())
		if js != nil {
			t.Fatalf("background %v: jobs outside a run: %v, want nil", background, js)
		}
		if l := js.List(); l != nil {
			t.Errorf("background %v: List %v, want none", background, l)
		}
		ctx := t.Context()
		_, errStart := js.Start(ctx, subagent.Task{Task: "look"})
		_, errStatus := js.Status("job_1")
		_, errWait := js.Wait(ctx, subagent.WaitFor{})
		_, errSend := js.Send(ctx, "job_1", "hurry")
		_, errCancel := js.Cancel(ctx, "job_1")
		for i, err := range []error{errStart, errStatus, errWait, errSend, errCancel} {
			if err == nil || !strings.Contains(err.Error(), "inside a run") || !strings.Contains(err.Error(), "WithBackground") {
				t.Errorf("background %v: action %d: %v, want an error that says where jobs are", background, i, err)
			}
		}
	}
}
