package bigtree

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/providertest"
	"github.com/deputy-go/deputy/subagent"
)

// WireReplies is the script of a vendor's wire-format test server for
// WireRoundTrip: the lead calls two critics at once, each answers, and the
// lead sums up.
func WireReplies() []providertest.Reply {
	return []providertest.Reply{
		{ToolCalls: []provider.ToolCall{
			{ID: "call_a", Name: "critic", Arguments: json.RawMessage(`{"task":"check the numbers"}`)},
			{ID: "call_b", Name: "critic", Arguments: json.RawMessage(`{"task":"check the prose"}`)},
		}, Usage: provider.Usage{InputTokens: 40, OutputTokens: 20}},
		{Text: "The numbers hold.", Usage: provider.Usage{InputTokens: 25, OutputTokens: 6}},
		{Text: "The prose is clear.", Usage: provider.Usage{InputTokens: 25, OutputTokens: 7}},
		{Text: "Both critics agree.", Usage: provider.Usage{InputTokens: 90, OutputTokens: 5}},
	}
}

// WireRoundTrip records a delegation through live, a real provider
// talking to its vendor's wire-format test server, calls stop (which
// closes the server), and replays the cassette, written and read back,
// with no provider: it fails unless the replay gives the same answer,
// usage, tree and provider name.
func WireRoundTrip(live provider.Provider, stop func()) error {
	run := func(p provider.Provider) (agent.Output, string, error) {
		critic, err := subagent.FromReact("critic", "Checks one aspect of a draft.", p, nil)
		if err != nil {
			return agent.Output{}, "", err
		}
		lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic))
		if err != nil {
			return agent.Output{}, "", err
		}
		tree := subagent.NewTree(nil)
		out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review the draft."})
		var lines []string
		for _, n := range tree.Roots() {
			lines = append(lines, fmt.Sprintf("%s %s %s %s %+v", n.Name, n.Arguments, n.State, n.Result, n.TotalUsage()))
		}
		slices.Sort(lines)
		return out, strings.Join(lines, "\n"), err
	}
	rec := cassette.Record(live)
	want, wantTree, err := run(rec)
	stop()
	if err != nil {
		return fmt.Errorf("recording: %w", err)
	}
	c, err := rec.Cassette()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		return err
	}
	if c, err = cassette.Read(&buf); err != nil {
		return err
	}
	if c.Len() != 4 {
		return fmt.Errorf("the cassette holds %d calls, want 4", c.Len())
	}
	p := cassette.Replay(c)
	got, gotTree, err := run(p)
	if err != nil {
		return fmt.Errorf("replaying: %w", err)
	}
	if got.Answer != want.Answer || got.Usage != want.Usage || got.ChildUsage != want.ChildUsage || gotTree != wantTree {
		return fmt.Errorf("the replay differs: %q %+v %+v\n%s\nrecorded: %q %+v %+v\n%s", got.Answer, got.Usage, got.ChildUsage, gotTree, want.Answer, want.Usage, want.ChildUsage, wantTree)
	}
	if want.Answer != "Both critics agree." || want.ChildUsage.Requests != 2 {
		return fmt.Errorf("the recorded run answered %q with %d child requests", want.Answer, want.ChildUsage.Requests)
	}
	n, ok := live.(provider.Namer)
	if !ok || p.Name() != n.Name() {
		return fmt.Errorf("the replay is named %q, the live provider %v", p.Name(), live)
	}
	return nil
}
