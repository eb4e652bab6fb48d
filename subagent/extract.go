package subagent

import (
	"encoding/json"

	"github.com/deputy-go/deputy/internal/jsonextract"
)

// ExtractJSON finds the JSON value in a model's answer, tolerantly: the
// whole answer when it is JSON, else the last ```json (or plain ```) fenced
// block holding valid JSON, else the last complete JSON object in the prose.
// It reports false when there is none.
func ExtractJSON(answer string) (json.RawMessage, bool) {
	raw, ok := jsonextract.Find(answer)
	if !ok {
		return nil, false
	}
	return json.RawMessage(raw), true
}
