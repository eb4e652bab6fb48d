package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// callIDModes are the ways real providers name tool calls: afresh on
// every request, not at all, or from call_0 again in every response. None
// repeats the ids of the run that asked.
var callIDModes = []struct {
	name string
	id   func(n int64, i int) string // of the i-th call of the n-th answer
}{
	{"fresh ids", func(n int64, i int) string { return "call_" + strconv.FormatInt(1000*n+int64(i), 10) }},
	{"no ids", func(int64, int) string { return "" }},
	{"ids restarting at call_0", func(_ int64, i int) string { return "call_" + strconv.Itoa(i) }},
}

// withKey returns the tool results of msgs that decode as JSON objects
// with key.
func withKey(msgs []provider.Message, key string) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		var v map[string]any
		if m.Role == provider.RoleTool && json.Unmarshal([]byte(m.Content), &v) == nil && v[key] != nil {
			out = append(out, v)
		}
	}
	return out
}

// A message the child took before the process died is delivered once:
// the turn run again replays it before the same step, the parent's send,
// run again, gets its receipt, and the child's tool, which ran before the
// crash, does not run again.
func TestJobMessageOnceAcrossResume(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			var looked, noted atomic.Int64
			var lastReq provider.Request
			runTurn := func(crash bool) (agent.Output, [][]string, error) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				sent := make(chan struct{})
				var once sync.Once
				var n atomic.Int64
				var mu sync.Mutex
				var childInbound [][]string
				var lastChild provider.Request
				model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
					k := n.Add(1)
					call := func(name, args string) provider.Response {
						return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: mode.id(k, 0), Name: name, Arguments: json.RawMessage(args)}), Usage: provider.Usage{InputTokens: 10, Requests: 1}}
					}
					text := func(s string) provider.Response {
						return provider.Response{Message: provider.AssistantMessage(s), Usage: provider.Usage{InputTokens: 10, Requests: 1}}
					}
					if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
						in := inbound(req)
						mu.Lock()
						childInbound = append(childInbound, in)
						lastChild = req
						mu.Unlock()
						switch len(toolResults(req.Messages)) {
						case 0:
							return call("lookup", `{}`), nil
						case 1:
							return call("note", `{}`), nil
						}
						if crash {
							cancel() // the process dies as the model is asked
							return provider.Response{}, context.Canceled
						}
						if len(in) != 1 {
							return text("no message"), nil
						}
						return text("found it: " + in[0][strings.LastIndex(in[0], "\n")+1:]), nil
					}
					jobs := withKey(req.Messages, "job_id")
					switch {
					case len(jobs) == 0:
						return call(subagent.SpawnToolName, `{"task":"dig","background":true}`), nil
					case len(jobs) == 1:
						return call(subagent.JobsToolName, `{"action":"send","job_id":"`+jobs[0]["job_id"].(string)+`","message":"look under the stairs"}`), nil
					case len(toolResults(req.Messages)) == 2:
						once.Do(func() { close(sent) })
						return call(subagent.JobsToolName, `{"action":"wait","timeout_seconds":600,"job_id":"`+jobs[0]["job_id"].(string)+`"}`), nil
					}
					rs := toolResults(req.Messages)
					return text("lead: " + rs[len(rs)-1]), nil
				})
				look := tool.Func{Def: tool.Definition{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
						select {
						case <-sent:
						case <-ctx.Done():
							return tool.Result{}, ctx.Err()
						}
						looked.Add(1)
						return tool.Result{Content: "a map"}, nil
					}}
				note := tool.Func{Def: tool.Definition{Name: "note", Parameters: json.RawMessage(`{"type":"object"}`)},
					Fn: func(context.Context, tool.Call) (tool.Result, error) {
						noted.Add(1)
						return tool.Result{Content: "noted"}, nil
					}}
				reg, err := tool.NewRegistry(look, note)
				if err != nil {
					t.Fatal(err)
				}
				s, err := subagent.NewSpawner(model, reg, subagent.WithBackground())
				if err != nil {
					t.Fatal(err)
				}
				if err := reg.Register(s); err != nil {
					t.Fatal(err)
				}
				if err := reg.Register(s.JobsTool()); err != nil {
					t.Fatal(err)
				}
				if !crash {
					close(sent) // the send was made by the run that crashed
					once.Do(func() {})
				}
				j, err := st.Journal(ctx, "message-turn")
				if err != nil {
					t.Fatal(err)
				}
				out, err := lead(t, model, reg).Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
				lastReq = lastChild
				return out, childInbound, err
			}
			if _, _, err := runTurn(true); !errors.Is(err, context.Canceled) {
				t.Fatalf("the crashed run ended with %v, not with the crash", err)
			}
			crashed := roles(lastReq)
			// What the resumed turn reads, to tell which records a failure
			// found missing.
			read, err := st.Journal(t.Context(), "message-turn")
			if err != nil {
				t.Fatal(err)
			}
			out, inboundSeen, err := runTurn(false)
			if err != nil {
				t.Fatalf("%v\nthe journal it resumed:\n%s", err, strings.Join(read.Keys(""), "\n"))
			}
			if out.Answer != "lead: found it: look under the stairs" {
				t.Errorf("answer %q", out.Answer)
			}
			// The resumed turn asks only the child's third step again,
			// with the message in it once, where it was delivered: before
			// the second step, or the first when the job's goroutine
			// started after the lead's send.
			if len(inboundSeen) != 1 || len(inboundSeen[0]) != 1 {
				t.Errorf("the resumed child was asked %d times, with messages %q; want once, the message once", len(inboundSeen), inboundSeen)
			}
			if n, m := looked.Load(), noted.Load(); n != 1 || m != 1 {
				t.Errorf("the child's tools ran %d and %d times, want once each", n, m)
			}
			if got := roles(lastReq); got != crashed || strings.Count(got, "message") != 1 {
				t.Errorf("the resumed child's conversation: %s; the crashed one's: %s; want the same, with the message once", got, crashed)
			}
		})
	}
}

// roles names the messages of req by role, a message from the parent as
// "message".
func roles(req provider.Request) string {
	var out []string
	for _, m := range req.Messages {
		r := string(m.Role)
		if len(inbound(provider.Request{Messages: []provider.Message{m}})) > 0 {
			r = "message"
		}
		out = append(out, r)
	}
	return strings.Join(out, " ")
}
