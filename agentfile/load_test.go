package agentfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// Estimate is the Go type the corpus's estimator names.
type Estimate struct {
	Task  string `json:"task"`
	Hours int    `json:"hours"`
}

func namedTool(name string) tool.Tool {
	return tool.Func{Def: tool.Definition{Name: name, Description: "The " + name + " tool.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: name + " done"}, nil
		}}
}

// echo answers every request with its system prompt's first line.
var echo = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
	first, _, _ := strings.Cut(req.System, "\n")
	return provider.Response{Message: provider.AssistantMessage("echo: " + first), Usage: provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}}, nil
})

// programLoader is the program the corpus is written for: its tools, its
// two providers, the aliases, a GitHub MCP server, a trusted hook, a
// registered type.
func programLoader(t testing.TB, opts ...agentfile.Option) *agentfile.Loader {
	t.Helper()
	reg, err := tool.NewRegistry(namedTool("read_file"), namedTool("read_dir"), namedTool("grep"), namedTool("write_file"), namedTool("delete_file"), namedTool("run_tests"))
	if err != nil {
		t.Fatal(err)
	}
	base := []agentfile.Option{
		agentfile.WithProvider("anthropic", echo, "claude-sonnet-4-5", "claude-haiku-4-5"),
		agentfile.WithProvider("local", echo, "llama3"),
		agentfile.WithModelAlias("sonnet", "claude-sonnet-4-5"),
		agentfile.WithModelAlias("haiku", "claude-haiku-4-5"),
		agentfile.WithTools(reg),
		agentfile.WithMCPServer("github", namedTool("create_issue"), namedTool("list_pulls")),
		agentfile.WithHook("audit-log", func(ctx context.Context, in agentfile.HookInput) error { return nil }),
		agentfile.ResultType[Estimate]("Estimate"),
	}
	l, err := agentfile.NewLoader(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// golden compares got with the golden file, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got):\n%s", name, d)
	}
}

// The corpus — Claude Code files with every key deputy reads, a YAML form,
// CRLF line ends, a byte-order mark, a file name with ':' and spaces,
// names with capitals and digits — loads whole: one definition a file,
// every value where the golden file shows it, no warning.
func TestCorpusLoadsWhole(t *testing.T) {
	r, err := programLoader(t).LoadDir("testdata/corpus")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("testdata/corpus/*")
	agents := 0
	for _, f := range files {
		if fi, _ := os.Stat(f); !fi.IsDir() {
			agents++
		}
	}
	defs := r.Definitions()
	if len(defs) != agents {
		t.Fatalf("%d definitions from %d files", len(defs), agents)
	}
	if w := r.Warnings(); len(w) != 0 {
		t.Fatalf("warnings: %v", w)
	}
	if len(r.Members()) != len(defs) || len(r.Tools()) != len(defs) {
		t.Fatalf("%d members, %d tools for %d definitions", len(r.Members()), len(r.Tools()), len(defs))
	}
	for _, d := range defs {
		m, ok := r.Member(d.Name)
		if !ok || m.Definition().Name != d.Name || m.Definition().Description != d.Description {
			t.Errorf("member %q: %v %+v", d.Name, ok, m)
		}
	}
	b, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "corpus.golden.json", string(b)+"\n")
}

// Every problem of every file of a directory is reported at once, each
// with its file, its line and what to do, and nothing is loaded.
func TestRejectionsMatchTheirGoldenMessages(t *testing.T) {
	r, err := programLoader(t).LoadDir("testdata/reject")
	var lerr *agentfile.Error
	if !errors.As(err, &lerr) || r != nil {
		t.Fatalf("got %v, %v; want an *agentfile.Error and no roster", r, err)
	}
	// Every file is named by at least one problem: none was skipped.
	files, _ := filepath.Glob("testdata/reject/*")
	for _, f := range files {
		name := filepath.Base(f)
		found := false
		for _, p := range lerr.Problems {
			found = found || p.File == name
		}
		if !found {
			t.Errorf("%s: no problem reported", name)
		}
	}
	golden(t, "reject.golden", err.Error()+"\n")
}

