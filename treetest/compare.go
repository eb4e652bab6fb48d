package treetest

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// Run is what one run of a tree produced: the top-level agent's Output and
// the tree of its sub-agents (subagent.Tree.Roots).
type Run struct {
	Output agent.Output
	Tree   []*subagent.Node
}

// Figures are how one node, or a whole run, ended and what it spent.
type Figures struct {
	// Outcome is the node's state and, for a report, its status
	// ("succeeded [partial]"); for a whole run, "answered".
	Outcome string
	// Model names the models that answered it.
	Model string
	// Answer is its answer (Answer), or its error.
	Answer string
	// Usage is what it spent, its sub-agents included.
	Usage provider.Usage
	// Cost is what that cost in US dollars, at the run's own prices
	// (agent.WithPrices): zero without prices.
	Cost float64
}

// RunRow is one node of two runs of a tree, side by side: Before or
// After is nil where that run had no such node.
type RunRow struct {
	// Path is the node's path (see Tree), "" for the whole run.
	Path          string
	Before, After *Figures
}

// Changed reports whether the node ended differently, answered
// differently or spent differently in the two runs.
func (r RunRow) Changed() bool {
	if r.Before == nil || r.After == nil {
		return true
	}
	return *r.Before != *r.After
}

// RunComparison sets two runs of one tree side by side, node by node: a
// recorded run and its fork onto another model (cassette.Fork), or any
// two runs. Its String is a table.
type RunComparison struct {
	// Rows are the whole run first, then the nodes in the order of their
	// calls: Before's, with After's nodes that Before lacks after their
	// siblings.
	Rows []RunRow
}

// CompareRuns sets before and after side by side, node by node, matching
// nodes by their path.
func CompareRuns(before, after Run) *RunComparison {
	c := &RunComparison{Rows: []RunRow{{Before: runFigures(before.Output), After: runFigures(after.Output)}}}
	b := FromRoots(nil, before.Tree)
	a := FromRoots(nil, after.Tree)
	afterBy := map[string]*node{}
	for _, n := range a.nodes {
		afterBy[n.path] = n
	}
	seen := map[string]bool{}
	var walk func(bs, as []*node)
	walk = func(bs, as []*node) {
		for _, n := range bs {
			seen[n.path] = true
			row := RunRow{Path: n.path, Before: nodeFigures(n.Node)}
			var kids []*node
			if m := afterBy[n.path]; m != nil {
				row.After = nodeFigures(m.Node)
				kids = m.kids
			}
			c.Rows = append(c.Rows, row)
			walk(n.kids, kids)
		}
		for _, m := range as {
			if !seen[m.path] {
				seen[m.path] = true
				c.Rows = append(c.Rows, RunRow{Path: m.path, After: nodeFigures(m.Node)})
				walk(nil, m.kids)
			}
		}
	}
	walk(topLevel(b), topLevel(a))
	return c
}

func topLevel(tr *Tree) []*node {
	var out []*node
	for _, n := range tr.nodes {
		if n.parent == nil {
			out = append(out, n)
		}
	}
	return out
}

func runFigures(out agent.Output) *Figures {
	return &Figures{Outcome: "answered", Answer: out.Answer, Usage: out.Usage.Add(out.ChildUsage), Cost: out.Cost}
}

func nodeFigures(n *subagent.Node) *Figures {
	f := &Figures{Outcome: string(n.State), Usage: n.TotalUsage()}
	if st := ReportStatus(n); st != "" {
		f.Outcome += " [" + st + "]"
	}
	f.Cost, _ = n.Cost(nil)
	var models []string
	for _, m := range n.Usage {
		if m.Model != "" && !slices.Contains(models, m.Model) {
			models = append(models, m.Model)
		}
	}
	if len(models) == 0 && n.Model != "" {
		models = []string{n.Model}
	}
	f.Model = strings.Join(models, ",")
	if n.State == subagent.StateSucceeded {
		f.Answer = Answer(n)
	} else {
		f.Answer = n.Error
	}
	return f
}

// String is the comparison as a table: a row a node, indented by depth,
// marked "*" when it changed, with each run's outcome, model, tokens
// (input+output) and cost.
func (c *RunComparison) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\tnode\tbefore\tmodel\ttokens\tcost\tafter\tmodel\ttokens\tcost")
	for _, r := range c.Rows {
		name := "(run)"
		if r.Path != "" {
			name = strings.Repeat("  ", strings.Count(r.Path, "/")) + r.Path[strings.LastIndexByte(r.Path, '/')+1:]
		}
		mark := ""
		if r.Changed() {
			mark = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", mark, name, cells(r.Before), cells(r.After))
	}
	w.Flush()
	return b.String()
}

func cells(f *Figures) string {
	if f == nil {
		return "-\t\t\t"
	}
	return fmt.Sprintf("%s\t%s\t%d+%d\t$%.6f", f.Outcome, f.Model, f.Usage.InputTokens, f.Usage.OutputTokens, f.Cost)
}
