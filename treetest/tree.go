package treetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Tree is what a run delegated, under test: the nodes of a subagent.Tree,
// each named by its path.
type Tree struct {
	t     testing.TB
	roots []*subagent.Node
	nodes []*node // depth first, in the order of the calls
	byRun map[string]*node
}

// node is a Node with its path and where it sits.
type node struct {
	*subagent.Node
	path   string
	parent *node
	kids   []*node
}

// New returns tree as it stands, for assertions on t. Read it once the
// run has returned.
func New(t testing.TB, tree *subagent.Tree) *Tree {
	return FromRoots(t, tree.Roots())
}

// FromRoots returns the tree of roots (subagent.Tree.Roots), for
// assertions on t.
func FromRoots(t testing.TB, roots []*subagent.Node) *Tree {
	tr := &Tree{t: t, roots: roots, byRun: map[string]*node{}}
	tr.add(nil, roots)
	return tr
}

func (tr *Tree) add(parent *node, nodes []*subagent.Node) []*node {
	var out []*node
	segs := segments(nodes)
	for i, n := range nodes {
		nn := &node{Node: n, path: segs[i], parent: parent}
		if parent != nil {
			nn.path = parent.path + "/" + segs[i]
		}
		tr.nodes = append(tr.nodes, nn)
		if n.RunID != "" { // a refused node has none
			tr.byRun[n.RunID] = nn
		}
		nn.kids = tr.add(nn, n.Children)
		out = append(out, nn)
	}
	return out
}

// segments names siblings: by name, and by "#" and their order among the
// siblings of that name when there are more than one ("analyst#3").
func segments(nodes []*subagent.Node) []string {
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Name]++
	}
	seen := map[string]int{}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
		if count[n.Name] > 1 {
			out[i] += "#" + strconv.Itoa(seen[n.Name])
		}
		seen[n.Name]++
	}
	return out
}

// Paths returns the path of every node, depth first, in the order of the
// calls.
func (tr *Tree) Paths() []string {
	out := make([]string, len(tr.nodes))
	for i, n := range tr.nodes {
		out[i] = n.path
	}
	return out
}

// Match reports whether a node's path matches pattern: both split at "/",
// each part of the pattern matching one part of the path as path.Match
// does, a part without "#" matching any of the siblings of that name
// ("analyst" matches "analyst#3"), and "**" matching any number of parts.
func Match(pattern, p string) bool {
	return matchParts(strings.Split(pattern, "/"), strings.Split(p, "/"))
}

func matchParts(pat, p []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for k := 0; k <= len(p); k++ {
				if matchParts(pat[1:], p[k:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 || !matchPart(pat[0], p[0]) {
			return false
		}
		pat, p = pat[1:], p[1:]
	}
	return len(p) == 0
}

func matchPart(pat, part string) bool {
	if !strings.Contains(pat, "#") {
		part, _, _ = strings.Cut(part, "#")
	}
	ok, _ := path.Match(pat, part)
	return ok
}

// Nodes returns the nodes whose paths match pattern (see Match), for
// assertions. A pattern that matches no node is not a failure: say how
// many you expect with Count.
func (tr *Tree) Nodes(pattern string) *Selection {
	tr.t.Helper()
	if _, err := path.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
		tr.t.Fatalf("treetest: pattern %q: %v", pattern, err)
	}
	s := &Selection{tr: tr, what: strconv.Quote(pattern)}
	for _, n := range tr.nodes {
		if Match(pattern, n.path) {
			s.nodes = append(s.nodes, n)
		}
	}
	return s
}

// Selection is the nodes an assertion is about.
type Selection struct {
	tr    *Tree
	what  string
	nodes []*node
}

// Len returns the number of nodes selected.
func (s *Selection) Len() int { return len(s.nodes) }

// Nodes returns the nodes selected.
func (s *Selection) Nodes() []*subagent.Node {
	out := make([]*subagent.Node, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.Node
	}
	return out
}

// Paths returns the paths of the nodes selected.
func (s *Selection) Paths() []string {
	out := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.path
	}
	return out
}

