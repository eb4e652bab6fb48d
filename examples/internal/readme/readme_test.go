package readme

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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

// snippets returns the snippets of a Go file (see the package comment).
func snippets(src string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(src, "\n") {
		switch {
		case line == "// README snippet":
			in, cur = true, nil
		case line == "// end of README snippet":
			in = false
			out = append(out, strings.TrimRight(strings.Join(cur, "\n"), "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return out
}

// Every Go block of README.md is a snippet of this package, or of the
// Temporal or A2A module's readme_test.go, which the compiler and go vet check,
// so that what a reader pastes works.
func TestREADMEQuotesSnippets(t *testing.T) {
	doc, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, file := range []string{"snippets.go", "../../../temporal/readme_test.go", "../../../a2a/readme_test.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, snippets(string(src))...)
	}
	got := goBlocks(string(doc))
	if len(want) == 0 {
		t.Fatal("snippets.go has no snippets")
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(want):
			t.Errorf("README.md's Go block %d is not in examples/internal/readme/snippets.go; add it there between the snippet markers, so that it is compiled:\n%s", i+1, got[i])
		case i >= len(got):
			t.Errorf("snippet %d of snippets.go is not in README.md; quote it or remove it:\n%s", i+1, want[i])
		default:
			if d := cmp.Diff(want[i], got[i]); d != "" {
				t.Errorf("README.md's Go block %d differs from snippet %d of snippets.go; make them equal (-snippet +README):\n%s", i+1, i+1, d)
			}
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
	src := "x\n// README snippet\nfunc f() {}\n\n// end of README snippet\ny\n// README snippet\ng\n// end of README snippet\n"
	if d := cmp.Diff([]string{"func f() {}", "g"}, snippets(src)); d != "" {
		t.Error(d)
	}
}
