package cassette_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/bigtree"
)

func TestEveryCallIsKeyedByItsPlaceInTheTree(t *testing.T) {
	c, _, _ := record(t, bigtree.IDsFresh)
	steps := map[string]int{}
	for _, e := range c.Entries() {
		steps[e.Position]++
	}
	if steps["lead"] != 2 {
		t.Errorf("lead made %d calls, want 2", steps["lead"])
	}
	for r := range bigtree.Researchers {
		pos := "lead/researcher@1." + itoa(r)
		if steps[pos] != 2 {
			t.Errorf("%s made %d calls, want 2 (positions: %v)", pos, steps[pos], keys(steps))
		}
		for j := range bigtree.FanOut {
			want := 1
			if j%4 == 1 {
				want = 2 // asked again for its report
			}
			if got := steps[pos+"/analyst@1."+itoa(j)]; got != want {
				t.Errorf("%s/analyst@1.%d made %d calls, want %d", pos, j, got, want)
			}
		}
	}
	if len(steps) != 1+bigtree.Nodes {
		t.Errorf("%d positions, want %d: %v", len(steps), 1+bigtree.Nodes, keys(steps))
	}
}

// In each id mode (a model that names its calls afresh, one that sends
// no ids, one whose ids restart at call_0), a one-word change in one
// child's prompt fails that node alone, and re-recording it calls the
// model once and runs each approved tool once, as the recording did.
func TestAChangedPromptFailsOnlyItsNodeAndIsRerecordedAlone(t *testing.T) {
	for _, ids := range []struct {
		name string
		mode int
	}{{"fresh ids", bigtree.IDsFresh}, {"no ids", bigtree.IDsNone}, {"ids restart", bigtree.IDsRestart}} {
		t.Run(ids.name, func(t *testing.T) { changedPromptRerecorded(t, ids.mode) })
	}
}

func changedPromptRerecorded(t *testing.T, ids int) {
	c, want, _ := record(t, ids)
	const changed = "topic 2 part 7"
	const node = "lead/researcher@1.2/analyst@1.7"
	prompt := func(task string) string {
		if task == changed {
			return "You are a thorough analyst." // one word changed
		}
		return ""
	}
	p := cassette.Replay(c)
	_, err := runTree(t, p, prompt)
	if err == nil {
		t.Fatal("the replay with a changed prompt succeeded")
	}
	misses := p.Misses()
	if len(misses) != 1 || misses[0].Position != node {
		t.Fatalf("misses %v, want one at %s", misses, node)
	}
	var m *cassette.MissError
	if !errors.As(err, &m) || !m.Consequence || m.Cause == nil || m.Cause.Position != node {
		t.Fatalf("the run's error does not lead to the miss at %s: %v", node, err)
	}
	msg := err.Error()
	for _, s := range []string{node, `- system: "You are a careful analyst."`, `+ system: "You are a thorough analyst."`, "-deputy.record="} {
		if !strings.Contains(msg, s) {
			t.Errorf("the miss does not say %q:\n%s", s, msg)
		}
	}

	live := &bigtree.Model{IDs: ids}
	rp, err := cassette.Rerecord(c, live, node)
	if err != nil {
		t.Fatal(err)
	}
	rerun, err := runTree(t, rp, prompt)
	if err != nil {
		t.Fatalf("re-recording: %v", err)
	}
	if rerun.asked != want.asked || rerun.ran != want.ran {
		t.Errorf("re-recording: %d approvals asked, tools ran %v; recorded %d, %v", rerun.asked, rerun.ran, want.asked, want.ran)
	}
	if live.Calls.Load() != 1 {
		t.Fatalf("re-recording called the model %d times, want once (the changed node only)", live.Calls.Load())
	}
	c2, err := rp.Cassette()
	if err != nil {
		t.Fatal(err)
	}
	old, now := c.Entries(), c2.Entries()
	if len(old) != len(now) {
		t.Fatalf("the re-recorded cassette holds %d calls, the old one %d", len(now), len(old))
	}
	for i := range old {
		same := old[i].Hash == now[i].Hash && old[i].Position == now[i].Position
		if (now[i].Position == node) == same {
			t.Errorf("entry %d at %s: changed %v", i, now[i].Position, !same)
		}
	}
	p = cassette.Replay(c2)
	got, err := runTree(t, p, prompt)
	if err != nil || len(p.Misses()) > 0 {
		t.Fatalf("replaying the re-recorded cassette: %v", err)
	}
	if got.dump != want.dump {
		t.Errorf("the re-recorded tree differs:\n%s\nwant:\n%s", got.dump, want.dump)
	}
	if got.asked != want.asked || got.ran != want.ran {
		t.Errorf("replaying the re-recorded cassette: %d approvals asked, tools ran %v; recorded %d, %v", got.asked, got.ran, want.asked, want.ran)
	}
	var a, b bytes.Buffer
	if err := c.Write(&a); err != nil {
		t.Fatal(err)
	}
	if err := c2.Write(&b); err != nil {
		t.Fatal(err)
	}
	if d := lineDiff(a.String(), b.String()); d != 1 {
		t.Errorf("the files differ in %d lines, want 1", d)
	}
}

func lineDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	n := 0
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			n++
		}
	}
	return n + max(len(al), len(bl)) - min(len(al), len(bl))
}
