package agentfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Bounds on what a file may make the loader do; see the package doc.
const (
	// maxAliases bounds the aliases (*name) of one file.
	maxAliases = 16
	// maxNodes bounds the YAML nodes the loader visits in one file,
	// aliases followed: what an alias bomb would multiply.
	maxNodes = 10000
	// maxNesting bounds how deep a file's YAML nests.
	maxNesting = 32
	// maxListItems bounds a list such as tools.
	maxListItems = 256
	// maxTextBytes bounds a name, a model, a tool entry.
	maxTextBytes = 256
	// maxDescriptionBytes bounds a description, which every request of
	// the parent carries.
	maxDescriptionBytes = 4096
)

// entry is a text of the file and the line it is on.
type entry struct {
	s    string
	line int
}

// hookSpec is one hook command of a file.
type hookSpec struct {
	event   string
	matcher *regexp.Regexp // nil: every tool
	command string
	line    int
}

// outputSpec is the result contract a file names.
type outputSpec struct {
	kind   string // "", "report", "type", "schema", "file"
	name   string // the type's name or the file's path
	schema json.RawMessage
	line   int
}

// spec is one file as read, before it is resolved against the program.
type spec struct {
	file        string
	src         []byte
	name        entry
	description entry
	prompt      entry
	tools       []entry
	toolsSet    bool
	toolsLine   int
	disallowed  []entry
	model       entry
	maxTurns    int
	background  bool
	color       string
	mcp         []entry
	hooks       []hookSpec
	output      outputSpec
	tokenLimit  int64
	costLimit   float64
	timeout     time.Duration
	maxDepth    int
	depthLine   int
}

// Keys of a definition, with what the loader does with each.
const (
	keyDeputy      = iota // read and used
	keyUnsupported        // Claude Code's, not implemented: reported
)

var knownKeys = map[string]int{
	"name": keyDeputy, "description": keyDeputy, "tools": keyDeputy, "disallowedTools": keyDeputy,
	"model": keyDeputy, "maxTurns": keyDeputy, "background": keyDeputy, "color": keyDeputy,
	"mcpServers": keyDeputy, "hooks": keyDeputy,
	"prompt": keyDeputy, "output": keyDeputy, "tokenLimit": keyDeputy, "costLimit": keyDeputy,
	"timeout": keyDeputy, "maxDepth": keyDeputy,
	"permissionMode": keyUnsupported, "skills": keyUnsupported, "memory": keyUnsupported,
	"effort": keyUnsupported, "isolation": keyUnsupported, "initialPrompt": keyUnsupported,
}

// unsupportedWhy says, for each Claude Code key deputy does not implement,
// what deputy has instead.
var unsupportedWhy = map[string]string{
	"permissionMode": "deputy has no permission modes (a tool that needs a person's approval is wrapped by the program with tool.RequireApproval)",
	"skills":         "deputy does not preload skills (put what the sub-agent must know in its prompt)",
	"memory":         "deputy keeps no memory directory for a sub-agent (a resident expert with subagent.WithStore is how one remembers)",
	"effort":         "deputy has no effort setting",
	"isolation":      "deputy does not run a sub-agent in a git worktree",
	"initialPrompt":  "only a Claude Code session's main agent reads it; a deputy sub-agent starts with the task it is given",
}

var colors = []string{"red", "blue", "green", "yellow", "purple", "orange", "pink", "cyan", "magenta", "white"}

