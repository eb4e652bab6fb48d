package main

import (
	"context"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/approve-*.jsonl; go test -deputy.record='*'
// records them again from the example's scripted models.
var record = cassette.RecordFlag()

// scripted is the example's two scripted models as one provider, as a
// cassette records them: the janitor is the agent offered delete_logs.
func scripted(ids string) provider.Provider {
	ops, janitor := script(ids)
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		for _, t := range req.Tools {
			if t.Name == "delete_logs" {
				return janitor.Complete(ctx, req)
			}
		}
		return ops.Complete(ctx, req)
	})
}

// The example replayed from the recording of its own scripted run asks
// the person once, resumes from the journal, runs the approved deletion
// once and prints the same figures, with no model; its tree holds one
// janitor that succeeded. It does so whatever ids the recorded models gave
// their calls: fresh ones, none, or call_0 in every reply.
func TestReplaysItsRecording(t *testing.T) {
	for _, ids := range []string{"fresh", "none", "restart"} {
		t.Run(ids, func(t *testing.T) { replay(t, ids) })
	}
}

func replay(t *testing.T, ids string) {
	p := cassette.Open(t, "testdata/approve-"+ids+".jsonl", scripted(ids), *record)
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tree := subagent.NewTree(nil)
	var out strings.Builder
	if err := demo(context.Background(), strings.NewReader("y\n"), &out, st, p, p, tree); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := `deletes files for good: Allow delete_logs with {"dir":"/var/log/old"}? [y/N]
(deleting /var/log/old)
answer: Janitor says: Result: deleted the logs in /var/log/old
model calls: ops 2, janitor 2 (the answers before the question were replayed, not asked again)
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if n := strings.Count(out.String(), "(deleting "); n != 1 {
		t.Errorf("the approved deletion ran %d times, want once", n)
	}
	if *record == "" && p.LiveCalls() != 0 {
		t.Errorf("the replay called the model %d times", p.LiveCalls())
	}

	tr := treetest.New(t, tree)
	tr.Nodes("*").Count(1)
	tr.Nodes("janitor").WithArgs(`{"task":"free disk space on /var"}`).Count(1).
		Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("deleted the logs in /var/log/old"))
	const dump = `janitor succeeded {"task":"free disk space on /var"} → "Result: deleted the logs in /var/log/old" (0+0 tokens)
`
	if diff := cmp.Diff(dump, tr.Dump()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}
