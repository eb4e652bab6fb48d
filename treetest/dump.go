package treetest

import (
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/subagent"
)

// Dump returns the tree one node a line, indented by depth, children in
// the order of their calls: name (and "#k" among siblings of one name),
// state, report status, arguments, answer (clipped), the validator's
// retries when it had any, and tokens. It leaves
// out what changes from run to run (run and call ids, times), so that a
// golden file of it holds whatever order parallel children ran in.
func (tr *Tree) Dump() string {
	var b strings.Builder
	for _, n := range tr.nodes {
		depth := strings.Count(n.path, "/")
		b.WriteString(strings.Repeat("  ", depth) + line(n) + "\n")
	}
	return b.String()
}

// Dump is (*Tree).Dump of roots, for a golden file outside a test.
func Dump(roots []*subagent.Node) string {
	return (&Tree{roots: roots, byRun: map[string]*node{}}).build().Dump()
}

func (tr *Tree) build() *Tree {
	tr.add(nil, tr.roots)
	return tr
}

// line is one node's line, without its indent.
func line(n *node) string {
	seg := n.path[strings.LastIndexByte(n.path, '/')+1:]
	s := fmt.Sprintf("%s %s", seg, n.State)
	if st := ReportStatus(n.Node); st != "" {
		s += " [" + st + "]"
	}
	if len(n.Arguments) > 0 {
		s += " " + clip(string(n.Arguments), 80)
	}
	switch {
	case n.State == subagent.StateSucceeded:
		s += " → " + fmt.Sprintf("%q", clip(Answer(n.Node), 60))
	case n.Error != "":
		s += " ! " + fmt.Sprintf("%q", clip(n.Error, 60))
	}
	if n.Retries > 0 {
		s += fmt.Sprintf(" (retried %d)", n.Retries)
	}
	u := n.TotalUsage()
	return s + fmt.Sprintf(" (%d+%d tokens)", u.InputTokens, u.OutputTokens)
}
