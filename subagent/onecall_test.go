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

	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// skewed is a model whose tokenizer counts a token a byte of what it
// reads, four times what the budget's estimate counts for what it has no
// count for, the worst the documented error allows, and a token per four
// bytes of what it writes, stopping at the request's output bound. It
// works out, for every call, the estimate the run made of its input
// (the count of the run's last call, in and out, and a token per four
// bytes of what was added since and of the budget note), and keeps the
// largest shortfall of one call (e). reply answers a request, given the
// conversation's first message.
type skewed struct {
	price provider.Price
	reply func(req provider.Request, first string) provider.Message
	// blank, when set, says which replies cut at their output bound
	// come back with no text, billed all the same, as a model that
	// thought until the bound answers.
	blank func(req provider.Request) bool
	// onBilled, when set, is told of each call once it is billed.
	onBilled func(req provider.Request, first string)

	mu      sync.Mutex
	convs   map[string]skewedConv
	billed  provider.Usage
	dollars float64
	e       int64
	calls   int
}

// skewedConv is what a conversation's last call read and was billed.
type skewedConv struct {
	in, out int64
	body    int // messages, the note aside
	bytes   int64
}

func (m *skewed) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	body, note := req.Messages, int64(0)
	if last := body[len(body)-1]; last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Budget note:") {
		body, note = body[:len(body)-1], compact.MsgBytes(last)
	}
	fixed := int64(len(req.System))
	for _, t := range req.Tools {
		fixed += int64(len(t.Name) + len(t.Description) + len(t.Parameters))
	}
	bytes := compact.MsgsBytes(body)
	in := fixed + bytes + note
	msg := m.reply(req, body[0].Content)
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err // cancelled before it was sent: not billed
	}
	if msg.Content != "" && req.MaxTokens > 0 && len(msg.Content) > 4*req.MaxTokens {
		msg.Content = msg.Content[:4*req.MaxTokens]
	}
	out := (compact.MsgBytes(msg) + 3) / 4
	key := req.System + "\x00" + body[0].Content
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.convs == nil {
		m.convs = map[string]skewedConv{}
	}
	est := (fixed + bytes + 3) / 4
	if prev, ok := m.convs[key]; ok {
		added := bytes - prev.bytes - compact.MsgBytes(body[prev.body])
		est = prev.in + prev.out + (added+3)/4
	}
	est += (note + 3) / 4
	m.e = max(m.e, in-est)
	m.convs[key] = skewedConv{in: in, out: out, body: len(body), bytes: bytes}
	u := provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
	m.billed = m.billed.Add(u)
	m.dollars += m.price.Cost(u)
	m.calls++
	stop := provider.StopEndTurn
	if req.MaxTokens > 0 && out >= int64(req.MaxTokens) {
		stop = provider.StopMaxTokens
		if m.blank != nil && m.blank(req) {
			msg.Content = ""
		}
	}
	if m.onBilled != nil {
		m.mu.Unlock()
		m.onBilled(req, body[0].Content)
		m.mu.Lock()
	}
	return provider.Response{Message: msg, Usage: u, Model: "fake", StopReason: stop}, nil
}

func (m *skewed) Name() string { return "fake" }

// skewedTree runs a lead that asks ten children at once for a part each
// (depth 1), or ten children that each ask a worker of their own (depth
// 2), under limit, over a model of skewed counts; it returns what the tree
// was billed and the model.
func skewedTree(t *testing.T, depth, ids int, limit agent.Option, prices *provider.Prices) (*skewed, agent.Output, error) {
	t.Helper()
	m, a := skewedLead(t, depth, ids, limit, prices)
	out, err := a.Run(t.Context(), agent.Input{Text: skewedTask})
	return m, out, err
}

// skewedTask is the task of skewedLead's lead.
const skewedTask = "Write the ten parts of the survey."

// skewedLead is skewedTree's lead, not run yet, and its model.
func skewedLead(t *testing.T, depth, ids int, limit agent.Option, prices *provider.Prices) (*skewed, *agent.React) {
	t.Helper()
	return skewedLeadOf(t, depth, ids, limit, prices, nil)
}

