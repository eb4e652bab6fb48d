package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/mcpbridge"
	"github.com/deputy-go/deputy/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An MCP client consults the expert twice and the reviewer once, over
// streamable HTTP, as an editor would.
func TestServesTheTourOverMCP(t *testing.T) {
	srv, err := newServer(script())
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
