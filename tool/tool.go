package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/toolcall"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
)

// Definition describes a tool to a model.
type Definition = provider.ToolDef

// Call is one request from a model to run a tool.
type Call = provider.ToolCall

// Result is what a tool call produced.
type Result struct {
	// Content is what the model reads.
	Content string
	// IsError tells the model the call failed and Content says why.
	IsError bool
	// Usage is model work done inside the tool (a sub-agent's tokens); the
	// agent folds it into its ChildUsage. A Registry raises it, count by
	// count, to what the agents run under the call spent: a sub-agent the
	// tool runs itself counts whether or not the tool reports it.
	Usage provider.Usage
	// Value is a structured form of Content for Go callers, such as a
	// sub-agent's validated answer. It is never sent to a model.
	Value any
	// Err is the failure behind an error Result, kept for Go callers and
	// error chains (errors.Is/As). It is never sent to a model.
	Err error
}

// Tool is something a model can call.
//
// Definition must return the same value every time and must be cheap. Call
// must be safe for concurrent use: the calls of one model turn run in
// parallel. Call returns a Result the model reads, or a Go error that ends
// the run (see the package documentation for the two channels); when it
// returns an error, the Usage in its Result is still counted.
type Tool interface {
	Definition() Definition
	Call(ctx context.Context, call Call) (Result, error)
}

// Conditional is the optional capability of a tool that is not always
// offered. The Registry leaves a tool whose Available reports false out of
// the definitions sent to the model, and answers a call to it as to an
// unknown tool. This is how a depth cap or a denied permission makes a tool
// disappear instead of refusing.
type Conditional interface {
	Available(ctx context.Context) bool
}

// ErrInvalidArguments marks a call whose arguments are wrong. It is
// correctable: the model is told what was wrong and may try again.
var ErrInvalidArguments = errors.New("tool: invalid arguments")

// ErrUnknownTool marks a call to a tool that is not registered or not
// available. It is correctable.
var ErrUnknownTool = errors.New("tool: unknown tool")

// ErrPanic marks a tool call that panicked. The Registry recovers the panic
// into an error Result, so the run goes on and the model can try another way.
var ErrPanic = toolcall.ErrPanic

type correctable struct{ err error }

func (c correctable) Error() string { return c.err.Error() }
func (c correctable) Unwrap() error { return c.err }

// Correctable marks err as a failure the model can act on: returned from a
// tool, it becomes an error Result whose Content is err's message instead of
// ending the run. Correctable(nil) is nil.
func Correctable(err error) error {
	if err == nil {
		return nil
	}
	return correctable{err}
}

// IsCorrectable reports whether err is a failure the model can act on:
// marked with Correctable, or wrapping ErrInvalidArguments or ErrUnknownTool.
func IsCorrectable(err error) bool {
	var c correctable
	return errors.As(err, &c) || errors.Is(err, ErrInvalidArguments) || errors.Is(err, ErrUnknownTool)
}

// Func is a Tool made of a definition and a function.
type Func struct {
	// Def is what the model is shown.
	Def Definition
	// Fn runs a call; it must be safe for concurrent use.
	Fn func(ctx context.Context, call Call) (Result, error)
}

// Definition returns f.Def.
func (f Func) Definition() Definition { return f.Def }

// Call calls f.Fn.
func (f Func) Call(ctx context.Context, call Call) (Result, error) { return f.Fn(ctx, call) }

// typed is the Tool that New builds.
type typed[In, Out any] struct {
	def    Definition
	schema *jsonschema.Schema
	fn     func(context.Context, In) (Out, error)
}

// New builds a tool from a typed function. The parameter schema is reflected
// from In (which must be a struct, or a pointer to one) once, here; each
// call's arguments are validated against it before they are decoded, and a
// violation reaches the model as an error Result naming the field.
//
// Out is rendered for the model: a string as it is, a Result as it is, and
// anything else as JSON. An error from fn ends the run unless it is
// Correctable.
func New[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error)) (Tool, error) {
	if err := toolcall.CheckName(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("tool %q: nil function: pass the function the tool runs", name)
	}
	t := reflect.TypeFor[In]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("tool %q: arguments type %v is not a struct: models call tools with a JSON object, so wrap it in a struct", name, t)
	}
	s, err := jsonschema.For[In]()
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", name, err)
	}
	return &typed[In, Out]{
		def:    Definition{Name: name, Description: description, Parameters: s.Raw()},
		schema: s,
		fn:     fn,
	}, nil
}

// Must returns t, and panics if err is not nil. It is for package-level
// tools whose definitions are known to be right, like regexp.MustCompile.
func Must(t Tool, err error) Tool {
	if err != nil {
		panic(err)
	}
	return t
}

func (t *typed[In, Out]) Definition() Definition { return t.def }

