package cassette_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// otherModel is the model a fork continues on: the tree's model, but an
// analyst's summary says another model wrote it. It counts its calls by
// position.
type otherModel struct {
	inner *bigtree.Model
	mu    sync.Mutex
	calls map[string]int
}

func (m *otherModel) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.calls[cassette.Position(ctx)]++
	m.mu.Unlock()
	resp, err := m.inner.Complete(ctx, req)
	resp.Model = "other-model"
	if agent.Name(ctx) == "analyst" {
		resp.Message.Content = strings.Replace(resp.Message.Content, "looked at", "looked at by another model", 1)
	}
	return resp, err
}

func (m *otherModel) positions() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.calls)
}

func TestAForkReplaysUpToItsNodeAndGoesOnOnTheOtherModel(t *testing.T) {
	const node = "lead/researcher@1.2/analyst@1.7"
	for _, ids := range []struct {
		name string
		mode int
	}{{"fresh ids", bigtree.IDsFresh}, {"no ids", bigtree.IDsNone}, {"ids restart", bigtree.IDsRestart}} {
		t.Run(ids.name, func(t *testing.T) {
			c, recorded, _ := record(t, ids.mode)
			other := &otherModel{inner: &bigtree.Model{IDs: ids.mode}, calls: map[string]int{}}
			p, err := cassette.Fork(c, other, node)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := bigtree.New(p)
			if err != nil {
				t.Fatal(err)
			}
			tree := subagent.NewTree(nil)
			out, _, err := tr.Run(context.Background(), tree)
			if err != nil {
				t.Fatalf("the fork: %v", err)
			}
			if m := p.Misses(); len(m) > 0 {
				t.Fatalf("the fork missed: %v", m[0])
			}
			// The forked node, then what read its answer: its researcher's
			// next call and the lead's; nothing before it or beside it.
			want := map[string]int{node: 1, "lead/researcher@1.2": 1, "lead": 1}
			if got := other.positions(); !maps.Equal(got, want) {
				t.Errorf("the other model answered %v, want %v", got, want)
			}
			if p.LiveCalls() != 3 {
				t.Errorf("LiveCalls %d, want 3", p.LiveCalls())
			}
			if tr.Deploys.Load() != 1 || tr.Publishes.Load() != 1 {
				t.Errorf("tools ran %d, %d times; want once each", tr.Deploys.Load(), tr.Publishes.Load())
			}
			var forked, sibling *subagent.Node
			for _, n := range tree.Roots()[2].Children {
				switch string(n.Arguments) {
				case `{"task":"topic 2 part 7"}`:
					forked = n
				case `{"task":"topic 2 part 8"}`:
					sibling = n
				}
			}
			if forked == nil || forked.Model != "other-model" || !strings.Contains(string(forked.Result), "by another model") {
				t.Errorf("the forked node: %+v", forked)
			}
			if sibling == nil || sibling.Model != "tree-model" {
				t.Errorf("a sibling of the forked node was not replayed: %+v", sibling)
			}
			if r := string(tree.Roots()[2].Result); strings.Contains(recorded.dump, r) {
				t.Errorf("the forked node's researcher answered as recorded (%s): it did not read the forked answer", r)
			}

			// The forked run is a cassette of its own, replayed with no
			// model.
			fc, err := p.Cassette()
			if err != nil {
				t.Fatal(err)
			}
			if fc.Len() != c.Len() {
				t.Errorf("the forked cassette holds %d calls, the recorded one %d", fc.Len(), c.Len())
			}
			again := cassette.Replay(fc)
			got, err := runTree(t, again, nil)
			if err != nil || len(again.Misses()) > 0 {
				t.Fatalf("replaying the fork: %v %v", err, again.Misses())
			}
			if got.out.Answer != out.Answer || got.dump != dump(tree.Roots(), "") {
				t.Errorf("the replayed fork answered %q, the fork %q; trees:\n%s\n%s", got.out.Answer, out.Answer, got.dump, dump(tree.Roots(), ""))
			}
			if n := other.positions(); !maps.Equal(n, want) {
				t.Errorf("replaying the fork called the other model: %v", n)
			}
		})
	}
}