// parse reads one file into a spec; its problems go to ps.
func (l *Loader) parse(file string, src []byte, ps *problems) *spec {
	if i := bytes.IndexByte(src, 0); i >= 0 {
		ps.add(lineAt(src, i), "", "the file holds a NUL byte: it is not a text file; save it as UTF-8 text")
		return nil
	}
	if !utf8.Valid(src) {
		i := firstInvalid(src)
		ps.add(lineAt(src, i), "", fmt.Sprintf("the file is not UTF-8 (byte 0x%02x at offset %d): save it as UTF-8", src[i], i))
		return nil
	}
	s := &spec{file: file, src: src}
	text := bytes.TrimPrefix(src, []byte("\ufeff"))
	text = bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n"))
	var front []byte
	md := !strings.HasSuffix(file, ".yaml") && !strings.HasSuffix(file, ".yml")
	if md {
		var body []byte
		var bodyLine int
		var ok bool
		front, body, bodyLine, ok = splitFront(text)
		if !ok {
			ps.add(1, "", "no front matter: a Markdown definition starts with a line \"---\", then YAML (name, description, …), then \"---\", then the system prompt")
			return nil
		}
		ps.off = 1
		prompt := strings.TrimSpace(string(body))
		s.prompt = entry{prompt, bodyLine}
	} else {
		front = text
	}
	root, ok := parseYAML(front, ps)
	if !ok {
		return nil
	}
	d := &decoder{l: l, ps: ps, budget: maxNodes}
	if !d.bounded(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		ps.add(root.Line, "", "the definition must be a YAML mapping of keys (name: …, description: …)")
		return nil
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], d.deref(root.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			ps.add(k.Line, "", "a key must be a plain name such as description")
			continue
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			ps.add(k.Line, key, fmt.Sprintf("the key is given twice (first on line %d): keep one", first+ps.off))
			continue
		}
		seen[key] = k.Line
		kind, known := knownKeys[key]
		switch {
		case !known:
			msg := "unknown key: deputy reads " + keyList()
			if near := nearest(key); near != "" {
				msg = fmt.Sprintf("unknown key: did you mean %q? deputy reads %s", near, keyList())
			}
			ps.add(k.Line, key, msg)
			continue
		case kind == keyUnsupported:
			l.unsupported(ps, k.Line, key, unsupportedWhy[key])
			continue
		case v == nil:
			continue // an alias past the bound, reported
		}
		d.key(s, key, k.Line, v, md)
	}
	if _, ok := seen["name"]; !ok {
		ps.add(root.Line, "name", "missing: give the sub-agent a name (letters, digits, '-' and '_'), as its tool is called")
	}
	if _, ok := seen["description"]; !ok {
		ps.add(root.Line, "description", "missing: say when the sub-agent should be used; the delegating model reads it to choose")
	}
	if md {
		if s.prompt.s == "" {
			ps.add(s.prompt.line-ps.off, "", "the body is empty: below the front matter, write the system prompt (who the sub-agent is and how it works)")
		}
	} else if _, ok := seen["prompt"]; !ok {
		ps.add(root.Line, "prompt", "missing: a YAML definition gives its system prompt under prompt (a Markdown one, in its body)")
	}
	return s
}

// unsupported reports a Claude Code key deputy does not implement, as an
// error or, under WithUnsupported(Warn), a warning.
func (l *Loader) unsupported(ps *problems, line int, key, why string) {
	if l.warnUnsupported {
		ps.warn(line, key, "ignored: "+why)
		return
	}
	ps.add(line, key, "not implemented: "+why+": remove the key, or load with agentfile.WithUnsupported(agentfile.Warn) to ignore it with a warning")
}

// key decodes one known key's value into s.
func (d *decoder) key(s *spec, key string, line int, v *yaml.Node, md bool) {
	switch key {
	case "name":
		if t, ok := d.text(key, v, maxTextBytes); ok {
			if msg := nameProblem(t); msg != "" {
				d.ps.add(v.Line, key, msg)
			}
			s.name = entry{t, v.Line}
		}
	case "description":
		if t, ok := d.text(key, v, maxDescriptionBytes); ok {
			if strings.TrimSpace(t) == "" {
				d.ps.add(v.Line, key, "empty: say when the sub-agent should be used")
			}
			s.description = entry{strings.TrimSpace(t), v.Line}
		}
	case "prompt":
		if md {
			d.ps.add(line, key, "a Markdown definition's system prompt is its body: move the text below the front matter")
			return
		}
		if t, ok := d.text(key, v, math.MaxInt); ok {
			s.prompt = entry{strings.TrimSpace(t), v.Line}
			if s.prompt.s == "" {
				d.ps.add(v.Line, key, "empty: write the system prompt (who the sub-agent is and how it works)")
			}
		}
	case "tools":
		s.tools, s.toolsSet, s.toolsLine = d.list(key, v), true, v.Line
	case "disallowedTools":
		s.disallowed = d.list(key, v)
	case "model":
		if t, ok := d.text(key, v, maxTextBytes); ok {
			s.model = entry{strings.TrimSpace(t), v.Line}
		}
	case "maxTurns":
		s.maxTurns = int(d.integer(key, v, 1, 10000))
	case "maxDepth":
		s.maxDepth, s.depthLine = int(d.integer(key, v, 1, 8)), v.Line
	case "tokenLimit":
		s.tokenLimit = d.integer(key, v, 1, 1<<40)
	case "costLimit":
		s.costLimit = d.number(key, v)
	case "timeout":
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			d.ps.add(v.Line, key, "must be a duration such as 90s or 5m, not "+kindName(v))
			return
		}
		if t, ok := d.text(key, v, 64); ok {
			dur, err := time.ParseDuration(t)
			switch {
			case err != nil:
				d.ps.add(v.Line, key, fmt.Sprintf("%q is not a duration: write one such as 90s or 5m", t))
			case dur <= 0 || dur > 24*time.Hour:
				d.ps.add(v.Line, key, fmt.Sprintf("%v is out of range: give a duration above zero and at most 24h", dur))
			default:
				s.timeout = dur
			}
		}
	case "background":
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
			d.ps.add(v.Line, key, "must be true or false")
			return
		}
		s.background = v.Value == "true"
	case "color":
		if t, ok := d.text(key, v, maxTextBytes); ok {
			if !slices.Contains(colors, t) {
				d.ps.add(v.Line, key, fmt.Sprintf("%q is not a color: use one of %s", t, strings.Join(colors, ", ")))
			}
			s.color = t
		}
	case "mcpServers":
		d.mcpServers(s, v)
	case "hooks":
		d.hooks(s, v)
	case "output":
		d.output(s, v)
	}
}

