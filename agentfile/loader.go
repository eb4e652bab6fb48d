package agentfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Defaults of the bounds on a directory.
const (
	// DefaultMaxFileBytes bounds one definition file (WithMaxFileBytes).
	DefaultMaxFileBytes = 64 << 10
	// DefaultMaxFiles bounds the definition files of a directory
	// (WithMaxFiles).
	DefaultMaxFiles = 256
)

// Loader reads definition files and resolves them against what the
// program gives it: its tools, its providers and their models, the MCP
// servers it allows, the hooks it trusts and the Go types it registers.
// A Loader is safe for concurrent use; each load returns a Roster of its
// own.
type Loader struct {
	tools           *tool.Registry
	providers       []namedProvider
	aliases         map[string]string
	mcp             map[string][]tool.Tool
	hooks           map[string]Hook
	types           map[string]subagent.Option
	warnUnsupported bool
	maxFileBytes    int
	maxFiles        int
	reactOpts       []agent.Option
	subOpts         []subagent.Option
}

type namedProvider struct {
	name   string
	p      provider.Provider
	models []string
}

// Option configures a Loader.
type Option func(*Loader) error

// NewLoader returns a Loader. It needs at least one provider
// (WithProvider): the first one registered is the one a definition
// without a model, or with model: inherit, runs on.
func NewLoader(opts ...Option) (*Loader, error) {
	l := &Loader{
		aliases: map[string]string{}, mcp: map[string][]tool.Tool{}, hooks: map[string]Hook{},
		types: map[string]subagent.Option{}, maxFileBytes: DefaultMaxFileBytes, maxFiles: DefaultMaxFiles,
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("agentfile: NewLoader: a nil Option: remove it")
		}
		if err := o(l); err != nil {
			return nil, fmt.Errorf("agentfile: %w", err)
		}
	}
	if len(l.providers) == 0 {
		return nil, errors.New("agentfile: NewLoader: no provider: register the one the sub-agents run on with WithProvider")
	}
	for alias, model := range l.aliases {
		if l.serving(model) == nil {
			return nil, fmt.Errorf("agentfile: WithModelAlias(%q, %q): no provider serves %q: list it in WithProvider's models", alias, model, model)
		}
	}
	return l, nil
}

// WithProvider registers a provider under a name, with the models it
// serves (the ids a definition's model may name, directly or through an
// alias). The first provider registered is the default: a definition
// without a model, or with model: inherit, runs on it, with the first of
// its models (or, when it lists none, the model the provider picks).
func WithProvider(name string, p provider.Provider, models ...string) Option {
	return func(l *Loader) error {
		switch {
		case p == nil:
			return fmt.Errorf("WithProvider(%q, nil): pass the provider", name)
		case name == "":
			return errors.New("WithProvider: empty name: name the provider, as errors name it")
		case slices.ContainsFunc(l.providers, func(np namedProvider) bool { return np.name == name }):
			return fmt.Errorf("WithProvider(%q): registered twice: give each provider its own name", name)
		}
		for _, m := range models {
			if m == "" || m == "inherit" {
				return fmt.Errorf("WithProvider(%q): %q cannot name a model", name, m)
			}
			if other := l.serving(m); other != nil {
				return fmt.Errorf("WithProvider(%q): model %q is served by %q already: a model id names one provider", name, m, other.name)
			}
		}
		l.providers = append(l.providers, namedProvider{name: name, p: p, models: slices.Clone(models)})
		return nil
	}
}

// WithModelAlias lets definitions name model by alias, as Claude Code's
// do with sonnet, opus and haiku: WithModelAlias("haiku",
// "claude-haiku-4-5"). The model must be one a provider lists.
func WithModelAlias(alias, model string) Option {
	return func(l *Loader) error {
		if alias == "" || alias == "inherit" {
			return fmt.Errorf("WithModelAlias(%q, …): %q cannot be an alias", alias, alias)
		}
		if _, dup := l.aliases[alias]; dup {
			return fmt.Errorf("WithModelAlias(%q, …): given twice: keep one", alias)
		}
		l.aliases[alias] = model
		return nil
	}
}

