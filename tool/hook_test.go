package tool_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type hookCtxKey struct{}

func TestCallHook(t *testing.T) {
	seen := func(name string, fn func(ctx context.Context, c tool.Call) (tool.Result, error)) tool.Tool {
		return tool.Func{Def: tool.Definition{Name: name}, Fn: fn}
	}
	reg, err := tool.NewRegistry(
		seen("echo", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			// The tool runs under the context the hook returned for this call.
			return tool.Result{Content: ctx.Value(hookCtxKey{}).(string)}, nil
		}),
		seen("oops", func(context.Context, tool.Call) (tool.Result, error) { panic("boom") }),
		seen("bad", func(context.Context, tool.Call) (tool.Result, error) {
			return tool.Result{}, tool.Correctable(errors.New("try again"))
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		id      string
		isError bool
		err     error
	}
	var (
		mu   sync.Mutex
		outs []outcome
	)
	hook := func(ctx context.Context, c tool.Call) (context.Context, func(tool.Result, error)) {
		ctx = context.WithValue(ctx, hookCtxKey{}, "ctx of "+c.ID)
		return ctx, func(res tool.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			outs = append(outs, outcome{c.ID, res.IsError, err})
		}
	}
	calls := []provider.ToolCall{
		{ID: "1", Name: "echo"}, {ID: "2", Name: "echo"}, {ID: "3", Name: "oops"}, {ID: "4", Name: "bad"}, {ID: "5", Name: "missing"},
	}
	results, err := reg.Execute(tool.WithCallHook(context.Background(), hook), calls)
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Content != "ctx of 1" || results[1].Content != "ctx of 2" {
		t.Errorf("each call gets its own context: %q, %q", results[0].Content, results[1].Content)
	}
	sort.Slice(outs, func(i, j int) bool { return outs[i].id < outs[j].id })
	want := []outcome{{"1", false, nil}, {"2", false, nil}, {"3", true, nil}, {"4", true, nil}, {"5", true, nil}}
	if len(outs) != len(want) {
		t.Fatalf("hook finished %d calls, want %d: %+v", len(outs), len(want), outs)
	}
	for i := range want {
		if outs[i] != want[i] {
			t.Errorf("call %s: got %+v, want %+v", want[i].id, outs[i], want[i])
		}
	}

	// Without a hook nothing is observed; a nil hook removes one.
	outs = nil
	if _, err := reg.Execute(tool.WithCallHook(tool.WithCallHook(context.Background(), hook), nil), calls[2:3]); err != nil {
		t.Fatal(err)
	}
	if len(outs) != 0 {
		t.Errorf("a nil hook still observed %v", outs)
	}
}
