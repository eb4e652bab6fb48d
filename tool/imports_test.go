package tool_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// tool knows no storage: a tool author compiles no store, and the journal's
// scopes it consults (internal/journal) see a turn's journal through an
// interface that the layers above fill with a store's.
func TestToolImportsNoStorage(t *testing.T) {
	const mod = "github.com/deputy-go/deputy/"
	seen := map[string]string{} // package → one that imports it
	var walk func(dir, path string)
	walk = func(dir, path string) {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			rel, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			if _, done := seen[imp]; done {
				continue
			}
			seen[imp] = path
			walk(filepath.Join("..", filepath.FromSlash(rel)), imp)
		}
	}
	walk(".", mod+"tool")
	for imp, by := range seen {
		if imp == mod+"store" || strings.HasPrefix(imp, mod+"store/") {
			t.Errorf("tool depends on %s (imported by %s); the tool layer must know no storage package", imp, by)
		}
	}
}