// WithArgs keeps the nodes called with arguments that match args, a JSON
// object: each of its fields must be in the call's arguments with an equal
// value, other fields of the call's are let be, and a field whose value is
// the string "*" matches any value. Call AnyArgs, or nothing, to ignore the
// arguments.
func (s *Selection) WithArgs(args string) *Selection {
	s.tr.t.Helper()
	var want map[string]any
	if err := json.Unmarshal([]byte(args), &want); err != nil {
		s.tr.t.Fatalf("treetest: WithArgs(%s): not a JSON object: %v", args, err)
	}
	out := &Selection{tr: s.tr, what: s.what + " with arguments " + args}
	for _, n := range s.nodes {
		var got map[string]any
		if json.Unmarshal(n.Arguments, &got) == nil && argsMatch(want, got) {
			out.nodes = append(out.nodes, n)
		}
	}
	return out
}

// InState keeps the nodes in one of states: InState(subagent.StateRefused)
// keeps the hand-offs a limit refused, which never ran.
func (s *Selection) InState(states ...subagent.State) *Selection {
	out := &Selection{tr: s.tr, what: fmt.Sprintf("%s in state %v", s.what, states)}
	for _, n := range s.nodes {
		if slices.Contains(states, n.State) {
			out.nodes = append(out.nodes, n)
		}
	}
	return out
}

// AnyArgs keeps every node selected: the arguments do not count.
func (s *Selection) AnyArgs() *Selection { return s }

func argsMatch(want, got map[string]any) bool {
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return false
		}
		if w == "*" {
			continue
		}
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		if !bytes.Equal(wb, gb) {
			return false
		}
	}
	return true
}

// Count asserts that exactly n nodes are selected.
func (s *Selection) Count(n int) *Selection {
	s.tr.t.Helper()
	if len(s.nodes) != n {
		s.tr.t.Errorf("treetest: %d nodes match %s, want %d; the tree:\n%s", len(s.nodes), s.what, n, clipLines(s.tr.Dump(), 60))
	}
	return s
}

// A Check is an assertion on one node: nil when it holds, else what is
// wrong. Write your own as a func.
type Check func(n *subagent.Node) error

// Each asserts every check on every node selected; a failure names the
// node by its path and shows the tree around it.
func (s *Selection) Each(checks ...Check) *Selection {
	s.tr.t.Helper()
	for _, n := range s.nodes {
		for _, c := range checks {
			if err := c(n.Node); err != nil {
				s.tr.t.Errorf("treetest: %s: %v\n%s", n.path, err, s.tr.around(n))
			}
		}
	}
	return s
}

// State checks that a node ended in one of states.
func State(states ...subagent.State) Check {
	return func(n *subagent.Node) error {
		for _, st := range states {
			if n.State == st {
				return nil
			}
		}
		if n.Error != "" {
			return fmt.Errorf("state %s (%s), want %v", n.State, clip(n.Error, 200), states)
		}
		return fmt.Errorf("state %s, want %v", n.State, states)
	}
}

// Status checks the status of a node's report (subagent.ResultSchema:
// success, partial or failed): one of statuses.
func Status(statuses ...string) Check {
	return func(n *subagent.Node) error {
		got := ReportStatus(n)
		for _, st := range statuses {
			if got == st {
				return nil
			}
		}
		if got == "" {
			return fmt.Errorf("no report status in its result %s, want one of %v", clip(string(n.Result), 120), statuses)
		}
		return fmt.Errorf("report status %q, want one of %v", got, statuses)
	}
}

// ReportStatus returns the status of the report a node answered with
// (subagent.ResultSchema), or "" when its result is none.
func ReportStatus(n *subagent.Node) string {
	var r struct {
		Status string `json:"status"`
	}
	if json.Unmarshal([]byte(Answer(n)), &r) != nil {
		return ""
	}
	return r.Status
}

