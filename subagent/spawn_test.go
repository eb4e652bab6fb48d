package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

func TestSpawnInvalidArgumentsAreCorrectable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := fake.NewProvider()
	critic, err := subagent.FromReact("critic", "Reviews a draft for errors.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	researcher, err := subagent.FromReact("researcher", "Finds and reads sources.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	roster := []subagent.SpawnOption{subagent.WithRoster(researcher, critic)}
	tests := []struct {
		name string
		opts []subagent.SpawnOption
		args string
		want []string
	}{
		{"missing task", nil, `{"context":"c"}`,
			[]string{"missing property 'task'", "pass task (required), context, output_schema (a JSON Schema object)"}},
		{"blank task", nil, `{"task":"  \n"}`,
			[]string{"task is blank: say what the sub-agent must do"}},
		{"not JSON", nil, `{"task":`,
			[]string{"not valid JSON", "pass task (required)"}},
		{"unknown agent", roster, `{"task":"t","agent":"oracle"}`,
			[]string{"agent (one of: critic, researcher)"}},
		{"agent without a roster", nil, `{"task":"t","agent":"critic"}`,
			[]string{"'agent' not allowed", "pass task (required), context, output_schema (a JSON Schema object)"}},
		{"background not enabled", nil, `{"task":"t","background":true}`,
			[]string{"'background' not allowed"}},
		{"output_schema not an object", nil, `{"task":"t","output_schema":"a number"}`,
			[]string{"/output_schema", "output_schema (a JSON Schema object)"}},
		{"output_schema does not compile", nil, `{"task":"t","output_schema":{"type":"nope"}}`,
			[]string{"output_schema: jsonschema: JSON Schema does not compile", `send a JSON Schema object such as {"type":"object"`}},
		{"output_schema refers to a file", nil, `{"task":"t","output_schema":{"$ref":"file:///etc/hostname"}}`,
			[]string{"output_schema:", "file:///etc/hostname is outside the schema"}},
		{"output_schema with an absurd number", nil, `{"task":"t","output_schema":{"multipleOf":1e-99999999}}`,
			[]string{"number 1e-99999999 is out of range: write numbers of at most 400 characters"}},
		{"output_schema refers to a URL", nil, `{"task":"t","output_schema":{"$ref":"https://example.com/s.json"}}`,
			[]string{"output_schema:", "https://example.com/s.json is outside the schema"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg, _ := setup(t, p, false, tc.opts)
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(tc.args)}})
			if err != nil {
				t.Fatalf("Execute: %v, want the error as a result", err)
			}
			if !res[0].IsError || !errors.Is(res[0].Err, tool.ErrInvalidArguments) {
				t.Errorf("result %+v: want an error result wrapping tool.ErrInvalidArguments", res[0])
			}
			mustContain(t, res[0].Content, tc.want...)
			if n := p.Calls(); n != 0 {
				t.Errorf("the model was called %d times for invalid arguments", n)
			}
		})
	}
}

