package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// pause is a tool of the lead that takes a while and runs again when its
// turn is resumed, as a slow replay of the lead's earlier steps does.
type pause struct{ d time.Duration }

func (p pause) Definition() tool.Definition {
	return tool.Definition{Name: "pause", Description: "Waits a moment.", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (p pause) Call(ctx context.Context, _ tool.Call) (tool.Result, error) {
	select {
	case <-time.After(p.d):
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
	return tool.Result{Content: "paused"}, nil
}

func (pause) RunsAgain(tool.Call) bool { return true }

// A message sent to a background job while its model is answering, whose
// answer then asks a person for approval: the job suspends with the
// message still waiting. The turn resumed with the approval runs the
// approved call once and delivers the message once, before the job's
// next step, and the lead's wait collects the answer that read it; the
// receipt the resumed lead reads says delivered. However long the lead's
// own replay takes before its send runs again, and whatever ids the
// model gives its calls.
func TestJobMessageToASuspendedJobDeliveredOnceAfterTheAnswer(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var deletes atomic.Int64
			del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
				Path string `json:"path"`
			}) (string, error) {
				deletes.Add(1)
				return "deleted " + in.Path, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sent := make(chan struct{})
			var once sync.Once
			var n, leadCalls, forkCalls atomic.Int64
			var mu sync.Mutex
			var forkInbound [][]string
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				k := n.Add(1)
				u := provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}
				calls := func(cs ...provider.ToolCall) (provider.Response, error) {
					for i := range cs {
						cs[i].ID = mode.id(k, i)
					}
					return provider.Response{Message: provider.AssistantMessage("", cs...), Usage: u}, nil
				}
				call := func(name, args string) provider.ToolCall {
					return provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}
				}
				text := func(s string) (provider.Response, error) {
					return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
				}
				results := toolResults(req.Messages)
				if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
					forkCalls.Add(1)
					mu.Lock()
					forkInbound = append(forkInbound, inboundTexts(req))
					mu.Unlock()
					if len(results) == 0 {
						// Answers once the lead has sent its message.
						select {
						case <-sent:
						case <-ctx.Done():
							return provider.Response{}, ctx.Err()
						}
						return calls(call("delete", `{"path":"/tmp/x"}`))
					}
					return text("cleaned up; read: " + strings.Join(inboundTexts(req), "|"))
				}
				leadCalls.Add(1)
				job := latestJob(req.Messages)
				switch len(results) {
				case 0:
					return calls(call(subagent.SpawnToolName, `{"task":"clean up","background":true}`), call("pause", `{}`))
				case 2:
					return calls(call(subagent.JobsToolName, `{"action":"send","job_id":"`+job+`","message":"also tidy /tmp/y"}`))
				case 3:
					once.Do(func() { close(sent) })
					return calls(call(subagent.JobsToolName, `{"action":"wait","job_id":"`+job+`","timeout_seconds":60}`))
				}
				return text("lead: " + results[len(results)-1])
			})
			reg, _ := setup(t, model, true, []subagent.SpawnOption{subagent.WithBackground()}, tool.RequireApproval(del, "deletes data", 0), pause{300 * time.Millisecond})
			st := newStore(t)
			run := func(ctx context.Context) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return lead(t, model, reg).Run(agent.WithJournal(ctx, j), agent.Input{Text: "tidy up"})
			}
			_, err = run(t.Context())
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("the first run ended with %v, want the job's question", err)
			}
			if d, l, f := deletes.Load(), leadCalls.Load(), forkCalls.Load(); d != 0 || l != 3 || f != 1 {
				t.Fatalf("before the answer: %d deletes, the lead and the job asked their models %d and %d times; want 0, 3, 1", d, l, f)
			}

			rctx, err := tool.Resume(t.Context(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(rctx)
			if err != nil {
				t.Fatalf("the resumed run: %v", err)
			}
			if d, l, f := deletes.Load(), leadCalls.Load(), forkCalls.Load(); d != 1 || l != 4 || f != 2 {
				t.Errorf("after the answer: %d deletes, the lead and the job asked their models %d and %d times; want 1, 4, 2", d, l, f)
			}
			mu.Lock()
			last := forkInbound[len(forkInbound)-1]
			mu.Unlock()
			if len(last) != 1 || last[0] != "also tidy /tmp/y" {
				t.Errorf("the job's step after the answer read the lead's messages %q, want the one message once", last)
			}
			if want := "lead: cleaned up; read: also tidy /tmp/y"; out.Answer != want {
				t.Errorf("the resumed run answered %q, want %q", out.Answer, want)
			}
			// The receipt the resumed lead read for its send.
			var receipt map[string]any
			for _, r := range withKey(out.Messages, "message_id") {
				receipt = r
			}
			if receipt == nil || receipt["state"] != "delivered" || receipt["step"] != 2.0 || receipt["seq"] != 1.0 {
				t.Errorf("the resumed lead read the receipt %v, want the message delivered before the job's step 2, its first", receipt)
			}
			if got, want := out.TotalUsage(), (provider.Usage{InputTokens: 60, OutputTokens: 6, Requests: 6}); got != want {
				t.Errorf("the resumed turn counted %+v, want the six model calls once: %+v", got, want)
			}
		})
	}
}

