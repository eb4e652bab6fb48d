package readme

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// goBlocks returns the text of each ```go block of a Markdown document.
func goBlocks(doc string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// snippet is a piece of a Go file quoted by a document.
type snippet struct {
	doc  string // the document that quotes it, from the root: "docs/mcp.md"
	file string // the Go file it is in, from the root
	text string
}

// snippets returns the snippets of a Go file (see the package comment).
func snippets(file, src string) []snippet {
	var out []snippet
	var cur []string
	doc := ""
	for _, line := range strings.Split(src, "\n") {
		switch {
		case doc == "" && strings.HasPrefix(line, "// snippet of "):
			doc, cur = strings.TrimPrefix(line, "// snippet of "), nil
		case doc != "" && line == "// end of snippet":
			out = append(out, snippet{doc: doc, file: file, text: strings.TrimRight(strings.Join(cur, "\n"), "\n")})
			doc = ""
		case doc != "":
			cur = append(cur, line)
		}
	}
	return out
}

// allSnippets returns the snippets of every Go file of the repository.
func allSnippets(t *testing.T) []snippet {
	var all []snippet
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		all = append(all, snippets(filepath.ToSlash(rel), string(src))...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Every Go block of README.md and of the guides in docs/ is a snippet of a
// Go file that the compiler and go vet check (see the package comment), so
// that what a reader pastes works; and every snippet is quoted where it says.
func TestDocsQuoteSnippets(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"README.md"}
	for _, d := range docs {
		names = append(names, "docs/"+filepath.Base(d))
	}
	byDoc := map[string][]snippet{}
	for _, s := range allSnippets(t) {
		if !slices.Contains(names, s.doc) {
			t.Errorf("%s has a snippet of %s, which does not exist; name README.md or a guide in docs/:\n%s", s.file, s.doc, s.text)
			continue
		}
		byDoc[s.doc] = append(byDoc[s.doc], s)
	}
	if len(byDoc["README.md"]) == 0 {
		t.Error("no Go file has a snippet of README.md")
	}
	for _, name := range names {
		doc, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		left := byDoc[name]
		for i, block := range goBlocks(string(doc)) {
			j := slices.IndexFunc(left, func(s snippet) bool { return s.text == block })
			if j < 0 {
				hint := ""
				if len(left) > 0 {
					hint = "\nThe nearest snippet of " + name + " not yet quoted, in " + left[0].file + " (-snippet +block):\n" + cmp.Diff(left[0].text, block)
				}
				t.Errorf("Go block %d of %s is no snippet: put it in a Go file that is compiled, between the lines \"// snippet of %s\" and \"// end of snippet\", and quote it exactly:\n%s%s", i+1, name, name, block, hint)
				continue
			}
			left = slices.Delete(left, j, j+1)
		}
		for _, s := range left {
			t.Errorf("%s has a snippet of %s that %s does not quote; quote it there or remove it:\n%s", s.file, name, name, s.text)
		}
	}
}

func TestGoBlocks(t *testing.T) {
	doc := "text\n```go\na\n\tb\n```\n```sh\nc\n```\n  ```go\nd\n  ```\n"
	if d := cmp.Diff([]string{"a\n\tb", "d"}, goBlocks(doc)); d != "" {
		t.Error(d)
	}
}

func TestSnippets(t *testing.T) {
	src := "x\n// snippet of docs/a.md\nfunc f() {}\n\n// end of snippet\ny\n// snippet of README.md\ng\n// end of snippet\n"
	want := []snippet{{"docs/a.md", "f.go", "func f() {}"}, {"README.md", "f.go", "g"}}
	if d := cmp.Diff(want, snippets("f.go", src), cmp.AllowUnexported(snippet{})); d != "" {
		t.Error(d)
	}
}
