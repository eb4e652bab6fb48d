package subagent_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// WithMaxSpawns bounds the children of a turn, not of each run of it: a
// journaled turn that started its two children, asked a person and was
// resumed with the answer refuses a third spawn, as the turn run once
// does, though the resumed run replayed the two from the journal (before,
// the count began again at the resume, and the third child ran). With
// models that name their calls afresh, not at all, and from call_0.
func TestMaxSpawnsHoldsAcrossAResume(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			var deploys atomic.Int64
			deploy, err := tool.New("deploy", "Deploys.", func(ctx context.Context, in struct{}) (string, error) {
				deploys.Add(1)
				return "deployed", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			fork := subagent.DefaultForkName
			p := fake.NewProvider(
				modeCall(mode.id, 1, subagent.SpawnToolName, `{"task":"part one"}`).For("lead"),
				modeCall(mode.id, 2, subagent.SpawnToolName, `{"task":"part two"}`).For("lead"),
				modeCall(mode.id, 3, "deploy", `{}`).For("lead"),
				modeCall(mode.id, 4, subagent.SpawnToolName, `{"task":"part three"}`).For("lead"),
				fake.Text("done").For("lead").WithUsage(usage(1)),
				fake.Text("one done").For(fork).WithUsage(usage(1)),
				fake.Text("two done").For(fork).WithUsage(usage(1)),
				fake.Text("three done").For(fork).WithUsage(usage(1)),
			)
			reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(2)}, tool.RequireApproval(deploy, "", 0))
			a := lead(t, p, reg)
			run := func(ctx context.Context) (agent.Output, error) {
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "write it"})
			}
			_, err = run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run: %v, want the deploy's question", err)
			}
			rctx := approveOne(t, context.Background(), in)
			out, err := run(rctx)
			if err != nil || out.Answer != "done" {
				t.Fatalf("the resumed run: %q, %v", out.Answer, err)
			}
			results := toolResults(out.Messages)
			if len(results) != 4 {
				t.Fatalf("tool results %q: want four", results)
			}
			mustContain(t, results[3], subagent.ErrMaxSpawns.Error())
			if n := len(p.RequestsFor(fork)); n != 2 {
				t.Errorf("the children were asked %d times, want twice", n)
			}
		})
	}
}
