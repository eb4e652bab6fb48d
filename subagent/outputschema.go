package subagent

import "encoding/json"

// OutputSchema returns the JSON Schema the tool validates its child's
// answer against (WithReport, WithOutputSchema or OutputOf), or nil when the
// answer is not validated. A caller must not modify it.
//
// A validated call's Result carries the checked answer in Value; bridges
// that publish tools elsewhere (the MCP bridge) declare this schema and
// return that value as structured content.
func (t *SubAgentTool) OutputSchema() json.RawMessage {
	if t.cfg.check == nil {
		return nil
	}
	return t.cfg.check.schema.Raw()
}
