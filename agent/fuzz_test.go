package agent_test

import (
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
)

// FuzzRestore feeds any bytes to Restore: it never panics, and what it
// accepts is a conversation a model API would take, which Snapshot then
// gives back unchanged.
func FuzzRestore(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"messages":[]}`,
		`{"version":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
		`{"version":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c1","name":"t","arguments":{}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`,
		`{"version":1,"messages":[{"role":"tool","tool_call_id":"x"}]}`,
		`{"version":2}`, `null`, `{`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := agent.NewReact(fake.NewProvider())
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Restore(data); err != nil {
			if len(a.History()) != 0 {
				t.Fatalf("a rejected snapshot changed the conversation")
			}
			return
		}
		if err := conversation.Check(a.History()); err != nil {
			t.Fatalf("accepted a broken conversation: %v", err)
		}
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := agent.NewReact(fake.NewProvider())
		if err := b.Restore(snap); err != nil {
			t.Fatalf("a snapshot does not restore: %v", err)
		}
	})
}
