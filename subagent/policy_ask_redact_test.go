package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// A call or a hand-off a rule asks a person about, which a redactor
// rewrote too, goes on once approved as the redactor left it (the tool
// never gets the secret, the child gets the task as rewritten), across the resume that carries the
// answer, whatever ids the model gives its calls. Each runs once.
func TestPolicyAskedCallKeepsItsRedaction(t *testing.T) {
	const key = "sk-live-3141"
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var answers atomic.Int64
			lead := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
				n := answers.Add(1)
				for _, m := range req.Messages {
					if m.Role == provider.RoleTool {
						return provider.Response{Message: provider.AssistantMessage("done"), Usage: provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}}, nil
					}
				}
				msg := provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
					{ID: mode.id(n, 0), Name: "mail", Arguments: json.RawMessage(`{"body":"the key is ` + key + `"}`)},
					{ID: mode.id(n, 1), Name: "courier", Arguments: json.RawMessage(`{"task":"deliver ` + key + `"}`)},
				}}
				return provider.Response{Message: msg, Usage: provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}}, nil
			})
			var mu sync.Mutex
			var courierRead []string
			courierAgent := agent.Func(func(_ context.Context, in agent.Input) (agent.Output, error) {
				mu.Lock()
				courierRead = append(courierRead, in.Text)
				for _, m := range in.Messages {
					courierRead = append(courierRead, m.Content)
				}
				mu.Unlock()
				return agent.Output{Answer: "delivered"}, nil
			})
			var mailed []string
			mail := tool.Func{
				Def: tool.Definition{Name: "mail", Description: "Sends mail.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(_ context.Context, c tool.Call) (tool.Result, error) {
					mu.Lock()
					mailed = append(mailed, string(c.Arguments))
					mu.Unlock()
					return tool.Result{Content: "sent"}, nil
				},
			}
			courier, err := subagent.FromAgent("courier", "Delivers.", courierAgent)
			if err != nil {
				t.Fatal(err)
			}
			askHandOff := policy.Func("ask-courier", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation && c.Tool == "courier" {
					return policy.Asked("hand this to the courier?")
				}
				return policy.Decision{}
			})
			stamp := policy.Func("stamp", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation {
					c.Task += " (checked)"
					return policy.Rewrote("stamped the task")
				}
				return policy.Decision{}
			})
			pol, err := policy.New(policy.AskBefore("ask-mail", "mail"), askHandOff, stamp, policy.Redact("secrets", []string{key}))
			if err != nil {
				t.Fatal(err)
			}
			a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(mail, courier), agent.WithPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			st := newStore(t)
			j, err := st.Journal(t.Context(), "turn")
			if err != nil {
				t.Fatal(err)
			}
			asked := 0
			answerRounds(t, t.Context(), 4, func(ctx context.Context) error {
				_, err := a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "send it"})
				return err
			}, func(_ int, it tool.Interrupt) bool {
				asked++
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			if asked != 2 {
				t.Errorf("%d questions, want 2 (the mail and the hand-off)", asked)
			}
			if len(mailed) != 1 {
				t.Fatalf("mail ran %d times, want once", len(mailed))
			}
			if strings.Contains(mailed[0], key) || !strings.Contains(mailed[0], policy.Redacted) {
				t.Errorf("the approved mail was sent with %s: want the key redacted", mailed[0])
			}
			if len(courierRead) == 0 {
				t.Fatal("the courier never ran")
			}
			if !strings.Contains(courierRead[0], "(checked)") {
				t.Errorf("the courier, approved, was handed %q: want the task as the rule rewrote it", courierRead[0])
			}
			for _, s := range courierRead {
				if strings.Contains(s, key) {
					t.Errorf("the courier, approved, read the key: %q", s)
				}
			}
		})
	}
}

// answerRounds runs a journaled turn (run, under ctx), and runs it again
// with a person's answer to each question it stops on (approve: yes or
// no), resumed from base, until it ends without one; it fails the test
// when a run fails, or when the turn has not ended after rounds runs
// again.
func answerRounds(t *testing.T, base context.Context, rounds int, run func(ctx context.Context) error, approve func(round int, it tool.Interrupt) bool) {
	t.Helper()
	ctx := base
	for round := 0; ; round++ {
		if round > rounds {
			t.Fatalf("no end after %d rounds", rounds)
		}
		err := run(ctx)
		var in *tool.Interrupted
		if !errors.As(err, &in) {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			return
		}
		var answers []tool.Answer
		for _, it := range in.Interrupts {
			payload := fmt.Sprintf(`{"approved":%v}`, approve(round, it))
			answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(payload)})
		}
		if ctx, err = tool.Resume(base, in, answers...); err != nil {
			t.Fatal(err)
		}
	}
}
