package subagent

import "encoding/json"

// OutputSchema returns the answer's schema, or nil; do not modify it.
func (t *SubAgentTool) OutputSchema() json.RawMessage {
	if t.cfg.check == nil {
		return nil
	}
	return t.cfg.check.schema.Raw()
}
