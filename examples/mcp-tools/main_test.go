package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/mcpbridge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func note(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("Release 1.4 ships on Thursday."), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The reference filesystem server, installed by .ci/run, serves the child.
func TestChildReadsThroughTheReferenceFilesystemServer(t *testing.T) {
	nm := os.Getenv("DEPUTY_TEST_MCP_NODE_MODULES")
	if nm == "" {
		t.Skip("set DEPUTY_TEST_MCP_NODE_MODULES to mcpbridge/clienttest/node_modules after npm ci there (.ci/run does)")
	}
	dir := note(t)
	var out bytes.Buffer
	server := mcpbridge.Command("node", filepath.Join(nm, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), dir)
	if err := run(context.Background(), &out, noEnv, server, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "answer: From the team's notes — The notes say: Release 1.4 ships on Thursday.") {
		t.Errorf("output:\n%s", out.String())
	}
}

// Without node, an in-process server with the same tool stands in. The
// test runs in the note's directory and names it ".", so that what the
// scripted models write and read (the path is in both) is the same
// length wherever the system keeps its temporary directories.
func TestChildReadsThroughAnInProcessServer(t *testing.T) {
	t.Chdir(note(t))
	var out bytes.Buffer
	if err := run(context.Background(), &out, noEnv, filesServer(t), "."); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, out.String())
}

// filesServer returns the transport to an in-process MCP server with the
// reference filesystem server's read_text_file tool, which ends with t.
func filesServer(t *testing.T) mcpbridge.Transport {
	srv := mcp.NewServer(&mcp.Implementation{Name: "files", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "read_text_file", Description: "Reads a file."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Path string `json:"path"`
		}) (*mcp.CallToolResult, any, error) {
			b, err := os.ReadFile(in.Path)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Wait() })
	return mcpbridge.SDKTransport("files", ct)
}

// noEnv is an empty environment: the tests run on the scripted model
// whatever the process's environment names.
func noEnv(string) string { return "" }

// checkOutput checks what the example prints on the scripted model, run
// over the note in ".": one tool from the server, the answer from the note
// the child read through it, and the lead's and the spawned child's usage,
// two model calls each, to the token.
func checkOutput(t *testing.T, out string) {
	t.Helper()
	want := "provider: fake (scripted replies; docs/providers.md tells how to use a real one)\n" +
		"tools from the MCP server: 1\n" +
		"answer: From the team's notes — The notes say: Release 1.4 ships on Thursday.\n" +
		"usage: lead 2 req, 724 in, 39 out | child 2 req, 228 in, 21 out\n"
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