// WithTools gives the tools a definition may name in tools and
// disallowedTools. A definition that leaves tools out gets all of them.
func WithTools(reg *tool.Registry) Option {
	return func(l *Loader) error {
		if reg == nil {
			return errors.New("WithTools(nil): pass a registry, or leave the option out for none")
		}
		l.tools = reg
		return nil
	}
}

// WithMCPServer allows definitions to name an MCP server the program is
// connected to (mcpbridge.Client's Tools): a definition that lists name in
// mcpServers gets its tools, which tools and disallowedTools may also name
// as mcp__<name>__<tool>. A definition cannot start a server of its own.
func WithMCPServer(name string, tools ...tool.Tool) Option {
	return func(l *Loader) error {
		if name == "" {
			return errors.New("WithMCPServer: empty name")
		}
		if _, dup := l.mcp[name]; dup {
			return fmt.Errorf("WithMCPServer(%q): given twice: keep one", name)
		}
		if slices.Contains(tools, nil) {
			return fmt.Errorf("WithMCPServer(%q): a nil tool", name)
		}
		l.mcp[name] = slices.Clone(tools)
		return nil
	}
}

// WithHook trusts a hook: a definition whose hooks name command (as
// Claude Code's name a shell command) has h run around its tool calls. A
// definition that names any other command is refused: files never run
// code of their own.
func WithHook(command string, h Hook) Option {
	return func(l *Loader) error {
		if command == "" || h == nil {
			return fmt.Errorf("WithHook(%q, …): give a command and a hook", command)
		}
		if _, dup := l.hooks[command]; dup {
			return fmt.Errorf("WithHook(%q, …): given twice: keep one", command)
		}
		l.hooks[command] = h
		return nil
	}
}

// ResultType registers T under name as a result contract: a definition
// with output: {type: name} has its answer validated against T's JSON
// Schema, as subagent.OutputOf[T] does, and a Go caller gets a T.
func ResultType[T any](name string) Option {
	return func(l *Loader) error {
		if name == "" {
			return errors.New("ResultType: empty name")
		}
		if _, dup := l.types[name]; dup {
			return fmt.Errorf("ResultType(%q): registered twice: keep one", name)
		}
		l.types[name] = subagent.OutputOf[T]()
		return nil
	}
}

// Unsupported is what a load does with a Claude Code key deputy does not
// implement (permissionMode, skills, memory, effort, isolation,
// initialPrompt, a hook event other than PreToolUse and PostToolUse).
type Unsupported int

const (
	// Fail refuses the file, naming the key and its line (the default).
	Fail Unsupported = iota
	// Warn loads the file without the key; Roster.Warnings lists it.
	Warn
)

// WithUnsupported says what a load does with Claude Code keys deputy does
// not implement: Fail (the default) or Warn.
func WithUnsupported(u Unsupported) Option {
	return func(l *Loader) error {
		if u != Fail && u != Warn {
			return fmt.Errorf("WithUnsupported(%d): use Fail or Warn", u)
		}
		l.warnUnsupported = u == Warn
		return nil
	}
}

// WithMaxFileBytes bounds each definition file (DefaultMaxFileBytes).
func WithMaxFileBytes(n int) Option {
	return func(l *Loader) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxFileBytes(%d): give a size above zero", n)
		}
		l.maxFileBytes = n
		return nil
	}
}

// WithMaxFiles bounds the definition files of a directory
// (DefaultMaxFiles).
func WithMaxFiles(n int) Option {
	return func(l *Loader) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxFiles(%d): give a count above zero", n)
		}
		l.maxFiles = n
		return nil
	}
}

// WithReactOptions configures every sub-agent's ReAct agent further,
// before what its file says (WithPrices for costLimit, WithLogger, …).
func WithReactOptions(opts ...agent.Option) Option {
	return func(l *Loader) error {
		l.reactOpts = append(l.reactOpts, opts...)
		return nil
	}
}

// WithSubagentOptions configures every sub-agent's tool further, before
// what its file says (subagent.WithOutcome, WithMaxOutputBytes, …).
func WithSubagentOptions(opts ...subagent.Option) Option {
	return func(l *Loader) error {
		l.subOpts = append(l.subOpts, opts...)
		return nil
	}
}