// mcpServers reads the names of the MCP servers a sub-agent uses. A
// server defined in the file (a mapping) is refused: a file cannot start
// a process or open a connection the program did not.
func (d *decoder) mcpServers(s *spec, v *yaml.Node) {
	const key = "mcpServers"
	if v.Kind != yaml.SequenceNode {
		d.ps.add(v.Line, key, "must be a list of server names, such as [github]")
		return
	}
	for _, it := range v.Content {
		it = d.deref(it)
		switch {
		case it == nil:
		case it.Kind == yaml.MappingNode:
			d.ps.add(it.Line, key, "a server defined in the file is refused: a definition cannot start a process or open a connection; name a server the program allows (agentfile.WithMCPServer)")
		case it.Kind == yaml.ScalarNode && it.Tag == "!!str" && it.Value != "" && len(it.Value) <= maxTextBytes:
			s.mcp = append(s.mcp, entry{it.Value, it.Line})
		default:
			d.ps.add(it.Line, key, "each item must be a server's name")
		}
	}
}

// hooks reads Claude Code's hooks mapping: event → [{matcher, hooks:
// [{type: command, command}]}].
func (d *decoder) hooks(s *spec, v *yaml.Node) {
	const key = "hooks"
	if v.Kind != yaml.MappingNode {
		d.ps.add(v.Line, key, "must be a mapping of events (PreToolUse, PostToolUse) to lists of matchers and hooks")
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		ev, groups := v.Content[i], d.deref(v.Content[i+1])
		if groups == nil {
			continue
		}
		if ev.Value != "PreToolUse" && ev.Value != "PostToolUse" {
			d.l.unsupported(d.ps, ev.Line, key, fmt.Sprintf("deputy runs hooks around tool calls only (PreToolUse, PostToolUse), not at %q", ev.Value))
			continue
		}
		if groups.Kind != yaml.SequenceNode {
			d.ps.add(groups.Line, key, fmt.Sprintf("%s must be a list of {matcher, hooks}", ev.Value))
			continue
		}
		for _, g := range groups.Content {
			g = d.deref(g)
			if g == nil {
				continue
			}
			if g.Kind != yaml.MappingNode {
				d.ps.add(g.Line, key, fmt.Sprintf("each item of %s must be a mapping with matcher and hooks", ev.Value))
				continue
			}
			var matcher *regexp.Regexp // nil: every tool
			var cmds *yaml.Node
			for j := 0; j+1 < len(g.Content); j += 2 {
				gk, gv := g.Content[j], d.deref(g.Content[j+1])
				switch {
				case gv == nil:
				case gk.Value == "matcher":
					if t, ok := d.text(key+".matcher", gv, maxTextBytes); ok && t != "" && t != "*" {
						// Checked alone first: wrapped, ")(" would compile.
						_, err := regexp.Compile(t)
						var re *regexp.Regexp
						if err == nil {
							re, err = regexp.Compile("^(?:" + t + ")$")
						}
						if err != nil {
							d.ps.add(gv.Line, key, fmt.Sprintf("matcher %q is not a regular expression (%v): write tool names such as \"Edit|Write\"", t, err))
						}
						matcher = re
					}
				case gk.Value == "hooks":
					cmds = gv
				default:
					d.ps.add(gk.Line, key, fmt.Sprintf("unknown key %q in a hook group: use matcher and hooks", gk.Value))
				}
			}
			if cmds == nil || cmds.Kind != yaml.SequenceNode {
				d.ps.add(g.Line, key, "a hook group needs hooks: a list of {type: command, command: …}")
				continue
			}
			for _, c := range cmds.Content {
				c = d.deref(c)
				if c == nil {
					continue
				}
				h := hookSpec{event: ev.Value, matcher: matcher, line: c.Line}
				typ := ""
				if c.Kind == yaml.MappingNode {
					for j := 0; j+1 < len(c.Content); j += 2 {
						ck, cv := c.Content[j], d.deref(c.Content[j+1])
						if cv == nil {
							continue
						}
						switch ck.Value {
						case "type":
							typ, _ = d.text(key+".type", cv, maxTextBytes)
						case "command":
							h.command, _ = d.text(key+".command", cv, maxTextBytes)
						case "timeout":
							d.integer(key+".timeout", cv, 1, 3600) // read; the program's hook keeps its own time
						default:
							d.ps.add(ck.Line, key, fmt.Sprintf("unknown key %q in a hook: use type and command", ck.Value))
						}
					}
				}
				if typ != "command" || h.command == "" {
					d.ps.add(c.Line, key, "a hook must be {type: command, command: <a name the program trusts>}")
					continue
				}
				s.hooks = append(s.hooks, h)
			}
		}
	}
}

