package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	invopop "github.com/invopop/jsonschema"

	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=the city to report on"`
	Days int    `json:"days,omitempty"`
}

func weatherTool(t *testing.T) tool.Tool {
	t.Helper()
	w, err := tool.New("weather", "Reports the weather.", func(ctx context.Context, in weatherArgs) (string, error) {
		if in.Days > 0 {
			return "sunny in " + in.City + " for " + strings.Repeat("+", in.Days), nil
		}
		return "sunny in " + in.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestTypedToolArguments(t *testing.T) {
	w := weatherTool(t)
	tests := []struct {
		name    string
		args    string
		want    string // the Result's content when the call succeeds
		wantErr string // the error's text when it does not
	}{
		{name: "valid", args: `{"city":"Lisbon"}`, want: "sunny in Lisbon"},
		{name: "optional field", args: `{"city":"Lisbon","days":2}`, want: "sunny in Lisbon for ++"},
		{name: "surrounding blanks", args: " \n{\"city\":\"Lisbon\"}\t", want: "sunny in Lisbon"},
		{name: "malformed JSON", args: `{"city":`,
			wantErr: "tool: invalid arguments for weather: not valid JSON: unexpected EOF: fix the arguments to match the tool's schema and call it again"},
		{name: "wrong type", args: `{"city":5}`,
			wantErr: "tool: invalid arguments for weather: at /city: got number, want string: fix the arguments to match the tool's schema and call it again"},
		{name: "null", args: `null`,
			wantErr: "tool: invalid arguments for weather: at the top level: got null, want object: fix the arguments to match the tool's schema and call it again"},
		{name: "array", args: `[{"city":"Lisbon"}]`,
			wantErr: "tool: invalid arguments for weather: at the top level: got array, want object: fix the arguments to match the tool's schema and call it again"},
		{name: "missing required", args: `{}`,
			wantErr: "tool: invalid arguments for weather: at the top level: missing property 'city': fix the arguments to match the tool's schema and call it again"},
		{name: "no arguments at all", args: ``,
			wantErr: "tool: invalid arguments for weather: at the top level: missing property 'city': fix the arguments to match the tool's schema and call it again"},
		{name: "unknown property", args: `{"city":"Lisbon","country":"PT"}`,
			wantErr: "tool: invalid arguments for weather: at the top level: additional properties 'country' not allowed: fix the arguments to match the tool's schema and call it again"},
		{name: "two problems", args: `{"city":1,"days":"2"}`,
			wantErr: "at /city: got number, want string; at /days: got string, want integer"},
		{name: "fraction for an integer", args: `{"city":"Lisbon","days":1.5}`,
			wantErr: "at /days: got number, want integer"},
		{name: "an integer written with an exponent", args: `{"city":"Lisbon","days":1e1}`, want: "sunny in Lisbon for ++++++++++"},
		{name: "an integer the field cannot hold", args: `{"city":"Lisbon","days":1e30}`,
			wantErr: "tool: invalid arguments for weather: at /days: number 1e30 does not fit this field: send a whole number from -9223372036854775808 to 9223372036854775807"},
		{name: "trailing data", args: `{"city":"Lisbon"} {}`,
			wantErr: "tool: invalid arguments for weather: not valid JSON: invalid character after top-level value"},
		{name: "a string", args: `"Lisbon"`,
			wantErr: "at the top level: got string, want object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := w.Call(t.Context(), tool.Call{ID: "c1", Name: "weather", Arguments: json.RawMessage(tt.args)})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if diff := cmp.Diff(tool.Result{Content: tt.want}, res); diff != "" {
					t.Errorf("Result (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Call succeeded with %+v, want an error containing %q", res, tt.wantErr)
			}
			if !errors.Is(err, tool.ErrInvalidArguments) || !tool.IsCorrectable(err) {
				t.Errorf("error %v: want it to wrap ErrInvalidArguments and be correctable", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
}

func TestTypedToolPointerArguments(t *testing.T) {
	w, err := tool.New("echo", "Echoes.", func(ctx context.Context, in *weatherArgs) (string, error) { return in.City, nil })
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Call(t.Context(), tool.Call{Name: "echo", Arguments: json.RawMessage(`{"city":"Porto"}`)})
	if err != nil || res.Content != "Porto" {
		t.Fatalf("Call = %+v, %v; want Porto", res, err)
	}
	if _, err := w.Call(t.Context(), tool.Call{Name: "echo", Arguments: json.RawMessage(`null`)}); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Fatalf("null arguments: error %v, want ErrInvalidArguments (never a nil pointer)", err)
	}
}

func TestTypedToolSchema(t *testing.T) {
	w := weatherTool(t)
	def := w.Definition()
	var got map[string]any
	if err := json.Unmarshal(def.Parameters, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "description": "the city to report on"},
			"days": map[string]any{"type": "integer"},
		},
		"required":             []any{"city"},
		"additionalProperties": false,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tool.Definition{Name: "weather", Description: "Reports the weather.", Parameters: def.Parameters}, def); diff != "" {
		t.Errorf("definition (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(def, w.Definition()); diff != "" {
		t.Errorf("Definition changed between calls (-first +second):\n%s", diff)
	}
}

type node struct {
	Name     string `json:"name"`
	Children []node `json:"children,omitempty"`
	Next     *node  `json:"next,omitempty"`
}

type forest struct {
	Trees []node `json:"trees"`
}

// A recursive argument type used to make New loop forever.
func TestTypedToolRecursiveArguments(t *testing.T) {
	type made struct {
		t   tool.Tool
		err error
	}
	done := make(chan made, 1)
	go func() {
		tl, err := tool.New("count", "Counts nodes.", func(ctx context.Context, in forest) (int, error) {
			var count func(n node) int
			count = func(n node) int {
				c := 1
				for _, ch := range n.Children {
					c += count(ch)
				}
				if n.Next != nil {
					c += count(*n.Next)
				}
				return c
			}
			total := 0
			for _, tr := range in.Trees {
				total += count(tr)
			}
			return total, nil
		})
		done <- made{tl, err}
	}()
	var m made
	select {
	case m = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("tool.New did not return for a recursive type")
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	var schema struct {
		Type string         `json:"type"`
		Defs map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(m.t.Definition().Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || len(schema.Defs) == 0 {
		t.Errorf("schema %s: want a top-level object with $defs", m.t.Definition().Parameters)
	}
	tests := []struct {
		args, want, wantErr string
	}{
		{args: `{"trees":[{"name":"a","children":[{"name":"b"},{"name":"c","next":{"name":"d"}}]}]}`, want: "4"},
		{args: `{"trees":[{"name":"a","children":[{"name":"b","next":{"name":5}}]}]}`, wantErr: "at /trees/0/children/0/next/name: got number, want string"},
		{args: `{"trees":[{"name":"a","children":[{"nom":"b"}]}]}`, wantErr: "missing property 'name'"},
	}
	for _, tt := range tests {
		res, err := m.t.Call(t.Context(), tool.Call{Name: "count", Arguments: json.RawMessage(tt.args)})
		switch {
		case tt.wantErr == "" && (err != nil || res.Content != tt.want):
			t.Errorf("Call(%s) = %+v, %v; want %s", tt.args, res, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Call(%s) error %v; want it to contain %q", tt.args, err, tt.wantErr)
		}
	}
}

type report struct {
	City string `json:"city"`
	Temp int    `json:"temp"`
}

func TestTypedToolOutput(t *testing.T) {
	ctx := t.Context()
	call := tool.Call{Name: "t", Arguments: json.RawMessage(`{"city":"Faro"}`)}
	used := provider.Usage{InputTokens: 10, OutputTokens: 5, Requests: 1}
	errDisk := errors.New("disk on fire")

	tests := []struct {
		name            string
		tool            tool.Tool
		want            tool.Result
		wantErr         error
		wantCorrectable bool
	}{
		{
			name: "string as it is",
			tool: tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (string, error) { return `"quoted" ` + in.City, nil })),
			want: tool.Result{Content: `"quoted" Faro`},
		},
		{
			name: "struct as JSON, with its value",
			tool: tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (report, error) { return report{in.City, 25}, nil })),
			want: tool.Result{Content: `{"city":"Faro","temp":25}`, Value: report{"Faro", 25}},
		},
		{
			name: "Result as it is",
			tool: tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (tool.Result, error) {
				return tool.Result{Content: "child says hi", Usage: used}, nil
			})),
			want: tool.Result{Content: "child says hi", Usage: used},
		},
		{
			name:    "program error",
			tool:    tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (string, error) { return "ignored", errDisk })),
			wantErr: errDisk,
		},
		{
			name: "correctable error",
			tool: tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (string, error) {
				return "", tool.Correctable(errors.New("no such city: try a capital"))
			})),
			wantCorrectable: true,
		},
		{
			// The Usage of a failed child must still be counted.
			name: "Result with an error keeps its usage",
			tool: tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (tool.Result, error) {
				return tool.Result{Usage: used}, errDisk
			})),
			want:    tool.Result{Usage: used},
			wantErr: errDisk,
		},
		{
			name:    "unencodable output",
			tool:    tool.Must(tool.New("t", "", func(ctx context.Context, in weatherArgs) (func(), error) { return func() {}, nil })),
			wantErr: &json.UnsupportedTypeError{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.tool.Call(ctx, call)
			if diff := cmp.Diff(tt.want, res); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantCorrectable:
				if !tool.IsCorrectable(err) {
					t.Errorf("error %v: want a correctable one", err)
				}
			case tt.wantErr == nil:
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
			default:
				var ute *json.UnsupportedTypeError
				if errors.As(tt.wantErr, &ute) {
					if !errors.As(err, &ute) {
						t.Errorf("error %v, want a *json.UnsupportedTypeError in the chain", err)
					}
				} else if !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v, want %v in the chain", err, tt.wantErr)
				}
				if tool.IsCorrectable(err) {
					t.Errorf("error %v is correctable; a program error must not be", err)
				}
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	fn := func(ctx context.Context, in weatherArgs) (string, error) { return "", nil }
	tests := []struct {
		name    string
		make    func() (tool.Tool, error)
		wantErr string
	}{
		{"empty name", func() (tool.Tool, error) { return tool.New("", "d", fn) }, `tool: empty name: give the tool a name the model can call, like "search"`},
		{"space in name", func() (tool.Tool, error) { return tool.New("get weather", "d", fn) }, `tool: name "get weather" is not allowed`},
		{"dot in name", func() (tool.Tool, error) { return tool.New("a.b", "d", fn) }, `tool: name "a.b" is not allowed`},
		{"name too long", func() (tool.Tool, error) { return tool.New(strings.Repeat("x", 65), "d", fn) }, `is not allowed: use at most 64`},
		{"nil function", func() (tool.Tool, error) {
			return tool.New[weatherArgs, string]("w", "d", nil)
		}, `tool "w": nil function`},
		{"string arguments", func() (tool.Tool, error) {
			return tool.New("w", "d", func(ctx context.Context, in string) (string, error) { return in, nil })
		}, `tool "w": arguments type string is not a struct: models call tools with a JSON object, so wrap it in a struct`},
		{"slice arguments", func() (tool.Tool, error) {
			return tool.New("w", "d", func(ctx context.Context, in []weatherArgs) (string, error) { return "", nil })
		}, `is not a struct`},
		{"map arguments", func() (tool.Tool, error) {
			return tool.New("w", "d", func(ctx context.Context, in map[string]any) (string, error) { return "", nil })
		}, `is not a struct`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := tt.make()
			if err == nil {
				t.Fatalf("New returned %v, want an error", tl)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
	ok := []string{"a", "get_weather", "get-weather", "A1", strings.Repeat("x", 64)}
	for _, name := range ok {
		if _, err := tool.New(name, "d", fn); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
}

func TestMust(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Must did not panic on an error")
		}
	}()
	tool.Must(tool.New("", "", func(ctx context.Context, in weatherArgs) (string, error) { return "", nil }))
}

func TestCorrectable(t *testing.T) {
	base := errors.New("base")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", base, false},
		{"marked", tool.Correctable(base), true},
		{"marked then wrapped", fmt.Errorf("outer: %w", tool.Correctable(base)), true},
		{"invalid arguments", fmt.Errorf("%w: bad", tool.ErrInvalidArguments), true},
		{"unknown tool", fmt.Errorf("%w: x", tool.ErrUnknownTool), true},
		{"cancelled", context.Canceled, false},
		{"joined", errors.Join(base, tool.Correctable(base)), true},
	}
	for _, tt := range tests {
		if got := tool.IsCorrectable(tt.err); got != tt.want {
			t.Errorf("%s: IsCorrectable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
	if tool.Correctable(nil) != nil {
		t.Error("Correctable(nil) is not nil")
	}
	c := tool.Correctable(base)
	if !errors.Is(c, base) || c.Error() != "base" {
		t.Errorf("Correctable(base) = %q, unwrapping to base: %v", c, errors.Is(c, base))
	}
}

func TestFunc(t *testing.T) {
	def := tool.Definition{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}
	f := tool.Func{Def: def, Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: c.ID + ":" + string(c.Arguments)}, nil
	}}
	if diff := cmp.Diff(def, f.Definition()); diff != "" {
		t.Errorf("Definition (-want +got):\n%s", diff)
	}
	res, err := f.Call(t.Context(), tool.Call{ID: "x", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Content != "x:{}" {
		t.Errorf("Call = %+v, %v", res, err)
	}
}

func TestArguments(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "{}"},
		{" \t\r\n", "{}"},
		{"{}", "{}"},
		{`{"a":1}`, `{"a":1}`},
		{"null", "null"},
		{" x ", " x "},
	}
	for _, tt := range tests {
		if got := string(toolcall.Arguments(json.RawMessage(tt.in))); got != tt.want {
			t.Errorf("Arguments(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The schema is compiled once, in New: a call costs a few dozen
// allocations, where compiling a schema costs thousands.
func TestTypedToolCompilesOnce(t *testing.T) {
	w := weatherTool(t)
	call := tool.Call{Name: "weather", Arguments: json.RawMessage(`{"city":"Lisbon"}`)}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := w.Call(context.Background(), call); err != nil {
			t.Fatal(err)
		}
	})
	compile := testing.AllocsPerRun(10, func() {
		if _, err := jsonschema.For[weatherArgs](); err != nil {
			t.Fatal(err)
		}
	})
	if allocs*10 > compile {
		t.Errorf("a call allocates %v times, compiling the schema %v: the call must not compile", allocs, compile)
	}
}

// An unnamed argument struct around a recursive type.
func TestTypedToolRecursiveInsideUnnamed(t *testing.T) {
	tl, err := tool.New("count", "Counts trees.", func(ctx context.Context, in struct {
		Trees []node `json:"trees"`
	}) (int, error) {
		return len(in.Trees), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tl.Call(t.Context(), tool.Call{Arguments: json.RawMessage(`{"trees":[{"name":"a","children":[{"name":"b"}]}]}`)})
	if err != nil || res.Content != "1" {
		t.Errorf("Call = %+v, %v", res, err)
	}
	_, err = tl.Call(t.Context(), tool.Call{Arguments: json.RawMessage(`{"trees":[{"name":"a","children":[{"name":1}]}]}`)})
	if err == nil || !strings.Contains(err.Error(), "at /trees/0/children/0/name: got number, want string") {
		t.Errorf("error %v", err)
	}
}

// openArgs gives its own schema, which leaves other keys open.
type openArgs struct {
	Path string `json:"path"`
}

func (openArgs) JSONSchema() *invopop.Schema {
	return &invopop.Schema{Type: "object", Required: []string{"path"}}
}

// Arguments that pass the schema but hold a key encoding/json would read
// into a field by ignoring case are refused before the function runs,
// with the key to send: the function would read another path than the
// one a policy or a viewer saw.
func TestNewRefusesAKeyInAnotherCase(t *testing.T) {
	var ran []string
	tl, err := tool.New("remove", "Removes a file.", func(_ context.Context, in openArgs) (string, error) {
		ran = append(ran, in.Path)
		return "removed", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"path":"tmp/x","PATH":"/etc"}`, `{"path":"tmp/x","Path":"/etc"}`} {
		_, err = tl.Call(context.Background(), tool.Call{Arguments: json.RawMessage(args)})
		if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), `spell it "path"`) {
			t.Errorf("%s: %v, want ErrInvalidArguments saying which key to send", args, err)
		}
	}
	if _, err := tl.Call(context.Background(), tool.Call{Arguments: json.RawMessage(`{"path":"tmp/x","other":1}`)}); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 || ran[0] != "tmp/x" {
		t.Fatalf("the function ran with %q", ran)
	}
}
