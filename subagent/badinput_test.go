package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// Every bad input of the foundation's table, and every odd child answer,
// through each of the three forms inside a parent's run: the parent's run
// goes on, its model reads what happened, the child runs only when it
// should.
func TestBadInputEachForm(t *testing.T) {
	tenMB := `{"task":"` + strings.Repeat("x", 10<<20) + `"}`
	megabyte := strings.Repeat("é", 512<<10) // 1 MiB of two-byte runes
	extraKeys := `{"status":"success","summary":"ok","extra":1}`
	permissive := WithOutputSchema(json.RawMessage(`{"type":"object","properties":{"status":{"type":"string"}}}`))
	tests := []struct {
		name       string
		toolName   string // the parent calls; "" means child
		args       string
		child      []string // the child model's answers
		childCall  string   // a tool the child calls first, if any
		opts       []Option
		wantError  error // in the parent's tool result; nil means none
		wantCalls  int   // model calls of the child
		check      func(t *testing.T, content string, p *fake.Provider)
		wantPrefix string
	}{
		{name: "malformed JSON", args: `{"task":`, wantError: tool.ErrInvalidArguments},
		{name: "wrong type", args: `{"task":5}`, wantError: tool.ErrInvalidArguments},
		{name: "null", args: `null`, wantError: tool.ErrInvalidArguments},
		{name: "array instead of object", args: `[{"task":"x"}]`, wantError: tool.ErrInvalidArguments},
		{name: "10 MB argument string", args: tenMB, wantError: tool.ErrInvalidArguments},
		{name: "unknown tool name", toolName: "childd", args: `{"task":"x"}`, wantError: tool.ErrUnknownTool},
		{name: "child calls an unknown tool", args: `{"task":"x"}`, childCall: "nope", child: []string{"recovered"},
			wantCalls: 2, wantPrefix: "recovered", check: func(t *testing.T, _ string, p *fake.Provider) {
				reqs := p.RequestsFor("child")
				last := reqs[1].Messages[len(reqs[1].Messages)-1]
				if last.Role != provider.RoleTool || !last.IsError || !strings.Contains(last.Content, "unknown tool") {
					t.Errorf("the child read %+v, want an unknown-tool error", last)
				}
			}},
		{name: "reply with neither text nor tool calls", args: `{"task":"x"}`, child: []string{""},
			wantError: agent.ErrEmptyReply, wantCalls: 1},
		{name: "1 MB answer", args: `{"task":"x"}`, child: []string{megabyte}, wantCalls: 1,
			check: func(t *testing.T, content string, _ *fake.Provider) {
				i := strings.Index(content, "\n[output truncated: 1048576 bytes, the first ")
				if len(content) > DefaultMaxOutputBytes || i < 0 || !strings.HasPrefix(megabyte, content[:i]) || !utf8.ValidString(content) {
					t.Errorf("content of %d bytes, want a valid UTF-8 prefix of at most %d with a marker", len(content), DefaultMaxOutputBytes)
				}
			}},
		{name: "invalid UTF-8 answer", args: `{"task":"x"}`, child: []string{"ok \xff\xfe end"}, wantCalls: 1, wantPrefix: "ok \uFFFD end"},
		{name: "extra keys under WithReport", args: `{"task":"x"}`, child: []string{extraKeys, extraKeys}, opts: []Option{WithReport()},
			wantCalls: 2, check: func(t *testing.T, content string, _ *fake.Provider) {
				var r Report
				if err := json.Unmarshal([]byte(content), &r); err != nil || r.Status != ReportFailed || r.Summary != extraKeys {
					t.Errorf("content %s, want a failed Result with the raw answer", content)
				}
			}},
		{name: "extra keys under a permissive schema", args: `{"task":"x"}`, child: []string{extraKeys}, opts: []Option{permissive},
			wantCalls: 1, wantPrefix: extraKeys},
	}
	for _, f := range forms {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				name := tt.toolName
				if name == "" {
					name = "child"
				}
				replies := []fake.Reply{
					fake.Call(name, tt.args).For("lead"),
					fake.Text("The lead goes on.").For("lead"),
				}
				if tt.childCall != "" {
					replies = append(replies, fake.Call(tt.childCall, `{}`).For("child"))
				}
				for _, a := range tt.child {
					replies = append(replies, fake.Text(a).For("child"))
				}
				p := fake.NewProvider(replies...)
				lead := newReact(t, p, agent.WithName("lead"), agent.WithTools(f.build(t, p, nil, tt.opts...)))

				out, err := lead.Run(context.Background(), agent.Input{Text: "go"})
				if err != nil {
					t.Fatalf("the parent's run failed: %v", err)
				}
				if out.Answer != "The lead goes on." {
					t.Errorf("answer = %q", out.Answer)
				}
				msgs := toolMessages(out.Messages)
				if len(msgs) != 1 {
					t.Fatalf("%d tool results, want 1", len(msgs))
				}
				res := msgs[0]
				if res.IsError != (tt.wantError != nil) {
					t.Errorf("the parent's model read %.300q (error %v), want error %v", res.Content, res.IsError, tt.wantError)
				}
				if got := len(p.RequestsFor("child")); got != tt.wantCalls {
					t.Errorf("the child's model was called %d times, want %d", got, tt.wantCalls)
				}
				if !strings.HasPrefix(res.Content, tt.wantPrefix) {
					t.Errorf("content %.300q, want it to start with %q", res.Content, tt.wantPrefix)
				}
				if tt.check != nil {
					tt.check(t, res.Content, p)
				}
				if len(res.Content) > DefaultMaxOutputBytes {
					t.Errorf("the parent's model read %d bytes", len(res.Content))
				}
				if tt.wantError != nil {
					// The Go error behind the result is kept for callers.
					reqs := p.RequestsFor("lead")
					if len(reqs) != 2 {
						t.Fatalf("%d lead requests", len(reqs))
					}
					if err := causeOf(t, f, tt.args, tt.child, tt.opts, name); !errors.Is(err, tt.wantError) {
						t.Errorf("error %v, want one wrapping %v", err, tt.wantError)
					}
				}
			})
		}
	}
}

// causeOf replays a failing call through a registry and returns the error
// kept in its Result.
func causeOf(t *testing.T, f formBuilder, args string, child []string, opts []Option, name string) error {
	var replies []fake.Reply
	for _, a := range child {
		replies = append(replies, fake.Text(a).For("child"))
	}
	reg := must(tool.NewRegistry(f.build(t, fake.NewProvider(replies...), nil, opts...)))(t)
	results, err := reg.Execute(context.Background(), []tool.Call{{ID: "c", Name: name, Arguments: json.RawMessage(args)}})
	if err != nil {
		t.Fatal(err)
	}
	return results[0].Err
}