func TestNewSpawnerRejectsBadConfiguration(t *testing.T) {
	p := fake.NewProvider()
	member := func(name string, params string) *subagent.SubAgentTool {
		var raw json.RawMessage
		if params != "" {
			raw = json.RawMessage(params)
		}
		m, err := subagent.FromReact(name, "d", p, nil, subagent.WithParams(raw))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name string
		p    provider.Provider
		opts []subagent.SpawnOption
		want string
	}{
		{"nil provider", nil, nil, "nil provider"},
		{"nil roster member", p, []subagent.SpawnOption{subagent.WithRoster(nil)}, "nil member"},
		{"two members of one name", p, []subagent.SpawnOption{subagent.WithRoster(member("a", ""), member("a", ""))}, `two roster members are named "a"`},
		{"member that needs more than a task", p,
			[]subagent.SpawnOption{subagent.WithRoster(member("a", `{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`))},
			`roster member "a" does not accept a call with only a task`},
		{"max spawns 0", p, []subagent.SpawnOption{subagent.WithMaxSpawns(0)}, "max spawns 0"},
		{"concurrency 0", p, []subagent.SpawnOption{subagent.WithSpawnConcurrency(0)}, "spawn concurrency 0"},
		{"child budget 0", p, []subagent.SpawnOption{subagent.WithChildTokenBudget(0)}, "child token budget 0"},
		{"bad fork name", p, []subagent.SpawnOption{subagent.WithForkName("my fork")}, `name "my fork" is not allowed`},
		{"nil fork tools", p, []subagent.SpawnOption{subagent.WithForkTools(nil)}, "WithForkTools(nil)"},
		{"nil policy", p, []subagent.SpawnOption{subagent.WithSpawnPolicy(nil)}, "WithSpawnPolicy(nil)"},
		{"bad default schema", p, []subagent.SpawnOption{subagent.WithOutputSchema(json.RawMessage(`{"type":1}`))}, "output schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subagent.NewSpawner(tc.p, nil, tc.opts...)
			if err == nil {
				t.Fatalf("NewSpawner succeeded, want an error containing %q", tc.want)
			}
			mustContain(t, err.Error(), tc.want)
		})
	}
}

