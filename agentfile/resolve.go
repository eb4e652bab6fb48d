package agentfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// candidate is a tool a definition may be given, under the names it may
// be called by in tools and disallowedTools.
type candidate struct {
	t     tool.Tool
	names []string // its name, and mcp__server__name for an MCP server's
}

// resolve turns the specs into members, by name: every name, tool,
// model, server, hook and schema resolved against the program.
func (l *Loader) resolve(fsys fs.FS, specs []*spec) ([]*member, []Problem) {
	var out []Problem
	byName := map[string]*spec{}
	for _, s := range specs {
		if s.name.s == "" {
			continue // missing or wrong: reported
		}
		if first, dup := byName[s.name.s]; dup {
			out = append(out, Problem{File: s.file, Line: s.name.line + lineOffset(s), Key: "name",
				Message: fmt.Sprintf("%q is the name of %s:%d too: give each sub-agent its own name", s.name.s, first.file, first.name.line+lineOffset(first))},
				Problem{File: first.file, Line: first.name.line + lineOffset(first), Key: "name",
					Message: fmt.Sprintf("%q is the name of %s:%d too: give each sub-agent its own name", s.name.s, s.file, s.name.line+lineOffset(s))})
			continue
		}
		byName[s.name.s] = s
	}
	members := make([]*member, 0, len(specs))
	schemas := map[string]compiled{}
	for _, s := range specs {
		if byName[s.name.s] != s {
			continue
		}
		ps := &problems{file: s.file, off: lineOffset(s)}
		m := l.member(fsys, s, byName, schemas, ps)
		out = append(out, ps.all()...)
		if m != nil {
			members = append(members, m)
		}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].def.Name < members[j].def.Name })
	return members, out
}

// lineOffset is the lines before a file's YAML: the "---" of a Markdown
// file's front matter.
func lineOffset(s *spec) int {
	if strings.HasSuffix(s.file, ".md") {
		return 1
	}
	return 0
}

