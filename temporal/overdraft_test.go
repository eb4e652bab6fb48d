package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/deputy-go/deputy/agent"
	dcompact "github.com/deputy-go/deputy/internal/compact"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// skewedModel is a model whose tokenizer counts a token a byte of what
// it reads, four times what a run's estimate counts for what the provider
// has not counted yet (the worst the documented error allows), and a
// token per four bytes of what it writes, stopping at the request's
// output bound. For every call it works out the estimate the run made of
// its input, as the workflow and the worker make it, and keeps the
// largest shortfall of one call (e).
type skewedModel struct {
	price provider.Price
	reply func(req provider.Request) provider.Message
	// inProcess: the calls are an agent's in process (a factory's), whose
	// estimates count a conversation's bytes as package agent does.
	inProcess bool
	procs     map[string]procConv

	mu      sync.Mutex
	convs   map[string]*budget // the estimate of each conversation, keyed by its first message
	billed  provider.Usage
	dollars float64
	e       int64
	calls   int
}

func (m *skewedModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	msg := m.reply(req)
	if req.MaxTokens > 0 && len(msg.Content) > 4*req.MaxTokens {
		msg.Content = msg.Content[:4*req.MaxTokens]
	}
	out := int64(len(msg.Content)+3) / 4
	for _, c := range msg.ToolCalls {
		out += int64(len(c.Name)+len(c.Arguments)+3) / 4
	}
	in := requestBytes(req)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.convs == nil {
		m.convs = map[string]*budget{}
	}
	key := req.System + "\x00" + req.Messages[0].Content
	b := m.convs[key]
	if b == nil {
		b = &budget{}
		m.convs[key] = b
	}
	if m.inProcess && strings.HasPrefix(req.System, "You write.") {
		m.e = max(m.e, in-m.procEstimate(key, req, msg))
	} else {
		m.e = max(m.e, in-b.estimate(req))
	}
	u := provider.Usage{InputTokens: in, OutputTokens: out, Requests: 1}
	b.noteReply(req, provider.Response{Message: msg, Usage: u})
	m.billed = m.billed.Add(u)
	m.dollars += m.price.Cost(u)
	m.calls++
	stop := provider.StopEndTurn
	if req.MaxTokens > 0 && out >= int64(req.MaxTokens) {
		stop = provider.StopMaxTokens
	}
	return provider.Response{Message: msg, Usage: u, Model: "m1", StopReason: stop}, nil
}

func (m *skewedModel) Name() string { return "skewed" }

// procConv is what an in-process conversation's last call read and was
// billed, for the estimate of its next.
type procConv struct {
	in, out int64
	body    int // messages, the budget note aside
	bytes   int64
}

// procEstimate is the estimate an agent in process made of req, the
// call of the conversation key, as package agent makes it: the count of
// its last call, in and out, and a token per four bytes of what was added
// since and of the budget note; it records the call, which msg answers.
// m.mu is held.
func (m *skewedModel) procEstimate(key string, req provider.Request, msg provider.Message) int64 {
	body, note := req.Messages, int64(0)
	if last := body[len(body)-1]; last.Role == provider.RoleUser && strings.HasPrefix(last.Content, "Budget note:") {
		body, note = body[:len(body)-1], dcompact.MsgBytes(last)
	}
	fixed := int64(len(req.System))
	for _, t := range req.Tools {
		fixed += int64(len(t.Name) + len(t.Description) + len(t.Parameters))
	}
	bytes := dcompact.MsgsBytes(body)
	est := (fixed + bytes + 3) / 4
	if prev, ok := m.procs[key]; ok {
		added := bytes - prev.bytes - dcompact.MsgBytes(body[prev.body])
		est = prev.in + prev.out + (added+3)/4
	}
	if m.procs == nil {
		m.procs = map[string]procConv{}
	}
	out := (dcompact.MsgBytes(msg) + 3) / 4
	m.procs[key] = procConv{in: requestBytes(req), out: out, body: len(body), bytes: bytes}
	return est + (note+3)/4
}

