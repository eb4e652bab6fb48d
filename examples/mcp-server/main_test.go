package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/tool"
)

// TestMain runs the tests or, when a test starts this binary as the
// program (runAsProgram set), runs the program with the given flags, on
// the scripted model whatever the environment says.
func TestMain(m *testing.M) {
	if os.Getenv(runAsProgram) != "" {
		if err := run(context.Background(), os.Args[1:], func(string) string { return "" }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

const runAsProgram = "DEPUTY_MCP_SERVER_EXAMPLE_RUN"

// An MCP client consults the expert twice and the reviewer once, over
// streamable HTTP, as an editor would.
func TestServesTheTourOverMCP(t *testing.T) {
	srv, err := newServer(script(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(nil))
	defer hs.Close()
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.HTTP(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	ask := func(name, task string) tool.Result {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"task": task})
		res, err := reg.Execute(context.Background(), []tool.Call{{ID: "1", Name: name, Arguments: args}})
		if err != nil || res[0].IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res[0]
	}
	if got := ask("expert", "What is a sub-agent?").Content; !strings.Contains(got, "FromAgent") {
		t.Errorf("first answer %q", got)
	}
	if got := ask("expert", "Which one remembers?").Content; !strings.Contains(got, "question 1 of this conversation") {
		t.Errorf("the expert forgot the first question: %q", got)
	}
	review := ask("reviewer", "Review: ...")
	v, ok := review.Value.(map[string]any)
	if !ok || v["status"] != "partial" {
		t.Errorf("the reviewer's structured content %#v", review.Value)
	}
}

// The program runs twice over stdio, as an MCP host starts it, with the
// same -store file: the second run's expert remembers the question asked
// in the first. Without -store, a second run starts afresh.
func TestStoreKeepsTheExpertAcrossRuns(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// consult starts the program with args, asks the expert one question
	// and stops the program.
	consult := func(task string, args ...string) string {
		t.Helper()
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), runAsProgram+"=1")
		c, err := mcpbridge.Connect(context.Background(), mcpbridge.Cmd(cmd))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.Close(); err != nil {
				t.Errorf("stopping the program: %v", err)
			}
		}()
		reg, _ := tool.NewRegistry()
		if err := c.Register(reg); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(map[string]string{"task": task})
		res, err := reg.Execute(context.Background(), []tool.Call{{ID: "1", Name: "expert", Arguments: a}})
		if err != nil || res[0].IsError {
			t.Fatalf("expert: %v %+v", err, res)
		}
		return res[0].Content
	}
	db := filepath.Join(t.TempDir(), "expert.db")
	if got := consult("What is a sub-agent?", "-store", db); !strings.Contains(got, "FromAgent") {
		t.Errorf("first run's answer %q", got)
	}
	if got := consult("Which one remembers?", "-store", db); !strings.Contains(got, "question 1 of this conversation") {
		t.Errorf("the second run with -store forgot the first run's question: %q", got)
	}
	if got := consult("Which one remembers?"); !strings.Contains(got, "FromAgent") {
		t.Errorf("without -store the expert should start afresh: %q", got)
	}
}