// member resolves one spec.
func (l *Loader) member(fsys fs.FS, s *spec, byName map[string]*spec, schemas map[string]compiled, ps *problems) *member {
	def := &Definition{
		Name: s.name.s, Description: s.description.s, SystemPrompt: s.prompt.s, File: s.file,
		MaxSteps: s.maxTurns, TokenLimit: s.tokenLimit, CostLimit: s.costLimit, Timeout: s.timeout,
		MaxDepth: s.maxDepth, Background: s.background, Color: s.color,
	}
	m := &member{def: def}
	h := sha256.New()
	h.Write(s.src)

	// The model.
	np, model, msg := l.model(s.model.s)
	if msg != "" {
		ps.add(s.model.line, "model", msg)
	} else {
		m.p, def.Provider, def.Model = np.p, np.name, model
	}

	// MCP servers, then the tools the definition may name.
	var cands []candidate
	if l.tools != nil {
		for _, t := range l.tools.Tools() {
			cands = append(cands, candidate{t: t, names: []string{t.Definition().Name}})
		}
	}
	for _, e := range s.mcp {
		tools, ok := l.mcp[e.s]
		if !ok {
			ps.add(e.line, "mcpServers", fmt.Sprintf("%q is not a server the program allows (%s): name one of those, or have the program allow it with agentfile.WithMCPServer", e.s, listOr(mapKeys(l.mcp), "it allows none")))
			continue
		}
		for _, t := range tools {
			n := t.Definition().Name
			cands = append(cands, candidate{t: t, names: []string{n, "mcp__" + e.s + "__" + n}})
		}
	}
	keep := make([]bool, len(cands))
	var delegates []string
	delegateAll := false
	if !s.toolsSet {
		for i := range keep {
			keep[i] = true
		}
	}
	for _, e := range s.tools {
		if names, all, ok := agentRef(e.s); ok {
			if all {
				delegateAll = true
			}
			for _, n := range names {
				switch other, found := byName[n]; {
				case !found:
					ps.add(e.line, "tools", fmt.Sprintf("%s: no definition is named %q: name one of %s", e.s, n, strings.Join(mapKeys(byName), ", ")))
				case other == s:
					ps.add(e.line, "tools", fmt.Sprintf("%s: a sub-agent cannot delegate to itself", e.s))
				default:
					delegates = append(delegates, n)
				}
			}
			continue
		}
		if msg := matchTools(e.s, cands, keep, true); msg != "" {
			ps.add(e.line, "tools", msg)
		}
	}
	if delegateAll {
		for n := range byName {
			if n != s.name.s {
				delegates = append(delegates, n)
			}
		}
	}
	for _, e := range s.disallowed {
		if names, all, ok := agentRef(e.s); ok {
			if all {
				delegates = nil
			}
			delegates = slices.DeleteFunc(delegates, func(n string) bool { return slices.Contains(names, n) })
			continue
		}
		if msg := matchTools(e.s, cands, keep, false); msg != "" {
			ps.add(e.line, "disallowedTools", msg)
		}
	}
	for i, c := range cands {
		if keep[i] {
			m.tools = append(m.tools, c.t)
			def.Tools = append(def.Tools, c.t.Definition().Name)
		}
	}
	slices.Sort(delegates)
	def.Delegates = slices.Compact(delegates)

	// Hooks, from the trust list only.
	for _, hs := range s.hooks {
		fn, ok := l.hooks[hs.command]
		if !ok {
			ps.add(hs.line, "hooks", fmt.Sprintf("%q is not a hook the program trusts (%s): a definition cannot run commands of its own; have the program trust it with agentfile.WithHook", hs.command, listOr(mapKeys(l.hooks), "it trusts none")))
			continue
		}
		m.hooks = append(m.hooks, hook{event: hs.event, match: hs.matcher, fn: fn})
	}

	// The result contract.
	switch o := s.output; o.kind {
	case "report":
		m.subOpts = append(m.subOpts, subagent.WithReport())
		def.Output = "report"
	case "type":
		opt, ok := l.types[o.name]
		if !ok {
			ps.add(o.line, "output", fmt.Sprintf("no Go type is registered as %q (%s): register it with agentfile.ResultType", o.name, listOr(mapKeys(l.types), "none is")))
			break
		}
		m.subOpts = append(m.subOpts, opt)
		def.Output = "type:" + o.name
	case "schema":
		c := schemaOption(schemas, o.schema)
		if c.err != nil {
			ps.add(o.line, "output", fmt.Sprintf("the schema is refused: %v", c.err))
			break
		}
		m.subOpts = append(m.subOpts, c.opt)
		def.Output = "schema"
	case "file":
		raw, msg := schemaFile(fsys, schemas, o.name)
		if msg != "" {
			ps.add(o.line, "output", msg)
			break
		}
		c := schemaOption(schemas, raw)
		if c.err != nil {
			ps.add(o.line, "output", fmt.Sprintf("the schema in %s is refused: %v", o.name, c.err))
			break
		}
		h.Write([]byte("\x00" + o.name + "\x00"))
		h.Write(raw)
		m.subOpts = append(m.subOpts, c.opt)
		def.Output = "file:" + o.name
	}
	if s.timeout > 0 {
		m.subOpts = append(m.subOpts, subagent.WithTimeout(s.timeout))
	}
	def.Hash = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if len(ps.list) > 0 {
		return nil
	}
	ropts := slices.Clone(l.reactOpts)
	ropts = append(ropts, agent.WithName(def.Name), agent.WithSystemPrompt(def.SystemPrompt))
	if def.Model != "" {
		ropts = append(ropts, agent.WithModel(def.Model))
	}
	if def.MaxSteps > 0 {
		ropts = append(ropts, agent.WithMaxSteps(def.MaxSteps))
	}
	if def.TokenLimit > 0 {
		ropts = append(ropts, agent.WithTokenLimit(def.TokenLimit))
	}
	if def.CostLimit > 0 {
		ropts = append(ropts, agent.WithCostLimit(def.CostLimit))
	}
	m.reactOpts = ropts
	return m
}

// model resolves a definition's model: "" and inherit name the default
// provider; an alias names its model; a model id names the provider that
// lists it.
func (l *Loader) model(name string) (*namedProvider, string, string) {
	if name == "" || name == "inherit" {
		np := &l.providers[0]
		if len(np.models) > 0 {
			return np, np.models[0], ""
		}
		return np, "", ""
	}
	id := name
	if target, ok := l.aliases[name]; ok {
		id = target
	}
	if np := l.serving(id); np != nil {
		return np, id, ""
	}
	choices := []string{"inherit"}
	choices = append(choices, mapKeys(l.aliases)...)
	for _, np := range l.providers {
		choices = append(choices, np.models...)
	}
	return nil, "", fmt.Sprintf("no provider the program registered serves %q: use one of %s, or have the program name it (agentfile.WithModelAlias, or WithProvider's models)", name, strings.Join(choices, ", "))
}

