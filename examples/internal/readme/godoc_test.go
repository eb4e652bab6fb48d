package readme

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages a newcomer opens first stay readable: go doc -all of agent
// and of subagent is under 500 lines each. Reference detail goes into the
// guides in docs/, plumbing into agent/runtime or internal packages.
func TestPackageDocsStayShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go doc; skipped in -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for _, pkg := range []string{"./agent", "./subagent"} {
		cmd := exec.Command(gobin, "doc", "-all", pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", pkg, err)
		}
		if n := strings.Count(string(out), "\n"); n >= 500 {
			t.Errorf("go doc -all %s prints %d lines; keep it under 500: move reference detail to its guide in docs/ or plumbing out of the package", pkg, n)
		}
	}
}
