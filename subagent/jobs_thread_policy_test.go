package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The answer of a thread's job that ended between turns reaches the
// next turn's model as a note, and the policy checks it there as it
// checks a result the jobs tool collects: a redactor's rule binds it,
// in the three id modes.
func TestJobNoteIsCheckedByThePolicy(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := &threadModel{dig: make(chan struct{}), id: mode.id}
			close(m.dig)
			reg, s := setup(t, m, true, []subagent.SpawnOption{subagent.WithJobsAcrossTurns(nil)}, digTool(m))
			t.Cleanup(func() { s.Close() })
			pol, err := policy.New(policy.Redact("gold", []string{"gold"}))
			if err != nil {
				t.Fatal(err)
			}
			a := lead(t, m, reg, agent.WithPolicy(pol))
			ctx := agent.WithThread(t.Context(), "t1")
			if _, err := a.Run(ctx, agent.Input{Text: "cmd start"}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); s.Jobs(ctx).List()[0].State == subagent.JobRunning; {
				if time.Now().After(deadline) {
					t.Fatal("the job did not end")
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := a.Run(ctx, agent.Input{Text: "what now?"}); err != nil {
				t.Fatal(err)
			}
			var notes []string
			for _, msg := range m.reqs[len(m.reqs)-1].Messages {
				if msg.Role == provider.RoleUser && strings.Contains(msg.Content, "started in an earlier turn") {
					notes = append(notes, msg.Content)
				}
			}
			if len(notes) != 1 || strings.Contains(notes[0], "gold") || !strings.Contains(notes[0], policy.Redacted) {
				t.Fatalf("the second turn's model read the notes %q: want one, its secret redacted", notes)
			}
		})
	}
}

// digTool is threadLead's dig: it waits for m.dig to be closed.
func digTool(m *threadModel) tool.Tool {
	return tool.Func{Def: tool.Definition{Name: "dig", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			select {
			case <-m.dig:
				return tool.Result{Content: "dug"}, nil
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}}
}
