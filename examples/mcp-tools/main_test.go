package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// Without node, an in-process server with the same tool stands in.
func TestChildReadsThroughAnInProcessServer(t *testing.T) {
	dir := note(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, noEnv, filesServer(t), dir); err != nil {
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

// checkOutput checks what the example prints on the scripted model: one
// tool from the server, the answer from the note the child read through
// it, and the lead's and the spawned child's usage: two model calls each,
// their replies' tokens exactly, and the tokens they were sent, which
// count the note's directory (a temporary one, whose name varies in
// length), within a few tokens.
func checkOutput(t *testing.T, out string) {
	t.Helper()
	usage := regexp.MustCompile(`usage: lead 2 req, (\d+) in, 53 out \| child 2 req, (\d+) in, 35 out\n$`)
	m := usage.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output:\n%s\nwant the lead's and the child's usage last", out)
	}
	lead, _ := strconv.Atoi(m[1])
	child, _ := strconv.Atoi(m[2])
	if lead < 750 || lead > 780 || child < 255 || child > 285 {
		t.Errorf("tokens in: lead %d, child %d; want about 766 and 270", lead, child)
	}
	want := "provider: fake (scripted replies; docs/providers.md tells how to use a real one)\n" +
		"tools from the MCP server: 1\n" +
		"answer: From the team's notes — The notes say: Release 1.4 ships on Thursday.\n"
	if diff := cmp.Diff(want, usage.ReplaceAllString(out, "")); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
