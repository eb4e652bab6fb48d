package subagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestSpawnOutputSchema checks the validation of an answer against the
// call's output_schema: the fork is told the shape, gets one corrective
// retry, and a second failure comes back with the [validation failed: …]
// ending.
func TestSpawnOutputSchema(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	tests := []struct {
		name        string
		opts        []subagent.SpawnOption
		schema      string // the call's output_schema; "" for none
		replies     []fake.Reply
		want        string
		wantValue   any
		wantUsage   provider.Usage
		wantPrompt  string
		wantRetried bool
	}{
		{
			name:       "valid at once",
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text(`{"n":1}`).For(fork).WithUsage(usage(10))},
			want:       `{"n":1}`,
			wantValue:  map[string]any{"n": float64(1)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:       "found in a fenced block",
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text("Here:\n```json\n{\"n\": 2}\n```").For(fork).WithUsage(usage(10))},
			want:       `{"n": 2}`,
			wantValue:  map[string]any{"n": float64(2)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:   "fixed on the retry",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text("about five").For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":5}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":5}`,
			wantValue:   map[string]any{"n": float64(5)},
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:   "wrong twice",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text(`{"n":"five"}`).For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":"still five"}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":"still five"}` + "\n\n[validation failed: at /n: got string, want integer]",
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:   "an absurd number is a violation, not a crash",
			schema: numberSchema,
			replies: []fake.Reply{
				fake.Text(`{"n":1e-99999999}`).For(fork).WithUsage(usage(10)),
				fake.Text(`{"n":1e999999999}`).For(fork).WithUsage(usage(20)),
			},
			want:        `{"n":1e999999999}` + "\n\n[validation failed: number 1e999999999 is out of range: write numbers of at most 400 characters with an exponent from -400 to 400]",
			wantUsage:   times(2, usage(15)),
			wantPrompt:  subagent.SchemaPrompt(json.RawMessage(numberSchema)),
			wantRetried: true,
		},
		{
			name:       "the spawner's default applies without output_schema",
			opts:       []subagent.SpawnOption{subagent.WithReport()},
			replies:    []fake.Reply{fake.Text(`{"status":"partial","summary":"half"}`).For(fork).WithUsage(usage(10))},
			want:       `{"status":"partial","summary":"half"}`,
			wantValue:  subagent.Report{Status: subagent.ReportPartial, Summary: "half"},
			wantUsage:  usage(10),
			wantPrompt: subagent.ReportPrompt(),
		},
		{
			name:       "output_schema wins over the spawner's default",
			opts:       []subagent.SpawnOption{subagent.WithReport()},
			schema:     numberSchema,
			replies:    []fake.Reply{fake.Text(`{"n":1}`).For(fork).WithUsage(usage(10))},
			want:       `{"n":1}`,
			wantValue:  map[string]any{"n": float64(1)},
			wantUsage:  usage(10),
			wantPrompt: subagent.SchemaPrompt(json.RawMessage(numberSchema)),
		},
		{
			name:      "no validation",
			replies:   []fake.Reply{fake.Text("just prose").For(fork).WithUsage(usage(10))},
			want:      "just prose",
			wantUsage: usage(10),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fake.NewProvider(tc.replies...)
			reg, _ := setup(t, p, false, tc.opts)
			args := `{"task":"count"}`
			if tc.schema != "" {
				args = `{"task":"count","output_schema":` + tc.schema + `}`
			}
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].IsError || res[0].Content != tc.want {
				t.Errorf("result %+v\nwant content %q", res[0], tc.want)
			}
			if diff := cmp.Diff(tc.wantValue, res[0].Value); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUsage, res[0].Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			reqs := p.RequestsFor(fork)
			wantSystem := subagent.DefaultForkPrompt
			if tc.wantPrompt != "" {
				wantSystem += "\n\n" + tc.wantPrompt
			}
			if reqs[0].System != wantSystem {
				t.Errorf("fork system prompt:\n%s\nwant:\n%s", reqs[0].System, wantSystem)
			}
			if want := map[bool]int{false: 1, true: 2}[tc.wantRetried]; len(reqs) != want {
				t.Fatalf("the fork made %d requests, want %d", len(reqs), want)
			}
			if tc.wantRetried {
				retry := reqs[1].Messages
				if len(retry) != 1 {
					t.Fatalf("the retry is not a fresh run: %d messages", len(retry))
				}
				mustContain(t, retry[0].Content, "count\n\nYour answer was rejected: ", "Your rejected answer was:\n")
			}
		})
	}
}

