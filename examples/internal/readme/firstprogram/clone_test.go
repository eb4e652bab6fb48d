package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's way to build the first program on a clone works as written:
// in a new module next to a clone of the repository, its go mod edit line,
// go mod tidy and go run print the lead's answer. The go command runs with
// no proxy and no checksum database, from the module cache the repository's
// own build filled, so the test reaches no network.
func TestFirstProgramOnAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own with the go command; skipped in -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	readme, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	edit := regexp.MustCompile("`(go mod edit [^`]+)`").FindStringSubmatch(string(readme))
	if edit == nil {
		t.Fatal("README.md has no `go mod edit …` line for building on a clone")
	}
	if !strings.Contains(edit[1], "=../deputy") {
		t.Fatalf("README.md's line %q no longer points at a clone in ../deputy; update this test with it", edit[1])
	}
	program := firstGoBlock(string(readme))
	if !strings.Contains(program, "func main()") {
		t.Fatalf("README.md's first Go block is not the first program:\n%s", program)
	}

	repo, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(repo, filepath.Join(dir, "deputy")); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(dir, "hello")
	if err := os.Mkdir(hello, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, args...)
		cmd.Dir = hello
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "init", "hello")
	run(strings.Fields(edit[1])[1:]...)
	if err := os.WriteFile(filepath.Join(hello, "main.go"), []byte(program+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// -e: offline (GOPROXY=off), the module cache may lack modules that
	// only the tests of deputy's dependencies import; the build needs none.
	run("mod", "tidy", "-e")
	out := run("run", ".")
	if !strings.Contains(out, "The tallest mountain is Everest (8,849 m).\n") {
		t.Errorf("the first program, built on a clone, printed\n%s\nwant the lead's answer", out)
	}
}

// firstGoBlock returns the text of the first ```go block of a Markdown document.
func firstGoBlock(doc string) string {
	_, rest, ok := strings.Cut(doc, "```go\n")
	if !ok {
		return ""
	}
	block, _, _ := strings.Cut(rest, "\n```")
	return block
}
