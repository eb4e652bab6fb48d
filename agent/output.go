package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/internal/jsonextract"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
)

// ErrInvalidOutput: under OutputOf, the answer did not fit T even after the
// corrective retry.
var ErrInvalidOutput = errcode.New("invalid_output", "agent: the answer does not fit the output type")

// output is what OutputOf checks a final answer against.
type output struct {
	schema *jsonschema.Schema
	decode func(raw string) (any, error)
}

// OutputOf makes the answer a value of type T (see subagent.OutputOf): T's
// JSON Schema is every run's ResponseSchema, and the answer's JSON is checked
// and decoded into Output.Value, sent back once with what is wrong when it
// does not fit, then failing with ErrInvalidOutput (answer and usage kept):
//
//	out, err := a.Run(ctx, agent.Input{Text: "Review the change."})
//	review, ok := out.Value.(Review)
func OutputOf[T any]() Option {
	return func(r *React) error {
		s, err := jsonschema.For[T]()
		if err != nil {
			return fmt.Errorf("%w: OutputOf: %w", ErrInvalidOption, err)
		}
		r.output = &output{schema: s, decode: func(raw string) (any, error) {
			var v T
			// A key T's schema leaves open (one T gives itself) that
			// encoding/json would read into a field by ignoring case.
			if err := exactkeys.Check(raw, reflect.TypeFor[T]()); err != nil {
				return nil, err
			}
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				return nil, fmt.Errorf("the JSON does not decode into the type asked for: %v", err)
			}
			return v, nil
		}}
		return nil
	}
}

// check returns the value of answer, or what is wrong with it in words a
// model can act on.
func (o *output) check(ctx context.Context, answer string) (any, error) {
	raw, ok := jsonextract.Find(answer)
	if !ok {
		return nil, errors.New("the answer holds no JSON")
	}
	if err := o.schema.ValidateText(ctx, raw); err != nil {
		return nil, err
	}
	return o.decode(raw)
}

// checkAnswer checks the run's final answer under OutputOf. It reports
// done with the value, or, the first time an answer does not fit, puts
// the problem to the model and reports not done.
func (s *runState) checkAnswer(answer string) (done bool, err error) {
	o := s.r.output
	v, problem := o.check(s.ctx, answer)
	switch {
	case problem == nil:
		s.value = v
		return true, nil
	case s.corrected:
		return true, fmt.Errorf("%w: %v: make the type easier to fill, or the model's instructions clearer", ErrInvalidOutput, problem)
	}
	s.corrected = true
	s.add(provider.UserMessage("Your answer does not fit the JSON Schema it must match: " + problem.Error() +
		"\nAnswer again with only the JSON value, matching this schema:\n" + string(o.schema.Raw())))
	return false, nil
}
