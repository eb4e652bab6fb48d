package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/tool"
)

type fuzzArgs struct {
	Name  string   `json:"name"`
	Count int      `json:"count,omitempty" jsonschema:"minimum=0,maximum=100"`
	Tags  []string `json:"tags,omitempty"`
	Inner *struct {
		Flag bool `json:"flag"`
	} `json:"inner,omitempty"`
}

// FuzzToolArguments feeds a model's arguments, any bytes at all, through a
// typed tool in a registry: the call never panics, invalid arguments are
// correctable error results, and the function only ever sees arguments that
// match the schema.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{"name":"a"}`, `{"name":"a","count":3,"tags":["x"],"inner":{"flag":true}}`, `null`, `[]`, `{`, `{"name":1}`, ``, `{"name":"a","extra":1}`, `"str"`, `{"count":-1,"name":""}`} {
		f.Add([]byte(s))
	}
	seen := func(ctx context.Context, in fuzzArgs) (string, error) {
		if in.Count < 0 || in.Count > 100 {
			return "", errors.New("schema let an out-of-range count through")
		}
		return "ok", nil
	}
	tl, err := tool.New("fuzz", "fuzzed", seen)
	if err != nil {
		f.Fatal(err)
	}
	reg, err := tool.NewRegistry(tl)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		res, err := reg.Execute(context.Background(), []tool.Call{{ID: "1", Name: "fuzz", Arguments: args}})
		if err != nil {
			t.Fatalf("a bad argument became a program error: %v", err)
		}
		r := res[0]
		if !r.IsError {
			if r.Content != "ok" {
				t.Fatalf("unexpected content %q", r.Content)
			}
			var v fuzzArgs
			if json.Unmarshal(toolcall.Arguments(args), &v) != nil {
				t.Fatalf("accepted arguments that do not decode: %q", args)
			}
			return
		}
		if r.Content == "" || !errors.Is(r.Err, tool.ErrInvalidArguments) {
			t.Fatalf("an error result without a correctable cause: %q %v", r.Content, r.Err)
		}
	})
}