// skewedLeadOf is skewedLead whose children are wrap of the agents the
// children's factory builds, given the task's arguments (nil: the agents).
func skewedLeadOf(t *testing.T, depth, ids int, limit agent.Option, prices *provider.Prices, wrap func(a agent.Agent, args json.RawMessage) agent.Agent) (*skewed, *agent.React) {
	t.Helper()
	part := strings.Repeat("Write this part of the survey in full, with every figure the sites reported, and cite them. ", 5)
	const lead = skewedTask
	var fresh atomic.Int64
	m := &skewed{price: provider.Price{Input: 1e-6, Output: 4e-6}}
	m.reply = func(req provider.Request, first string) provider.Message {
		switch {
		case len(req.Tools) > 0 && first == lead && len(req.Messages) == 1:
			calls := make([]provider.ToolCall, 10)
			for i := range calls {
				calls[i] = provider.ToolCall{Name: "part", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
			}
			resumetest.NameCalls(ids, calls, &fresh)
			return provider.AssistantMessage("", calls...)
		case len(req.Tools) > 0 && len(req.Messages) == 1 && strings.Contains(req.System, "You write"):
			calls := []provider.ToolCall{{Name: "worker", Arguments: json.RawMessage(fmt.Sprintf(`{"task":"the figures of %s"}`, strings.ReplaceAll(first, `"`, "")))}}
			resumetest.NameCalls(ids, calls, &fresh)
			return provider.AssistantMessage("", calls...)
		}
		return provider.AssistantMessage(essay)
	}
	newReact := func(system string, tools ...tool.Tool) *agent.React {
		reg, err := tool.NewRegistry(tools...)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.NewReact(m, agent.WithSystemPrompt(system), agent.WithRegistry(reg), agent.WithPrices(prices))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	var childTools []tool.Tool
	if depth == 2 {
		worker, err := subagent.FromFactory("worker", "Finds the figures.", func(context.Context, json.RawMessage) (agent.Agent, error) {
			return newReact("You find figures. " + part), nil
		}, subagent.WithMaxDepth(2))
		if err != nil {
			t.Fatal(err)
		}
		childTools = append(childTools, worker)
	}
	child, err := subagent.FromFactory("part", "Writes one part.", func(_ context.Context, args json.RawMessage) (agent.Agent, error) {
		if wrap != nil {
			return wrap(newReact("You write. "+part, childTools...), args), nil
		}
		return newReact("You write. "+part, childTools...), nil
	}, subagent.WithMaxDepth(2))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(child)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(m, agent.WithName("lead"), agent.WithSystemPrompt("You lead the survey."), agent.WithRegistry(reg), agent.WithPrices(prices), limit)
	if err != nil {
		t.Fatal(err)
	}
	return m, a
}

// TestTenForksPassTheLimitByOneCallsError runs ten children at once
// (and ten that each run a worker), every child's call near the end of
// its share, under a token limit and
// a cost limit, over a model whose counts are four times what the
// estimate counts for the bytes it estimates: the tree is billed at most
// its limit plus the shortfall of one call's estimate, the largest,
// worked out call by call, and the lead answers (before, the children's
// calls each passed their shares by theirs, and the lead had nothing left
// to answer with). With models that name their calls afresh, not at all,
// and from call_0.
func TestTenForksPassTheLimitByOneCallsError(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		t.Fatal(err)
	}
	for _, depth := range []int{1, 2} {
		for _, cost := range []bool{false, true} {
			for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
				t.Run(fmt.Sprintf("depth %d, cost %v, ids %d", depth, cost, ids), func(t *testing.T) {
					tokens := int64(6000)
					if depth == 2 {
						tokens = 30000
					}
					limit := agent.WithTokenLimit(tokens)
					if cost {
						limit = agent.WithCostLimit(float64(tokens) * 1e-6)
					}
					m, out, err := skewedTree(t, depth, ids, limit, prices)
					m.mu.Lock()
					defer m.mu.Unlock()
					t.Logf("billed %d tokens, $%.6f, in %d calls; the largest shortfall of one call %d; answer %.40q, err %v", m.billed.Tokens(), m.dollars, m.calls, m.e, out.Answer, err)
					if err != nil {
						t.Errorf("the lead failed: %v", err)
					} else if got := out.Usage.Add(out.ChildUsage); got != m.billed {
						t.Errorf("Output counts %+v, the model billed %+v", got, m.billed)
					}
					if m.calls < 3 {
						t.Fatalf("%d model calls: the test needs the children to call their model", m.calls)
					}
					if cost {
						if bound := float64(tokens)*1e-6 + float64(m.e)*m.price.Input; m.dollars > bound+1e-12 {
							t.Errorf("the tree cost $%.6f, past its limit and one call's shortfall, $%.6f", m.dollars, bound)
						}
					} else if m.billed.Tokens() > tokens+m.e {
						t.Errorf("the tree spent %d tokens, past its limit and one call's shortfall, %d + %d", m.billed.Tokens(), tokens, m.e)
					}
				})
			}
		}
	}
}

