package tool_test

import (
	"context"
	"testing"

	"github.com/deputy-go/deputy/tool"
)

func TestRegistryRemove(t *testing.T) {
	named := func(n string) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: n}, Fn: func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{Content: n}, nil
		}}
	}
	reg, err := tool.NewRegistry(named("a"), named("b"), named("c"))
	if err != nil {
		t.Fatal(err)
	}
	held := reg.Definitions(context.Background())
	if !reg.Remove("b") {
		t.Fatal("Remove(b) reported false")
	}
	if reg.Remove("b") || reg.Remove("zzz") {
		t.Error("removing a tool that is not there reported true")
	}
	var names []string
	for _, d := range reg.Definitions(context.Background()) {
		names = append(names, d.Name)
	}
	if got := len(names); got != 2 || names[0] != "a" || names[1] != "c" {
		t.Errorf("definitions after Remove: %v, want [a c]", names)
	}
	if len(held) != 3 || held[1].Name != "b" {
		t.Errorf("definitions a caller held were changed: %v", held)
	}
	res, err := reg.Execute(context.Background(), []tool.Call{{Name: "b"}})
	if err != nil || !res[0].IsError {
		t.Errorf("a call to a removed tool: %+v %v, want an unknown-tool error result", res, err)
	}
	if err := reg.Register(named("b")); err != nil {
		t.Errorf("registering the name again: %v", err)
	}
}
