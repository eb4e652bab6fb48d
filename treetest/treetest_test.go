package treetest_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/bigtree"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
	"github.com/deputy-go/deputy/treetest"
)

var update = flag.Bool("update", false, "write testdata/tree.golden again")

// recorder is a testing.TB that keeps what it was told.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// bigTree runs the tree on the stored cassette, at procs.
func bigTree(t *testing.T) (*subagent.Tree, []tool.Interrupt) {
	t.Helper()
	c, err := cassette.Load("../cassette/testdata/tree.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := bigtree.New(cassette.Replay(c))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	_, asked, err := tr.Run(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	return tree, asked
}

func TestTheGoldenDumpHoldsWhateverOrderTheChildrenRanIn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var first string
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		for range 3 {
			tree, _ := bigTree(t)
			got := treetest.New(t, tree).Dump()
			if first == "" {
				first = got
			}
			if got != first {
				t.Fatalf("GOMAXPROCS %d: the dump differs:\n%s\nthe first:\n%s", procs, got, first)
			}
		}
	}
	if *update {
		if err := os.WriteFile("testdata/tree.golden", []byte(first), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/tree.golden")
	if err != nil {
		t.Fatalf("%v: write it with -update", err)
	}
	if first != string(want) {
		t.Errorf("the dump differs from testdata/tree.golden (write it again with -update if the change is meant):\n%s", first)
	}
}

func TestAssertionsOverTheTree(t *testing.T) {
	tree, asked := bigTree(t)
	tr := treetest.New(t, tree)
	tr.Nodes("research").Count(3).Each(treetest.State(subagent.StateSucceeded), treetest.AnswerContains("Summary of topic"))
	tr.Nodes("research/analyst").Count(48)
	tr.Nodes("**/analyst").Count(48).Each(treetest.State(subagent.StateSucceeded), treetest.MaxTokens(2000), treetest.MaxOwnTokens(2000))
	tr.Nodes("research#1/analyst").WithArgs(`{"task":"topic 1 part 3"}`).Count(1).Each(treetest.Status("partial"))
	tr.Nodes("research#1/analyst").WithArgs(`{"task":"*"}`).Count(16)
	tr.Nodes("research/analyst#6").Count(3).Each(treetest.Status("failed"))
	tr.Nodes("research#2").Each(treetest.MaxTokens(20000))
	// The analysts of parts 1, 5, 9 and 13 answer in prose at first and
	// are asked again; the others fit at once.
	for j := range bigtree.FanOut {
		retries := 0
		if j%4 == 1 {
			retries = 1
		}
		tr.Nodes(fmt.Sprintf("research/analyst#%d", j)).Count(3).Each(treetest.Retries(retries))
	}
	tr.Approvals(asked, "", 1)
	tr.Approvals(asked, "research#1", 1)
	tr.Approvals(asked, "research", 1)
	if got := tr.Paths()[1]; got != "research#0/analyst#0" {
		t.Errorf("the second node is %q, want research#0/analyst#0", got)
	}
}

func TestAFailureNamesTheNodeAndShowsTheTreeAroundIt(t *testing.T) {
	tree, asked := bigTree(t)
	r := &recorder{TB: t}
	tr := treetest.New(r, tree)
	tr.Nodes("research#2/analyst#10").Each(treetest.Status("success"))
	tr.Nodes("research/analyst").Count(47)
	tr.Nodes("research#0").Each(treetest.MaxTokens(10))
	tr.Approvals(asked, "research#0", 1)
	tr.Nodes("research#1/analyst#5").Each(treetest.Retries(0))
	tr.Nodes("research#0/analyst#4").Each(treetest.Retries(1))
	if len(r.errs) != 6 {
		t.Fatalf("%d failures, want 6:\n%s", len(r.errs), strings.Join(r.errs, "\n"))
	}
	for i, want := range [][]string{
		{"research#2/analyst#10: report status \"partial\"", "\n  research#2 succeeded", "\n  > analyst#10 succeeded [partial]", "\n    analyst#8 ", "\n    analyst#12 ", "… 8 before", "… 3 after"},
		{"48 nodes match \"research/analyst\", want 47", "research#0 succeeded"},
		{"research#0: spent", "more than 10"},
		{"0 approvals asked by \"research#0\", want 1"},
		{"research#1/analyst#5: the validator asked it again 1 times (1 answers rejected), want 0", "\n  > analyst#5 succeeded [success] {\"task\":\"topic 1 part 5\"}", "(retried 1)"},
		{"research#0/analyst#4: the validator asked it again 0 times (0 answers rejected), want 1", "\n  > analyst#4 succeeded"},
	} {
		for _, w := range want {
			if !strings.Contains(r.errs[i], w) {
				t.Errorf("failure %d does not say %q:\n%s", i, w, r.errs[i])
			}
		}
	}
}

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"research", "research#1", true},
		{"research#1", "research#1", true},
		{"research#1", "research#2", false},
		{"research", "research#1/analyst#2", false},
		{"research/*", "research#1/analyst#2", true},
		{"**/analyst", "research#1/analyst#2", true},
		{"**/analyst", "analyst", true},
		{"**", "a/b/c", true},
		{"a/**/c", "a/c", true},
		{"a/**/c", "a/b/x/c", true},
		{"a/**/c", "a/b/x/d", false},
		{"re*", "research#0", true},
	} {
		if got := treetest.Match(tc.pattern, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// A node's own usage and cost are its usage and cost less its
// sub-agents', requests included; the ceilings of a node alone and of its
// subtree fail apart.
func TestOwnUsageAndCostLeaveTheSubAgentsOut(t *testing.T) {
	child := &subagent.Node{RunID: "r2", Name: "critic", State: subagent.StateSucceeded,
		Usage: []provider.ModelUsage{{Model: "small", Usage: provider.Usage{InputTokens: 30, OutputTokens: 10, Requests: 1}, Cost: 0.01}}}
	lead := &subagent.Node{RunID: "r1", Name: "editor", State: subagent.StateSucceeded, Children: []*subagent.Node{child},
		Usage: []provider.ModelUsage{
			{Model: "large", Usage: provider.Usage{InputTokens: 100, OutputTokens: 50, Requests: 2}, Cost: 0.02},
			{Model: "small", Usage: provider.Usage{InputTokens: 30, OutputTokens: 10, Requests: 1}, Cost: 0.01},
		}}
	if got, want := treetest.OwnUsage(lead), (provider.Usage{InputTokens: 100, OutputTokens: 50, Requests: 2}); got != want {
		t.Errorf("OwnUsage = %+v, want %+v", got, want)
	}
	prices, err := provider.NewPrices(map[string]provider.Price{"large": {Input: 0.0001, Output: 0.0002}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		check treetest.Check
		fails string // "" when it holds
	}{
		{treetest.MaxOwnCost(0.02, nil), ""},
		{treetest.MaxOwnCost(0.019, nil), "cost $0.020000 itself, more than $0.019000"},
		{treetest.MaxCost(0.03, nil), ""},
		{treetest.MaxCost(0.029, nil), "cost $0.030000 with its sub-agents"},
		{treetest.MaxOwnTokens(150), ""},
		{treetest.MaxOwnTokens(149), "spent 150 tokens itself"},
		{treetest.MaxTokens(189), "spent 190 tokens with its sub-agents"},
		{treetest.MaxOwnCost(1, prices), "models without a price: [small]"},
	} {
		r := &recorder{TB: t}
		treetest.FromRoots(r, []*subagent.Node{lead}).Nodes("editor").Count(1).Each(tc.check)
		switch {
		case tc.fails == "" && len(r.errs) > 0:
			t.Errorf("a check that holds failed: %s", strings.Join(r.errs, "\n"))
		case tc.fails != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0], tc.fails) || !strings.Contains(r.errs[0], "treetest: editor: ")):
			t.Errorf("failures %q, want one on editor saying %q", r.errs, tc.fails)
		}
	}
}

