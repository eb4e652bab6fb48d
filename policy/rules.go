package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/provider"
)

// AnyDepth makes a tool list apply at every depth of the tree.
const AnyDepth = -1

// AllowTools returns a rule named name that allows, at depth (AnyDepth:
// everywhere), only the tools whose names match one of patterns, and
// denies every other tool call there. A pattern is a name, in which "*"
// stands for any run of characters ("search_*"). Two allow lists that
// cover the same depth both apply: a call must be on each.
func AllowTools(name string, depth int, patterns ...string) Rule {
	return &toolList{name: name, allow: true, depth: depth, patterns: slices.Clone(patterns), names: namesOf(patterns)}
}

// DenyTools returns a rule named name that denies, at depth (AnyDepth:
// everywhere), the calls of tools whose names match one of patterns (see
// AllowTools), and the hand-offs to sub-agents of those names, a roster
// member spawned through spawn_subagent included.
func DenyTools(name string, depth int, patterns ...string) Rule {
	return &toolList{name: name, depth: depth, patterns: slices.Clone(patterns), names: namesOf(patterns)}
}

type toolList struct {
	name     string
	allow    bool
	depth    int
	patterns []string
	names    []namePattern // patterns, ready to match
}

func (l *toolList) Name() string { return l.name }
func (l *toolList) points() uint8 {
	if l.allow {
		return onlyTools
	}
	return onlyTools | 1<<pointIndex(BeforeDelegation)
}

func (l *toolList) Decide(_ context.Context, c *Check) Decision {
	// A deny list decides on the hand-off to a sub-agent too, by its name:
	// a roster member is spawned by a call of spawn_subagent, not of its
	// name, and a call of its name was denied before it got this far.
	at := c.Point == BeforeTool || !l.allow && c.Point == BeforeDelegation
	if !at || (l.depth != AnyDepth && l.depth != c.Depth) {
		return Decision{}
	}
	listed := matchNames(l.names, c.Tool)
	switch {
	case l.allow && !listed:
		return Denied(c.Tool + " is not among the tools allowed here (" + strings.Join(l.patterns, ", ") + ")")
	case !l.allow && listed:
		return Denied(c.Tool + " is not allowed here")
	}
	return Decision{}
}

// covers reports whether every name l allows is allowed by o too.
func (l *toolList) coveredBy(o *toolList) bool {
	for _, p := range l.patterns {
		if !slices.Contains(o.patterns, p) && (strings.Contains(p, "*") || !matchAny(o.patterns, p)) {
			return false
		}
	}
	return true
}

// widens returns a *Widening when r, added after the rules have, would
// allow a tool one of have's allow lists leaves out at a depth both cover.
func widens(have []Rule, r Rule) error {
	l, ok := r.(*toolList)
	if !ok || !l.allow {
		return nil
	}
	for _, h := range have {
		o, ok := h.(*toolList)
		if !ok || !o.allow || (o.depth != AnyDepth && l.depth != AnyDepth && o.depth != l.depth) {
			continue
		}
		if !l.coveredBy(o) {
			return &Widening{Rule: l.name, Allows: slices.Clone(l.patterns), Inherited: o.name, InheritedAllows: slices.Clone(o.patterns)}
		}
	}
	return nil
}

// ErrWidens is what every *Widening matches with errors.Is.
var ErrWidens = errcode.New("policy_widens", "policy: a policy would widen the one it extends")

// Widening is the error of a policy that would allow what the policy it
// extends forbids: Narrow returns it when the policy is made, With when
// it is put on a context that carries the one it widens, and a run
// whose agent has a policy of its own (agent.WithPolicy) fails with it,
// before any model call, when that policy widens the one its run
// inherits.
type Widening struct {
	Rule, Inherited         string   // the rule that widens, and the inherited one it widens
	Allows, InheritedAllows []string // the names and patterns each allows
}

func (e *Widening) Error() string {
	return fmt.Sprintf("policy: rule %q would allow %v, wider than the inherited rule %q allows (%v): a policy can only narrow the one it extends: "+
		"make it with Narrow of the inherited policy, and allow no tool that %q leaves out", e.Rule, e.Allows, e.Inherited, e.InheritedAllows, e.Inherited)
}

// Unwrap returns ErrWidens.
func (e *Widening) Unwrap() error { return ErrWidens }

