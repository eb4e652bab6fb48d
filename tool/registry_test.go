package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// fn is a tool made of a name and a function of the call.
func fn(name string, f func(ctx context.Context, c tool.Call) (tool.Result, error)) tool.Func {
	return tool.Func{Def: tool.Definition{Name: name, Description: "The " + name + " tool.", Parameters: json.RawMessage(`{"type":"object"}`)}, Fn: f}
}

// echo answers with its name and arguments.
func echo(name string) tool.Func {
	return fn(name, func(ctx context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: name + " " + string(c.Arguments)}, nil
	})
}

type allowKey struct{}

// gated is a tool available only when the context allows its name.
type gated struct{ tool.Func }

func (g gated) Available(ctx context.Context) bool {
	allowed, _ := ctx.Value(allowKey{}).(string)
	return strings.Contains(allowed, g.Def.Name)
}

func names(defs []tool.Definition) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

func TestRegistryRegister(t *testing.T) {
	tests := []struct {
		name    string
		tools   []tool.Tool
		wantErr string
	}{
		{"distinct", []tool.Tool{echo("a"), echo("b")}, ""},
		{"duplicate", []tool.Tool{echo("a"), echo("b"), echo("a")}, `tool: a tool named "a" is already registered: give each tool its own name`},
		{"nil tool", []tool.Tool{echo("a"), nil}, "tool: Register(nil): pass a Tool"},
		{"bad name", []tool.Tool{echo("a b")}, `tool: name "a b" is not allowed`},
		{"empty name", []tool.Tool{echo("")}, "tool: empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tool.NewRegistry(tt.tools...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if r.Len() != len(tt.tools) {
					t.Errorf("Len() = %d, want %d", r.Len(), len(tt.tools))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewRegistry error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}

	r, err := tool.NewRegistry(echo("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(echo("a")); err == nil {
		t.Error("Register of a second tool named a succeeded")
	}
	if r.Len() != 1 {
		t.Errorf("a refused tool was kept: Len() = %d", r.Len())
	}
}

func TestRegistryLookupAndOrder(t *testing.T) {
	c, b, a := echo("c"), echo("b"), echo("a")
	r, err := tool.NewRegistry(c, b, a)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Lookup("b"); !ok || got.Definition().Name != "b" {
		t.Errorf("Lookup(b) = %v, %v", got, ok)
	}
	if got, ok := r.Lookup("z"); ok || got != nil {
		t.Errorf("Lookup(z) = %v, %v; want nothing", got, ok)
	}
	var got []string
	for _, tl := range r.Tools() {
		got = append(got, tl.Definition().Name)
	}
	if diff := cmp.Diff([]string{"c", "b", "a"}, got); diff != "" {
		t.Errorf("Tools() in registration order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c", "b", "a"}, names(r.Definitions(t.Context()))); diff != "" {
		t.Errorf("Definitions() in registration order (-want +got):\n%s", diff)
	}
}

func TestRegistryNilAndZero(t *testing.T) {
	var nilReg *tool.Registry
	if nilReg.Len() != 0 || nilReg.Tools() != nil || nilReg.Definitions(t.Context()) != nil {
		t.Error("a nil registry is not empty")
	}
	if _, ok := nilReg.Lookup("a"); ok {
		t.Error("a nil registry found a tool")
	}
	res, err := nilReg.Execute(t.Context(), []tool.Call{{ID: "1", Name: "a"}})
	if err != nil || !res[0].IsError || !strings.Contains(res[0].Content, "no tools are available") {
		t.Errorf("Execute on a nil registry = %+v, %v; want an error result", res, err)
	}
	if got := nilReg.Filter(func(tool.Tool) bool { return true }); got == nil || got.Len() != 0 {
		t.Errorf("Filter on a nil registry = %v, want an empty registry", got)
	}

	// The zero value used to panic on Register and to deadlock on Execute.
	var zero tool.Registry
	if err := zero.Register(echo("a")); err != nil {
		t.Fatal(err)
	}
	if err := zero.Register(echo("b")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var results []tool.Result
	go func() {
		defer close(done)
		results, err = zero.Execute(context.Background(), []tool.Call{{Name: "a"}, {Name: "b"}})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Execute on a zero Registry did not return")
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]tool.Result{{Content: "a "}, {Content: "b "}}, results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestRegistryAvailable(t *testing.T) {
	r, err := tool.NewRegistry(echo("always"), gated{echo("search")}, gated{echo("spawn")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		allow string
		want  []string
	}{
		{"", []string{"always"}},
		{"search", []string{"always", "search"}},
		{"spawn search", []string{"always", "search", "spawn"}},
	}
	for _, tt := range tests {
		ctx := context.WithValue(t.Context(), allowKey{}, tt.allow)
		if diff := cmp.Diff(tt.want, names(r.Definitions(ctx))); diff != "" {
			t.Errorf("allowing %q: definitions (-want +got):\n%s", tt.allow, diff)
		}
	}

	// A call to a tool that is not available is answered as to an unknown tool.
	ctx := context.WithValue(t.Context(), allowKey{}, "search")
	res, err := r.Execute(ctx, []tool.Call{{ID: "1", Name: "spawn"}, {ID: "2", Name: "search", Arguments: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []tool.Result{
		{Content: `tool: unknown tool "spawn": call one of: always, search`, IsError: true},
		{Content: "search {}"},
	}
	if diff := cmp.Diff(want, res, ignoreErr); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestRegistryLimits(t *testing.T) {
	r, err := tool.NewRegistry(echo("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetParallelism(0); err == nil || err.Error() != "tool: parallelism 0: use 1 or more" {
		t.Errorf("SetParallelism(0) = %v", err)
	}
	if err := r.SetMaxArgumentBytes(1); err == nil || !strings.Contains(err.Error(), "use at least 2 bytes") {
		t.Errorf("SetMaxArgumentBytes(1) = %v", err)
	}
	if err := r.SetMaxArgumentBytes(10); err != nil {
		t.Fatal(err)
	}
	res, err := r.Execute(t.Context(), []tool.Call{
		{Name: "a", Arguments: json.RawMessage(`{"x":"12"}`)},  // 10 bytes: at the limit
		{Name: "a", Arguments: json.RawMessage(`{"x":"123"}`)}, // 11 bytes: over it
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []tool.Result{
		{Content: `a {"x":"12"}`},
		{Content: "tool: invalid arguments for a: the arguments are 11 bytes, more than the limit of 10: send less, or pass a reference instead of the content", IsError: true},
	}
	if diff := cmp.Diff(want, res, ignoreErr); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestRegistryExecuteErrors(t *testing.T) {
	errDisk := errors.New("disk on fire")
	used := provider.Usage{InputTokens: 7, Requests: 1}
	r, err := tool.NewRegistry(
		echo("ok"),
		fn("program", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Usage: used}, errDisk
		}),
		fn("correctable", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "lost", Usage: used}, tool.Correctable(errors.New("no such file: list the folder first"))
		}),
		fn("invalid", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{}, fmt.Errorf("%w: path must be relative", tool.ErrInvalidArguments)
		}),
		fn("refuses", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{Content: "not allowed", IsError: true}, nil
		}),
		fn("panics", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			panic("kaboom")
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		call    string
		want    tool.Result
		wantErr string
	}{
		{"ok", tool.Result{Content: "ok {}"}, ""},
		{"program", tool.Result{Usage: used}, "tool program: disk on fire"},
		{"correctable", tool.Result{Content: "no such file: list the folder first", IsError: true, Usage: used}, ""},
		{"invalid", tool.Result{Content: "tool: invalid arguments: path must be relative", IsError: true}, ""},
		{"refuses", tool.Result{Content: "not allowed", IsError: true}, ""},
		{"panics", tool.Result{Content: "tool panics failed: it panicked: kaboom", IsError: true}, ""},
		{"missing", tool.Result{Content: `tool: unknown tool "missing": call one of: correctable, invalid, ok, panics, program, refuses`, IsError: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			res, err := r.Execute(t.Context(), []tool.Call{{ID: "1", Name: tt.call, Arguments: json.RawMessage(`{}`)}})
			if diff := cmp.Diff([]tool.Result{tt.want}, res, ignoreErr); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Execute error %v, want none", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, errDisk) {
				t.Errorf("Execute error %v, want %q wrapping the tool's error", err, tt.wantErr)
			}
		})
	}
}

func TestRegistryPanicAmongOthers(t *testing.T) {
	r, err := tool.NewRegistry(echo("a"), fn("boom", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		var m map[string]int
		//lint:ignore SA5000 the tool panics on purpose
		m["x"]++ // a real bug: assignment to a nil map
		return tool.Result{}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Execute(t.Context(), []tool.Call{{Name: "a"}, {Name: "boom"}, {Name: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []tool.Result{
		{Content: "a "},
		{Content: "tool boom failed: it panicked: assignment to entry in nil map", IsError: true},
		{Content: "a "},
	}
	if diff := cmp.Diff(want, res, ignoreErr); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// Two calls that each wait for the other to start finish only when they
// really run at the same time; if they ran one after the other, synctest
// would report the deadlock.
func TestRegistryExecuteIsParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started sync.WaitGroup
		started.Add(2)
		both := fn("both", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			started.Done()
			started.Wait()
			return tool.Result{Content: string(c.Arguments)}, nil
		})
		r, err := tool.NewRegistry(both)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Execute(t.Context(), []tool.Call{{Name: "both", Arguments: json.RawMessage(`1`)}, {Name: "both", Arguments: json.RawMessage(`2`)}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]tool.Result{{Content: "1"}, {Content: "2"}}, res); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
	})
}

func TestRegistryParallelismBound(t *testing.T) {
	for _, bound := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var running, peak atomic.Int32
				slow := fn("slow", func(ctx context.Context, c tool.Call) (tool.Result, error) {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(time.Second)
					running.Add(-1)
					return tool.Result{Content: string(c.Arguments)}, nil
				})
				r, err := tool.NewRegistry(slow)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.SetParallelism(bound); err != nil {
					t.Fatal(err)
				}
				calls := make([]tool.Call, 6)
				for i := range calls {
					calls[i] = tool.Call{Name: "slow", Arguments: json.RawMessage(fmt.Sprint(i))}
				}
				start := time.Now()
				if _, err := r.Execute(t.Context(), calls); err != nil {
					t.Fatal(err)
				}
				if got := peak.Load(); got != int32(bound) {
					t.Errorf("at most %d calls ran at once, want exactly %d", got, bound)
				}
				want := time.Duration((6+bound-1)/bound) * time.Second
				if got := time.Since(start); got != want {
					t.Errorf("6 one-second calls with a bound of %d took %v, want %v", bound, got, want)
				}
			})
		})
	}
}

// Results come back in call order, whatever order the calls finish in.
func TestRegistryResultOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sleepy := fn("sleepy", func(ctx context.Context, c tool.Call) (tool.Result, error) {
			var d int
			if err := json.Unmarshal(c.Arguments, &d); err != nil {
				return tool.Result{}, err
			}
			time.Sleep(time.Duration(d) * time.Second)
			return tool.Result{Content: string(c.Arguments)}, nil
		})
		r, err := tool.NewRegistry(sleepy)
		if err != nil {
			t.Fatal(err)
		}
		var calls []tool.Call
		var want []tool.Result
		for _, d := range []string{"5", "1", "4", "2", "3"} {
			calls = append(calls, tool.Call{Name: "sleepy", Arguments: json.RawMessage(d)})
			want = append(want, tool.Result{Content: d})
		}
		got, err := r.Execute(t.Context(), calls)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, ignoreErr); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
	})
}

