package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deputy-go/deputy/tool"
)

type addArgs struct {
	A int `json:"a" jsonschema:"description=the first number"`
	B int `json:"b" jsonschema:"description=the second number"`
}

// A typed tool: its schema is reflected from the argument type, and bad
// arguments come back as an error the model can correct.
func ExampleNew() {
	add := tool.Must(tool.New("add", "Adds two integers.", func(ctx context.Context, in addArgs) (int, error) {
		return in.A + in.B, nil
	}))
	fmt.Println(string(add.Definition().Parameters))

	res, err := add.Call(context.Background(), tool.Call{Name: "add", Arguments: json.RawMessage(`{"a":2,"b":3}`)})
	fmt.Println(res.Content, err)

	_, err = add.Call(context.Background(), tool.Call{Name: "add", Arguments: json.RawMessage(`{"a":2,"b":"three"}`)})
	fmt.Println(tool.IsCorrectable(err))
	fmt.Println(err)
	// Output:
	// {"properties":{"a":{"type":"integer","description":"the first number"},"b":{"type":"integer","description":"the second number"}},"additionalProperties":false,"type":"object","required":["a","b"]}
	// 5 <nil>
	// true
	// tool: invalid arguments for add: at /b: got string, want integer: fix the arguments to match the tool's schema and call it again
}

// A model turn's calls run in parallel; the results come back in call order,
// and what the model can fix becomes an error result rather than a Go error.
func ExampleRegistry_Execute() {
	add := tool.Must(tool.New("add", "Adds two integers.", func(ctx context.Context, in addArgs) (int, error) {
		return in.A + in.B, nil
	}))
	reg, err := tool.NewRegistry(add)
	if err != nil {
		panic(err)
	}
	results, err := reg.Execute(context.Background(), []tool.Call{
		{ID: "1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)},
		{ID: "2", Name: "multiply", Arguments: json.RawMessage(`{"a":3,"b":4}`)},
		{ID: "3", Name: "add", Arguments: json.RawMessage(`{"a":1}`)},
	})
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Printf("error=%v %s\n", r.IsError, r.Content)
	}
	// Output:
	// error=false 3
	// error=true tool: unknown tool "multiply": call one of: add
	// error=true tool: invalid arguments for add: at the top level: missing property 'b': fix the arguments to match the tool's schema and call it again
}

type depthKey struct{}

// shallowOnly is a tool that disappears below the top level.
type shallowOnly struct{ tool.Func }

func (shallowOnly) Available(ctx context.Context) bool {
	depth, _ := ctx.Value(depthKey{}).(int)
	return depth == 0
}

// A tool that implements Available can vanish from what the model is shown.
func ExampleRegistry_Definitions() {
	spawn := shallowOnly{tool.Func{
		Def: tool.Definition{Name: "spawn", Description: "Starts a helper.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "started"}, nil
		},
	}}
	search := tool.Func{
		Def: tool.Definition{Name: "search", Description: "Searches.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "found"}, nil
		},
	}
	reg, err := tool.NewRegistry(search, spawn)
	if err != nil {
		panic(err)
	}
	for depth := range 2 {
		ctx := context.WithValue(context.Background(), depthKey{}, depth)
		var names []string
		for _, d := range reg.Definitions(ctx) {
			names = append(names, d.Name)
		}
		fmt.Println(depth, names)
	}
	// Output:
	// 0 [search spawn]
	// 1 [search]
}

// A tool reports a failure the model can act on with Correctable; any other
// error ends the agent's run.
func ExampleCorrectable() {
	open := tool.Func{
		Def: tool.Definition{Name: "open", Description: "Opens a file.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			if string(c.Arguments) == `{"path":"/etc/passwd"}` {
				return tool.Result{}, errors.New("sandbox breached")
			}
			return tool.Result{}, tool.Correctable(errors.New("no such file: list the folder first"))
		},
	}
	reg, _ := tool.NewRegistry(open)
	res, err := reg.Execute(context.Background(), []tool.Call{{Name: "open", Arguments: json.RawMessage(`{"path":"notes.txt"}`)}})
	fmt.Println(res[0].IsError, res[0].Content, err)
	_, err = reg.Execute(context.Background(), []tool.Call{{Name: "open", Arguments: json.RawMessage(`{"path":"/etc/passwd"}`)}})
	fmt.Println(err)
	// Output:
	// true no such file: list the folder first <nil>
	// tool open: sandbox breached
}
