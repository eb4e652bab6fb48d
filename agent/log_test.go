package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// records decodes the JSON lines a slog.JSONHandler wrote.
func records(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// A logged run says at Debug what each model and tool call did, and at
// Warn the tool error only the model saw.
func TestWithLogger(t *testing.T) {
	calls := 0
	lookup := toolFunc("lookup", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		calls++
		if calls == 1 {
			return tool.Result{}, tool.Correctable(errors.New("no such order: try the order number"))
		}
		return tool.Result{Content: "shipped"}, nil
	})
	p := fake.NewProvider(
		fake.Call("lookup", `{"order":"x"}`),
		fake.Call("lookup", `{"order":"42"}`),
		fake.Text("It shipped."),
	).Named("acme", "big")
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newReact(t, p, agent.WithName("support"), agent.WithTools(lookup), agent.WithLogger(l))
	out, err := a.Run(context.Background(), agent.Input{Text: "Where is my order?"})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, r := range records(t, &buf) {
		msgs = append(msgs, r["level"].(string)+" "+r["msg"].(string))
		if r["agent"] != "support" || r["run_id"] != out.RunID {
			t.Errorf("record %v: want agent support and run_id %s", r, out.RunID)
		}
		switch r["msg"] {
		case "deputy: model call":
			if r["model"] != "big" || r["input_tokens"].(float64) <= 0 {
				t.Errorf("model call record %v: want the model and its tokens", r)
			}
		case "deputy: tool call failed; the model reads why":
			if r["tool"] != "lookup" || !strings.Contains(r["error"].(string), "no such order") {
				t.Errorf("tool failure record %v: want the tool and the error the model read", r)
			}
		case "deputy: run finished":
			if r["steps"].(float64) != 3 || r["error"] != nil {
				t.Errorf("run record %v: want 3 steps and no error", r)
			}
		}
	}
	want := []string{
		"DEBUG deputy: model call", "WARN deputy: tool call failed; the model reads why",
		"DEBUG deputy: model call", "DEBUG deputy: tool call",
		"DEBUG deputy: model call", "DEBUG deputy: run finished",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}

	// At Warn, a failed model call is logged, and the run's own error is
	// the caller's: not logged.
	buf.Reset()
	l = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	failing := fake.NewProvider(fake.Error(&provider.Error{Provider: "acme", Kind: provider.KindTransient, StatusCode: 503}))
	if _, err := newReact(t, failing, agent.WithLogger(l)).Run(context.Background(), agent.Input{Text: "Hi"}); err == nil {
		t.Fatal("the run did not fail")
	}
	recs := records(t, &buf)
	if len(recs) != 1 || recs[0]["msg"] != "deputy: model call failed" || !strings.Contains(recs[0]["error"].(string), "503") {
		t.Errorf("at Warn: records %v, want the failed model call alone", recs)
	}
}
