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

// auditedLead is a lead whose model calls the tool mail and the
// sub-agent courier in one step, then answers, under a policy of rules:
// it counts what ran, and keeps the audit trail of the runs under its
// sink, each record as "rule tool point verdict answer", of the rules
// named "ask-…".
type auditedLead struct {
	agent             agent.Agent
	mails, deliveries atomic.Int64
	sink              event.Sink

	mu    sync.Mutex
	trail map[string]int
}

func newAuditedLead(t *testing.T, id func(n int64, i int) string, rules ...policy.Rule) *auditedLead {
	t.Helper()
	l := &auditedLead{trail: map[string]int{}}
	var answers atomic.Int64
	model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		n := answers.Add(1)
		u := provider.Usage{Requests: 1, InputTokens: 1, OutputTokens: 1}
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				return provider.Response{Message: provider.AssistantMessage("done"), Usage: u}, nil
			}
		}
		return provider.Response{Message: provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
			{ID: id(n, 0), Name: "mail", Arguments: json.RawMessage(`{"body":"hello"}`)},
			{ID: id(n, 1), Name: "courier", Arguments: json.RawMessage(`{"task":"deliver it"}`)},
		}}, Usage: u}, nil
	})
	mail := tool.Func{
		Def: tool.Definition{Name: "mail", Description: "Sends mail.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			l.mails.Add(1)
			return tool.Result{Content: "sent"}, nil
		},
	}
	courier, err := subagent.FromAgent("courier", "Delivers.", agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
		l.deliveries.Add(1)
		return agent.Output{Answer: "delivered"}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	if l.agent, err = agent.NewReact(model, agent.WithName("lead"), agent.WithTools(mail, courier), agent.WithPolicy(pol)); err != nil {
		t.Fatal(err)
	}
	l.sink = event.SinkFunc(func(e event.Event) {
		if e.Type != event.Custom || e.Name != policy.EventName {
			return
		}
		var v struct{ Rule, Tool, Point, Verdict, Answer string }
		if err := json.Unmarshal(e.Value, &v); err != nil {
			t.Error(err)
		}
		if strings.HasPrefix(v.Rule, "ask-") {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.trail[strings.Join([]string{v.Rule, v.Tool, v.Point, v.Verdict, v.Answer}, " ")]++
		}
	})
	return l
}

// checkTrail fails t unless the audit trail is want.
func (l *auditedLead) checkTrail(t *testing.T, want map[string]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !maps.Equal(l.trail, want) {
		t.Errorf("the trail of the questions is %v, want %v", l.trail, want)
	}
}

// askHandOff asks a person before the hand-off to the courier.
var askHandOff = policy.Func("ask-hand-off", func(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point == policy.BeforeDelegation && c.Tool == "courier" {
		return policy.Asked("hand this to the courier?")
	}
	return policy.Decision{}
})

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
			l := newAuditedLead(t, mode.id, policy.AskBefore("ask-mail", "mail"), askHandOff)
			j, err := newStore(t).Journal(t.Context(), "turn")
			if err != nil {
				t.Fatal(err)
			}
			var last agent.Output
			answerRounds(t, t.Context(), 3, func(ctx context.Context) error {
				var err error
				last, err = l.agent.Run(event.WithSink(agent.WithJournal(ctx, j), l.sink), agent.Input{Text: "send it"})
				return err
			}, func(_ int, it tool.Interrupt) bool {
				return strings.Contains(it.Message, "ask-mail") // the mail yes, the hand-off no
			})
			if l.mails.Load() != 1 || l.deliveries.Load() != 0 {
				t.Errorf("the mail ran %d times and the courier %d, want once and never", l.mails.Load(), l.deliveries.Load())
			}
			l.checkTrail(t, map[string]int{
				"ask-mail mail tool ask ": 1, "ask-mail mail tool allow approved": 1,
				"ask-hand-off courier delegation ask ": 1, "ask-hand-off courier delegation deny rejected": 1,
			})
			if len(last.Denials) != 0 {
				t.Errorf("the run's denials are %v, want none: a person's no is no policy's denial", last.Denials)
			}
		})
	}
}

// A question left unanswered when a journaled turn is resumed with the
// answer to another is put again, and is still in the audit trail once;
// so is each of the two questions a policy asks about one call, before
// the call and before its hand-off: the courier runs once the person
// approved both. Before, the question put again was in the trail again,
// and so was the call's answer as the hand-off was asked about.
func TestPolicyRecordsEachOfTwoQuestionsOnce(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			l := newAuditedLead(t, mode.id, policy.AskBefore("ask-call", "mail", "courier"), askHandOff)
			j, err := newStore(t).Journal(t.Context(), "turn")
			if err != nil {
				t.Fatal(err)
			}
			// Each round, the first question it stops on is answered,
			// yes; the others wait.
			ctx := t.Context()
			for rounds := 1; ; rounds++ {
				if rounds > 6 {
					t.Fatal("no end after 6 rounds")
				}
				_, err := l.agent.Run(event.WithSink(agent.WithJournal(ctx, j), l.sink), agent.Input{Text: "send it"})
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
			if l.mails.Load() != 1 || l.deliveries.Load() != 1 {
				t.Errorf("the mail ran %d times and the courier %d, want each once", l.mails.Load(), l.deliveries.Load())
			}
			l.checkTrail(t, map[string]int{
				"ask-call mail tool ask ": 1, "ask-call mail tool allow approved": 1,
				"ask-call courier tool ask ": 1, "ask-call courier tool allow approved": 1,
				"ask-hand-off courier delegation ask ": 1, "ask-hand-off courier delegation allow approved": 1,
			})
		})
	}
}
