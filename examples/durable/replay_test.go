package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
	"github.com/google/go-cmp/cmp"
)

// go test replays testdata/turn-*.jsonl; go test -deputy.record='*'
// records them again from the example's scripted models.
var record = cassette.RecordFlag()

// scripted is the example's two scripted models as one provider, as a
// cassette records them.
func scripted(t *testing.T, ids string) provider.Provider {
	lm, err := newLead(ids)
	if err != nil {
		t.Fatal(err)
	}
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if agent.Name(ctx) == "lead" {
			return lm.Complete(ctx, req)
		}
		return workerModel.Complete(ctx, req)
	})
}

// The example's turn replayed from the recording of its own scripted run,
// across its restart, simulated in this process: the first run, on the
// cassette, is stopped once k workers have finished and its store closed
// as a dying process leaves it; the second opens the same file, answers
// those k from the journal and the others from the cassette, and prints
// the same figures, with no model. Its tree holds the other workers, each
// once. It does so whatever ids the recorded lead gave its calls, and
// wherever the first run stopped.
func TestReplaysItsRecording(t *testing.T) {
	for _, tt := range []struct {
		ids string
		k   int
	}{{"fresh", 8}, {"none", 8}, {"restart", 8}, {"fresh", 19}} {
		t.Run(fmt.Sprintf("%s ids, stopped after %d", tt.ids, tt.k), func(t *testing.T) {
			rec := *record
			if tt.k != 8 {
				rec = "" // the cassette recorded once, stopped after 8
			}
			p := cassette.Open(t, "testdata/turn-"+tt.ids+".jsonl", scripted(t, tt.ids), rec)
			db := filepath.Join(t.TempDir(), "deputy.db")
			st, err := open(db)
			if err != nil {
				t.Fatal(err)
			}
			ws := &workers{model: p, answerOnly: tt.k}
			stop, err := runUntil(st, p, ws, tt.k)
			if err != nil {
				t.Fatal(err)
			}
			stop()
			var out strings.Builder
			report(&out, ws, tt.k)
			finished := ws.answered()

			if st, err = open(db); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			tree := subagent.NewTree(nil)
			ws = &workers{model: p}
			if err := secondRun(&out, st, p, ws, tree); err != nil {
				t.Fatalf("second run: %v\n%s", err, out.String())
			}
			var rest []int
			for i := 1; i <= chapters; i++ {
				if !slices.Contains(finished, i) {
					rest = append(rest, i)
				}
			}
			n := chapters - tt.k
			want := strings.Join([]string{
				fmt.Sprintf("run 1: workers of chapters %v finished; the other %d were still waiting for their model", finished, n),
				"run 2: the same turn again, under the same journal",
				fmt.Sprintf("replayed from the journal (no model call): %d workers, chapters %v", tt.k, finished),
				fmt.Sprintf("ran: %d workers, chapters %v", n, rest),
				fmt.Sprintf("model calls in run 2: lead 1 (its plan came from the journal), workers %d", n),
				"usage of the whole turn: lead 2 requests, workers 20 requests, 9680 tokens",
				fmt.Sprintf("of which run 1 spent (counted from the journal, not paid again): %d requests, %d tokens", tt.k+1, 240+tt.k*430),
				fmt.Sprintf("paid in run 2: %d requests, %d tokens", n+1, 840+n*430),
				"answer: The report in 20 chapter summaries: revenue grew, costs fell.",
				"the turn ended and its journal was deleted: it holds 0 entries",
			}, "\n") + "\n"
			if diff := cmp.Diff(want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if len(finished) != tt.k {
				t.Errorf("the first run finished chapters %v, want %d", finished, tt.k)
			}
			if rec == "" && p.LiveCalls() != 0 {
				t.Errorf("the replay called the model %d times", p.LiveCalls())
			}

			// The second run's tree holds the workers it ran, each once; the
			// others' answers came from the journal, as did the lead's plan,
			// so no event names their calls again.
			tr := treetest.New(t, tree)
			tr.Nodes("summarize_chapter").Count(n).Each(treetest.State(subagent.StateSucceeded), treetest.MaxTokens(430))
			var answered []int
			for _, nd := range tree.Roots() {
				var answer string
				_ = json.Unmarshal(nd.Result, &answer)
				var ch int
				if _, err := fmt.Sscanf(answer, "Chapter %d:", &ch); err != nil {
					t.Errorf("a worker answered %q", answer)
				}
				answered = append(answered, ch)
			}
			slices.Sort(answered)
			if diff := cmp.Diff(rest, answered); diff != "" {
				t.Errorf("the chapters the second run's workers answered (-want +got):\n%s", diff)
			}
		})
	}
}
