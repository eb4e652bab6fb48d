package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	defer ss.Wait()
	var out bytes.Buffer
	if err := run(context.Background(), &out, noEnv, mcpbridge.SDKTransport("files", ct), dir); err != nil {
		t.Fatal(err)
	}
	want := "tools from the MCP server: 1\nanswer: From the team's notes — The notes say: Release 1.4 ships on Thursday.\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant it to contain:\n%s", out.String(), want)
	}
}

// noEnv is an empty environment: the tests run on the scripted model
// whatever the process's environment names.
func noEnv(string) string { return "" }
