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
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// billing is a fake provider that keeps its bill: what each agent's
// model calls billed (as the fake answered them, cut at a request's output
// bound), and, for the lead's, what the whole tree had billed before each.
type billing struct {
	p      *fake.Provider
	mu     sync.Mutex
	total  provider.Usage
	by     map[string]provider.Usage
	before []int64 // tokens the tree had billed before each lead call
	leads  []provider.Usage
}

func (b *billing) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	resp, err := b.p.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	who := agent.Name(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if who == "lead" {
		b.before = append(b.before, b.total.Tokens())
		b.leads = append(b.leads, resp.Usage)
	}
	b.total = b.total.Add(resp.Usage)
	if b.by == nil {
		b.by = map[string]provider.Usage{}
	}
	b.by[who] = b.by[who].Add(resp.Usage)
	return resp, nil
}

func (b *billing) Name() string { return b.p.Name() }

// charge is the fake's answer of msg to req, with what it bills.
func charge(req provider.Request, msg provider.Message) provider.Response {
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg), Model: "fake"}
}

// silentTree is a lead whose one tool, written by the user, runs two
// sub-agents itself and reports none of what they spent (its Result's
// Usage is empty): a writer, which calls its note tool once and answers,
// and a reviewer, which answers. With viaTool the tool runs them through
// their SubAgentTools' Call (the Tree sees them); else through their
// agents' Run.
type silentTree struct {
	ids   int
	fresh atomic.Int64
	bill  billing
	notes atomic.Int64
	pairs atomic.Int64
	lead  *agent.React
}