// stopAndRunAgain runs lead's turn under the journal of turn in st with
// ctx, which the test cancels as the turn goes (the run must end
// cancelled), then calls between, when not nil, and runs the turn again
// to its end; it returns the calls m had billed as the first run ended,
// and the second run's output and error.
func stopAndRunAgain(t *testing.T, ctx context.Context, st *store.Store, turn string, m *skewed, lead *agent.React, between func()) (int, agent.Output, error) {
	t.Helper()
	j, err := st.Journal(t.Context(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: skewedTask}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run of the turn: %v, want it cancelled", err)
	}
	m.mu.Lock()
	first := m.calls
	m.mu.Unlock()
	if j, err = st.Journal(t.Context(), turn); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	lead.Reset()
	out, err := lead.Run(agent.WithJournal(t.Context(), j), agent.Input{Text: skewedTask})
	return first, out, err
}

// TestTheTreesDebtOutlivesAResume stops a journaled turn of
// skewedTree's ten children as the first child's call, which takes the
// tree's turn and passes its share, is answered, and runs the turn again:
// the calls of the run after it plan with what that call passed its
// share by, as the calls of a turn run once do, so the turn makes the
// same calls and is billed the same as the turn run once, at most its
// limit plus one call's shortfall, under a token limit and a cost limit
// (before, the run after it began with no debt, and a child more passed
// its share as the first had). With models that name their calls afresh,
// not at all, and from call_0.
func TestTheTreesDebtOutlivesAResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, cost := range []bool{false, true} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("cost %v, ids %d", cost, ids), func(t *testing.T) {
				const tokens = 6000
				limit := agent.WithTokenLimit(tokens)
				if cost {
					limit = agent.WithCostLimit(tokens * 1e-6)
				}
				once, _, err := skewedTree(t, 1, ids, limit, prices)
				if err != nil {
					t.Fatalf("the turn run once: %v", err)
				}
				m, lead := skewedLead(t, 1, ids, limit, prices)
				ctx, stop := context.WithCancel(t.Context())
				defer stop()
				reply := m.reply
				var stopped atomic.Bool
				var stoppedPart atomic.Value
				m.reply = func(req provider.Request, part string) provider.Message {
					if strings.Contains(req.System, "You write") {
						if !stopped.Swap(true) {
							stoppedPart.Store(part)
						} else {
							// Another child's call, made as the stop comes,
							// is not sent: one child's answer is recorded.
							<-ctx.Done()
						}
					}
					return reply(req, part)
				}
				m.onBilled = func(_ provider.Request, part string) {
					if p, _ := stoppedPart.Load().(string); p == part {
						stop() // the turn stops as the child's answer comes
					}
				}
				turn := fmt.Sprintf("debt-%v-%d", cost, ids)
				first, out, err := stopAndRunAgain(t, ctx, st, turn, m, lead, nil)
				m.mu.Lock()
				defer m.mu.Unlock()
				t.Logf("billed %d tokens, $%.6f, in %d calls (%d before the stop); the largest shortfall of one call %d; answer %.40q, err %v", m.billed.Tokens(), m.dollars, m.calls, first, m.e, out.Answer, err)
				t.Logf("run once: billed %d tokens, $%.6f, in %d calls", once.billed.Tokens(), once.dollars, once.calls)
				if err != nil {
					t.Fatalf("the turn run again failed: %v", err)
				}
				if got := out.TotalUsage(); got != m.billed {
					t.Errorf("the turn's Output counts %+v, the model billed %+v", got, m.billed)
				}
				if first != 2 || m.calls <= first {
					t.Fatalf("%d calls before the stop and %d after: the test needs the lead's and a child's before it, and more after", first, m.calls-first)
				}
				billedAsOnce(t, m, once, tokens, cost)
			})
		}
	}
}

