package subagent

import "encoding/json"

// OutputSchema returns the JSON Schema the child's answer is validated
// against, or nil; a caller must not modify it. The MCP bridge declares it,
// with the Result's Value as structured content.
func (t *SubAgentTool) OutputSchema() json.RawMessage {
	if t.cfg.check == nil {
		return nil
	}
	return t.cfg.check.schema.Raw()
}
