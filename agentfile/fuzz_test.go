package agentfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/deputy-go/deputy/agentfile"
)

// Any file either loads or is refused with an *agentfile.Error whose every
// problem names the file; nothing panics.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/corpus", "testdata/reject", "testdata/unsupported"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			if src, err := os.ReadFile(file); err == nil {
				f.Add(filepath.Ext(file) == ".md", src)
			}
		}
	}
	l := programLoader(f)
	f.Fuzz(func(t *testing.T, md bool, src []byte) {
		name := "a.yaml"
		if md {
			name = "a.md"
		}
		fsys := fstest.MapFS{name: {Data: src}, "schemas/review.json": {Data: []byte(`{"type":"object"}`)}}
		r, err := l.LoadFS(fsys)
		if err == nil {
			if len(r.Definitions()) != 1 {
				t.Fatalf("loaded %d definitions from one file", len(r.Definitions()))
			}
			return
		}
		var lerr *agentfile.Error
		if !errors.As(err, &lerr) || len(lerr.Problems) == 0 {
			t.Fatalf("%v: not an *agentfile.Error with problems", err)
		}
		for _, p := range lerr.Problems {
			if p.File != name || p.Message == "" {
				t.Fatalf("problem %+v", p)
			}
		}
	})
}
