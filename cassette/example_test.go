package cassette_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// A lead delegates to a critic; the run is recorded once through a live
// provider (here a scripted one), then replayed with no provider at all.
func Example() {
	build := func(p *cassette.Provider) *agent.React {
		critic, _ := subagent.FromReact("critic", "Reviews a draft.", p, nil)
		lead, _ := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic))
		return lead
	}
	live := fake.NewProvider(
		fake.Call("critic", `{"task":"review: deputy is fast"}`).For("lead"),
		fake.Text("Fast, and says how fast.").For("critic"),
		fake.Text("The critic agrees.").For("lead"),
	)
	path := filepath.Join(os.TempDir(), "example-cassette.jsonl")
	defer os.Remove(path)

	rec := cassette.Record(live)
	if _, err := build(rec).Run(context.Background(), agent.Input{Text: "Review my draft."}); err != nil {
		fmt.Println(err)
		return
	}
	c, _ := rec.Cassette()
	if err := c.Save(path); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range c.Entries() {
		fmt.Println(e.Position, e.Step)
	}

	c, err := cassette.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := build(cassette.Replay(c)).Run(context.Background(), agent.Input{Text: "Review my draft."})
	fmt.Println(out.Answer, err, live.Calls())
	// Output:
	// lead 0
	// lead 1
	// lead/critic@1.0 0
	// The critic agrees. <nil> 3
}
