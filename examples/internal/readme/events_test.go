package readme

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/subagent"
)

// The guide's client, reading a served run with a sub-agent, builds a tree
// whose sub-agent has what it spent.
func TestReadGivesASubagentsUsage(t *testing.T) {
	model := fake.NewProvider(
		fake.Call("researcher", `{"task":"Which is the tallest mountain?"}`).For("lead"),
		fake.Text("Everest.").For("researcher"),
		fake.Text("It is Everest.").For("lead"),
	)
	expert, err := agent.NewReact(model, agent.WithName("researcher"))
	if err != nil {
		t.Fatal(err)
	}
	researcher, err := subagent.FromAgent("researcher", "Research one question.", expert)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(researcher))
	if err != nil {
		t.Fatal(err)
	}
	h, err := agui.New(lead)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(
		`{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":"What is the tallest mountain?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tree := subagent.NewTree(nil)
	if err := read(resp.Body, tree); err != nil {
		t.Fatal(err)
	}
	roots := tree.Roots()
	if len(roots) != 1 || roots[0].Name != "researcher" || roots[0].State != subagent.StateSucceeded {
		t.Fatalf("the tree read from the stream: %+v, want the researcher, finished", roots)
	}
	if u := roots[0].TotalUsage(); u.InputTokens == 0 || u.OutputTokens == 0 {
		t.Errorf("the researcher's usage read from the stream: %+v, want its call's tokens", u)
	}
}
