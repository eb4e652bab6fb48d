package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/tool"
)

// At the depth cap the tool is not advertised, and a direct call fails
// with ErrMaxDepth.
func TestDepthCapRefusesDeeperCalls(t *testing.T) {
	tests := []struct {
		name      string
		opts      []Option
		depth     int
		available bool
	}{
		{"top level, default cap", nil, 0, true},
		{"child, default cap", nil, 1, false},
		{"grandchild, default cap", nil, 2, false},
		{"child, cap 2", []Option{WithMaxDepth(2)}, 1, true},
		{"grandchild, cap 2", []Option{WithMaxDepth(2)}, 2, false},
	}
	for _, f := range forms {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				p := fake.NewProvider(fake.Text("done").For("child"))
				sub := f.build(t, p, nil, tt.opts...)
				reg := must(tool.NewRegistry(sub))(t)
				ctx := run.WithDepth(context.Background(), tt.depth)

				if got := sub.Available(ctx); got != tt.available {
					t.Errorf("Available at depth %d = %v, want %v", tt.depth, got, tt.available)
				}
				if got := len(reg.Definitions(ctx)) == 1; got != tt.available {
					t.Errorf("advertised at depth %d = %v, want %v", tt.depth, got, tt.available)
				}
				_, err := callTool(ctx, sub, "call_1", `{"task":"x"}`)
				if tt.available {
					if err != nil {
						t.Errorf("call within the cap: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrMaxDepth) || !tool.IsCorrectable(err) {
					t.Errorf("direct call at the cap: error %v, want a correctable ErrMaxDepth", err)
				}
				if p.Calls() != 0 {
					t.Error("the child ran at the cap")
				}
				results, _ := reg.Execute(ctx, []tool.Call{{ID: "c", Name: "child", Arguments: json.RawMessage(`{"task":"x"}`)}})
				if !results[0].IsError || !errors.Is(results[0].Err, tool.ErrUnknownTool) {
					t.Errorf("a model's call at the cap = %+v, want an unknown-tool error", results[0])
				}
			})
		}
	}
	if _, err := FromAgent("x", "x", agent.Func(nil), WithMaxDepth(0)); err == nil {
		t.Error("WithMaxDepth(0) accepted")
	}
}

// Depth rides the context, so a cycle is bounded like a chain: a child
// whose registry holds the very tool that runs it does not see it.
func TestDelegationCycleIsBoundedByDepth(t *testing.T) {
	for _, maxDepth := range []int{1, 2, 3} {
		p := fake.NewProvider(fake.Call("loop", `{"task":"again"}`).For("loop")).Loop()
		tools := must(tool.NewRegistry())(t)
		sub := must(FromReact("loop", "Runs itself.", p, tools, WithMaxDepth(maxDepth),
			WithReactOptions(agent.WithToolRetries(0))))(t)
		if err := tools.Register(sub); err != nil {
			t.Fatal(err)
		}
		_, err := callTool(context.Background(), sub, "call_1", `{"task":"start"}`)
		if !errors.Is(err, tool.ErrUnknownTool) {
			t.Errorf("cap %d: error %v, want the deepest child to meet an unknown tool", maxDepth, err)
		}
		reqs := p.RequestsFor("loop")
		if len(reqs) != maxDepth {
			t.Fatalf("cap %d: %d model calls, want one per level", maxDepth, len(reqs))
		}
		for i, r := range reqs {
			if advertised := len(r.Tools) == 1; advertised != (i+1 < maxDepth) {
				t.Errorf("cap %d: the child at depth %d was offered %v", maxDepth, i+1, r.Tools)
			}
		}
	}
}

// The cap applies through the tool, also to a validated answer.
func TestOutputCapAppliesThroughTheTool(t *testing.T) {
	long := `{"status":"success","summary":"` + strings.Repeat("x", 2000) + `"}`
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(long).For("child"))
			sub := f.build(t, p, nil, WithMaxOutputBytes(500), WithReport())
			res, err := callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Content) > 500 || !strings.Contains(res.Content, "[output truncated: ") {
				t.Errorf("content of %d bytes, want at most 500 with a marker", len(res.Content))
			}
			if r, ok := res.Value.(Report); !ok || len(r.Summary) != 2000 {
				t.Errorf("value = %T, want the whole Result for Go callers", res.Value)
			}
		})
	}
	if _, err := FromAgent("x", "x", agent.Func(nil), WithMaxOutputBytes(10)); err == nil {
		t.Error("WithMaxOutputBytes(10) accepted")
	}
}

// A failed Result too long for the cap is shortened in its
// summary, so that what the model reads is still a Result; Go callers get
// the whole answer.
func TestFailedResultStaysJSON(t *testing.T) {
	tests := []struct {
		name, answer string
		max          int
	}{
		{"a megabyte", `{"status":"success","summary":"` + strings.Repeat("é", 512<<10) + `","extra":1}`, DefaultMaxOutputBytes},
		{"quotes to escape", `{"extra":"` + strings.Repeat(`\"`, 5000) + `"}`, 1000},
		{"control characters", `{"extra":1} ` + strings.Repeat("\x01", 5000), 300},
		{"invalid UTF-8", `{"extra":1} ` + strings.Repeat("\xff", 5000), 300},
		{"the smallest cap", `{"extra":1} ` + strings.Repeat("x", 5000), 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.NewProvider(fake.Text(tt.answer).For("child"), fake.Text(tt.answer).For("child"))
			sub := forms[1].build(t, p, nil, WithReport(), WithMaxOutputBytes(tt.max))
			res, err := callTool(context.Background(), sub, "call_1", `{"task":"x"}`)
			if err != nil {
				t.Fatal(err)
			}
			var r Report
			if err := json.Unmarshal([]byte(res.Content), &r); err != nil || r.Status != ReportFailed || len(res.Content) > tt.max {
				t.Errorf("content of %d bytes (cap %d) is not a failed Result: %v", len(res.Content), tt.max, err)
			}
			if !strings.HasSuffix(r.Summary, " [truncated]") {
				t.Errorf("summary %q does not say it was cut", r.Summary)
			}
			if v, _ := res.Value.(Report); v.Summary != tt.answer {
				t.Errorf("Value's summary is not the whole answer")
			}
		})
	}
}