// Claude Code's keys deputy does not implement are errors by default,
// and under WithUnsupported(Warn) warnings, with the same file and line.
func TestUnsupportedKeysAreReported(t *testing.T) {
	_, err := programLoader(t).LoadDir("testdata/unsupported")
	if err == nil {
		t.Fatal("loaded with Claude Code keys deputy does not implement")
	}
	r, werr := programLoader(t, agentfile.WithUnsupported(agentfile.Warn)).LoadDir("testdata/unsupported")
	if werr != nil {
		t.Fatal(werr)
	}
	var b strings.Builder
	b.WriteString(err.Error())
	b.WriteString("\n\nunder WithUnsupported(Warn):\n")
	for _, w := range r.Warnings() {
		b.WriteString(w.String())
		b.WriteString("\n")
	}
	golden(t, "unsupported.golden", b.String())
}

// One bad file among good ones: nothing loads.
func TestOneBadFileLoadsNothing(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.md", "---\nname: good\ndescription: Good.\n---\nPrompt.\n")
	write(t, dir, "bad.md", "---\nname: bad\ndescription: Bad.\ntools: nope\n---\nPrompt.\n")
	r, err := programLoader(t).LoadDir(dir)
	if r != nil || err == nil || !strings.Contains(err.Error(), "bad.md:4: tools:") {
		t.Fatalf("got %v, %v", r, err)
	}
}

// A file whose only problem is its name is refused with that problem, not
// built.
func TestABadNameAloneIsItsOnlyProblem(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "colon.md", "---\nname: code:reviewer\ndescription: d\n---\nP.\n")
	_, err := programLoader(t).LoadDir(dir)
	var lerr *agentfile.Error
	if !errors.As(err, &lerr) || len(lerr.Problems) != 1 || lerr.Problems[0].Line != 2 || lerr.Problems[0].Key != "name" {
		t.Fatalf("%v, want the name's problem alone", err)
	}
}

func TestNewLoaderRefusesWhatItCannotUse(t *testing.T) {
	for name, opts := range map[string][]agentfile.Option{
		"no provider":          nil,
		"nil provider":         {agentfile.WithProvider("p", nil)},
		"alias to nothing":     {agentfile.WithProvider("p", echo, "m"), agentfile.WithModelAlias("sonnet", "x")},
		"model of two":         {agentfile.WithProvider("p", echo, "m"), agentfile.WithProvider("q", echo, "m")},
		"nil registry":         {agentfile.WithProvider("p", echo), agentfile.WithTools(nil)},
		"zero file bound":      {agentfile.WithProvider("p", echo), agentfile.WithMaxFileBytes(0)},
		"bad unsupported mode": {agentfile.WithProvider("p", echo), agentfile.WithUnsupported(7)},
		"nil option":           {agentfile.WithProvider("p", echo), nil},
	} {
		if _, err := agentfile.NewLoader(opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func write(t testing.TB, dir, name, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The files the package doc shows load, and the doc shows them as they
// are in testdata/doc.
func TestTheDocsFilesLoad(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"code-reviewer.md", "summarizer.yaml"} {
		src, err := os.ReadFile(filepath.Join("testdata/doc", f))
		if err != nil {
			t.Fatal(err)
		}
		quoted := "//\t" + strings.ReplaceAll(strings.TrimSuffix(string(src), "\n"), "\n", "\n//\t")
		if !strings.Contains(string(doc), quoted) {
			t.Errorf("doc.go does not show testdata/doc/%s as it is", f)
		}
	}
	r, err := programLoader(t).LoadDir("testdata/doc")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Definitions()) != 3 || len(r.Warnings()) != 0 {
		t.Fatalf("%d definitions, warnings %v", len(r.Definitions()), r.Warnings())
	}
}