// narrows returns a *Widening when a rule of own, a *Policy, that p
// lacks would allow what one of p's forbids (run.Bound.Narrows).
func (p *Policy) narrows(own any) error {
	for _, r := range own.(*Policy).rules {
		if contains(p.rules, r) {
			continue
		}
		if err := widens(p.rules, r); err != nil {
			return err
		}
	}
	return nil
}

// namePattern is a pattern of tool names (see AllowTools) made ready to
// match when its rule is made: a pattern without a star is compared
// whole, and one whose only star ends it ("search_*") by its prefix,
// without match's loop. A delegation under five rules matched a tool's
// name against six patterns at each of its calls, all of them of these
// two kinds.
type namePattern struct {
	pattern string
	kind    uint8 // exactName, prefixName or anyName
}

const (
	exactName = iota
	prefixName
	anyName
)

// namesOf returns patterns ready to match.
func namesOf(patterns []string) []namePattern {
	out := make([]namePattern, len(patterns))
	for i, p := range patterns {
		out[i] = nameOf(p)
	}
	return out
}

// nameOf returns pattern ready to match.
func nameOf(pattern string) namePattern {
	switch star := strings.IndexByte(pattern, '*'); {
	case star < 0:
		return namePattern{pattern, exactName}
	case star == len(pattern)-1:
		return namePattern{pattern[:star], prefixName}
	}
	return namePattern{pattern, anyName}
}

// match reports whether name matches np (match).
func (np namePattern) match(name string) bool {
	switch np.kind {
	case exactName:
		return name == np.pattern
	case prefixName:
		return strings.HasPrefix(name, np.pattern)
	}
	return match(np.pattern, name)
}

// matchNames reports whether name matches one of names.
func matchNames(names []namePattern, name string) bool {
	for _, np := range names {
		if np.match(name) {
			return true
		}
	}
	return false
}

// matchAny reports whether name matches one of patterns.
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if match(p, name) {
			return true
		}
	}
	return false
}

// match reports whether name matches pattern, in which "*" stands for any
// run of characters and everything else for itself. It backtracks to the
// last star only, so its work is bounded by the product of the lengths,
// whatever name a model sends.
func match(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			mark++
			p, n = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// AskBefore returns a rule named name that has a person approve each call
// of a tool whose name matches one of patterns (see AllowTools), at any
// depth: the run stops with a tool.ApprovalReason interrupt, and a
// resumed run goes on with the answer, as for tool.RequireApproval.
func AskBefore(name string, patterns ...string) Rule {
	return &askBefore{name: name, names: namesOf(patterns)}
}

type askBefore struct {
	name  string
	names []namePattern // the patterns, ready to match
}

func (a *askBefore) Name() string  { return a.name }
func (a *askBefore) points() uint8 { return onlyTools }

func (a *askBefore) Decide(ctx context.Context, c *Check) Decision {
	if c.Point == BeforeTool && matchNames(a.names, c.Tool) {
		c.place(ctx)
		return Asked(fmt.Sprintf("Allow %s to call %s with %s?", c.Path, c.Tool, clip(string(c.Arguments), 512)))
	}
	return Decision{}
}

// Redacted is what Redact puts in place of a secret.
const Redacted = "[REDACTED]"

// Redact returns a rule named name that replaces, with Redacted, each of
// values (secrets the application knows, such as a key a user pasted)
// and each match of patterns, wherever it would leave the agent that
// holds it: in a tool call's arguments, in what a sub-agent is handed, in
// a result, and in the model requests of sub-agents (depth 1 and below;
// the top-level agent's own requests carry what it was given). So a
// secret given to the lead reaches no child, no child's model and no
// tool.
// Empty values are ignored. In arguments, which are JSON, a value is
// matched as it is and as JSON escapes it, and, in arguments that hold
// escapes, in each string once decoded (a secret spelled with \u escapes
// or "\/" is found); a pattern is matched against the JSON text and
// those strings, so it should not match quotes or backslashes.
//
// A run's model calls send its conversation again and again: what a
// call sends as an earlier call of the run sent it, found clean then, is
// not scanned again (the text is compared, so a message changed since,
// in place or not, is scanned anew).
func Redact(name string, values []string, patterns ...*regexp.Regexp) Rule {
	r := &redactor{name: name}
	for _, v := range values {
		if v == "" {
			continue
		}
		r.values = append(r.values, v)
		if b, err := json.Marshal(v); err == nil {
			if e := string(b[1 : len(b)-1]); e != v {
				r.escaped = append(r.escaped, e)
			}
		}
	}
	for _, v := range append(slices.Clip(r.values), r.escaped...) {
		r.needles = append(r.needles, []byte(v))
	}
	for _, p := range patterns {
		if p != nil {
			prefix, _ := p.LiteralPrefix()
			r.patterns = append(r.patterns, pattern{re: p, prefix: prefix, prefixBytes: []byte(prefix)})
		}
	}
	r.shortest = -1
	for _, v := range r.values { // the escaped values are longer
		r.shortest = shorter(r.shortest, len(v))
	}
	for _, p := range r.patterns {
		r.shortest = shorter(r.shortest, minMatch(p.re))
	}
	r.shortest = max(r.shortest, 0)
	return r
}

// shorter returns the smaller of n, or m when n is -1 (none yet).
func shorter(n, m int) int {
	if n < 0 || m < n {
		return m
	}
	return n
}

type redactor struct {
	name     string
	values   []string
	escaped  []string // values as JSON escapes them, where that differs
	needles  [][]byte // values and escaped, as bytes
	patterns []pattern
	// shortest is the length of the shortest text that can hold a secret
	// (a value or a match of a pattern, minMatch): a shorter text is not
	// scanned. Most texts a delegation passes on are short (a task, a
	// tool's arguments, "3"): in BenchmarkDelegationPolicyRatio, all but
	// one of the twelve a delegation checks.
	shortest int
}

// minMatch returns a length, in bytes, that no match of re is shorter
// than: a lower bound, counting one byte for each character a match must
// hold (a character of the pattern may match more bytes, never fewer: an
// invalid byte in the text matches the pattern's U+FFFD, and a character
// matched regardless of case another of a different length). A pattern
// that cannot be parsed again (none that compiled) gives 0: every text is
// scanned.
func minMatch(re *regexp.Regexp) int {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return 0
	}
	return minLen(tree)
}

