package mcpbridge_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// referenceServer starts one of the official reference MCP servers,
// installed by npm from mcpbridge/clienttest's lock file, or skips.
func referenceServer(t *testing.T, pkg string, args ...string) *mcpbridge.Client {
	t.Helper()
	nm := os.Getenv("DEPUTY_TEST_MCP_NODE_MODULES")
	if nm == "" {
		t.Skip("set DEPUTY_TEST_MCP_NODE_MODULES to mcpbridge/clienttest/node_modules after npm ci there (.ci/run does) to run the reference MCP servers")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the reference MCP servers: %v", err)
	}
	script := filepath.Join(nm, "@modelcontextprotocol", pkg, "dist", "index.js")
	c, err := mcpbridge.Connect(context.Background(), mcpbridge.Command(node, append([]string{script}, args...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// childRun runs a lead agent that delegates to a ReAct child holding
// reg's tools; the child makes calls, then answers. It returns the tool
// messages the child's model read.
func childRun(t *testing.T, reg *tool.Registry, calls ...provider.ToolCall) []provider.Message {
	t.Helper()
	model := fake.NewProvider(
		fake.Call("worker", `{"task":"use the tools"}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Calls(calls...).For("worker"),
		fake.Text("used them").For("worker"),
	)
	worker, err := subagent.FromReact("worker", "Works with the tools it has.", model, reg)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(worker))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Run(context.Background(), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	reqs := model.RequestsFor("worker")
	if len(reqs) != 2 {
		t.Fatalf("the child made %d model calls, want 2", len(reqs))
	}
	var out []provider.Message
	for _, m := range reqs[1].Messages {
		if m.Role == provider.RoleTool {
			out = append(out, m)
		}
	}
	if len(out) != len(calls) {
		t.Fatalf("the child read %d tool results, want %d", len(out), len(calls))
	}
	return out
}

func tc(name, args string) provider.ToolCall {
	return provider.ToolCall{ID: "call_" + name, Name: name, Arguments: json.RawMessage(args)}
}

func TestReferenceServersEverythingServesAChild(t *testing.T) {
	c := referenceServer(t, "server-everything", "stdio")
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	got := childRun(t, reg,
		tc("echo", `{"message":"hello from a deputy child"}`),
		tc("get-sum", `{"a":2,"b":40}`),
		tc("get-structured-content", `{"location":"New York"}`),
		tc("get-sum", `{"a":"two"}`),
	)
	for i, want := range []string{"hello from a deputy child", "42", "temperature", ""} {
		if want != "" && (got[i].IsError || !strings.Contains(got[i].Content, want)) {
			t.Errorf("result %d: %+v, want one containing %q", i, got[i], want)
		}
	}
	if !got[3].IsError {
		t.Errorf("get-sum with a string: %+v, want an error result", got[3])
	}
}

func TestReferenceServersFilesystemKeepsToItsRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "note.txt"), []byte("the deploy is on Thursday"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := referenceServer(t, "server-filesystem", root)
	reg, _ := tool.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("do not read"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := childRun(t, reg,
		tc("read_text_file", `{"path":`+jsonOf(t, filepath.Join(root, "note.txt"))+`}`),
		tc("read_text_file", `{"path":`+jsonOf(t, outside)+`}`),
		tc("write_file", `{"path":`+jsonOf(t, filepath.Join(root, "out.txt"))+`,"content":"written by a child"}`),
	)
	if got[0].IsError || got[0].Content != "the deploy is on Thursday" {
		t.Errorf("reading inside the root: %+v", got[0])
	}
	if !got[1].IsError || !strings.Contains(got[1].Content, "outside allowed directories") || strings.Contains(got[1].Content, "do not read") {
		t.Errorf("reading outside the root: %+v, want the server's access-denied error", got[1])
	}
	if b, err := os.ReadFile(filepath.Join(root, "out.txt")); err != nil || string(b) != "written by a child" {
		t.Errorf("the child's write did not reach the disk: %q %v (result %+v)", b, err, got[2])
	}
}