// Answer returns the text a node answered its parent with ("" when it
// did not succeed).
func Answer(n *subagent.Node) string {
	var s string
	if json.Unmarshal(n.Result, &s) == nil {
		return s
	}
	return string(n.Result)
}

// MaxTokens checks that a node and its sub-agents spent at most n tokens.
func MaxTokens(n int64) Check {
	return func(nd *subagent.Node) error {
		if got := nd.TotalUsage().Tokens(); got > n {
			return fmt.Errorf("spent %d tokens with its sub-agents, more than %d", got, n)
		}
		return nil
	}
}

// MaxOwnTokens checks that a node's own model calls, its sub-agents'
// left out, spent at most n tokens.
func MaxOwnTokens(n int64) Check {
	return func(nd *subagent.Node) error {
		if got := OwnUsage(nd).Tokens(); got > n {
			return fmt.Errorf("spent %d tokens itself, more than %d", got, n)
		}
		return nil
	}
}

// OwnUsage returns what a node's own model calls spent: its usage less
// its children's, its requests included.
func OwnUsage(n *subagent.Node) provider.Usage {
	u := n.TotalUsage()
	for _, c := range n.Children {
		cu := c.TotalUsage()
		u = provider.Usage{InputTokens: u.InputTokens - cu.InputTokens, OutputTokens: u.OutputTokens - cu.OutputTokens,
			CacheReadTokens: u.CacheReadTokens - cu.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens - cu.CacheWriteTokens,
			Requests: u.Requests - cu.Requests}
	}
	return u
}

// MaxOwnCost checks that a node's own model calls, its sub-agents' left
// out, cost at most dollars, at prices (nil: the prices the run had), with
// every model priced.
func MaxOwnCost(dollars float64, prices *provider.Prices) Check {
	return func(n *subagent.Node) error {
		got, err := ownCost(n, prices)
		if err != nil {
			return err
		}
		if got > dollars {
			return fmt.Errorf("cost $%.6f itself, more than $%.6f", got, dollars)
		}
		return nil
	}
}

// ownCost is a node's cost less its children's.
func ownCost(n *subagent.Node, prices *provider.Prices) (float64, error) {
	got, unpriced := n.Cost(prices) // its sub-agents' models included
	for _, c := range n.Children {
		cc, _ := c.Cost(prices)
		got -= cc
	}
	if len(unpriced) > 0 {
		return 0, fmt.Errorf("models without a price: %v", unpriced)
	}
	return max(got, 0), nil // the sum of the children's may round above the whole
}

// MaxCost checks that a node and its sub-agents cost at most dollars, at
// prices (nil: the prices the run had, which its events carried), with
// every model priced.
func MaxCost(dollars float64, prices *provider.Prices) Check {
	return func(n *subagent.Node) error {
		got, unpriced := n.Cost(prices)
		if len(unpriced) > 0 {
			return fmt.Errorf("models without a price: %v", unpriced)
		}
		if got > dollars {
			return fmt.Errorf("cost $%.6f with its sub-agents, more than $%.6f", got, dollars)
		}
		return nil
	}
}

// Retries checks that the validator rejected a node's answer and asked it
// again exactly n times (subagent.Node.Retries): 0 for a child whose
// first answer fit its schema. A child asked again answers its parent
// with what its second try said, whether that fit or not (Status tells).
func Retries(n int) Check {
	return func(nd *subagent.Node) error {
		if nd.Retries != n {
			return fmt.Errorf("the validator asked it again %d times (%d answers rejected), want %d", nd.Retries, nd.Rejected, n)
		}
		return nil
	}
}

// AnswerContains checks that a node answered with text holding s.
func AnswerContains(s string) Check {
	return func(n *subagent.Node) error {
		if !strings.Contains(Answer(n), s) {
			return fmt.Errorf("answer %s does not contain %q", clip(Answer(n), 200), s)
		}
		return nil
	}
}