// minLen returns the fewest characters a match of re holds, at most
// maxMinLen.
func minLen(re *syntax.Regexp) int {
	n := 0
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		n = 1
	case syntax.OpCapture, syntax.OpPlus:
		n = minLen(re.Sub[0])
	case syntax.OpRepeat:
		n = max(re.Min, 0) * minLen(re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			n += minLen(sub)
		}
	case syntax.OpAlternate:
		n = -1
		for _, sub := range re.Sub {
			n = shorter(n, minLen(sub))
		}
	}
	// Anything else (star, quest, the empty match, anchors, a pattern
	// that matches nothing) may match nothing at all: 0.
	return min(max(n, 0), maxMinLen)
}

// maxMinLen bounds what minLen counts, so that no sum or product of it
// overflows (a repeat is at most 1000 times).
const maxMinLen = 1 << 20

// pattern is a pattern of secrets and the text every match begins with
// ("" when none). A text without that prefix is not run through the
// regular expression: a search for the prefix costs a fifth of a match
// that fails, and most of what a redactor reads holds no secret (in
// BenchmarkDelegationPolicy, a dozen texts a delegation, about a tenth of
// the whole delegation's CPU).
type pattern struct {
	re          *regexp.Regexp
	prefix      string
	prefixBytes []byte
}

func (p pattern) in(s string) bool {
	return s != "" && (p.prefix == "" || strings.Contains(s, p.prefix)) && p.re.MatchString(s)
}

func (p pattern) inJSON(b []byte) bool {
	return len(b) > 0 && (p.prefix == "" || bytes.Contains(b, p.prefixBytes)) && p.re.Match(b)
}

func (r *redactor) Name() string { return r.name }

// text returns s with the secrets replaced, and whether any was.
func (r *redactor) text(s string) (string, bool) {
	if len(s) < r.shortest {
		return s, false
	}
	changed := false
	for _, v := range r.values {
		if strings.Contains(s, v) {
			s, changed = strings.ReplaceAll(s, v, Redacted), true
		}
	}
	for _, p := range r.patterns {
		if p.in(s) {
			s, changed = p.re.ReplaceAllLiteralString(s, Redacted), true
		}
	}
	return s, changed
}

