package layers_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const mod = "github.com/deputy-go/deputy"

// below lists, for each package a user imports, every package of deputy's
// it may depend on, directly or through internal packages. A new package
// is added here, below what it needs; a test that fails here is an import
// that climbs the graph (move the shared piece down instead).
var below = map[string][]string{
	"event":      nil,
	"jsonschema": nil,
	"provider":   {"event"},

	"provider/openai":       {"event", "provider"},
	"provider/anthropic":    {"event", "provider"},
	"provider/fromenv":      {"event", "provider", "provider/openai", "provider/anthropic"},
	"provider/providertest": {"event", "provider"},
	"fake":                  {"event", "provider"},
	"cassette":              {"event", "provider"},

	"store":                 {"event", "provider"},
	"store/memory":          {"event", "provider", "store"},
	"store/sqlite":          {"event", "provider", "store"},
	"store/postgres":        {"event", "provider", "store"},
	"store/postgres/pgtest": nil,
	"store/storetest":       {"event", "provider", "store"},

	"policy": {"event", "provider"},
	// tool knows no storage: a tool author compiles no store.
	"tool":     {"event", "provider", "jsonschema", "policy"},
	"agent":    {"event", "provider", "jsonschema", "policy", "tool", "store"},
	"subagent": {"event", "provider", "jsonschema", "policy", "tool", "store", "agent"},

	"agent/runtime": {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent"},
	"agentfile":     {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent"},
	"treetest":      {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent"},
	"contracttest":  {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent", "agent/runtime", "store/memory"},

	// The surfaces on top: nothing below imports them.
	"agui":      {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent"},
	"mcpbridge": {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent", "store/memory"},
	"devui":     {"event", "provider", "jsonschema", "policy", "tool", "store", "agent", "subagent", "agui", "cassette"},
}

// sdks lists the modules only some packages may compile: a database
// driver, the MCP SDK, a vendor's SDK. The modules of other runtimes
// (Temporal, A2A) no package of this module may import.
var sdks = []struct {
	prefix string
	only   []string
}{
	{"modernc.org/sqlite", []string{"store/sqlite"}},
	{"github.com/jackc/pgx", []string{"store/postgres", "store/postgres/pgtest"}},
	{"github.com/modelcontextprotocol/go-sdk", []string{"mcpbridge"}},
	{"github.com/openai/openai-go", []string{"provider/openai", "provider/fromenv"}},
	{"github.com/anthropics/anthropic-sdk-go", []string{"provider/anthropic", "provider/fromenv"}},
	{"go.temporal.io", nil},
	{"github.com/a2aproject", nil},
	{"github.com/chromedp", nil},
}

type pkg struct {
	ours, theirs []string // imports: of this module (relative), of others
}

// load reads the imports of every package of the module (the modules
// nested in it, testdata and the example programs left out), test files
// not counted.
func load(t *testing.T) map[string]pkg {
	t.Helper()
	root := filepath.Join("..", "..")
	pkgs := map[string]pkg{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || rel == "examples") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
			return filepath.SkipDir // a module of its own
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		var p pkg
		for _, imp := range bp.Imports {
			if r, ok := strings.CutPrefix(imp, mod+"/"); ok {
				p.ours = append(p.ours, r)
			} else if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
				p.theirs = append(p.theirs, imp)
			}
		}
		pkgs[rel] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < len(below) {
		t.Fatalf("found %d packages, fewer than the %d listed: is the walk at the module's root?", len(pkgs), len(below))
	}
	return pkgs
}

// deps returns the packages of the module p depends on, each with the
// chain of imports that reaches it.
func deps(pkgs map[string]pkg, p string) map[string]string {
	via := map[string]string{}
	var walk func(from, chain string)
	walk = func(from, chain string) {
		for _, imp := range pkgs[from].ours {
			if _, seen := via[imp]; seen {
				continue
			}
			via[imp] = chain + " → " + imp
			walk(imp, via[imp])
		}
	}
	walk(p, p)
	return via
}

func internal(p string) bool {
	return p == "internal" || strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal")
}

// Each package depends only on those listed below it, however many
// internal packages lie between.
func TestImportsGoDown(t *testing.T) {
	pkgs := load(t)
	for p := range pkgs {
		if internal(p) {
			continue
		}
		allowed, ok := below[p]
		if !ok {
			t.Errorf("package %s is not in the list of layers: add it to below, with what it may import", p)
			continue
		}
		via := deps(pkgs, p)
		for d, chain := range via {
			if !internal(d) && !slices.Contains(allowed, d) {
				t.Errorf("%s depends on %s (%s); it may depend only on %v", p, d, chain, allowed)
			}
		}
	}
	for p := range below {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("package %s is listed in below but not found: take it out of the list", p)
		}
	}
}

// The surfaces on top (agui, devui, mcpbridge) and the contract suite are
// imported by no internal package but their own.
func TestNothingInternalImportsTheTop(t *testing.T) {
	pkgs := load(t)
	top := []string{"agui", "devui", "mcpbridge", "contracttest"}
	for p, pk := range pkgs {
		if !internal(p) {
			continue
		}
		for _, imp := range pk.ours {
			if slices.Contains(top, imp) && !strings.HasPrefix(p, imp+"/") {
				t.Errorf("%s imports %s: only the top's own internal packages may", p, imp)
			}
		}
	}
}

// A user compiles a database driver, the MCP SDK or a vendor SDK only by
// importing the package that needs it.
func TestSDKsOnlyWhereNamed(t *testing.T) {
	pkgs := load(t)
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if internal(p) {
			continue
		}
		via := deps(pkgs, p)
		via[p] = p
		for d, chain := range via {
			for _, ext := range pkgs[d].theirs {
				for _, s := range sdks {
					if strings.HasPrefix(ext, s.prefix) && !slices.Contains(s.only, p) {
						t.Errorf("%s compiles %s (%s imports it: %s); only %v may", p, ext, d, chain, s.only)
					}
				}
			}
		}
	}
}