// spentWithinOneCallsError runs a lead of spec on task on the server, over
// m, and checks that it answers, that its output counts what m billed,
// that who (its children) called the model, and that the tree spent at
// most its limit plus the largest shortfall of one call's estimate, in
// tokens or in money.
func spentWithinOneCallsError(ctx context.Context, t *testing.T, c client.Client, queue string, m *skewedModel, spec Spec, task, who string) {
	t.Helper()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("overdraft-%d", time.Now().UnixNano()), TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: spec, Text: task})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	err = run.Get(ctx, &out)
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("billed %d tokens, $%.6f, in %d calls; the largest shortfall of one call %d; answer %.40q, err %v", m.billed.Tokens(), m.dollars, m.calls, m.e, out.Answer, err)
	if err != nil {
		t.Fatalf("the lead failed: %v", err)
	}
	if got := out.TotalUsage(); got != m.billed {
		t.Errorf("the run counts %+v, the model billed %+v", got, m.billed)
	}
	if m.calls < 3 {
		t.Fatalf("%d model calls: the test needs %s to call their model", m.calls, who)
	}
	if spec.CostLimit > 0 {
		if bound := spec.CostLimit + float64(m.e)*m.price.Input; m.dollars > bound+1e-12 {
			t.Errorf("the tree cost $%.6f, past its limit and one call's shortfall, $%.6f", m.dollars, bound)
		}
	} else if m.billed.Tokens() > spec.TokenLimit+m.e {
		t.Errorf("the tree spent %d tokens, past its limit and one call's shortfall, %d + %d", m.billed.Tokens(), spec.TokenLimit, m.e)
	}
}

// TestTenForksPassTheLimitByOneCallsErrorOnTemporal forks ten children
// at once on a server, each child's call near the end of its share,
// under a token limit and under a cost limit, over a model whose counts
// are four times what the estimate counts for what it adds: the calls
// that may pass their runs' limits take the tree's turn, so the tree is
// billed at most its limit plus the shortfall of one call's estimate,
// the largest, worked out call by call, as in process, and the lead
// answers. (Before, each child's call passed its share by its own
// shortfall: n + Σ e.) With models that name their calls afresh, not at
// all, and from call_0.
func TestTenForksPassTheLimitByOneCallsErrorOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-6, Output: 4e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	const lead = "Write the ten parts of the survey."
	part := strings.Repeat("Write this part of the survey in full, with every figure the sites reported, and cite them. ", 5)
	essay := strings.Repeat("The figures of the sites, reported and cited in full. ", 80)
	type tree struct {
		forks int
		cost  bool
		ids   int
		slow  time.Duration // how long each call of a child takes
	}
	var trees []tree
	for _, cost := range []bool{false, true} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			trees = append(trees, tree{10, cost, ids, 0})
		}
	}
	// More calls wait for the turn than the server lets a workflow have
	// updates in flight (10 by default): the others ask again.
	trees = append(trees, tree{24, false, resumetest.IDsFresh, 300 * time.Millisecond})
	for _, tr := range trees {
		cost, ids := tr.cost, tr.ids
		{
			t.Run(fmt.Sprintf("forks %d, cost %v, ids %d", tr.forks, cost, ids), func(t *testing.T) {
				var fresh atomic.Int64
				m := &skewedModel{price: price}
				m.reply = func(req provider.Request) provider.Message {
					if len(req.Tools) > 0 && len(req.Messages) == 1 && req.Messages[0].Content == lead {
						msg := spawnCalls(tr.forks)
						resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
						return msg
					}
					if tr.slow > 0 {
						// Calls that hold the turn a while, so that many wait
						// for it; their answers are short, for the lead to read.
						time.Sleep(tr.slow)
						return provider.AssistantMessage("The part is written, with its figures.")
					}
					return provider.AssistantMessage(essay)
				}
				ctx, c, queue := onServer(t, &Runtime{Providers: map[string]provider.Provider{"m": m}, Prices: prices})
				tokens := int64(8000)
				if tr.forks > 10 {
					tokens = int64(tr.forks) * 1000
				}
				spec := Spec{Name: "lead", Provider: "m", Spawn: true, System: "You lead the survey, and write its parts. " + part, MaxSpawns: tr.forks}
				if cost {
					spec.CostLimit = float64(tokens) * price.Input
				} else {
					spec.TokenLimit = tokens
				}
				spentWithinOneCallsError(ctx, t, c, queue, m, spec, lead, "the children")
			})
		}
	}
}