// TestAnEmptyReplysDebtOutlivesAResume runs skewedTree's ten children
// under a journal, over a model whose first child's reply, cut at its
// output bound, comes back with no text (a model that thought until the
// bound), billed all the same, and stops the turn as the second child's
// call is answered; the turn run again makes the same calls as the turn
// run once, under a token limit and a cost limit: what the empty reply
// passed its share by counts in the debt the calls after the stop plan
// with, though the reply itself is not recorded (before, the run after
// the stop began without it, and one or two children more passed their
// shares: 8,904 tokens billed against a limit of 7,000 where the turn
// run once was billed 6,336). With models that name their calls afresh,
// not at all, and from call_0.
func TestAnEmptyReplysDebtOutlivesAResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// blankFirst makes the first child's reply cut at its bound empty,
	// and, when stop is not nil, calls it as the second child's call is
	// answered; the calls of children after it, made as the stop comes,
	// are not sent.
	blankFirst := func(m *skewed, ctx context.Context, stop func()) {
		var blanked atomic.Bool
		m.blank = func(req provider.Request) bool {
			return strings.Contains(req.System, "You write") && !blanked.Swap(true)
		}
		if stop == nil {
			return
		}
		reply := m.reply
		var children, billed atomic.Int32
		m.reply = func(req provider.Request, first string) provider.Message {
			if strings.Contains(req.System, "You write") && children.Add(1) > 2 {
				<-ctx.Done()
			}
			return reply(req, first)
		}
		m.onBilled = func(req provider.Request, _ string) {
			if strings.Contains(req.System, "You write") && billed.Add(1) == 2 {
				stop()
			}
		}
	}
	for _, cost := range []bool{false, true} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("cost %v, ids %d", cost, ids), func(t *testing.T) {
				limit := agent.WithTokenLimit(7000)
				if cost {
					limit = agent.WithCostLimit(8000 * 1e-6)
				}
				once, lead := skewedLead(t, 1, ids, limit, prices)
				blankFirst(once, nil, nil)
				if _, err := lead.Run(t.Context(), agent.Input{Text: skewedTask}); err != nil {
					t.Fatalf("the turn run once: %v", err)
				}
				m, lead := skewedLead(t, 1, ids, limit, prices)
				ctx, stop := context.WithCancel(t.Context())
				defer stop()
				blankFirst(m, ctx, stop)
				turn := fmt.Sprintf("empty-%v-%d", cost, ids)
				first, out, err := stopAndRunAgain(t, ctx, st, turn, m, lead, nil)
				m.mu.Lock()
				defer m.mu.Unlock()
				t.Logf("billed %d tokens, $%.6f, in %d calls (%d before the stop); err %v", m.billed.Tokens(), m.dollars, m.calls, first, err)
				t.Logf("run once: billed %d tokens, $%.6f, in %d calls", once.billed.Tokens(), once.dollars, once.calls)
				if err != nil {
					t.Fatalf("the turn run again failed: %v", err)
				}
				if got := out.TotalUsage(); got != m.billed {
					t.Errorf("the turn's Output counts %+v, the model billed %+v", got, m.billed)
				}
				if first != 3 || m.calls <= first {
					t.Fatalf("%d calls before the stop and %d after: the test needs the lead's and two children's before it, and more after", first, m.calls-first)
				}
				// Which child's call takes the tree's turn first, and so which
				// comes back empty, is the scheduler's choice: the bills of the
				// two runs differ by the length of a part or two, their calls
				// do not.
				if m.calls != once.calls {
					t.Errorf("the turn stopped and run again made %d calls billing %+v; run once, %d billing %+v", m.calls, m.billed, once.calls, once.billed)
				}
			})
		}
	}
}

// billedAsOnce checks that the turn stopped and run again, billed at m,
// made the calls and was billed what the turn run once was, and spent no
// more than its limit, tokens (as dollars at a millionth each under a
// cost limit), and one call's shortfall.
func billedAsOnce(t *testing.T, m, once *skewed, tokens int64, cost bool) {
	t.Helper()
	if m.calls != once.calls || m.billed != once.billed {
		t.Errorf("the turn stopped and run again made %d calls billing %+v; run once, %d billing %+v", m.calls, m.billed, once.calls, once.billed)
	}
	if cost {
		if bound := float64(tokens)*1e-6 + float64(m.e)*m.price.Input; m.dollars > bound+1e-12 {
			t.Errorf("the turn cost $%.6f, past its limit and one call's shortfall, $%.6f", m.dollars, bound)
		}
	} else if m.billed.Tokens() > tokens+m.e {
		t.Errorf("the turn spent %d tokens, past its limit and one call's shortfall, %d + %d", m.billed.Tokens(), tokens, m.e)
	}
}

