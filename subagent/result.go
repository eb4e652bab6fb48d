package subagent

import (
	"encoding/json"
	"strings"
)

// ResultSchema is the JSON Schema of the structured result a child returns
// under WithResult: a status, a summary, and optional findings. findings is
// typed ["object","null"] so that a real validator accepts null.
const ResultSchema = `{
  "type": "object",
  "properties": {
    "status": {"type": "string", "enum": ["success", "partial", "failed"]},
    "summary": {"type": "string"},
    "findings": {"type": ["object", "null"]}
  },
  "required": ["status", "summary"],
  "additionalProperties": false
}`

// Status is the outcome a child reports in its Result.
type Status string

// The statuses of a Result.
const (
	// StatusSuccess: the child did the whole task.
	StatusSuccess Status = "success"
	// StatusPartial: the child made progress but did not finish.
	StatusPartial Status = "partial"
	// StatusFailed: the child could not do the task, or its answer did not
	// fit ResultSchema (the raw answer is then the Summary).
	StatusFailed Status = "failed"
)

// Result is the structured outcome of a child run under WithResult.
type Result struct {
	Status   Status         `json:"status"`
	Summary  string         `json:"summary"`
	Findings map[string]any `json:"findings"`
}

// ResultSystemPrompt returns the instruction that makes a child answer in
// the shape of ResultSchema. Under WithResult, FromReact adds it to the
// child's system prompt, and FromAgent and FromFactory to the child's first
// question of each call.
func ResultSystemPrompt() string {
	return SchemaPrompt(json.RawMessage(ResultSchema)) +
		` Use status "success" when the task is done, "partial" when you made progress but could not finish, ` +
		`"failed" when you could not do it; put what you found in summary, and any structured data in findings.`
}

// SchemaPrompt returns the instruction that makes a child end its answer
// with a JSON value matching schema.
func SchemaPrompt(schema json.RawMessage) string {
	var b strings.Builder
	b.WriteString("When you have finished, reply with a single JSON value, and nothing else, that matches this JSON Schema:\n")
	b.Write(schema)
	b.WriteString("\n")
	return b.String()
}