func (t *typed[In, Out]) Call(ctx context.Context, call Call) (Result, error) {
	args := toolcall.Arguments(call.Arguments)
	text := string(args) // once, for the schema and the keys
	if err := t.schema.ValidateText(context.Background(), text); err != nil {
		return Result{}, fmt.Errorf("%w for %s: %v: fix the arguments to match the tool's schema and call it again", ErrInvalidArguments, t.def.Name, err)
	}
	// A key In's schema leaves open (a type that gives its own schema)
	// that encoding/json would read into a field by ignoring case.
	if err := exactkeys.Check(text, reflect.TypeFor[In]()); err != nil {
		return Result{}, fmt.Errorf("%w for %s: %v", ErrInvalidArguments, t.def.Name, err)
	}
	var in In
	if err := decodeArguments(args, &in); err != nil {
		return Result{}, fmt.Errorf("%w for %s: %v", ErrInvalidArguments, t.def.Name, err)
	}
	out, err := t.fn(ctx, in)
	if r, ok := any(out).(Result); ok {
		// A Result keeps its usage even beside an error: the work was done.
		return r, err
	}
	if err != nil {
		return Result{}, err
	}
	if s, ok := any(out).(string); ok {
		return Result{Content: s}, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return Result{}, fmt.Errorf("tool %q: encoding its result: %w", t.def.Name, err)
	}
	return Result{Content: string(b), Value: out}, nil
}

// decodeArguments decodes arguments the schema accepted into in. JSON
// Schema counts 1.0 and 1e2 as integers, and models write them, but Go
// does not decode them into an int: such numbers are written as the
// integers they are, and decoded again. What still does not fit says
// where and what to send.
func decodeArguments(args json.RawMessage, in any) error {
	err := json.Unmarshal(args, in)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		if err != nil {
			return fmt.Errorf("%v: fix the arguments to match the tool's schema and call it again", err)
		}
		return nil
	}
	if whole, changed := wholeNumbers(args); changed {
		if err = json.Unmarshal(whole, in); !errors.As(err, &te) {
			if err != nil {
				return fmt.Errorf("%v: fix the arguments to match the tool's schema and call it again", err)
			}
			return nil
		}
	}
	where := "at /" + strings.ReplaceAll(strings.TrimPrefix(te.Field, "."), ".", "/")
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi := intRange(te.Type)
		return fmt.Errorf("%s: %s does not fit this field: send a whole number from %s to %s", where, te.Value, lo, hi)
	}
	return fmt.Errorf("%s: %s does not fit this field, a Go %v: send a value of the type the schema gives", where, te.Value, te.Type)
}

// intRange is the range of an integer type, as text.
func intRange(t reflect.Type) (lo, hi string) {
	bits := t.Bits()
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return "0", new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits)), big.NewInt(1)).String()
	}
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits-1)), big.NewInt(1))
	return new(big.Int).Neg(new(big.Int).Add(max, big.NewInt(1))).String(), max.String()
}

// wholeNumbers returns args with every number that is a whole number
// written with a fraction or an exponent (1.0, 1e2, 2.50e1) written as an
// integer, and whether there was any. Only numbers within ±2^63 are
// rewritten, so the work is linear in the arguments' length.
func wholeNumbers(args json.RawMessage) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			s := string(v)
			if !strings.ContainsAny(s, ".eE") {
				return v
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
				return v
			}
			b, _, err := big.ParseFloat(s, 10, 256, big.ToNearestEven)
			if err != nil || !b.IsInt() {
				return v
			}
			i, _ := b.Int(nil)
			changed = true
			return json.Number(i.String())
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		}
		return v
	}
	v = walk(v)
	if !changed {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return b, true
}

// Rerunner is implemented by a tool some of whose calls must run again
// when a journaled turn is resumed, rather than be answered from the
// journal: a call whose effect lives only in the running process, such as
// starting a background job that a later call waits for. The ReAct loop
// journals every other call's result and, on resume, returns it without
// running the call again. RunsAgain must not have side effects.
type Rerunner interface {
	RunsAgain(call Call) bool
}

// Replayer is implemented by a tool that counts its calls in a run (a
// limit on them, such as subagent.WithMaxSpawns): when a journaled turn
// runs again, the ReAct loop answers the calls it recorded from the
// journal without running them, and tells the tool of each, in order,
// under the call's context, so that the count goes on from where the turn
// was. Replayed must not block.
type Replayer interface {
	Replayed(ctx context.Context, call Call)
}

// Sequencer is implemented by a tool some of whose calls must run in the
// order the model gave them when one step holds several: a message sent
// to one recipient twice in a step must arrive in that order, whoever
// wins a race. Registry.Execute runs the calls of a step for which InOrder
// reports true one after the other, in call order, beside the step's
// other calls, which run in parallel as ever. InOrder must not have side
// effects.
type Sequencer interface {
	InOrder(call Call) bool
}

// Notifier is implemented by a tool that has word for the agent holding
// it at the start of a turn: a spawner whose background children ended
// while no turn of the thread was running (subagent.WithJobsAcrossTurns).
// Before the first model call of a top-level run the ReAct loop adds the
// notes waiting to the conversation as one user message, counts what
// they spent, then says so (Noted). Under a journal the notes are recorded first, so that a resumed
// turn shows the same notes, and no note is shown twice.
//
// Its methods must be safe for concurrent use and must not block.
type Notifier interface {
	// Notes returns what waits for the run of ctx, in order.
	Notes(ctx context.Context) []Note
	// Noted tells the tool that the run of ctx showed the notes ids: they
	// are not returned again.
	Noted(ctx context.Context, ids []string)
}

// Note is one piece of word a Notifier has for the agent: an id unique
// to the tool, the text the model reads, and what the work it reports on
// spent, which the run counts as its children's (agent.Output.ChildUsage).
type Note struct {
	ID    string         `json:"id"`
	Text  string         `json:"text"`
	Usage provider.Usage `json:"usage"`
}
