package subagent

import (
	"encoding/json"
	"testing"
)

// forkArgs, which a journal keys a fork's invocation by, are the bytes
// the map of its task and model marshalled to before it was a struct.
func TestForkArgsAreThoseOfTheMap(t *testing.T) {
	for _, text := range []string{"", "find X", `say "<b>" & \n`, "ünï\u2028code"} {
		want, _ := json.Marshal(map[string]string{"task": text})
		if got := forkArgs(text, nil); string(got) != string(want) {
			t.Errorf("forkArgs(%q, nil) = %s, want %s", text, got, want)
		}
		want, _ = json.Marshal(map[string]string{"task": text, "model": "haiku"})
		if got := forkArgs(text, &menuModel{ModelChoice: ModelChoice{Name: "haiku"}}); string(got) != string(want) {
			t.Errorf("forkArgs(%q, haiku) = %s, want %s", text, got, want)
		}
	}
}