// A message a background job had not taken when it stopped to ask a
// person, under its turn's journal, says undelivered once the job is
// cancelled instead of answered: it is never taken.
func TestJobMessageToASuspendedJobCancelledIsUndelivered(t *testing.T) {
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct{}) (string, error) { return "deleted", nil })
	if err != nil {
		t.Fatal(err)
	}
	asked, sent := make(chan struct{}), make(chan struct{})
	var askedOnce, sentOnce sync.Once
	var s *subagent.Spawner
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}
		call := func(name, args string) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: name, Arguments: json.RawMessage(args)}), Usage: u}, nil
		}
		results := toolResults(req.Messages)
		if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
			askedOnce.Do(func() { close(asked) })
			select {
			case <-sent:
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
			return call("delete", `{}`)
		}
		job := latestJob(req.Messages)
		switch len(results) {
		case 0:
			return call(subagent.SpawnToolName, `{"task":"clean up","background":true}`)
		case 1:
			<-asked // the message comes during the job's first model call
			return call(subagent.JobsToolName, `{"action":"send","job_id":"`+job+`","message":"also tidy /tmp/y"}`)
		case 2:
			sentOnce.Do(func() { close(sent) })
			for { // until the job has asked
				if st, err := s.Jobs(ctx).Status(job); err == nil && st.State == subagent.JobSuspended {
					break
				}
				time.Sleep(time.Millisecond)
			}
			return call(subagent.JobsToolName, `{"action":"cancel","job_id":"`+job+`"}`)
		case 3:
			return call(subagent.JobsToolName, `{"action":"status","job_id":"`+job+`"}`)
		}
		return provider.Response{Message: provider.AssistantMessage("done"), Usage: u}, nil
	})
	reg, sp := setup(t, model, true, []subagent.SpawnOption{subagent.WithBackground()}, tool.RequireApproval(del, "", 0))
	s = sp
	j, err := newStore(t).Journal(t.Context(), "turn")
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead(t, model, reg).Run(agent.WithJournal(t.Context(), j), agent.Input{Text: "tidy up"})
	if err != nil {
		t.Fatal(err)
	}
	results := toolResults(out.Messages)
	mustContain(t, results[1], `"state":"queued"`)
	mustContain(t, results[2], "cancelled while it waited for a person's answer")
	var st subagent.JobStatus
	if err := json.Unmarshal([]byte(results[3]), &st); err != nil {
		t.Fatalf("the status %q: %v", results[3], err)
	}
	if st.State != subagent.JobCancelled || len(st.Messages) != 1 || st.Messages[0].State != subagent.MessageUndelivered || st.Messages[0].Seq != 1 {
		t.Errorf("the cancelled job's status: %s, messages %+v; want cancelled, the one message undelivered", st.State, st.Messages)
	}
}
