package subagent_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/subagent"
)

// A background job's child is journaled like a foreground one: the same
// turn run again collects the job's recorded answer without running it.
func TestBackgroundJobReplaysFromTheJournal(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	run := func() (agent.Output, *fake.Provider) {
		p := fake.NewProvider(
			spawns(`{"task":"dig deep","background":true}`).For("lead"),
			onJob("wait", "").For("lead"),
			fake.Text("done").For("lead"),
			fake.Text("dug").For(subagent.DefaultForkName).WithUsage(usage(10)),
		)
		reg, _ := setup(t, p, true, []subagent.SpawnOption{subagent.WithBackground()})
		j, err := st.Journal(ctx, "job-turn")
		if err != nil {
			t.Fatal(err)
		}
		out, err := lead(t, p, reg).Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		return out, p
	}
	first, _ := run()
	if first.ChildUsage.InputTokens != 10 {
		t.Fatalf("first run's child usage %+v, want the job's 10 tokens", first.ChildUsage)
	}
	second, p := run()
	// Not run again, and not paid again: counted, as spent before.
	if n := len(p.RequestsFor(subagent.DefaultForkName)); n != 0 || second.ChildUsage != first.ChildUsage || second.Earlier != first.TotalUsage() {
		t.Fatalf("the replayed job ran its child %d times, child usage %+v, %+v earlier; want none, the first run's %+v, all of it earlier", n, second.ChildUsage, second.Earlier, first.ChildUsage)
	}
	collected := false
	for _, m := range second.Messages {
		if m.Role == provider.RoleTool && strings.Contains(m.Content, "dug") {
			collected = true
		}
	}
	if !collected {
		t.Fatalf("the replayed job's answer never reached the lead: %v", second.Messages)
	}
}

// newStore opens a store on a fresh SQLite file, closed when t ends.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