// output reads the result contract: report, {type: Name}, {schema: {…}}
// or {file: path}.
func (d *decoder) output(s *spec, v *yaml.Node) {
	const key = "output"
	const how = "write output: report, or one of {type: <a Go type the program registered>}, {schema: <a JSON Schema>}, {file: <a .json file beside the definitions>}"
	s.output.line = v.Line
	if v.Kind == yaml.ScalarNode {
		if v.Tag == "!!str" && v.Value == "report" {
			s.output.kind = "report"
			return
		}
		d.ps.add(v.Line, key, fmt.Sprintf("%q is not a result contract: %s", v.Value, how))
		return
	}
	if v.Kind != yaml.MappingNode || len(v.Content) != 2 {
		d.ps.add(v.Line, key, "must name exactly one contract: "+how)
		return
	}
	k, val := v.Content[0], d.deref(v.Content[1])
	if val == nil {
		return
	}
	switch k.Value {
	case "type", "file":
		if t, ok := d.text(key+"."+k.Value, val, maxTextBytes); ok {
			s.output.kind, s.output.name, s.output.line = k.Value, t, val.Line
		}
	case "schema":
		x, ok := d.toJSON(val, 0)
		if !ok {
			return
		}
		raw, err := json.Marshal(x)
		if err != nil {
			d.ps.add(val.Line, key, fmt.Sprintf("the schema cannot be written as JSON: %v", err))
			return
		}
		s.output.kind, s.output.schema, s.output.line = "schema", raw, val.Line
	default:
		d.ps.add(k.Line, key, fmt.Sprintf("unknown contract %q: %s", k.Value, how))
	}
}

// decoder reads YAML nodes within the bounds on aliases and work.
type decoder struct {
	l      *Loader
	ps     *problems
	budget int  // nodes left to visit
	spent  bool // the budget ran out (reported once)
}

// bounded walks the tree once without following aliases: it refuses a
// file with too many aliases or nesting too deep before anything is
// decoded.
func (d *decoder) bounded(root *yaml.Node) bool {
	aliases, nodes := 0, 0
	var walk func(n *yaml.Node, depth int) bool
	walk = func(n *yaml.Node, depth int) bool {
		nodes++
		if depth > maxNesting {
			d.ps.add(n.Line, "", fmt.Sprintf("the YAML nests deeper than %d levels: flatten it", maxNesting))
			return false
		}
		if nodes > maxNodes {
			d.ps.add(n.Line, "", fmt.Sprintf("the YAML has more than %d nodes: a definition is much smaller; shorten it", maxNodes))
			return false
		}
		if n.Kind == yaml.AliasNode {
			aliases++
			if aliases > maxAliases {
				d.ps.add(n.Line, "", fmt.Sprintf("more than %d aliases (*name): write the values out instead", maxAliases))
				return false
			}
		}
		for _, c := range n.Content {
			if !walk(c, depth+1) {
				return false
			}
		}
		return true
	}
	return walk(root, 0)
}

