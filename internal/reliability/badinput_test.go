package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

type echoArgs struct {
	Text string `json:"text"`
}

func echoTool() tool.Tool {
	return tool.Must(tool.New("echo", "echoes", func(_ context.Context, in echoArgs) (string, error) { return in.Text, nil }))
}

// callThrough runs one tool call with the given raw arguments through a
// registry, the way a model's call arrives, and returns the error result.
func callThrough(t tool.Tool, name string, args []byte) error {
	reg, err := tool.NewRegistry(t)
	if err != nil {
		return err
	}
	res, err := reg.Execute(context.Background(), []tool.Call{{ID: "c", Name: name, Arguments: args}})
	if err != nil {
		return err
	}
	if !res[0].IsError {
		return nil
	}
	return errors.New(res[0].Content)
}

func nested(depth int) []byte {
	return []byte(`{"text":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
}

// what to do: every message says how to put things right.
var actionWords = regexp.MustCompile(`\b(use|pass|give|fix|send|add|call|check|raise|leave|say|shorten|wait|do|retry|answer|slow)\b`)

// TestBadInput is the table of bad input across the public surface: each row
// gets a clear error that says what was wrong and what to do, never a panic.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	p := fake.NewProvider()
	child := func(context.Context, json.RawMessage) (agent.Agent, error) { return agent.NewReact(p) }
	react, _ := agent.NewReact(p)
	spawnReg, _ := tool.NewRegistry()
	spawner, err := subagent.NewSpawner(p, spawnReg, subagent.WithRoster(mustTool(subagent.FromFactory("analyst", "analyses", child))))
	if err != nil {
		t.Fatal(err)
	}
	resident := mustTool(subagent.FromAgent("expert", "knows", react))
	factory := mustTool(subagent.FromFactory("worker", "works", child))
	fromReact := mustTool(subagent.FromReact("delegate", "delegates", p, nil))

	rows := []struct {
		name string
		run  func() error
		want string // what was wrong, as the message says it
	}{
		// Tool arguments, as a model sends them.
		{"args: malformed JSON", func() error { return callThrough(echoTool(), "echo", []byte(`{"text":`)) }, "not valid JSON"},
		{"args: wrong type", func() error { return callThrough(echoTool(), "echo", []byte(`{"text":5}`)) }, "/text"},
		{"args: null", func() error { return callThrough(echoTool(), "echo", []byte(`null`)) }, "want object"},
		{"args: array", func() error { return callThrough(echoTool(), "echo", []byte(`[1]`)) }, "want object"},
		{"args: missing field", func() error { return callThrough(echoTool(), "echo", []byte(`{}`)) }, "missing property"},
		{"args: extra field", func() error { return callThrough(echoTool(), "echo", []byte(`{"text":"a","x":1}`)) }, "additional"},
		{"args: 10 MB", func() error {
			return callThrough(echoTool(), "echo", []byte(`{"text":"`+strings.Repeat("a", 10<<20)+`"}`))
		}, "more than the limit"},
		{"args: trailing garbage", func() error { return callThrough(echoTool(), "echo", []byte(`{"text":"a"} and more`)) }, "not valid JSON"},
		{"args: nested 100000 deep", func() error { return callThrough(echoTool(), "echo", nested(100000)) }, "JSON"},
		{"args: unknown tool", func() error { return callThrough(echoTool(), "ech0", []byte(`{}`)) }, `unknown tool "ech0"`},
		{"args: resident, wrong type", func() error { return callThrough(resident, "expert", []byte(`{"task":1}`)) }, "/task"},
		{"args: factory, null", func() error { return callThrough(factory, "worker", []byte(`null`)) }, "want object"},
		{"args: FromReact, array", func() error { return callThrough(fromReact, "delegate", []byte(`[]`)) }, "want object"},
		{"args: spawn, missing task", func() error { return callThrough(spawner, subagent.SpawnToolName, []byte(`{"context":"x"}`)) }, "missing property 'task'"},
		{"args: spawn, unknown agent", func() error {
			return callThrough(spawner, subagent.SpawnToolName, []byte(`{"task":"t","agent":"nobody"}`))
		}, "analyst"},
		{"args: spawn, schema that does not compile", func() error {
			return callThrough(spawner, subagent.SpawnToolName, []byte(`{"task":"t","output_schema":{"type":"nonsense"}}`))
		}, "output_schema"},
		{"args: spawn, blank task", func() error { return callThrough(spawner, subagent.SpawnToolName, []byte(`{"task":"   "}`)) }, "blank"},

		// Model answers.
		{"answer: neither text nor tool calls", func() error {
			a, _ := agent.NewReact(fake.NewProvider(fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
				return provider.Response{Message: provider.Message{Role: provider.RoleAssistant}}, nil
			})))
			_, err := a.Run(ctx, agent.Input{Text: "q"})
			return err
		}, "neither text nor tool calls"},
		{"answer: script exhausted", func() error {
			a, _ := agent.NewReact(fake.NewProvider())
			_, err := a.Run(ctx, agent.Input{Text: "q"})
			return err
		}, "no reply left"},
		{"answer: validated child never gives JSON", func() error {
			fp := fake.NewProvider(fake.Text("prose"), fake.Text("more prose"))
			st := mustTool(subagent.FromReact("r", "r", fp, nil, subagent.WithReport()))
			_, err := st.Call(ctx, tool.Call{ID: "1", Name: "r", Arguments: []byte(`{"task":"t"}`)})
			return err
		}, "without the JSON result"},

		// AG-UI request bodies.
		{"RunAgentInput: not JSON", func() error { return post(t, "{threadId") }, "JSON"},
		{"RunAgentInput: missing threadId", func() error { return post(t, `{"runId":"r","messages":[]}`) }, "threadId"},
		{"RunAgentInput: messages not an array", func() error { return post(t, `{"threadId":"t","runId":"r","messages":{}}`) }, "messages"},
		{"RunAgentInput: unknown role", func() error {
			return post(t, `{"threadId":"t","runId":"r","messages":[{"id":"1","role":"wizard","content":"x"}]}`)
		}, "wizard"},
		{"RunAgentInput: body too large", func() error {
			return post(t, `{"threadId":"t","runId":"r","messages":[{"id":"1","role":"user","content":"`+strings.Repeat("a", 2<<20)+`"}]}`)
		}, "bytes"},
		{"RunAgentInput: GET", func() error { return request(t, "GET", "") }, "POST"},

		// Options and constructors.
		{"NewReact: nil provider", func() error { _, err := agent.NewReact(nil); return err }, "nil provider"},
		{"NewReact: max steps 0", func() error { _, err := agent.NewReact(p, agent.WithMaxSteps(0)); return err }, "max steps 0"},
		{"NewReact: negative retries", func() error { _, err := agent.NewReact(p, agent.WithToolRetries(-1)); return err }, "tool retries -1"},
		{"NewReact: negative token limit", func() error { _, err := agent.NewReact(p, agent.WithTokenLimit(-5)); return err }, "token limit -5"},
		{"NewReact: negative history", func() error { _, err := agent.NewReact(p, agent.WithHistoryLimit(-1)); return err }, "history limit"},
		{"NewReact: temperature 3", func() error { _, err := agent.NewReact(p, agent.WithTemperature(3)); return err }, "temperature"},
		{"NewReact: empty name", func() error { _, err := agent.NewReact(p, agent.WithName("")); return err }, "empty name"},
		{"NewReact: duplicate tools", func() error { _, err := agent.NewReact(p, agent.WithTools(echoTool(), echoTool())); return err }, "already registered"},
		{"Restore: garbage", func() error { return react.Restore([]byte("{nope")) }, "invalid conversation snapshot"},
		{"Restore: dangling tool call", func() error {
			return react.Restore([]byte(`{"version":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","name":"t","arguments":{}}]}]}`))
		}, "no result"},
		{"tool.New: empty name", func() error {
			_, err := tool.New("", "d", func(context.Context, echoArgs) (string, error) { return "", nil })
			return err
		}, "empty name"},
		{"tool.New: spaces in name", func() error {
			_, err := tool.New("my tool", "d", func(context.Context, echoArgs) (string, error) { return "", nil })
			return err
		}, "not allowed"},
		{"tool.New: non-struct arguments", func() error {
			_, err := tool.New("t", "d", func(context.Context, string) (string, error) { return "", nil })
			return err
		}, "not a struct"},
		{"tool.New: nil function", func() error { _, err := tool.New[echoArgs, string]("t", "d", nil); return err }, "nil function"},
		{"jsonschema.Compile: empty", func() error { _, err := jsonschema.Compile(nil); return err }, "empty JSON Schema"},
		{"jsonschema.Compile: not JSON", func() error { _, err := jsonschema.Compile([]byte(`{`)); return err }, "not valid JSON"},
		{"jsonschema.Compile: an array", func() error { _, err := jsonschema.Compile([]byte(`[]`)); return err }, "an array"},
		{"Registry: nil tool", func() error { _, err := tool.NewRegistry(nil); return err }, "Register(nil)"},
		{"Registry: parallelism 0", func() error { r, _ := tool.NewRegistry(); return r.SetParallelism(0) }, "parallelism 0"},
		{"FromAgent: nil agent", func() error { _, err := subagent.FromAgent("x", "d", nil); return err }, "nil agent"},
		{"FromFactory: nil factory", func() error { _, err := subagent.FromFactory("x", "d", nil); return err }, "nil factory"},
		{"FromReact: nil provider", func() error { _, err := subagent.FromReact("x", "d", nil, nil); return err }, "nil provider"},
		{"FromAgent: bad params", func() error {
			_, err := subagent.FromAgent("x", "d", react, subagent.WithParams([]byte(`{"type":7}`)))
			return err
		}, "parameters"},
		{"FromAgent: bad name", func() error { _, err := subagent.FromAgent("a b", "d", react); return err }, "not allowed"},
		{"WithMaxDepth(0)", func() error { _, err := subagent.FromAgent("x", "d", react, subagent.WithMaxDepth(0)); return err }, "max depth 0"},
		{"WithMaxOutputBytes(-1)", func() error {
			_, err := subagent.FromAgent("x", "d", react, subagent.WithMaxOutputBytes(-1))
			return err
		}, "max output"},
		{"WithTimeout(0)", func() error { _, err := subagent.FromAgent("x", "d", react, subagent.WithTimeout(0)); return err }, "timeout"},
		{"WithOutputSchema: invalid", func() error {
			_, err := subagent.FromAgent("x", "d", react, subagent.WithOutputSchema([]byte(`{"minimum":"a"}`)))
			return err
		}, "output schema"},
		{"WithInputFromArgs(nil)", func() error {
			_, err := subagent.FromAgent("x", "d", react, subagent.WithInputFromArgs(nil))
			return err
		}, "WithInputFromArgs(nil)"},
		{"NewSpawner: nil provider", func() error { _, err := subagent.NewSpawner(nil, nil); return err }, "nil provider"},
		{"NewSpawner: max spawns 0", func() error { _, err := subagent.NewSpawner(p, nil, subagent.WithMaxSpawns(0)); return err }, "max spawns 0"},
		{"NewSpawner: concurrency 0", func() error { _, err := subagent.NewSpawner(p, nil, subagent.WithSpawnConcurrency(0)); return err }, "concurrency 0"},
		{"subagent call beyond the depth cap", func() error {
			_, err := resident.Call(run.WithDepth(ctx, 1), tool.Call{ID: "1", Name: "expert", Arguments: []byte(`{"task":"t"}`)})
			if !errors.Is(err, subagent.ErrMaxDepth) {
				return errors.New("not ErrMaxDepth")
			}
			return err
		}, "depth"},
	}
	if len(rows) < 40 {
		t.Fatalf("the table has %d rows; it promises at least 40", len(rows))
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = row.run()
			}()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, row.want) {
				t.Errorf("error %q does not say %q", msg, row.want)
			}
			if !actionWords.MatchString(msg) {
				t.Errorf("error %q does not say what to do", msg)
			}
		})
	}
}

// post sends body to an AG-UI handler, as a client would, and returns its
// error answer.
func post(t *testing.T, body string) error { return request(t, "POST", body) }

func request(t *testing.T, method, body string) error {
	a := agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{Answer: "ok"}, nil })
	h, err := agui.New(a, agui.WithMaxBodyBytes(1<<20))
	if err != nil {
		return err
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", strings.NewReader(body)))
	if rec.Code < 400 || rec.Code >= 500 {
		t.Errorf("status %d, want a 4xx", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q, want JSON", ct)
	}
	return errors.New(rec.Body.String())
}

func mustTool(t *subagent.SubAgentTool, err error) *subagent.SubAgentTool {
	if err != nil {
		panic(err)
	}
	return t
}