func TestSpawnOutputCap(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	long := strings.Repeat("é", 500) // 1000 bytes
	member := func(p provider.Provider) *subagent.SubAgentTool {
		m, _ := subagent.FromReact("writer", "Writes at length.", p, nil, subagent.WithMaxOutputBytes(4096))
		return m
	}
	for _, args := range []string{`{"task":"write"}`, `{"task":"write","agent":"writer"}`} {
		t.Run(args, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(long).For(subagent.DefaultForkName), fake.Text(long).For("writer"))
			reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxOutputBytes(200), subagent.WithRoster(member(p))})
			res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(args)}})
			if err != nil {
				t.Fatal(err)
			}
			c := res[0].Content
			if len(c) > 200 || !utf8.ValidString(c) {
				t.Errorf("content of %d bytes (valid UTF-8: %v), want at most 200", len(c), utf8.ValidString(c))
			}
			mustContain(t, c, "[output truncated: 1000 bytes, the first ")
		})
	}
}

// TestSpawnForkRenderAndTimeout: WithRender and WithTimeout given to the
// spawn tool apply to its forks (a roster member keeps its own).
func TestSpawnForkRenderAndTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	render := subagent.WithRender(func(_ context.Context, o subagent.Outcome) (string, error) {
		return "rendered: " + o.Content, nil
	})
	t.Run("render", func(t *testing.T) {
		p := fake.NewProvider(fake.Text("forked").For(subagent.DefaultForkName), fake.Text("listed").For("writer"))
		writer, err := subagent.FromReact("writer", "Writes.", p, nil)
		if err != nil {
			t.Fatal(err)
		}
		reg, _ := setup(t, p, false, []subagent.SpawnOption{render, subagent.WithRoster(writer)})
		res, err := reg.Execute(t.Context(), []tool.Call{
			{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"write"}`)},
			{ID: "c2", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"write","agent":"writer"}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := []string{res[0].Content, res[1].Content}; got[0] != "rendered: forked" || got[1] != "listed" {
			t.Errorf("contents %q, want the fork's rendered and the member's as it answered", got)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := fake.NewProvider(fake.Text("late").For(subagent.DefaultForkName).After(time.Hour))
			reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithTimeout(time.Minute)})
			start := time.Now()
			res, err := reg.Execute(context.Background(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"wait"}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if !res[0].IsError || !strings.Contains(res[0].Content, "ran longer than 1m0s") {
				t.Errorf("result %+v, want the fork's timeout as an error result", res[0])
			}
			if d := time.Since(start); d != time.Minute {
				t.Errorf("the call took %v, want the timeout", d)
			}
		})
	})
}

// WithOutcome given to NewSpawner sees each forked child's outcome.
func TestSpawnerWithOutcomeSeesForkedChildren(t *testing.T) {
	var mu sync.Mutex
	var answers []string
	p := fake.NewProvider(
		spawns(`{"task":"dig"}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Text("dug it").For(subagent.DefaultForkName),
	)
	reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithOutcome(func(ctx context.Context, o subagent.Outcome) {
		mu.Lock()
		answers = append(answers, o.Output.Answer)
		mu.Unlock()
	})})
	if _, err := lead(t, p, reg).Run(context.Background(), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if len(answers) != 1 || answers[0] != "dug it" {
		t.Fatalf("the hook saw %q, want the forked child's answer once", answers)
	}
}
