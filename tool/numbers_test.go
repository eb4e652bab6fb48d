package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/tool"
)

// Numbers a model writes for an integer field: a whole number written with
// a fraction or an exponent is taken as the integer it is; one that does
// not fit says where and what to send; one beyond a float's range says so
// instead of reading as ∞.
func TestTypedToolNumbers(t *testing.T) {
	type inner struct {
		Small int8 `json:"small,omitempty"`
	}
	tl := tool.Must(tool.New("count", "Counts.", func(ctx context.Context, in struct {
		N     int     `json:"n,omitempty"`
		Ratio float64 `json:"ratio,omitempty"`
		In    inner   `json:"in,omitempty"`
	}) (string, error) {
		return fmt.Sprint(in.N, " ", in.Ratio, " ", in.In.Small), nil
	}))
	for _, c := range []struct{ args, want string }{
		{`{"n":1.0}`, "1 0 0"},
		{`{"n":1e2,"ratio":2.0}`, "100 2 0"},
		{`{"n":-2.50e1,"in":{"small":1.0}}`, "-25 0 1"},
		{`{"n":3,"ratio":1.5}`, "3 1.5 0"},
	} {
		res, err := tl.Call(context.Background(), tool.Call{Name: "count", Arguments: json.RawMessage(c.args)})
		if err != nil || res.Content != c.want {
			t.Errorf("%s: %q, %v; want %q", c.args, res.Content, err, c.want)
		}
	}
	for _, c := range []struct{ args, want string }{
		{`{"in":{"small":300}}`, "at /in/small: number 300 does not fit this field: send a whole number from -128 to 127"},
		{`{"n":1e30}`, "at /n: number 1e30 does not fit this field: send a whole number from -9223372036854775808 to 9223372036854775807"},
		{`{"n":1e400}`, "number 1e400 is too large: send one within ±1.7e308"},
		{`{"n":1.5}`, "at /n: got number, want integer"},
	} {
		_, err := tl.Call(context.Background(), tool.Call{Name: "count", Arguments: json.RawMessage(c.args)})
		if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct field") {
			t.Errorf("%s: %v; want ErrInvalidArguments saying %q", c.args, err, c.want)
		}
	}
}
