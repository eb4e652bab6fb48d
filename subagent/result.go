package subagent

import (
	"encoding/json"
	"strings"
)

// The JSON Schemas of the tools' arguments (defaults) and of a Report.
const (
	TaskParams   = `{"type":"object","properties":{"task":{"type":"string","description":"The task or question for the sub-agent, with everything it needs to know."}},"required":["task"]}`                                                                                    // FromAgent's, FromFactory's
	ReactParams  = `{"type":"object","properties":{"system_prompt":{"type":"string","description":"Who the sub-agent is and how it should work."},"task":{"type":"string","description":"The task for the sub-agent, with everything it needs to know."}},"required":["task"]}` // FromReact's
	ReportSchema = `{
  "type": "object",
  "properties": {
    "status": {"type": "string", "enum": ["success", "partial", "failed"]},
    "summary": {"type": "string"},
    "findings": {"type": ["object", "null"]}
  },
  "required": ["status", "summary"],
  "additionalProperties": false
}`
)

// ReportStatus is the outcome a child reports in its Report.
type ReportStatus string

const (
	ReportSuccess ReportStatus = "success" // did the whole task
	ReportPartial ReportStatus = "partial" // made progress, did not finish
	ReportFailed  ReportStatus = "failed"  // could not, or did not fit ReportSchema (raw answer in Summary)
)

// Report is a child's answer under WithReport.
type Report struct {
	Status   ReportStatus   `json:"status"`
	Summary  string         `json:"summary"`
	Findings map[string]any `json:"findings"`
}

// ReportPrompt returns WithReport's instruction to answer as a Report.
func ReportPrompt() string {
	return SchemaPrompt(json.RawMessage(ReportSchema)) +
		` Use status "success" when the task is done, "partial" when you made progress but could not finish, ` +
		`"failed" when you could not do it; put what you found in summary, and any structured data in findings.`
}

// SchemaPrompt tells a child to end its answer with JSON fitting schema.
func SchemaPrompt(schema json.RawMessage) string {
	var b strings.Builder
	b.WriteString("When you have finished, reply with a single JSON value, and nothing else, that matches this JSON Schema:\n")
	b.Write(schema)
	b.WriteString("\n")
	return b.String()
}
