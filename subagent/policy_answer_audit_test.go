package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// The audit trail holds each question a policy puts to a person once,
// and the person's answer once — an approval as an allow, a refusal as a
// deny, each saying what they answered — across the resume that carries
// the answers, whatever ids the model gives its calls. Before, the
// resumed run recorded the question again as "ask", and the answer was in
// no record. A person's no is not a policy's denial: it is not in the
// run's Denials.
func TestPolicyRecordsAQuestionAndItsAnswerOnce(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			var answers atomic.Int64
			lead := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
				n := answers.Add(1)
				u := provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}
				for _, m := range req.Messages {
					if m.Role == provider.RoleTool {
						return provider.Response{Message: provider.AssistantMessage("done"), Usage: u}, nil
					}
				}
				return provider.Response{Message: provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
					{ID: mode.id(n, 0), Name: "mail", Arguments: json.RawMessage(`{"body":"hello"}`)},
					{ID: mode.id(n, 1), Name: "courier", Arguments: json.RawMessage(`{"task":"deliver it"}`)},
				}}, Usage: u}, nil
			})
			var mails, deliveries atomic.Int64
			mail := tool.Func{
				Def: tool.Definition{Name: "mail", Description: "Sends mail.", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(context.Context, tool.Call) (tool.Result, error) {
					mails.Add(1)
					return tool.Result{Content: "sent"}, nil
				},
			}
			courier, err := subagent.FromAgent("courier", "Delivers.", agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
				deliveries.Add(1)
				return agent.Output{Answer: "delivered"}, nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			askHandOff := policy.Func("ask-courier", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation && c.Tool == "courier" {
					return policy.Asked("hand this to the courier?")
				}
				return policy.Decision{}
			})
			pol, err := policy.New(policy.AskBefore("ask-mail", "mail"), askHandOff)
			if err != nil {
				t.Fatal(err)
			}
			a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(mail, courier), agent.WithPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			j, err := newStore(t).Journal(t.Context(), "turn")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var trail []map[string]any
			sink := event.SinkFunc(func(e event.Event) {
				if e.Type != event.Custom || e.Name != policy.EventName {
					return
				}
				var v map[string]any
				if err := json.Unmarshal(e.Value, &v); err != nil {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				trail = append(trail, v)
			})
			var last agent.Output
			answerRounds(t, t.Context(), 3, func(ctx context.Context) error {
				var err error
				last, err = a.Run(event.WithSink(agent.WithJournal(ctx, j), sink), agent.Input{Text: "send it"})
				return err
			}, func(_ int, it tool.Interrupt) bool {
				return strings.Contains(it.Message, "ask-mail") // the mail yes, the hand-off no
			})
			if mails.Load() != 1 || deliveries.Load() != 0 {
				t.Errorf("the mail ran %d times and the courier %d, want once and never", mails.Load(), deliveries.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			got := map[string]int{}
			for _, v := range trail {
				if v["rule"] == "ask-mail" || v["rule"] == "ask-courier" {
					got[v["rule"].(string)+" "+v["verdict"].(string)+" "+str(v["answer"])]++
				}
			}
			want := map[string]int{
				"ask-mail ask ": 1, "ask-mail allow approved": 1,
				"ask-courier ask ": 1, "ask-courier deny rejected": 1,
			}
			if len(got) != len(want) {
				t.Errorf("the trail of the questions is %v, want %v", got, want)
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("the trail of the questions is %v, want %v", got, want)
					break
				}
			}
			if len(last.Denials) != 0 {
				t.Errorf("the run's denials are %v, want none: a person's no is no policy's denial", last.Denials)
			}
		})
	}
}

// str is v as a string, "" for none.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// A question left unanswered when a journaled turn is resumed with the
// answer to another is put again, and is still in the audit trail once;
// so is each of the two questions a policy asks about one call, before
// the call and before its hand-off: the courier runs once the person
// approved both. Before, the question put again was in the trail again.
func TestPolicyRecordsEachOfTwoQuestionsOnce(t *testing.T) {
	lead := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		u := provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage("done"), Usage: u}, nil
			}
		}
		return provider.Response{Message: provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
			{ID: "c1", Name: "mail", Arguments: json.RawMessage(`{"body":"hello"}`)},
			{ID: "c2", Name: "courier", Arguments: json.RawMessage(`{"task":"deliver it"}`)},
		}}, Usage: u}, nil
	})
	var mails, deliveries atomic.Int64
	mail := tool.Func{
		Def: tool.Definition{Name: "mail", Description: "Sends mail.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			mails.Add(1)
			return tool.Result{Content: "sent"}, nil
		},
	}
	courier, err := subagent.FromAgent("courier", "Delivers.", agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
		deliveries.Add(1)
		return agent.Output{Answer: "delivered"}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	askHandOff := policy.Func("ask-hand-off", func(_ context.Context, c *policy.Check) policy.Decision {
		if c.Point == policy.BeforeDelegation && c.Tool == "courier" {
			return policy.Asked("hand this to the courier?")
		}
		return policy.Decision{}
	})
	pol, err := policy.New(policy.AskBefore("ask-call", "mail", "courier"), askHandOff)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(lead, agent.WithName("lead"), agent.WithTools(mail, courier), agent.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var trail []map[string]any
	sink := event.SinkFunc(func(e event.Event) {
		if e.Type != event.Custom || e.Name != policy.EventName {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(e.Value, &v); err != nil {
			t.Error(err)
		}
		mu.Lock()
		defer mu.Unlock()
		trail = append(trail, v)
	})
	j, err := newStore(t).Journal(t.Context(), "turn")
	if err != nil {
		t.Fatal(err)
	}
	rounds := 0
	// Each round, the first question it stops on is answered, yes; the
	// others wait.
	ctx := t.Context()
	for {
		if rounds++; rounds > 6 {
			t.Fatal("no end after 6 rounds")
		}
		_, err := a.Run(event.WithSink(agent.WithJournal(ctx, j), sink), agent.Input{Text: "send it"})
		var in *tool.Interrupted
		if !errors.As(err, &in) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		if ctx, err = tool.Resume(t.Context(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if mails.Load() != 1 || deliveries.Load() != 1 {
		t.Errorf("the mail ran %d times and the courier %d, want each once", mails.Load(), deliveries.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	got := map[string]int{}
	for _, v := range trail {
		if r := str(v["rule"]); strings.HasPrefix(r, "ask-") {
			got[r+" "+str(v["tool"])+" "+str(v["point"])+" "+str(v["verdict"])+" "+str(v["answer"])]++
		}
	}
	want := map[string]int{
		"ask-call mail tool ask ": 1, "ask-call mail tool allow approved": 1,
		"ask-call courier tool ask ": 1, "ask-call courier tool allow approved": 1,
		"ask-hand-off courier delegation ask ": 1, "ask-hand-off courier delegation allow approved": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("the trail of the questions is %v, want %v", got, want)
	}
}
