package cassette_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/subagent"
)

var (
	replays = flag.Int("replays", 3, "how many times the tree test replays its cassette at each GOMAXPROCS")
	large   = flag.Bool("large", false, "read cassettes as large as the bounds allow")
)

// run is what one run of the big tree produced.
type run struct {
	out   agent.Output
	dump  string
	asked int
	ran   [2]int64 // deploys, publishes
}

func runTree(t *testing.T, p *cassette.Provider, prompt func(string) string) (run, error) {
	t.Helper()
	tr, err := bigtree.New(p)
	if err != nil {
		t.Fatal(err)
	}
	tr.AnalystPrompt = prompt
	tree := subagent.NewTree(nil)
	out, asked, err := tr.Run(context.Background(), tree)
	return run{out: out, dump: dump(tree.Roots(), ""), asked: len(asked), ran: [2]int64{tr.Deploys.Load(), tr.Publishes.Load()}}, err
}

// dump writes nodes one a line, siblings in the order of their arguments
// (the tree's own order is the order they started in).
func dump(nodes []*subagent.Node, indent string) string {
	nodes = slices.Clone(nodes)
	slices.SortStableFunc(nodes, func(a, b *subagent.Node) int {
		return strings.Compare(a.Name+string(a.Arguments), b.Name+string(b.Arguments))
	})
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s%s %s %s %s %+v\n", indent, n.Name, n.Arguments, n.State, n.Result, n.TotalUsage())
		b.WriteString(dump(n.Children, indent+"  "))
	}
	return b.String()
}

func record(t *testing.T, ids int) (*cassette.Cassette, run, *bigtree.Model) {
	t.Helper()
	live := &bigtree.Model{IDs: ids}
	rec := cassette.Record(live)
	want, err := runTree(t, rec, nil)
	if err != nil {
		t.Fatalf("recording: %v", err)
	}
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	if int64(c.Len()) != live.Calls.Load() {
		t.Fatalf("the cassette holds %d calls, the model answered %d", c.Len(), live.Calls.Load())
	}
	return c, want, live
}

func TestTreeReplaysWithoutTheModel(t *testing.T) {
	for _, ids := range []struct {
		name string
		mode int
	}{{"fresh ids", bigtree.IDsFresh}, {"no ids", bigtree.IDsNone}, {"ids restart", bigtree.IDsRestart}} {
		t.Run(ids.name, func(t *testing.T) {
			// A replay holds no model at all (cassette.Replay takes
			// none): that it makes no call is by construction.
			c, want, _ := record(t, ids.mode)
			if got := strings.Count(want.dump, "\n"); got != bigtree.Nodes {
				t.Fatalf("the recorded tree has %d nodes, want %d:\n%s", got, bigtree.Nodes, want.dump)
			}
			if want.asked != 2 || want.ran != [2]int64{1, 1} {
				t.Fatalf("recorded run: %d approvals asked, tools ran %v; want 2 and [1 1]", want.asked, want.ran)
			}
			n := *replays
			if ids.mode != bigtree.IDsFresh {
				n = 1
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
			for _, procs := range []int{1, 2, 8} {
				runtime.GOMAXPROCS(procs)
				for i := range n {
					p := cassette.Replay(c)
					got, err := runTree(t, p, nil)
					if err != nil {
						t.Fatalf("GOMAXPROCS %d, replay %d: %v", procs, i, err)
					}
					if m := p.Misses(); len(m) > 0 {
						t.Fatalf("GOMAXPROCS %d, replay %d: %d misses, the first: %v", procs, i, len(m), m[0])
					}
					if got.dump != want.dump {
						t.Fatalf("GOMAXPROCS %d, replay %d: the tree differs:\n%s\nrecorded:\n%s", procs, i, got.dump, want.dump)
					}
					if got.out.Answer != want.out.Answer || got.out.Usage != want.out.Usage || got.out.ChildUsage != want.out.ChildUsage || got.out.Earlier != want.out.Earlier {
						t.Fatalf("GOMAXPROCS %d, replay %d: output %q %+v %+v, recorded %q %+v %+v", procs, i,
							got.out.Answer, got.out.Usage, got.out.ChildUsage, want.out.Answer, want.out.Usage, want.out.ChildUsage)
					}
					if got.asked != want.asked || got.ran != want.ran {
						t.Fatalf("GOMAXPROCS %d, replay %d: %d approvals asked, tools ran %v; recorded %d, %v", procs, i, got.asked, got.ran, want.asked, want.ran)
					}
				}
			}
		})
	}
}