func TestAForkStillMissesWhatChangedBesideIt(t *testing.T) {
	c, _, _ := record(t, bigtree.IDsFresh)
	const node = "lead/researcher@1.2/analyst@1.7"
	const changed = "lead/researcher@1.2/analyst@1.3" // a sibling, in parallel
	other := &otherModel{inner: &bigtree.Model{IDs: bigtree.IDsFresh}, calls: map[string]int{}}
	p, err := cassette.Fork(c, other, node)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runTree(t, p, func(task string) string {
		if task == "topic 2 part 3" {
			return "You are a thorough analyst."
		}
		return ""
	})
	_ = err // the researcher reads the miss as a tool error and goes on on the other model
	if m := p.Misses(); len(m) != 1 || m[0].Position != changed {
		t.Fatalf("misses %v, want one at %s", m, changed)
	}
	if n := other.positions()[changed]; n != 0 {
		t.Errorf("the changed sibling beside the fork went to the other model (%d calls)", n)
	}
}

func TestASubAgentStartedByAForkedAnswerRunsOnTheOtherModel(t *testing.T) {
	build := func(p provider.Provider) *agent.React {
		checker, err := subagent.FromReact("checker", "Checks the facts.", p, nil)
		if err != nil {
			t.Fatal(err)
		}
		editor, err := subagent.FromReact("editor", "Edits the prose.", p, nil)
		if err != nil {
			t.Fatal(err)
		}
		lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(checker, editor))
		if err != nil {
			t.Fatal(err)
		}
		return lead
	}
	run := func(p provider.Provider) (*subagent.Tree, agent.Output) {
		tree := subagent.NewTree(nil)
		out, err := build(p).Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review the draft."})
		if err != nil {
			t.Fatal(err)
		}
		return tree, out
	}
	script := func(checked string) []fake.Reply {
		return []fake.Reply{
			fake.Call("checker", `{"task":"the numbers"}`).For("lead"),
			fake.Text(checked).For("checker"),
			fake.Call("editor", `{"task":"the prose"}`).For("lead"),
			fake.Text("The prose is clear.").For("editor"),
			fake.Text("The draft is ready.").For("lead"),
		}
	}
	rec := cassette.Record(fake.NewProvider(script("The numbers hold.")...))
	run(rec)
	c, err := rec.Cassette()
	if err != nil {
		t.Fatal(err)
	}

	// The lead calls the editor as before, with the same task: the call
	// the cassette holds is not what the fork leads to, and is made anew.
	other := fake.NewProvider(script("Two numbers are wrong.")[1:]...).Named("other", "other-model")
	p, err := cassette.Fork(c, other, "lead/checker@*")
	if err != nil {
		t.Fatal(err)
	}
	tree, _ := run(p)
	if got := other.Calls(); got != 4 {
		t.Errorf("the other model answered %d calls, want 4 (the checker, the lead twice, the editor)", got)
	}
	if other.Remaining() != 0 {
		t.Errorf("%d replies left", other.Remaining())
	}
	roots := tree.Roots()
	if len(roots) != 2 || roots[1].Model != "other-model" {
		t.Errorf("the editor the forked answer led to did not run on the other model: %+v", roots)
	}
}

func TestForkRefusesWhatItCannotRun(t *testing.T) {
	c, _, _ := record(t, bigtree.IDsFresh)
	other := &bigtree.Model{}
	for name, f := range map[string]func() error{
		"no cassette": func() error { _, err := cassette.Fork(nil, other, "lead"); return err },
		"no provider": func() error { _, err := cassette.Fork(c, nil, "lead"); return err },
		"bad pattern": func() error { _, err := cassette.Fork(c, other, "lead/[x"); return err },
		"no pattern":  func() error { _, err := cassette.Fork(c, other, ""); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: Fork succeeded", name)
		}
	}
}
