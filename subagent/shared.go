package subagent

import (
	"context"
	"encoding/json"

	"github.com/deputy-go/deputy/internal/textcap"
	"github.com/deputy-go/deputy/jsonschema"
)

// What follows is the pieces of a sub-agent call that another runtime of
// deputy's agents, such as the temporal module's workflows, needs to give
// its calls the same meaning: it uses these rather than copies of them.

// CapOutput cuts s to at most max bytes as a sub-agent's answer is cut
// (WithMaxOutputBytes): on a rune boundary, ending with a note that says
// how many bytes there were and how many are shown. s is returned as it
// is when it fits.
func CapOutput(s string, max int) string { return textcap.Cap(s, max) }

// CheckAnswer reads a child's answer as WithOutputSchema does: it finds the
// JSON value the answer holds (the whole answer, its last fenced block or
// its last object), refuses a repeated key, and validates the value
// against schema. It returns the JSON found ("" when none) and what is
// wrong with it, nil when it fits; err only when ctx ended first.
func CheckAnswer(ctx context.Context, schema *jsonschema.Schema, answer string) (found json.RawMessage, problem, err error) {
	c := &checker{schema: schema, decode: decodeAny}
	v, err := c.check(ctx, answer)
	if err != nil {
		return nil, nil, err
	}
	if v.raw != "" {
		found = json.RawMessage(v.raw)
	}
	return found, v.problem, nil
}

// CorrectionPrompt is what a child whose answer did not fit schema is told
// in its one corrective run: the problem, cut to a few kilobytes, and the
// shape asked for.
func CorrectionPrompt(schema json.RawMessage, problem error) string {
	c := &checker{prompt: SchemaPrompt(schema)}
	return c.correction(problem)
}
