package agui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/agui/internal/approvaltree"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// Two (thread, run) pairs whose joined text is the same have journals of
// their own, and a name stays a valid store key however long the ids.
func TestJournalNamesNeverCollide(t *testing.T) {
	long := strings.Repeat("t", 2*store.MaxKeyBytes)
	names := map[string]string{}
	hashed := agui.JournalName("", "t", long) // a run id that looks like the hashed name of another
	for _, p := range [][2]string{{"a/b", "c"}, {"a", "b/c"}, {"a/b/", "c"}, {long, "r"}, {long + "x", "r"}, {"t", long}, {"t", long + "x"},
		{"t", hashed[strings.Index(hashed, "sha256:"):]}} {
		n := agui.JournalName("", p[0], p[1])
		if len(n) > store.MaxKeyBytes {
			t.Errorf("thread %.10q run %.10q: a name of %d bytes", p[0], p[1], len(n))
		}
		if other, ok := names[n]; ok {
			t.Errorf("thread %.10q run %.10q and %s share the journal %q", p[0], p[1], other, n)
		}
		names[n] = p[0][:min(10, len(p[0]))] + "/" + p[1][:min(10, len(p[1]))]
	}
}

// entries is how many entries the journal of a thread's run holds.
func entries(t *testing.T, st *store.Store, thread, run string) int {
	t.Helper()
	j, err := st.Journal(context.Background(), agui.JournalName("", thread, run))
	if err != nil {
		t.Fatal(err)
	}
	return j.Len()
}

// A run that fails after its model answered and its tool ran keeps no
// journal: its runId is not used again, and nothing would read it.
func TestFailedRunLeavesNoJournal(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	steps := 0
	m := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		steps++
		if steps > 1 {
			return provider.Response{}, &provider.Error{StatusCode: 400, Message: "refused"}
		}
		return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "n1", Name: "note", Arguments: json.RawMessage(`{}`)})}, nil
	})
	note := tool.Func{Def: tool.Definition{Name: "note", Description: "Notes.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) { return tool.Result{Content: "noted"}, nil }}
	h := must(t)(agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(m, agent.WithName("assistant"), agent.WithTools(note))
	}, agui.WithThreads(st)))
	url := serve(t, h).URL
	evs := aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK)
	if last := evs[len(evs)-1]; last.Type != "RUN_ERROR" {
		t.Fatalf("the run ended with %s, want RUN_ERROR", last.Type)
	}
	if n := entries(t, st, "th", "run-1"); n != 0 {
		t.Fatalf("the failed run left %d journal entries", n)
	}
}

// DeleteThread forgets the journals of the thread's runs too.
func TestDeleteThreadForgetsItsJournals(t *testing.T) {
	st := sqliteStore(t, filepath.Join(t.TempDir(), "s.db"))
	var c approvaltree.Counts
	url := approvalServer(t, st, &c)
	aguiRun(t, url, runBody("th", "run-1", nil), http.StatusOK)
	if entries(t, st, "th", "run-1") == 0 {
		t.Fatal("the suspended run has no journal")
	}
	aguiRun(t, url, runBody("other", "run-1", nil), http.StatusOK)
	deleteThread(t, st, "th")
	if n := entries(t, st, "th", "run-1"); n != 0 {
		t.Fatalf("%d journal entries of the deleted thread are left", n)
	}
	if entries(t, st, "other", "run-1") == 0 {
		t.Fatal("deleting one thread forgot another's journal")
	}
}