// A program error cancels the calls still running and starts no other.
func TestRegistryProgramErrorStopsTheTurn(t *testing.T) {
	errDisk := errors.New("disk on fire")
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		r, err := tool.NewRegistry(
			fn("fail", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				time.Sleep(time.Second)
				return tool.Result{}, errDisk
			}),
			fn("wait", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				ran.Add(1)
				<-ctx.Done()
				return tool.Result{Content: "cancelled"}, ctx.Err()
			}),
			fn("later", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				ran.Add(1)
				return tool.Result{Content: "ran"}, nil
			}),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.SetParallelism(2); err != nil {
			t.Fatal(err)
		}
		res, err := r.Execute(t.Context(), []tool.Call{{Name: "fail"}, {Name: "wait"}, {Name: "later"}, {Name: "later"}})
		if !errors.Is(err, errDisk) {
			t.Fatalf("Execute error %v, want the failing tool's", err)
		}
		if got := ran.Load(); got != 1 {
			t.Errorf("%d calls ran, want 1 (only the one started before the failure)", got)
		}
		want := []tool.Result{
			{},
			{Content: "cancelled"},
			{Content: "tool later was not run: tool fail: disk on fire", IsError: true},
			{Content: "tool later was not run: tool fail: disk on fire", IsError: true},
		}
		if diff := cmp.Diff(want, res, ignoreErr); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
	})
}