// json returns the JSON text b with the secrets replaced, as they are and
// as JSON escapes them, and whether any was. It reads b without copying
// it when there is none.
func (r *redactor) json(b json.RawMessage) (json.RawMessage, bool) {
	if len(b) < r.shortest {
		return b, false
	}
	found := false
	for _, v := range r.needles {
		found = found || bytes.Contains(b, v)
	}
	for _, p := range r.patterns {
		found = found || p.inJSON(b)
	}
	if !found {
		if bytes.IndexByte(b, '\\') < 0 {
			return b, false
		}
		return r.decoded(b) // a secret spelled with escapes
	}
	s, _ := r.text(string(b))
	for _, v := range r.escaped {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	out := json.RawMessage(s)
	if strings.IndexByte(s, '\\') >= 0 {
		if d, ch := r.decoded(out); ch {
			out = d
		}
	}
	return out, true
}

// decoded returns the JSON text b, which holds escapes, with the secrets
// in its strings (keys too) replaced, as the strings read once decoded:
// JSON may spell a character of a secret as a \u escape, or "/" as "\/",
// and the tool reads the arguments decoded. It reports whether any was
// replaced; b that is not JSON is left as it is (no tool reads it).
func (r *redactor) decoded(b json.RawMessage) (json.RawMessage, bool) {
	if !json.Valid(b) {
		return b, false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers as they were written
	var v any
	if d.Decode(&v) != nil {
		return b, false
	}
	v, changed := r.value(v)
	if !changed {
		return b, false
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if e.Encode(v) != nil {
		return b, false
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), true
}

// value returns v, decoded JSON, with the secrets in its strings
// replaced, and whether any was.
func (r *redactor) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return r.text(x)
	case []any:
		changed := false
		for i := range x {
			var ch bool
			x[i], ch = r.value(x[i])
			changed = changed || ch
		}
		return x, changed
	case map[string]any:
		out := make(map[string]any, len(x))
		changed := false
		for k, e := range x {
			k2, kch := r.text(k)
			e2, ech := r.value(e)
			out[k2] = e2
			changed = changed || kch || ech
		}
		return out, changed
	}
	return v, false
}

// messages returns msgs with the secrets replaced, a new slice if any
// was (msgs is not written), and whether any was. A message m holds as
// found clean is not scanned; m (nil: none) keeps those found clean now.
func (r *redactor) messages(msgs []provider.Message, m *memo) ([]provider.Message, bool) {
	var out []provider.Message
	for i := range msgs {
		msg := &msgs[i]
		if m.clean(i, msg) {
			continue
		}
		c, changed := r.text(msg.Content)
		var calls []provider.ToolCall
		for j, tc := range msg.ToolCalls {
			if a, ch := r.json(tc.Arguments); ch {
				if calls == nil {
					calls = slices.Clone(msg.ToolCalls)
				}
				calls[j].Arguments = a
			}
		}
		if !changed && calls == nil {
			m.keep(i, msg)
			continue
		}
		m.forget(i)
		if out == nil {
			out = slices.Clone(msgs)
		}
		out[i].Content = c
		if calls != nil {
			out[i].ToolCalls = calls
		}
	}
	if out == nil {
		return msgs, false
	}
	return out, true
}

// memoFrom is the number of messages from which a request's check keeps
// a memo of what a redactor found clean in it: scanning a shorter
// conversation again costs less than the memo's allocations. A memo is
// made at the second model call decided on a Check, not the first: a
// Check made for one call would never read it.
const memoFrom = 8

// A memo is what a redactor found clean in the requests of one Check's
// model calls (a run's, in the agent loop, which decides them all on one
// Check), for the next: the system prompt, and each message by its index,
// its text and its tool calls' arguments. A message of the next request
// that is equal to the one kept at its index, text and arguments, is
// clean, and not scanned again; any other is scanned. Equal is equal
// bytes: a message replaced or changed (by compaction, by a rule, by
// anyone writing into its arguments) is not equal unless it is the same
// text, which was clean. The text is compared as a string, which Go never
// changes, and which costs nothing to compare when both share their bytes
// (a run's requests share its messages); arguments, bytes anyone could
// write into, are compared with a copy.
//
// A memo is its redactor's only (another's secrets are others): a Check
// holds one for each redactor of its policy, in a list.
type memo struct {
	rule     *redactor
	next     *memo
	system   string
	systemOK bool
	msgs     []cleanMessage
}

// cleanMessage is a message a redactor found clean: its text, and copies
// of its tool calls' arguments. ok is false for a message not found
// clean (a redactor rewrote it, or it was not scanned yet).
type cleanMessage struct {
	ok      bool
	content string
	args    []string
}

// memoOf returns r's memo in c, made when c's request is long enough to
// be worth one and c decided a model call before (memoFrom); nil when
// none is.
func (r *redactor) memoOf(c *Check) *memo {
	for m := c.memo; m != nil; m = m.next {
		if m.rule == r {
			return m
		}
	}
	if c.models < 2 || len(c.Request.Messages) < memoFrom {
		return nil
	}
	c.memo = &memo{rule: r, next: c.memo}
	return c.memo
}

// clean reports whether msg, at index i, is the message m holds as
// found clean there.
func (m *memo) clean(i int, msg *provider.Message) bool {
	if m == nil || i >= len(m.msgs) {
		return false
	}
	e := &m.msgs[i]
	if !e.ok || e.content != msg.Content || len(e.args) != len(msg.ToolCalls) {
		return false
	}
	for j := range msg.ToolCalls {
		if e.args[j] != string(msg.ToolCalls[j].Arguments) {
			return false
		}
	}
	return true
}

// keep keeps msg, found clean, at index i.
func (m *memo) keep(i int, msg *provider.Message) {
	if m == nil {
		return
	}
	if i >= len(m.msgs) {
		m.msgs = slices.Grow(m.msgs, i+1-len(m.msgs))[:i+1]
	}
	e := &m.msgs[i]
	e.ok, e.content = true, msg.Content
	e.args = slices.Grow(e.args[:0], len(msg.ToolCalls))
	for _, tc := range msg.ToolCalls {
		e.args = append(e.args, string(tc.Arguments)) // a copy
	}
}

// forget forgets what m holds at index i, which was not found clean.
func (m *memo) forget(i int) {
	if m != nil && i < len(m.msgs) {
		m.msgs[i] = cleanMessage{}
	}
}

func (r *redactor) Decide(_ context.Context, c *Check) Decision {
	changed := false
	switch c.Point {
	case BeforeTool:
		if a, ch := r.json(c.Arguments); ch {
			c.Arguments, changed = a, true
		}
	case BeforeDelegation:
		if t, ch := r.text(c.Task); ch {
			c.Task, changed = t, true
		}
		if msgs, ch := r.messages(c.Context, nil); ch {
			c.Context, changed = msgs, true
		}
	case AfterResult:
		if t, ch := r.text(c.Result); ch {
			c.Result, changed = t, true
		}
	case BeforeModel:
		if c.Depth == 0 || c.Request == nil {
			break // the top-level agent was given the secret
		}
		m := r.memoOf(c)
		if sys := c.Request.System; m == nil || !m.systemOK || m.system != sys {
			s, ch := r.text(sys)
			if ch {
				c.Request.System, changed = s, true
			}
			if m != nil {
				m.system, m.systemOK = sys, !ch
			}
		}
		if msgs, ch := r.messages(c.Request.Messages, m); ch {
			c.Request.Messages, changed = msgs, true
		}
	}
	if changed {
		return Rewrote("a secret was redacted")
	}
	return Decision{}
}

// PathUnder returns a rule named name that denies a call of a tool whose
// name matches pattern (see AllowTools) unless its argument field, a
// path, names a place under dir once cleaned: "../" cannot climb out, and
// a relative path is taken as relative to dir. A call whose field is
// missing or not a string is denied too. (The rule reads the path as
// written: a symbolic link under dir is the tool's to refuse.)
func PathUnder(name, pattern, field, dir string) Rule {
	return &pathUnder{name: name, tools: nameOf(pattern), field: field, root: filepath.Clean(dir)}
}

type pathUnder struct {
	name, field, root string
	tools             namePattern // the pattern, ready to match
}

func (u *pathUnder) Name() string  { return u.name }
func (u *pathUnder) points() uint8 { return onlyTools }

func (u *pathUnder) Decide(_ context.Context, c *Check) Decision {
	if c.Point != BeforeTool || !u.tools.match(c.Tool) {
		return Decision{}
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(c.Arguments, &args); err != nil {
		return Denied("its arguments are not a JSON object")
	}
	var p string
	if err := json.Unmarshal(args[u.field], &p); err != nil || p == "" {
		return Denied(fmt.Sprintf("its argument %q must be a path under %s", u.field, u.root))
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(u.root, p)
	}
	p = filepath.Clean(p)
	if rel, err := filepath.Rel(u.root, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return Denied(fmt.Sprintf("its argument %q, %s, is not under %s", u.field, clip(p, 200), u.root))
	}
	return Decision{}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