// compiled is a schema of a load, checked within the bounds for a schema
// from outside the program, and the option that validates against it.
type compiled struct {
	opt subagent.Option
	err error
	raw []byte // a schema file's text, under its name
	msg string // why the file cannot be used
}

// schemaFile reads a schema file once for a load.
func schemaFile(fsys fs.FS, schemas map[string]compiled, name string) ([]byte, string) {
	key := "\x00file\x00" + name
	if c, ok := schemas[key]; ok {
		return c.raw, c.msg
	}
	raw, msg := readSchema(fsys, name)
	schemas[key] = compiled{raw: raw, msg: msg}
	return raw, msg
}

// schemaOption checks raw and returns the option that validates against
// it, once for each schema text of a load: definitions often share one.
func schemaOption(schemas map[string]compiled, raw []byte) compiled {
	if c, ok := schemas[string(raw)]; ok {
		return c
	}
	var c compiled
	if _, c.err = jsonschema.CompileUntrusted(raw); c.err == nil {
		c.opt = subagent.WithOutputSchema(raw)
	}
	schemas[string(raw)] = c
	return c
}

// agentRef reads Agent(a, b) or Task(a, b): the sub-agents a definition
// may delegate to (all: bare Agent or Task).
func agentRef(s string) (names []string, all, ok bool) {
	if s == "Agent" || s == "Task" {
		return nil, true, true
	}
	for _, p := range []string{"Agent(", "Task("} {
		if strings.HasPrefix(s, p) && strings.HasSuffix(s, ")") {
			for _, n := range strings.Split(s[len(p):len(s)-1], ",") {
				if n = strings.TrimSpace(n); n != "" {
					names = append(names, n)
				}
			}
			return names, len(names) == 0, true
		}
	}
	return nil, false, false
}

// matchTools sets keep for the candidates pattern names (to keep, or
// not), and says what is wrong when it names none.
func matchTools(pattern string, cands []candidate, keep []bool, to bool) string {
	if strings.ContainsAny(pattern, "()") {
		return fmt.Sprintf("%q: deputy cannot limit a tool to some of its arguments: name the tool alone, or give the program a tool that does only that", pattern)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Sprintf("%q is not a valid pattern: use * for any run of characters", pattern)
	}
	found := false
	for i, c := range cands {
		for _, n := range c.names {
			if ok, _ := path.Match(pattern, n); ok {
				keep[i], found = to, true
				break
			}
		}
	}
	if found {
		return ""
	}
	var names []string
	for _, c := range cands {
		names = append(names, c.names[len(c.names)-1])
	}
	what := "no tool of the program is named so"
	if strings.ContainsAny(pattern, "*?[") {
		what = "the pattern matches no tool of the program"
	}
	return fmt.Sprintf("%q: %s (%s): remove it, fix the name, or have the program register the tool (agentfile.WithTools, WithMCPServer and mcpServers)", pattern, what, listOr(names, "it has none"))
}

// readSchema reads a schema file a definition names, by a relative path
// inside the directory only.
func readSchema(fsys fs.FS, name string) (json []byte, msg string) {
	clean := path.Clean(name)
	switch {
	case strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.Contains(name, ":"):
		return nil, fmt.Sprintf("%q is not a relative path: name a file beside the definitions, such as schemas/result.json", name)
	case !fs.ValidPath(clean) || clean != name:
		return nil, fmt.Sprintf("%q leaves the directory of definitions or is not clean: name a file inside it, such as schemas/result.json", name)
	case !strings.HasSuffix(name, ".json"):
		return nil, fmt.Sprintf("%q is not a .json file: a schema file holds JSON", name)
	}
	f, err := fsys.Open(clean)
	if err != nil {
		return nil, fmt.Sprintf("the schema file cannot be read: %v", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, jsonschema.MaxUntrustedBytes+1))
	if err != nil {
		return nil, fmt.Sprintf("the schema file cannot be read: %v", err)
	}
	if len(raw) > jsonschema.MaxUntrustedBytes {
		return nil, fmt.Sprintf("%s is larger than the %d bytes a schema may have", name, jsonschema.MaxUntrustedBytes)
	}
	return raw, ""
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// listOr names the items, at most 20 of them, or says none.
func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	if len(items) > 20 {
		return "such as " + strings.Join(items[:20], ", ")
	}
	return strings.Join(items, ", ")
}