// TestTheTreesDebtOutlivesAResumeAcrossJournals is
// TestTheTreesDebtOutlivesAResume with children that run under journals
// of their own (agent.WithJournal in the agent their factory builds, as
// a worker that keeps a turn of its own does): the first child's answer,
// which passed its share, is recorded in its own journal, and the turn
// run again replays it there, so no call of that child takes the tree's
// turn again; that child runs first in the run after the stop, or last
// (late), once the other children have ended, and the turn makes the same
// calls and is billed the same as the turn run once, at most its limit
// plus one call's shortfall (before, the debt was read only from the
// journal of the first call to take the tree's turn, another child's, and
// a child more passed its share: 5,580 tokens billed where the turn run
// once was billed 4,254; and, late, the debt of the child's journal
// counted only once that child began, after another child's call had
// planned without it and passed its share: 5,580 tokens billed too).
func TestTheTreesDebtOutlivesAResumeAcrossJournals(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prices, err := provider.NewPrices(map[string]provider.Price{"fake": {Input: 1e-6, Output: 4e-6}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct{ late, cost bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		late, cost := c.late, c.cost
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("late %v, cost %v, ids %d", late, cost, ids), func(t *testing.T) {
				const tokens = 6000
				limit := agent.WithTokenLimit(tokens)
				if cost {
					limit = agent.WithCostLimit(tokens * 1e-6)
				}
				turn := fmt.Sprintf("own-%v-%v-%d", late, cost, ids)
				// own runs each child under a journal of its own, named by
				// turn and its part. When first is set, the children wait
				// for the one of that part to end before they start, or,
				// late, that one waits for the others to end.
				var first string
				own := func(turn string) func(agent.Agent, json.RawMessage) agent.Agent {
					ended, others := make(chan struct{}), make(chan struct{})
					var left atomic.Int32
					left.Store(9)
					return func(a agent.Agent, args json.RawMessage) agent.Agent {
						return agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
							var p struct{ Task string }
							if err := json.Unmarshal(args, &p); err != nil {
								return agent.Output{}, err
							}
							wait := ended
							if late {
								wait = others
							}
							if first != "" && (p.Task == first) == late {
								select {
								case <-wait:
								case <-ctx.Done():
									return agent.Output{}, ctx.Err()
								}
							}
							j, err := st.Journal(ctx, turn+"-"+strings.ReplaceAll(p.Task, " ", "-"))
							if err != nil {
								return agent.Output{}, err
							}
							out, err := a.Run(agent.WithJournal(ctx, j), in)
							switch {
							case first == "":
							case p.Task == first && !late:
								close(ended)
							case p.Task != first && late && left.Add(-1) == 0:
								close(others)
							}
							return out, err
						})
					}
				}
				once, onceLead := skewedLeadOf(t, 1, ids, limit, prices, own(turn+"-once"))
				if _, err := onceLead.Run(t.Context(), agent.Input{Text: skewedTask}); err != nil {
					t.Fatalf("the turn run once: %v", err)
				}
				m, lead := skewedLeadOf(t, 1, ids, limit, prices, own(turn))
				ctx, stop := context.WithCancel(t.Context())
				defer stop()
				reply := m.reply
				var stopped atomic.Bool
				var stoppedPart atomic.Value
				m.reply = func(req provider.Request, part string) provider.Message {
					if strings.Contains(req.System, "You write") {
						if !stopped.Swap(true) {
							stoppedPart.Store(part)
						} else {
							// Another child's call, made as the stop comes,
							// is not sent: one child's answer is recorded.
							<-ctx.Done()
						}
					}
					return reply(req, part)
				}
				m.onBilled = func(_ provider.Request, part string) {
					if p, _ := stoppedPart.Load().(string); p == part {
						stop() // the turn stops as the child's answer comes
					}
				}
				calls, out, err := stopAndRunAgain(t, ctx, st, turn, m, lead, func() { first, _ = stoppedPart.Load().(string) })
				m.mu.Lock()
				defer m.mu.Unlock()
				t.Logf("billed %d tokens, $%.6f, in %d calls (%d before the stop, of %q); the largest shortfall of one call %d; err %v", m.billed.Tokens(), m.dollars, m.calls, calls, first, m.e, err)
				t.Logf("run once: billed %d tokens, $%.6f, in %d calls", once.billed.Tokens(), once.dollars, once.calls)
				if err != nil {
					t.Fatalf("the turn run again failed: %v", err)
				}
				if got := out.TotalUsage(); got != m.billed {
					t.Errorf("the turn's Output counts %+v, the model billed %+v", got, m.billed)
				}
				if calls != 2 || m.calls <= calls {
					t.Fatalf("%d calls before the stop and %d after: the test needs the lead's and one child's before it, and more after", calls, m.calls-calls)
				}
				billedAsOnce(t, m, once, tokens, cost)
			})
		}
	}
}