func newSilentTree(t *testing.T, ids int, viaTool bool, leadOpts ...agent.Option) *silentTree {
	t.Helper()
	s := &silentTree{ids: ids}
	// The lead calls the tool at each step while it has tools; asked to
	// wrap up (no tools), it answers.
	leadModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		if len(req.Tools) == 0 || answered(req) && !strings.Contains(req.Messages[0].Content, "again") {
			return charge(req, provider.AssistantMessage("Done: "+req.Messages[len(req.Messages)-1].Content)), nil
		}
		calls := []provider.ToolCall{{Name: "pair", Arguments: json.RawMessage(`{"topic":"release notes"}`)}}
		resumetest.NameCalls(s.ids, calls, &s.fresh)
		return charge(req, provider.AssistantMessage("", calls...)), nil
	})
	writerModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		if answered(req) {
			return charge(req, provider.AssistantMessage("The notes are written: "+req.Messages[len(req.Messages)-1].Content)), nil
		}
		calls := []provider.ToolCall{{Name: "note", Arguments: json.RawMessage(`{"text":"v1.2 ships the ledger"}`)}}
		resumetest.NameCalls(s.ids, calls, &s.fresh)
		return charge(req, provider.AssistantMessage("", calls...)), nil
	})
	reviewerModel := fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		return charge(req, provider.AssistantMessage("The notes read well.")), nil
	})
	s.bill.p = fake.NewProvider(leadModel.For("lead"), writerModel.For("writer"), reviewerModel.For("reviewer")).Loop().Named("fake", "fake")
	prov := &s.bill
	type noteIn struct {
		Text string `json:"text"`
	}
	note, err := tool.New("note", "Keeps a note.", func(_ context.Context, in noteIn) (string, error) {
		s.notes.Add(1)
		return "noted " + in.Text, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	newWriter := func() (agent.Agent, error) {
		return agent.NewReact(prov, agent.WithName("writer"), agent.WithTools(note))
	}
	newReviewer := func() (agent.Agent, error) { return agent.NewReact(prov, agent.WithName("reviewer")) }
	writer, err := subagent.FromFactory("writer", "Writes.", func(context.Context, json.RawMessage) (agent.Agent, error) { return newWriter() })
	if err != nil {
		t.Fatal(err)
	}
	reviewer, err := subagent.FromFactory("reviewer", "Reviews.", func(context.Context, json.RawMessage) (agent.Agent, error) { return newReviewer() })
	if err != nil {
		t.Fatal(err)
	}
	// runChild runs one child as the tool is set to, and returns its answer.
	runChild := func(ctx context.Context, c tool.Call, st *subagent.SubAgentTool, build func() (agent.Agent, error), task string) (string, error) {
		if viaTool {
			res, err := st.Call(ctx, tool.Call{ID: c.ID, Name: st.Definition().Name, Arguments: json.RawMessage(`{"task":"` + task + `"}`)})
			return res.Content, err
		}
		a, err := build()
		if err != nil {
			return "", err
		}
		out, err := a.Run(ctx, agent.Input{Text: task})
		return out.Answer, err
	}
	pair := tool.Func{
		Def: tool.Definition{Name: "pair", Description: "Writes the notes, then has them reviewed.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			s.pairs.Add(1)
			w, err := runChild(ctx, c, writer, newWriter, "write the notes")
			if err != nil {
				return tool.Result{}, err
			}
			r, err := runChild(ctx, c, reviewer, newReviewer, "review the notes")
			if err != nil {
				return tool.Result{}, err
			}
			return tool.Result{Content: w + " / " + r}, nil // no Usage
		},
	}
	s.lead, err = agent.NewReact(prov, append([]agent.Option{agent.WithName("lead"), agent.WithTools(pair)}, leadOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A tool the user writes that runs two sub-agents itself and leaves its
// Result's Usage empty is counted all the same: what the models billed is
// Output.Usage plus Output.ChildUsage, and, when the tool runs them through
// their SubAgentTools, what the Tree counts under the lead, each child on
// its own node. (Before, Output.ChildUsage left out what the children
// spent, though the Tree and the cost limit counted it.) With models that
// name their calls afresh, not at all, and from call_0.
func TestUserToolRunningSubAgentsUnreportedIsCounted(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		for _, viaTool := range []bool{true, false} {
			t.Run(fmt.Sprint("ids ", ids, " through SubAgentTool ", viaTool), func(t *testing.T) {
				s := newSilentTree(t, ids, viaTool)
				var rec recorder
				tree := subagent.NewTree(&rec)
				out, err := s.lead.Run(event.WithSink(t.Context(), tree), agent.Input{Text: "Ship the release."})
				if err != nil {
					t.Fatal(err)
				}
				s.bill.mu.Lock()
				defer s.bill.mu.Unlock()
				if !strings.Contains(out.Answer, "The notes are written: noted v1.2") || !strings.Contains(out.Answer, "The notes read well.") {
					t.Errorf("the lead answered %q, want both children's answers", out.Answer)
				}
				if s.pairs.Load() != 1 || s.notes.Load() != 1 {
					t.Errorf("the tool ran %d times and the note %d times, want once each", s.pairs.Load(), s.notes.Load())
				}
				if got := out.Usage.Add(out.ChildUsage); got != s.bill.total {
					t.Errorf("Output counts %+v, the models billed %+v", got, s.bill.total)
				}
				if out.Usage != s.bill.by["lead"] {
					t.Errorf("Output.Usage is %+v, the lead's model billed %+v", out.Usage, s.bill.by["lead"])
				}
				if !viaTool {
					return
				}
				var nodes provider.Usage
				byName := map[string]provider.Usage{}
				for _, n := range tree.Roots() {
					nodes = nodes.Add(n.TotalUsage())
					byName[n.Name] = byName[n.Name].Add(n.TotalUsage())
				}
				if nodes != tokens(out.ChildUsage) {
					t.Errorf("the Tree counts %+v under the lead, Output.ChildUsage %+v (%v)", nodes, out.ChildUsage, byName)
				}
				for _, name := range []string{"writer", "reviewer"} {
					if byName[name] != tokens(s.bill.by[name]) {
						t.Errorf("the Tree counts %+v for the %s, its model billed %+v", byName[name], name, s.bill.by[name])
					}
				}
			})
		}
	}
}

// Under WithTokenLimit, what the sub-agents of a tool the user writes
// spent counts toward the lead's limit though the tool reports none of it:
// the lead, whose model calls the tool again at every step it may, makes
// no model call that what the tree has billed before it leaves no room
// for, wraps up within the limit, and reports what the models billed.
// (Before, the lead counted only its own calls and went on calling the
// tool until they alone reached the limit: the tree spent several times
// it.) With models that name their calls afresh, not at all, and from
// call_0, the children run through their SubAgentTools or their agents.
func TestUserToolRunningSubAgentsUnreportedCountsTowardTheTokenLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const limit = 2000
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		for _, viaTool := range []bool{true, false} {
			t.Run(fmt.Sprint("ids ", ids, " through SubAgentTool ", viaTool), func(t *testing.T) {
				s := newSilentTree(t, ids, viaTool, agent.WithTokenLimit(limit), agent.WithMaxSteps(50))
				out, err := s.lead.Run(t.Context(), agent.Input{Text: "Ship the release, again and again."})
				s.bill.mu.Lock()
				defer s.bill.mu.Unlock()
				t.Logf("billed %+v by %v; lead calls %d, the tool ran %d times; answer %q, err %v", s.bill.total, s.bill.by, len(s.bill.leads), s.pairs.Load(), out.Answer, err)
				if err != nil && !errors.Is(err, agent.ErrUsageLimit) {
					t.Fatal(err)
				}
				if got := s.bill.total.Tokens(); got > limit {
					t.Errorf("the tree billed %d tokens, past its limit of %d", got, limit)
				}
				for i, u := range s.bill.leads {
					if s.bill.before[i]+u.Tokens() > limit {
						t.Errorf("lead call %d was made with %d tokens billed before it and billed %d: past the limit of %d", i+1, s.bill.before[i], u.Tokens(), limit)
					}
				}
				if got := out.Usage.Add(out.ChildUsage); err == nil && got != s.bill.total {
					t.Errorf("Output counts %+v, the models billed %+v (own %+v, children %+v)", got, s.bill.total, out.Usage, out.ChildUsage)
				}
				if err == nil && !out.Partial {
					t.Errorf("the lead answered %q without wrapping up, want a partial answer at its limit", out.Answer)
				}
				if s.pairs.Load() < 2 {
					t.Errorf("the tool ran %d times: the limit leaves room for more than one step", s.pairs.Load())
				}
			})
		}
	}
}