// deref follows an alias to its anchor's node, counting the nodes it
// brings in against the budget; nil when the budget is spent (reported).
func (d *decoder) deref(n *yaml.Node) *yaml.Node {
	if n == nil || n.Kind != yaml.AliasNode {
		return n
	}
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	if !d.spend(n, size(n, d.budget+1)) {
		return nil
	}
	return n
}

// size counts n's nodes, aliases followed, stopping past limit.
func size(n *yaml.Node, limit int) int {
	count := 0
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if count > limit || depth > maxNesting*2 {
			count = limit + 1
			return
		}
		count++
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			walk(n.Alias, depth+1)
			return
		}
		for _, c := range n.Content {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return count
}

func (d *decoder) spend(at *yaml.Node, n int) bool {
	if d.spent {
		return false
	}
	d.budget -= n
	if d.budget < 0 {
		d.spent = true
		d.ps.add(at.Line, "", fmt.Sprintf("the aliases expand past %d nodes: write the values out instead of repeating anchors", maxNodes))
		return false
	}
	return true
}

// text reads a string value of at most max bytes.
func (d *decoder) text(key string, v *yaml.Node, max int) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		msg := "must be text, not " + kindName(v)
		if v.Kind == yaml.ScalarNode {
			msg += ": quote it"
		}
		d.ps.add(v.Line, key, msg)
		return "", false
	}
	if len(v.Value) > max {
		d.ps.add(v.Line, key, fmt.Sprintf("%d bytes is longer than the %d allowed: shorten it", len(v.Value), max))
		return "", false
	}
	return v.Value, true
}

// list reads Claude Code's tool list: "A, B(x, y), C" or a YAML list.
func (d *decoder) list(key string, v *yaml.Node) []entry {
	var out []entry
	add := func(s string, line int) {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			d.ps.add(line, key, "an empty entry: remove the extra comma")
		case len(s) > maxTextBytes:
			d.ps.add(line, key, fmt.Sprintf("an entry of %d bytes is longer than the %d allowed", len(s), maxTextBytes))
		case len(out) >= maxListItems:
			d.ps.add(line, key, fmt.Sprintf("more than %d entries: use a pattern such as mcp__github__*", maxListItems))
		default:
			out = append(out, entry{s, line})
		}
	}
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
		if strings.TrimSpace(v.Value) == "" {
			d.ps.add(v.Line, key, "empty: write [] for none, or leave the key out")
			return []entry{}
		}
		for _, part := range splitTopLevel(v.Value) {
			add(part, v.Line)
		}
	case v.Kind == yaml.SequenceNode:
		out = []entry{}
		for _, it := range v.Content {
			it = d.deref(it)
			if it == nil {
				continue
			}
			if it.Kind != yaml.ScalarNode || it.Tag != "!!str" {
				d.ps.add(it.Line, key, "each entry must be a tool's name, not "+kindName(it))
				continue
			}
			add(it.Value, it.Line)
		}
	default:
		d.ps.add(v.Line, key, "must be a comma-separated text or a list of tool names, not "+kindName(v))
	}
	return out
}

// splitTopLevel splits at the commas outside parentheses: "A, Agent(x,
// y)" is two entries.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func (d *decoder) integer(key string, v *yaml.Node, lo, hi int64) int64 {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		d.ps.add(v.Line, key, "must be a whole number, not "+kindName(v))
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 0, 64)
	if err != nil || n < lo || n > hi {
		d.ps.add(v.Line, key, fmt.Sprintf("%s is out of range: give a number from %d to %d", v.Value, lo, hi))
		return 0
	}
	return n
}

func (d *decoder) number(key string, v *yaml.Node) float64 {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		d.ps.add(v.Line, key, "must be a number of dollars, not "+kindName(v))
		return 0
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || !(f > 0) || f > 1e6 {
		d.ps.add(v.Line, key, fmt.Sprintf("%s is out of range: give dollars above zero", v.Value))
		return 0
	}
	return f
}