// Approvals asserts that the nodes matching pattern asked, among the
// interrupts asked (the *tool.Interrupted of a run's first part), exactly
// n approvals (tool.RequireApproval) in all; the empty pattern is the
// top-level run. An approval asked twice for one call, which would run a
// side effect twice, is a failure whatever n.
func (tr *Tree) Approvals(asked []tool.Interrupt, pattern string, n int) {
	tr.t.Helper()
	got := 0
	calls := map[string]int{}
	for _, it := range asked {
		if it.Reason != tool.ApprovalReason {
			continue
		}
		where := ""
		if nd := tr.byRun[it.SubagentRunID]; nd != nil {
			where = nd.path
		} else if it.SubagentRunID != "" {
			where = "?" + it.SubagentRunID
		}
		if pattern == "" && where == "" || pattern != "" && where != "" && Match(pattern, where) {
			got++
			calls[where+"\x1f"+it.ToolCallID]++
		}
	}
	for k, c := range calls {
		if c > 1 {
			where, call, _ := strings.Cut(k, "\x1f")
			tr.t.Errorf("treetest: %s asked %d times to approve its call %s", or(where, "the top-level run"), c, call)
		}
	}
	if got != n {
		tr.t.Errorf("treetest: %d approvals asked by %s, want %d", got, or(strconv.Quote(pattern), "the top-level run"), n)
	}
}

// Refused asserts that the run's policy refused exactly n calls of the
// tool or sub-agent named name, before the call or at the hand-off to the
// child, among denials (agent.Output.Denials); the empty name counts
// every refusal. A hand-off the policy refused starts no child, so the
// tree has no node for it: this is where it is counted (one a limit
// refused is a node: see Selection.InState). A failure lists the refusals.
func (tr *Tree) Refused(denials []*policy.Denial, name string, n int) {
	tr.t.Helper()
	got := 0
	var all []string
	for _, d := range denials {
		if d.Point != policy.BeforeTool && d.Point != policy.BeforeDelegation {
			continue
		}
		all = append(all, fmt.Sprintf("%s at %s by rule %q: %s", d.Tool, or(d.Path, "the top-level run"), d.Rule, clip(d.Reason, 120)))
		if name == "" || d.Tool == name {
			got++
		}
	}
	if got != n {
		what := "calls of " + strconv.Quote(name)
		if name == "" {
			what = "calls"
		}
		tr.t.Errorf("treetest: the policy refused %d %s, want %d; its refusals: %s", got, what, n, or(strings.Join(all, "; "), "none"))
	}
}

func or(s, alt string) string {
	if s == "" || s == `""` {
		return alt
	}
	return s
}

// around shows the node's parent, the node (marked) among a few of its
// siblings, and its children.
func (tr *Tree) around(n *node) string {
	var b strings.Builder
	indent := "  "
	sibs := tr.rootNodes()
	if n.parent != nil {
		b.WriteString(indent + line(n.parent) + "\n")
		indent += "  "
		sibs = n.parent.kids
	}
	at := 0
	for i, s := range sibs {
		if s == n {
			at = i
		}
	}
	lo, hi := max(at-2, 0), min(at+3, len(sibs))
	if lo > 0 {
		fmt.Fprintf(&b, "%s… %d before\n", indent, lo)
	}
	for _, s := range sibs[lo:hi] {
		mark := indent
		if s == n {
			mark = indent[:len(indent)-2] + "> "
		}
		b.WriteString(mark + line(s) + "\n")
		if s == n {
			for k, c := range s.kids {
				if k == 5 {
					fmt.Fprintf(&b, "%s  … %d more\n", indent, len(s.kids)-k)
					break
				}
				b.WriteString(indent + "  " + line(c) + "\n")
			}
		}
	}
	if hi < len(sibs) {
		fmt.Fprintf(&b, "%s… %d after\n", indent, len(sibs)-hi)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (tr *Tree) rootNodes() []*node {
	var out []*node
	for _, n := range tr.nodes {
		if n.parent == nil {
			out = append(out, n)
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func clipLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("… %d lines more\n", len(lines)-n)
}