// The agents a factory builds (Spec.SubAgents' Factory) run in process
// inside an activity each, and their model calls that may pass their
// limits take the turn of the workflow's tree as well as their own: ten
// of them at once, near the end of their shares, over a model that counts
// four times the estimate, cost the tree at most its limit plus one
// call's shortfall, under a token limit and a cost limit (before, each
// agent's calls took turns only within it: n + Σ e). With models that
// name their calls afresh, not at all, and from call_0.
func TestTenFactoryAgentsPassTheLimitByOneCallsErrorOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-6, Output: 4e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	const lead = "Write the ten parts of the survey."
	part := strings.Repeat("Write this part of the survey in full, with every figure the sites reported, and cite them. ", 5)
	for _, cost := range []bool{false, true} {
		for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
			t.Run(fmt.Sprintf("cost %v, ids %d", cost, ids), func(t *testing.T) {
				var fresh atomic.Int64
				m := &skewedModel{price: price, inProcess: true}
				m.reply = func(req provider.Request) provider.Message {
					if len(req.Tools) > 0 && len(req.Messages) == 1 && req.Messages[0].Content == lead {
						calls := make([]provider.ToolCall, 10)
						for i := range calls {
							calls[i] = provider.ToolCall{Name: "part", Arguments: []byte(fmt.Sprintf(`{"task":"part %d"}`, i))}
						}
						resumetest.NameCalls(ids, calls, &fresh)
						return provider.AssistantMessage("", calls...)
					}
					// Short, for the lead to read: the agents' calls pass
					// their shares by what they read.
					return provider.AssistantMessage("The part is written, with its figures.")
				}
				factory := func(context.Context, []byte) (agent.Agent, error) {
					return agent.NewReact(m, agent.WithName("part"), agent.WithSystemPrompt("You write. "+part))
				}
				rt := &Runtime{Providers: map[string]provider.Provider{"m": m}, Prices: prices,
					Factories: map[string]subagent.Factory{"part": func(ctx context.Context, args json.RawMessage) (agent.Agent, error) { return factory(ctx, args) }}}
				ctx, c, queue := onServer(t, rt)
				tokens := int64(4800)
				spec := Spec{Name: "lead", Provider: "m", System: "You lead the survey.",
					SubAgents: []SubAgent{{Name: "part", Description: "Writes one part.", Factory: "part"}}}
				if cost {
					spec.CostLimit = float64(tokens) * price.Input
				} else {
					spec.TokenLimit = tokens
				}
				spentWithinOneCallsError(ctx, t, c, queue, m, spec, lead, "the factories' agents")
			})
		}
	}
}

