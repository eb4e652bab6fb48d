package subagent_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestSpawnRoster checks that the agent argument calls the named member,
// with the task and context as its task, and that the validation a member
// gets is the call's output_schema, else its own, else the spawner's.
func TestSpawnRoster(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var (
		mu  sync.Mutex
		got []string
	)
	factoryCritic := func(opts ...subagent.Option) *subagent.SubAgentTool {
		m, err := subagent.FromFactory("critic", "Reviews a draft for errors.",
			func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
				return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
					mu.Lock()
					got = append(got, in.Text)
					mu.Unlock()
					return agent.Output{Answer: `{"status":"success","summary":"two typos"}`, Usage: usage(7)}, nil
				}), nil
			}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name      string
		member    func(p provider.Provider) *subagent.SubAgentTool
		opts      []subagent.SpawnOption
		args      string
		replies   []fake.Reply
		want      string
		wantValue any
		wantInput []string // what the member's model or agent was given
	}{
		{
			name: "react member",
			member: func(p provider.Provider) *subagent.SubAgentTool {
				m, _ := subagent.FromReact("researcher", "Finds sources.", p, nil)
				return m
			},
			args:      `{"task":"find sources on X","context":"X is a letter","agent":"researcher"}`,
			replies:   []fake.Reply{fake.Text("three sources").For("researcher")},
			want:      "three sources",
			wantInput: []string{"find sources on X\n\nContext:\nX is a letter"},
		},
		{
			name:      "factory member gets the task as its argument",
			member:    func(provider.Provider) *subagent.SubAgentTool { return factoryCritic() },
			args:      `{"task":"review","agent":"critic"}`,
			want:      `{"status":"success","summary":"two typos"}`,
			wantInput: []string{"review"},
		},
		{
			name:      "member keeps its own validation over the spawner's default",
			member:    func(provider.Provider) *subagent.SubAgentTool { return factoryCritic(subagent.WithReport()) },
			opts:      []subagent.SpawnOption{subagent.WithOutputSchema(json.RawMessage(numberSchema))},
			args:      `{"task":"review","agent":"critic"}`,
			want:      `{"status":"success","summary":"two typos"}`,
			wantValue: subagent.Report{Status: subagent.ReportSuccess, Summary: "two typos"},
			// Its own shape, told on the first question.
			wantInput: []string{"review\n\n" + subagent.ReportPrompt()},
		},
		{
			name: "call's output_schema wins, and the member is told it",
			member: func(p provider.Provider) *subagent.SubAgentTool {
				m, _ := subagent.FromReact("researcher", "Finds sources.", p, nil, subagent.WithReport())
				return m
			},
			args:      `{"task":"count","agent":"researcher","output_schema":` + numberSchema + `}`,
			replies:   []fake.Reply{fake.Text(`{"n":3}`).For("researcher")},
			want:      `{"n":3}`,
			wantValue: map[string]any{"n": float64(3)},
			wantInput: []string{"count\n\n" + subagent.SchemaPrompt(json.RawMessage(numberSchema))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			p := fake.NewProvider(tc.replies...)
			reg, _ := setup(t, p, false, append(tc.opts, subagent.WithRoster(tc.member(p))))
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(tc.args)}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].IsError || res[0].Content != tc.want {
				t.Errorf("result %+v, want content %q", res[0], tc.want)
			}
			if diff := cmp.Diff(tc.wantValue, res[0].Value); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			inputs := got
			for _, r := range p.Requests() {
				inputs = append(inputs, r.Messages[0].Content)
			}
			if diff := cmp.Diff(tc.wantInput, inputs); diff != "" {
				t.Errorf("member input (-want +got):\n%s", diff)
			}
			if n := len(p.RequestsFor(subagent.DefaultForkName)); n != 0 {
				t.Errorf("a fork ran (%d requests), want only the member", n)
			}
		})
	}
}