// toJSON converts an inline schema to a value encoding/json writes.
func (d *decoder) toJSON(n *yaml.Node, depth int) (any, bool) {
	if depth > maxNesting {
		d.ps.add(n.Line, "output", fmt.Sprintf("the schema nests deeper than %d levels", maxNesting))
		return nil, false
	}
	if n = d.deref(n); n == nil {
		return nil, false
	}
	if !d.spend(n, 1) {
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				d.ps.add(k.Line, "output", "a schema's keys must be text")
				return nil, false
			}
			if _, dup := m[k.Value]; dup {
				d.ps.add(k.Line, "output", fmt.Sprintf("the schema holds the key %q twice: keep one", k.Value))
				return nil, false
			}
			v, ok := d.toJSON(n.Content[i+1], depth+1)
			if !ok {
				return nil, false
			}
			m[k.Value] = v
		}
		return m, true
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, ok := d.toJSON(c, depth+1)
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
		return s, true
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return n.Value, true
		case "!!bool":
			return n.Value == "true", true
		case "!!null":
			return nil, true
		case "!!int", "!!float":
			f, err := strconv.ParseFloat(n.Value, 64)
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				d.ps.add(n.Line, "output", fmt.Sprintf("%s is not a number JSON can hold", n.Value))
				return nil, false
			}
			if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				return json.Number(strconv.FormatInt(i, 10)), true
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), true
		}
	}
	d.ps.add(n.Line, "output", "the schema holds "+kindName(n)+", which JSON cannot: write plain YAML mappings, lists and scalars")
	return nil, false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "true or false"
		case "!!null":
			return "empty"
		case "!!str":
			return "text"
		}
		return "a value tagged " + n.Tag
	}
	return "an alias"
}

// parseYAML parses text into its one document's root node.
func parseYAML(text []byte, ps *problems) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			ps.add(1, "", "the definition is empty: give at least name and description")
			return nil, false
		}
		line, msg := yamlError(err)
		ps.add(line, "", "not valid YAML: "+msg+": fix the syntax")
		return nil, false
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			line, _ = yamlError(err)
		}
		ps.add(line, "", "a second YAML document (after \"---\"): a file holds one definition; move the other to a file of its own")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		ps.add(1, "", "the definition is empty: give at least name and description")
		return nil, false
	}
	return doc.Content[0], true
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlError splits a parser error into its line and message.
func yamlError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, msg[len(m[0]):]
	}
	return 1, strings.TrimPrefix(msg, "yaml: ")
}

// splitFront splits a Markdown file into its front matter and body, and
// the line the body starts on.
func splitFront(text []byte) (front, body []byte, bodyLine int, ok bool) {
	first, rest, found := bytes.Cut(text, []byte("\n"))
	if !found || strings.TrimRight(string(first), " \t\r") != "---" {
		return nil, nil, 0, false
	}
	line := 2
	off := 0
	for off <= len(rest) {
		end := bytes.IndexByte(rest[off:], '\n')
		var l []byte
		if end < 0 {
			l = rest[off:]
		} else {
			l = rest[off : off+end]
		}
		if strings.TrimRight(string(l), " \t\r") == "---" {
			if end < 0 {
				return rest[:off], nil, line + 1, true
			}
			return rest[:off], rest[off+end+1:], line + 1, true
		}
		if end < 0 {
			break
		}
		off += end + 1
		line++
	}
	return nil, nil, 0, false
}

func lineAt(src []byte, i int) int { return bytes.Count(src[:i], []byte("\n")) + 1 }

func firstInvalid(src []byte) int {
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return 0
}

// toolName matches what the model APIs accept as a tool's name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// nameProblem says what is wrong with a sub-agent's name, or "".
func nameProblem(name string) string {
	if toolName.MatchString(name) {
		return ""
	}
	suggest := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == ' ' || r == ':' || r == '.' || r == '/':
			return '-'
		}
		return -1
	}, name)
	if len(suggest) > 64 {
		suggest = suggest[:64]
	}
	msg := fmt.Sprintf("%q cannot name a tool: use 1 to 64 letters, digits, '-' and '_'", name)
	if suggest != "" && suggest != name {
		msg += fmt.Sprintf(", such as %q", suggest)
	}
	return msg
}

func keyList() string {
	return "name, description, tools, disallowedTools, model, maxTurns, background, color, mcpServers, hooks, prompt, output, tokenLimit, costLimit, timeout, maxDepth"
}

// nearest returns the known key key most likely misspells, or "".
func nearest(key string) string {
	best, bestD := "", 3
	for k := range knownKeys {
		if strings.EqualFold(k, key) {
			return k
		}
		if d := distance(strings.ToLower(k), strings.ToLower(key)); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of two short keys.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