// LoadDir loads every definition of dir (its *.md, *.yaml and *.yml
// files; subdirectories hold schema files), all or nothing: the Roster,
// or an *Error that lists every problem of every file. Files are read
// through an os.Root, so that neither a name nor a symbolic link reaches
// outside dir.
func (l *Loader) LoadDir(dir string) (*Roster, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("agentfile: opening the directory of definitions: %w", err)
	}
	defer root.Close()
	return l.LoadFS(root.FS())
}

// LoadFS loads the definitions at the top of fsys, as LoadDir does (an
// embed.FS, an os.Root's FS). Schema files are read from fsys by
// relative paths only.
func (l *Loader) LoadFS(fsys fs.FS) (*Roster, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("agentfile: listing the definitions: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || !isDefinition(e.Name()) {
			continue
		}
		files = append(files, e.Name())
	}
	if len(files) > l.maxFiles {
		return nil, &Error{Problems: []Problem{{File: ".", Message: fmt.Sprintf("%d definition files, more than the %d allowed: split the directory, or raise the bound with WithMaxFiles", len(files), l.maxFiles)}}}
	}
	var all, warns []Problem
	specs := make([]*spec, 0, len(files))
	for _, f := range files {
		ps := &problems{file: f}
		if src := l.read(fsys, f, ps); src != nil {
			if s := l.parse(f, src, ps); s != nil {
				specs = append(specs, s)
			}
		}
		all = append(all, ps.all()...)
		warns = append(warns, ps.warns...)
	}
	members, ps := l.resolve(fsys, specs)
	all = append(all, ps...)
	var r *Roster
	if len(all) == 0 {
		var p *Problem
		if r, p = l.build(members); p != nil {
			all = append(all, *p)
		}
	}
	if len(all) > 0 {
		sortProblems(all)
		return nil, &Error{Problems: all}
	}
	sortProblems(warns)
	r.warnings = warns
	return r, nil
}

func isDefinition(name string) bool {
	return strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// read reads a file of at most the bound.
func (l *Loader) read(fsys fs.FS, name string, ps *problems) []byte {
	f, err := fsys.Open(name)
	if err != nil {
		ps.add(0, "", fmt.Sprintf("cannot be read: %v", err))
		return nil
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, int64(l.maxFileBytes)+1))
	if err != nil {
		ps.add(0, "", fmt.Sprintf("cannot be read: %v", err))
		return nil
	}
	if len(src) > l.maxFileBytes {
		ps.add(0, "", fmt.Sprintf("larger than the %d bytes allowed: shorten it, or raise the bound with WithMaxFileBytes", l.maxFileBytes))
		return nil
	}
	return src
}

// serving returns the provider that lists model, or nil.
func (l *Loader) serving(model string) *namedProvider {
	for i := range l.providers {
		if slices.Contains(l.providers[i].models, model) {
			return &l.providers[i]
		}
	}
	return nil
}

// ModelMenu returns the option that gives subagent.NewSpawner a model
// menu (subagent.WithModelMenu) of names: each an alias (WithModelAlias),
// a model id a provider lists (WithProvider) or inherit, resolved as a
// definition's model is, so that the spawn tool's forks are offered
// models by the names definitions use. prices prices each of them; the
// spawn tool refuses one it has no price for. A name no provider serves
// is an error that lists those the loader knows.
func (l *Loader) ModelMenu(prices *provider.Prices, names ...string) (subagent.SpawnOption, error) {
	if len(names) == 0 {
		return nil, errors.New("agentfile: ModelMenu: no names: name the aliases or models a fork may run on")
	}
	choices := make([]subagent.ModelChoice, 0, len(names))
	for _, name := range names {
		np, model, msg := l.model(name)
		if msg != "" {
			return nil, fmt.Errorf("agentfile: ModelMenu: %s", msg)
		}
		choices = append(choices, subagent.ModelChoice{Name: name, Provider: np.p, Model: model})
	}
	return subagent.WithModelMenu(prices, choices...), nil
}
