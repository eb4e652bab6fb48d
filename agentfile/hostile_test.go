package agentfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agentfile"
)

// loadErr loads dir with the program's loader and returns the one
// problem list, failing if it loaded.
func loadErr(t *testing.T, dir string, opts ...agentfile.Option) string {
	t.Helper()
	r, err := programLoader(t, opts...).LoadDir(dir)
	var lerr *agentfile.Error
	if r != nil || !errors.As(err, &lerr) {
		t.Fatalf("got %v, %v; want it refused", r, err)
	}
	return err.Error()
}

func wantIn(t *testing.T, got string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("%q is not in:\n%s", p, got)
		}
	}
}

// Files are untrusted: each is refused within its bound, with the bound
// named.
func TestHostileFilesAreRefusedWithinTheirBounds(t *testing.T) {
	head := "---\nname: x\ndescription: x\n"
	cases := []struct {
		name  string
		files map[string]string
		opts  []agentfile.Option
		want  []string
	}{
		{"huge", map[string]string{"huge.md": head + "---\n" + strings.Repeat("a", agentfile.DefaultMaxFileBytes)},
			nil, []string{"huge.md: larger than the 65536 bytes allowed"}},
		{"too many files", map[string]string{"a.md": "", "b.md": "", "c.md": "", "d.md": ""},
			[]agentfile.Option{agentfile.WithMaxFiles(3)}, []string{"4 definition files, more than the 3 allowed"}},
		{"deep flow nesting", map[string]string{"deep.md": head + "output: {schema: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}\n---\nP.\n"},
			nil, []string{"deep.md:4: not valid YAML: exceeded max depth"}},
		{"deep block nesting", map[string]string{"deep.yaml": "name: x\ndescription: x\nprompt: x\noutput:\n  schema:\n" + nested(40)},
			nil, []string{"deep.yaml:", "nests deeper than 32 levels"}},
		{"billion laughs", map[string]string{"bomb.md": head + bomb(9, 9) + "---\nP.\n"},
			nil, []string{"bomb.md:", "more than 16 aliases"}},
		{"aliases within the count, past the expansion", map[string]string{"bomb.md": head + expansion() + "---\nP.\n"},
			nil, []string{"bomb.md:", "the aliases expand past 10000 nodes"}},
		{"NUL byte", map[string]string{"nul.md": head + "---\nP\x00.\n"},
			nil, []string{"nul.md:5: the file holds a NUL byte"}},
		{"invalid UTF-8 in a key", map[string]string{"bad.md": head + "t\xffols: x\n---\nP.\n"},
			nil, []string{"bad.md:4: the file is not UTF-8"}},
		{"schema path escapes", map[string]string{"esc.md": head + "output: {file: schemas/../../x.json}\n---\nP.\n"},
			nil, []string{"esc.md:4: output: \"schemas/../../x.json\" leaves the directory"}},
		{"schema path absolute", map[string]string{"abs.md": head + "output: {file: 'C:\\x.json'}\n---\nP.\n"},
			nil, []string{"abs.md:4: output:", "is not a relative path"}},
		{"schema too large", map[string]string{"big.md": head + "output: {file: s.json}\n---\nP.\n", "s.json": `{"description":"` + strings.Repeat("x", 20000) + `"}`},
			nil, []string{"big.md:4: output: s.json is larger than the 16384 bytes"}},
		{"schema file hostile", map[string]string{"ref.md": head + "output: {file: s.json}\n---\nP.\n", "s.json": `{"$ref":"https://example.com/x.json"}`},
			nil, []string{"ref.md:4: output: the schema in s.json is refused"}},
		{"many keys", map[string]string{"keys.md": head + manyKeys(5000) + "---\nP.\n"},
			nil, []string{"keys.md:", "more than 10000 nodes"}},
		{"many problems", map[string]string{"keys.md": head + manyKeys(500) + "---\nP.\n"},
			nil, []string{"keys.md:53: k49: unknown key", "keys.md: and 450 more problems: fix these first"}},
		{"huge description", map[string]string{"d.md": "---\nname: x\ndescription: " + strings.Repeat("d", 5000) + "\n---\nP.\n"},
			nil, []string{"d.md:3: description: 5000 bytes is longer than the 4096 allowed"}},
		{"long tool list", map[string]string{"t.md": head + "tools: " + strings.Repeat("grep,", 300) + "grep\n---\nP.\n"},
			nil, []string{"t.md:4: tools: more than 256 entries"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range c.files {
				write(t, dir, name, text)
			}
			wantIn(t, loadErr(t, dir, c.opts...), c.want...)
		})
	}
}

// A schema named through a link that leads out of the directory is not
// read: the directory is opened as an os.Root.
func TestSchemaLinkOutOfTheDirectoryIsRefused(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "secret.json", `{"type":"object"}`)
	dir := t.TempDir()
	write(t, dir, "a.md", "---\nname: a\ndescription: a\noutput: {file: schemas/s.json}\n---\nP.\n")
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.json"), filepath.Join(dir, "schemas", "s.json")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	wantIn(t, loadErr(t, dir), "a.md:4: output: the schema file cannot be read", "escapes")
	// A link to a definition outside the directory is not read either.
	dir2 := t.TempDir()
	write(t, outside, "agent.md", "---\nname: a\ndescription: a\n---\nP.\n")
	if err := os.Symlink(filepath.Join(outside, "agent.md"), filepath.Join(dir2, "agent.md")); err != nil {
		t.Fatal(err)
	}
	wantIn(t, loadErr(t, dir2), "agent.md: cannot be read")
}

// nested returns a block mapping n levels deep.
func nested(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%sk%d:\n", strings.Repeat("  ", i+2), i)
	}
	fmt.Fprintf(&b, "%sleaf\n", strings.Repeat("  ", n+2))
	return b.String()
}

// bomb returns the billion laughs: levels anchors, each a list of width
// aliases to the one before.
func bomb(levels, width int) string {
	var b strings.Builder
	b.WriteString("output:\n  schema:\n    enum: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n    x:\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), width), ", "))
	}
	return b.String()
}

// expansion returns anchors that stay within 16 aliases but expand past
// the node budget.
func expansion() string {
	var b strings.Builder
	b.WriteString("output:\n  schema:\n    a: &a [")
	for i := range 200 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("x")
	}
	b.WriteString("]\n    b: &b [*a, *a, *a, *a, *a, *a, *a]\n    c: &c [*b, *b, *b, *b, *b, *b, *b]\n    d: [*c, *c]\n")
	return b.String()
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d: v\n", i)
	}
	return b.String()
}
