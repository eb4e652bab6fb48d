// Package answercheck reads a child's answer against the JSON Schema it
// was asked to fit, and writes what the child is told when it does not:
// the validation of package subagent, shared with agent/runtime, through
// which another runtime checks its children's answers the same way.
package answercheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/deputy-go/deputy/internal/jsonextract"
	"github.com/deputy-go/deputy/jsonschema"
)

// Verdict is the reading of one answer.
type Verdict struct {
	Raw     string // the JSON found, if any: a part of the answer
	Found   bool   // whether there was JSON at all
	Value   any    // the decoded value, when valid
	Problem error  // nil when valid
}

// Check reads answer: it finds the JSON value the answer holds (the whole
// answer, its last fenced block or its last object), refuses a repeated
// key, validates the value against schema, and decodes it with decode,
// given the JSON's text. It fails only when ctx ends first.
func Check(ctx context.Context, schema *jsonschema.Schema, decode func(raw string) (any, error), answer string) (Verdict, error) {
	raw, ok := jsonextract.Find(answer)
	if !ok {
		return Verdict{Problem: errors.New("the answer holds no JSON value")}, nil
	}
	// Find found valid JSON: what ValidateText refuses besides what does
	// not fit is a repeated key, in a *ValidationError whose message is
	// the key's. A flat schema checks the text without decoding it.
	if err := schema.ValidateText(ctx, raw); err != nil {
		if ctx.Err() != nil && !isValidation(err) {
			return Verdict{}, err
		}
		return Verdict{Raw: raw, Found: true, Problem: err}, nil
	}
	value, err := decode(raw)
	if err != nil {
		return Verdict{Raw: raw, Found: true, Problem: err}, nil
	}
	return Verdict{Raw: raw, Found: true, Value: value}, nil
}

func isValidation(err error) bool {
	var ve *jsonschema.ValidationError
	return errors.As(err, &ve)
}

// DecodeAny decodes the checked answer as json.Unmarshal into an any
// does, with float64 numbers, which is what a Go caller of
// subagent.WithOutputSchema gets.
func DecodeAny(raw string) (any, error) {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("the answer does not decode: %v: answer with JSON of the shape asked for", err)
	}
	return v, nil
}

// maxCorrection bounds the problems a corrective retry lists: the retry
// request carries them to the child, and a long list says no more than its
// start.
const maxCorrection = 4 << 10

// Correction is what a child is told after a rejected answer: the problem,
// cut to a few kilobytes, and prompt, the instruction that tells it the
// shape to answer in.
func Correction(prompt string, problem error) string {
	msg := problem.Error()
	if len(msg) > maxCorrection {
		cut := maxCorrection
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + " … (the rest of the problems cut)"
	}
	return "Your answer was rejected: " + msg + ".\n" + prompt
}