func TestRegistryExecuteCancelled(t *testing.T) {
	var ran atomic.Int32
	r, err := tool.NewRegistry(fn("a", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		ran.Add(1)
		return tool.Result{}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, n := range []int{1, 3} {
		calls := make([]tool.Call, n)
		for i := range calls {
			calls[i] = tool.Call{Name: "a"}
		}
		res, err := r.Execute(ctx, calls)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%d calls: error %v, want context.Canceled", n, err)
		}
		if len(res) != n || !res[0].IsError {
			t.Errorf("%d calls: results %+v, want %d error results", n, res, n)
		}
	}
	if ran.Load() != 0 {
		t.Errorf("%d calls ran under a cancelled context", ran.Load())
	}
	if res, err := r.Execute(ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("Execute(no calls) = %v, %v", res, err)
	}
}

func TestRegistryFilter(t *testing.T) {
	r, err := tool.NewRegistry(echo("read"), echo("write"), echo("list"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetMaxArgumentBytes(4); err != nil {
		t.Fatal(err)
	}
	ro := r.Filter(func(tl tool.Tool) bool { return tl.Definition().Name != "write" })
	if diff := cmp.Diff([]string{"read", "list"}, names(ro.Definitions(t.Context()))); diff != "" {
		t.Errorf("filtered definitions (-want +got):\n%s", diff)
	}
	res, err := ro.Execute(t.Context(), []tool.Call{{Name: "write"}, {Name: "read", Arguments: json.RawMessage(`"long"`)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []tool.Result{
		{Content: `tool: unknown tool "write": call one of: list, read`, IsError: true},
		{Content: "tool: invalid arguments for read: the arguments are 6 bytes, more than the limit of 4: send less, or pass a reference instead of the content", IsError: true},
	}
	if diff := cmp.Diff(want, res, ignoreErr); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if err := ro.Register(echo("extra")); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("extra"); ok {
		t.Error("registering in the filtered registry changed the original")
	}
}

// Registering while turns run is safe (run with -race).
func TestRegistryConcurrentUse(t *testing.T) {
	r, err := tool.NewRegistry(echo("a"), gated{echo("g")})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := r.Register(echo(fmt.Sprintf("t%d", i))); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			res, err := r.Execute(context.Background(), []tool.Call{{Name: "a"}, {Name: "g"}})
			if err != nil || res[0].Content != "a " || !res[1].IsError {
				t.Errorf("Execute = %+v, %v", res, err)
			}
			_ = r.Definitions(context.Background())
			_ = r.Tools()
		})
	}
	wg.Wait()
	if r.Len() != 10 {
		t.Errorf("Len() = %d, want 10", r.Len())
	}
}

// ignoreErr leaves Result.Err out of comparisons: it carries the cause for Go
// callers, and TestRegistryErrorCause checks it on its own.
var ignoreErr = cmpopts.IgnoreFields(tool.Result{}, "Err")

// Every error Result keeps its cause, so errors.Is reaches the sentinel.
func TestRegistryErrorCause(t *testing.T) {
	boom := tool.Func{Def: tool.Definition{Name: "boom", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { panic("kaboom") }}
	bad := tool.Func{Def: tool.Definition{Name: "bad", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) { return tool.Result{}, tool.ErrInvalidArguments }}
	r, err := tool.NewRegistry(boom, bad)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Execute(t.Context(), []tool.Call{{ID: "1", Name: "boom"}, {ID: "2", Name: "bad"}, {ID: "3", Name: "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{tool.ErrPanic, tool.ErrInvalidArguments, tool.ErrUnknownTool} {
		if !res[i].IsError || !errors.Is(res[i].Err, want) {
			t.Errorf("result %d: IsError %v, Err %v; want an error result whose cause is %v", i, res[i].IsError, res[i].Err, want)
		}
	}
}