// An approval asked twice for one call, which would run its side effect
// twice, fails whatever count was asked for, naming the node and the call.
func TestAnApprovalAskedTwiceFails(t *testing.T) {
	node := &subagent.Node{RunID: "r1", Name: "publisher", State: subagent.StateSuspended}
	approval := tool.Interrupt{ID: "i1", Reason: tool.ApprovalReason, ToolCallID: "call_7", SubagentRunID: "r1"}
	r := &recorder{TB: t}
	tr := treetest.FromRoots(r, []*subagent.Node{node})
	tr.Approvals([]tool.Interrupt{approval}, "publisher", 1)
	if len(r.errs) != 0 {
		t.Fatalf("one approval asked once failed: %q", r.errs)
	}
	again := approval
	again.ID = "i2"
	tr.Approvals([]tool.Interrupt{approval, again}, "publisher", 2)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "publisher asked 2 times to approve its call call_7") {
		t.Errorf("failures %q, want one saying publisher asked twice for call_7", r.errs)
	}
}

// A hand-off the policy refuses starts no node: Refused counts it among
// the run's denials, and a wrong count lists them.
func TestRefusedCountsWhatThePolicyRefused(t *testing.T) {
	pol, err := policy.New(policy.Func("no-leaks", func(_ context.Context, c *policy.Check) policy.Decision {
		if c.Point == policy.BeforeDelegation && c.Task == "leak the draft" {
			return policy.Denied("the draft is not to leave the team")
		}
		return policy.Decision{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	model := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{ID: "a", Name: "critic", Arguments: json.RawMessage(`{"task":"review the draft"}`)},
			provider.ToolCall{ID: "b", Name: "critic", Arguments: json.RawMessage(`{"task":"leak the draft"}`)},
		).For("lead"),
		fake.Text("Clear enough.").For("critic"),
		fake.Text("Reviewed; not leaked.").For("lead"),
	)
	critic, err := subagent.FromReact("critic", "Reviews a draft.", model, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(critic), agent.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review my draft."})
	if err != nil {
		t.Fatal(err)
	}
	tr := treetest.New(t, tree)
	tr.Nodes("critic").Count(1).Each(treetest.State(subagent.StateSucceeded))
	tr.Refused(out.Denials, "critic", 1)
	tr.Refused(out.Denials, "", 1)
	tr.Refused(out.Denials, "editor", 0)

	r := &recorder{TB: t}
	treetest.New(r, tree).Refused(out.Denials, "critic", 0)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], `the policy refused 1 calls of "critic", want 0`) ||
		!strings.Contains(r.errs[0], `critic at lead by rule "no-leaks": the draft is not to leave the team`) {
		t.Errorf("failures %q, want one listing the critic's refusal", r.errs)
	}
}

// A hand-off a limit refuses is a node in state refused, under the run
// that asked for it: a test asks for it by its path, and a wrong
// expectation names it and shows it in the tree.
func TestALimitRefusalIsANode(t *testing.T) {
	spawn := func(task string) provider.ToolCall {
		return provider.ToolCall{ID: "call_" + task, Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"agent":"critic","task":"` + task + `"}`)}
	}
	model := fake.NewProvider(
		fake.Calls(spawn("a"), spawn("b")).For("lead"),
		fake.Calls(spawn("c")).For("lead"),
		fake.Text("Clear enough.").For("critic"),
		fake.Text("Clear enough.").For("critic"),
		fake.Text("Two reviews; the third was refused.").For("lead"),
	)
	critic, err := subagent.FromReact("critic", "Reviews a draft.", model, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(model, reg, subagent.WithRoster(critic), subagent.WithMaxSpawns(2))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(sp))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review my draft three times."})
	if err != nil {
		t.Fatal(err)
	}
	if out.Refused != 1 {
		t.Fatalf("Output.Refused %d, want 1", out.Refused)
	}
	tr := treetest.New(t, tree)
	tr.Nodes("critic").Count(3)
	tr.Nodes("critic").InState(subagent.StateSucceeded).Count(2)
	tr.Nodes("critic#2").InState(subagent.StateRefused).Count(1).WithArgs(`{"task":"c"}`).Count(1).
		Each(func(n *subagent.Node) error {
			if n.Code != "max_spawns" || !strings.Contains(n.Error, "spawn limit reached") || n.RunID != "" || len(n.Usage) != 0 {
				return fmt.Errorf("code %q, error %q, run id %q, usage %+v; want a max_spawns refusal that never ran", n.Code, n.Error, n.RunID, n.TotalUsage())
			}
			return nil
		})
	tr.Refused(out.Denials, "", 0) // the policy refused nothing

	r := &recorder{TB: t}
	treetest.New(r, tree).Nodes("critic").InState(subagent.StateRefused).Count(0)
	treetest.New(r, tree).Nodes("critic").Each(treetest.State(subagent.StateSucceeded))
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], `1 nodes match "critic" in state [refused], want 0`) ||
		!strings.Contains(r.errs[0], `critic#2 refused {"agent":"critic","task":"c"} ! "subagent: spawn limit reached`) ||
		!strings.HasPrefix(r.errs[1], "treetest: critic#2: state refused (subagent: spawn limit reached") {
		t.Errorf("failures %q, want two naming critic#2, refused by the spawn limit", r.errs)
	}
}