func TestSpawnDefinition(t *testing.T) {
	p := fake.NewProvider()
	researcher, _ := subagent.FromReact("researcher", "Finds and reads sources.", p, nil)
	critic, _ := subagent.FromReact("critic", "Reviews a draft for errors.", p, nil)
	tests := []struct {
		name       string
		opts       []subagent.SpawnOption
		wantProps  []string
		wantEnum   []string
		wantIn     []string
		wantNotIn  []string
		background bool
	}{
		{
			name:      "forks only",
			wantProps: []string{"context", "output_schema", "task"},
			wantIn: []string{
				"Handle simple work directly",
				"it cannot see this conversation",
				"a partial or failed sub-agent is not success",
				"At most 8 sub-agents per run.",
				"Each sub-agent is a fork of you, with your tools.",
			},
			wantNotIn: []string{"Named sub-agents", subagent.JobsToolName},
		},
		{
			name:      "roster",
			opts:      []subagent.SpawnOption{subagent.WithRoster(researcher, critic), subagent.WithMaxSpawns(3)},
			wantProps: []string{"agent", "context", "output_schema", "task"},
			wantEnum:  []string{"researcher", "critic"},
			wantIn: []string{
				"At most 3 sub-agents per run.",
				"pick with `agent` only when its purpose covers the task",
				"- researcher: Finds and reads sources.\n- critic: Reviews a draft for errors.\n",
			},
			wantNotIn: []string{subagent.JobsToolName},
		},
		{
			name:      "background",
			opts:      []subagent.SpawnOption{subagent.WithBackground()},
			wantProps: []string{"background", "context", "output_schema", "task"},
			wantIn:    []string{"A job id is not a result: collect each job with subagent_jobs (wait), or cancel it, before you answer"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := subagent.NewSpawner(p, nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			def := s.Definition()
			if def.Name != subagent.SpawnToolName {
				t.Errorf("name %q", def.Name)
			}
			mustContain(t, def.Description, tc.wantIn...)
			for _, w := range tc.wantNotIn {
				if strings.Contains(def.Description, w) {
					t.Errorf("description mentions %q:\n%s", w, def.Description)
				}
			}
			var params struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
				Required []string `json:"required"`
			}
			if err := json.Unmarshal(def.Parameters, &params); err != nil {
				t.Fatal(err)
			}
			var props []string
			for k := range params.Properties {
				props = append(props, k)
			}
			sort.Strings(props)
			if diff := cmp.Diff(tc.wantProps, props); diff != "" {
				t.Errorf("properties (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnum, params.Properties["agent"].Enum); diff != "" {
				t.Errorf("agent enum (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"task"}, params.Required); diff != "" {
				t.Errorf("required (-want +got):\n%s", diff)
			}
		})
	}
}

type denyKey struct{}

// TestSpawnNotOfferedAtCapOrWhenDenied checks that the spawn tool and its
// jobs tool disappear at the depth cap or under a denying policy, and that
// a direct call there fails with the sentinel.
func TestSpawnNotOfferedAtCapOrWhenDenied(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	policy := subagent.WithSpawnPolicy(func(ctx context.Context) bool { return ctx.Value(denyKey{}) == nil })
	tests := []struct {
		name    string
		opts    []subagent.SpawnOption
		depth   int
		deny    bool
		want    []string
		wantErr error
	}{
		{"top level", nil, 0, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"at the default cap", nil, 1, false, []string{"lookup"}, subagent.ErrMaxDepth},
		{"below a cap of 2", []subagent.SpawnOption{subagent.WithMaxDepth(2)}, 1, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"at a cap of 2", []subagent.SpawnOption{subagent.WithMaxDepth(2)}, 2, false, []string{"lookup"}, subagent.ErrMaxDepth},
		{"allowed by the policy", []subagent.SpawnOption{policy}, 0, false, []string{"lookup", "spawn_subagent", "subagent_jobs"}, nil},
		{"denied by the policy", []subagent.SpawnOption{policy}, 0, true, []string{"lookup"}, subagent.ErrDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("done").For(subagent.DefaultForkName))
			reg, s := setup(t, p, true, append(tc.opts, subagent.WithBackground()))
			ctx := run.WithDepth(t.Context(), tc.depth)
			if tc.deny {
				ctx = context.WithValue(ctx, denyKey{}, true)
			}
			if diff := cmp.Diff(tc.want, names(reg.Definitions(ctx))); diff != "" {
				t.Errorf("tools offered (-want +got):\n%s", diff)
			}
			if got, want := s.Available(ctx), tc.wantErr == nil; got != want {
				t.Errorf("Available = %v, want %v", got, want)
			}
			_, err := s.Call(ctx, tool.Call{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t"}`)})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("direct call: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil && !tool.IsCorrectable(err) {
				t.Errorf("direct call: %v is not correctable", err)
			}
		})
	}
}

// FuzzSpawnArguments checks that whatever arguments a model sends, the
// spawn tool answers with a result the model can read: a child's answer,
// or a correctable error, never a Go error or a panic.
func FuzzSpawnArguments(f *testing.F) {
	for _, seed := range []string{
		`{"task":"t"}`,
		`{"task":"t","context":"c","agent":"critic"}`,
		`{"task":"t","output_schema":` + numberSchema + `}`,
		`{"task":"t","output_schema":{"$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}}`,
		`{"task":"t","output_schema":{"pattern":"("}}`,
		`{"task":"t","output_schema":{"multipleOf":1e-9999}}`,
		`{"task":"t","output_schema":{"maximum":1.5e308}}`,
		`{"task":"t","background":true}`,
		`{"task":1}`, `[]`, `null`, ``, `{"task":"\u0000"}`,
	} {
		f.Add(seed)
	}
	p := fake.NewProvider(fake.Text(`{"n":1}`)).Loop().DontRecord()
	critic, err := subagent.FromReact("critic", "Reviews.", p, nil)
	if err != nil {
		f.Fatal(err)
	}
	reg, _ := setup(f, p, false, []subagent.SpawnOption{subagent.WithRoster(critic)})
	f.Fuzz(func(t *testing.T, args string) {
		res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
		if err != nil {
			t.Fatalf("arguments %q: Go error %v", args, err)
		}
		if res[0].IsError && !tool.IsCorrectable(res[0].Err) {
			t.Errorf("arguments %q: error result %q is not correctable", args, res[0].Content)
		}
		if res[0].Content == "" {
			t.Errorf("arguments %q: empty result", args)
		}
	})
}
