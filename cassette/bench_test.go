package cassette_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/benchcpu"
	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

func runBig(b *testing.B, p provider.Provider) {
	tr, err := bigtree.New(p)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := tr.Run(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
}

// The 51-node tree (two runs of its turn: up to the approvals, then
// resumed) on its scripted model, replayed from a cassette, and recorded.
// replay/scripted is the cost of replaying over running on a script;
// record/scripted the cost of recording.
func BenchmarkTree(b *testing.B) {
	live := &bigtree.Model{IDs: bigtree.IDsFresh}
	rec := cassette.Record(live)
	tr, _ := bigtree.New(rec)
	if _, _, err := tr.Run(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	c, err := rec.Cassette()
	if err != nil {
		b.Fatal(err)
	}
	var file bytes.Buffer
	if err := c.Write(&file); err != nil {
		b.Fatal(err)
	}
	b.Run("scripted", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Report(b)()
		for b.Loop() {
			runBig(b, &bigtree.Model{IDs: bigtree.IDsFresh})
		}
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Report(b)()
		for b.Loop() {
			runBig(b, cassette.Replay(c))
		}
		b.ReportMetric(float64(file.Len())/float64(c.Len()), "cassette-B/call")
	})
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Report(b)()
		for b.Loop() {
			runBig(b, cassette.Record(&bigtree.Model{IDs: bigtree.IDsFresh}))
		}
	})
}

// One delegation (a lead that calls one critic, on the scripted fake),
// plain and recorded: the cost of recording a call.
func BenchmarkDelegation(b *testing.B) {
	run := func(b *testing.B, wrap func(provider.Provider) provider.Provider) {
		b.ReportAllocs()
		defer benchcpu.Report(b)()
		for b.Loop() {
			live := fake.NewProvider(
				fake.Call("critic", `{"task":"review: deputy is fast"}`).For("lead"),
				fake.Text("Fast, and says how fast.").For("critic"),
				fake.Text("The critic agrees.").For("lead"),
			)
			p := wrap(live)
			critic, _ := subagent.FromReact("critic", "Reviews a draft.", p, nil)
			lead, _ := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic))
			if _, err := lead.Run(context.Background(), agent.Input{Text: "Review my draft."}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, func(p provider.Provider) provider.Provider { return p }) })
	b.Run("recorded", func(b *testing.B) {
		run(b, func(p provider.Provider) provider.Provider { return cassette.Record(p) })
	})
}