// A thread's job (Spec.JobsAcrossTurns) outlives the turn that started
// it, and the turn's workflow with it, which kept the tree's turn: the
// calls of the job's runs that may pass their limits then take the job's
// own turn, and so do those of the agents its factories build. A job under
// JobTokens (or JobCost) whose ten children, forks or factories' agents,
// start after its turn has ended, over a model that counts four times the
// estimate, spends at most its limit plus one call's shortfall (before,
// each of its children's calls went without a turn: n + Σ e). With models
// that name their calls afresh, not at all, and from call_0.
func TestThreadJobPassesItsLimitByOneCallsErrorAfterItsTurnOnTemporal(t *testing.T) {
	price := provider.Price{Input: 1e-6, Output: 4e-6}
	prices, err := provider.NewPrices(map[string]provider.Price{"m1": price})
	if err != nil {
		t.Fatal(err)
	}
	const lead, job = "Start the survey.", "Write the ten parts of the survey."
	// Long: the job's children read it at a token a byte.
	part := strings.Repeat("Write this part of the survey in full, with every figure the sites reported, and cite them. ", 15)
	type jobTree struct {
		factories, cost bool
		ids             int
	}
	var trees []jobTree
	for _, factories := range []bool{false, true} {
		for _, cost := range []bool{false, true} {
			for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
				trees = append(trees, jobTree{factories, cost, ids})
			}
		}
	}
	for _, tr := range trees {
		cost, ids := tr.cost, tr.ids
		{
			t.Run(fmt.Sprintf("factories %v, cost %v, ids %d", tr.factories, cost, ids), func(t *testing.T) {
				var fresh atomic.Int64
				turnEnded := make(chan struct{})
				m := &skewedModel{price: price, inProcess: tr.factories}
				m.reply = func(req provider.Request) provider.Message {
					first := req.Messages[0].Content
					results := len(resultsOf(req)) > 0
					switch {
					case first == lead && !results:
						msg := provider.AssistantMessage("", provider.ToolCall{Name: SpawnToolName, Arguments: json.RawMessage(`{"task":"` + job + `","background":true}`)})
						resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
						return msg
					case first == lead:
						return provider.AssistantMessage("The survey is under way.")
					case first == job && !results:
						<-turnEnded // the job's work begins once its turn has ended
						msg := spawnCalls(10)
						if tr.factories {
							for i := range msg.ToolCalls {
								msg.ToolCalls[i].Name = "part"
							}
						}
						resumetest.NameCalls(ids, msg.ToolCalls, &fresh)
						return msg
					}
					// Short, for the job to read: its children's calls pass
					// their shares by what they read.
					return provider.AssistantMessage("The part is written, with its figures.")
				}
				rt := &Runtime{Providers: map[string]provider.Provider{"m": m}, Prices: prices,
					Factories: map[string]subagent.Factory{"part": func(context.Context, json.RawMessage) (agent.Agent, error) {
						return agent.NewReact(m, agent.WithName("part"), agent.WithSystemPrompt("You write. "+part))
					}}}
				ctx, c, queue := onServer(t, rt)
				// The job's first call reads the tools of jobs at a token a
				// byte, and its wrap-up reads them again: about 7,000 tokens.
				const tokens = 17000
				spec := Spec{Name: "lead", Provider: "m", Spawn: true, Background: true, JobsAcrossTurns: true, MaxDepth: 2, MaxSpawns: 10,
					System: "You lead the survey, and write its parts. " + part}
				if tr.factories {
					spec.SubAgents = []SubAgent{{Name: "part", Description: "Writes one part.", Factory: "part"}}
				}
				limit := "JobTokens"
				if cost {
					spec.JobCost, limit = tokens*price.Input, "JobCost"
				} else {
					spec.JobTokens = tokens
				}
				thread := "thread-" + queue
				a := &Agent{Client: c, TaskQueue: queue, Spec: spec}
				out, err := a.Run(agent.WithThread(ctx, thread), agent.Input{Text: lead})
				close(turnEnded)
				if err != nil {
					t.Fatal(err)
				}
				var jobOut RunOutput
				jobErr := c.GetWorkflow(ctx, ThreadWorkflowID("", thread)+"/job_1", "").Get(ctx, &jobOut)
				m.mu.Lock()
				defer m.mu.Unlock()
				// The job's: what the lead's turn reported aside.
				lu := out.TotalUsage()
				spent := provider.Usage{InputTokens: m.billed.InputTokens - lu.InputTokens, OutputTokens: m.billed.OutputTokens - lu.OutputTokens, Requests: m.billed.Requests - lu.Requests}
				dollars := m.dollars - out.Cost
				t.Logf("the job was billed %d tokens, $%.6f, of %d calls in all; the largest shortfall of one call %d; its answer %.40q, err %v", spent.Tokens(), dollars, m.calls, m.e, jobOut.Answer, jobErr)
				if jobErr != nil {
					t.Errorf("the job failed: %v", jobErr)
				} else if got := jobOut.TotalUsage(); got != spent {
					t.Errorf("the job counts %+v, the model billed it %+v", got, spent)
				}
				if m.calls < 5 {
					t.Fatalf("%d model calls: the test needs a child of the job to call its model (the lead's two calls and the job's two aside)", m.calls)
				}
				if cost {
					if bound := spec.JobCost + float64(m.e)*price.Input; dollars > bound+1e-12 {
						t.Errorf("the job cost $%.6f, past its %s and one call's shortfall, $%.6f", dollars, limit, bound)
					}
				} else if spent.Tokens() > tokens+m.e {
					t.Errorf("the job spent %d tokens, past its %s and one call's shortfall, %d + %d", spent.Tokens(), limit, tokens, m.e)
				}
			})
		}
	}
}

// A tree's workflow remembers the askings for its turn that stopped
// waiting until their updates come, and no more than treeTurnWithdrawn of
// them: an asking whose update never came (its call's context ended as
// it sent it) is forgotten, the oldest first, however many calls of a
// long tree stop waiting so; the latest are still remembered.
func TestWithdrawnAskingsAreBounded(t *testing.T) {
	var turn treeTurn
	const n = 10 * treeTurnWithdrawn
	for i := range n {
		turn.done(overdraft{Holder: "wf/1", Ask: fmt.Sprintf("ask_%d", i), Withdrawn: true})
	}
	if len(turn.withdrawn) != treeTurnWithdrawn || len(turn.withdrawnOrder) != treeTurnWithdrawn {
		t.Fatalf("after %d withdrawals the workflow remembers %d (%d in order), want %d", n, len(turn.withdrawn), len(turn.withdrawnOrder), treeTurnWithdrawn)
	}
	if !turn.withdrawn[fmt.Sprintf("ask_%d", n-1)] || !turn.withdrawn[fmt.Sprintf("ask_%d", n-treeTurnWithdrawn)] {
		t.Error("the latest withdrawals are forgotten")
	}
	if turn.withdrawn["ask_0"] {
		t.Error("the oldest withdrawal is still remembered")
	}
}
