package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/tool"
)

// delegator is a lead whose model delegates one task to the tool named
// to, then answers with what it returned.
func delegator(t testing.TB, to string, id func(int64) string, calls *atomic.Int64, tools ...tool.Tool) *agent.React {
	t.Helper()
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := calls.Add(1)
		usage := provider.Usage{InputTokens: 5, OutputTokens: 1, Requests: 1}
		if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("lead: " + last.Content), Usage: usage}, nil
		}
		call := provider.ToolCall{ID: id(n), Name: to, Arguments: json.RawMessage(`{"task":"pay 100"}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
	lead, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(tools...))
	if err != nil {
		t.Fatal(err)
	}
	return lead
}

// A remote deputy agent's approval becomes a question in the caller's
// tree, attributed to the remote child; the caller's resume answers it on
// the same remote task, which goes on: the remote transfer runs once, the
// remote model is asked twice in all, no second remote task is started,
// and the remote usage is folded into the lead's — whatever ids either
// side's model gives its calls.
func TestRemoteQuestionResumesTheSameTask(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			p := newPayer(t, mode.id)
			srv, err := a2a.NewPerTask(p.build, a2a.WithName("payer"), a2a.WithDescription("Pays."))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv)
			defer hs.Close()

			ctx := context.Background()
			remote, err := a2a.Connect(ctx, hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer remote.Close()
			payer, err := remote.Tool()
			if err != nil {
				t.Fatal(err)
			}
			var leadCalls atomic.Int64
			lead := delegator(t, payer.Definition().Name, mode.id, &leadCalls, payer)
			var seen []event.Event
			journaled := journaledRun(t, lead, "pay")
			run := func(ctx context.Context) (agent.Output, error) {
				return journaled(event.WithSink(ctx, event.SinkFunc(func(e event.Event) { seen = append(seen, e) })))
			}
			out1, err := run(ctx)
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("first run: %v, want one question", err)
			}
			q := in.Interrupts[0]
			if q.Reason != tool.ApprovalReason || q.SubagentRunID == "" {
				t.Errorf("question %+v: want the remote's approval, attributed to the remote child", q)
			}
			rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: q.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out2, err := run(rctx)
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			if out2.Answer != "lead: done: moved 100" {
				t.Errorf("answer %q", out2.Answer)
			}
			if got := p.transfers.Load(); got != 1 {
				t.Errorf("%d remote transfers, want 1", got)
			}
			if got := p.model.Load(); got != 2 {
				t.Errorf("the remote model was asked %d times, want 2: a second remote task was started or a step repeated", got)
			}
			if got := leadCalls.Load(); got != 2 {
				t.Errorf("the lead's model was asked %d times, want 2", got)
			}
			// The resumed run reports the whole turn: the remote task's
			// two model calls (its report covers the task's rounds), the
			// first as the first run saw it.
			if remoteUsage := out2.ChildUsage; remoteUsage.Requests != 2 || remoteUsage.InputTokens != 20 {
				t.Errorf("remote usage of the resumed run %+v, want the task's 2 requests and 20 input tokens", remoteUsage)
			}
			if out1.ChildUsage.Requests != 1 {
				t.Errorf("remote usage of the first run %+v, want the 1 request of the task's first round", out1.ChildUsage)
			}
			// What the first run spent, the lead's and the remote task's,
			// is the resumed run's earlier part.
			if out2.Earlier != out1.TotalUsage() {
				t.Errorf("the resumed run's Earlier %+v, want what the first run spent, %+v", out2.Earlier, out1.TotalUsage())
			}
			var started, finished int
			for _, e := range seen {
				switch e.Type {
				case event.SubagentStarted:
					started++
				case event.SubagentFinished:
					finished++
				}
			}
			if started < 2 || finished < 2 {
				t.Errorf("%d SUBAGENT_STARTED and %d SUBAGENT_FINISHED over both runs, want the remote child's in each", started, finished)
			}
		})
	}
}

// A remote child that finished in a turn that then waited for a person is
// replayed from the journal when the turn resumes: the remote agent is not
// asked again, and what it reported it cost counts once in each run's cost,
// the resumed run's as earlier, whatever ids the lead's model gives its
// calls.
func TestFinishedRemoteChildIsReplayed(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			var asked atomic.Int64
			expert := agent.Func(func(ctx context.Context, in agent.Input) (agent.Output, error) {
				asked.Add(1)
				return agent.Output{Answer: "the rate is 4%", Usage: provider.Usage{Requests: 1, InputTokens: 7}, Cost: 0.25}, nil
			})
			srv, err := a2a.NewServer(expert, a2a.WithName("rates"))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv)
			defer hs.Close()
			ctx := context.Background()
			remote, err := a2a.Connect(ctx, hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer remote.Close()
			rates, err := remote.Tool()
			if err != nil {
				t.Fatal(err)
			}
			var paid atomic.Int64
			pay := tool.RequireApproval(tool.Must(tool.New("pay", "Pays.", func(context.Context, struct{}) (string, error) {
				paid.Add(1)
				return "paid", nil
			})), "", 0)
			var n atomic.Int64
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				i := n.Add(1)
				if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
					return provider.Response{Message: provider.AssistantMessage("ok")}, nil
				}
				return provider.Response{Message: provider.AssistantMessage("",
					provider.ToolCall{ID: mode.id(i), Name: rates.Definition().Name, Arguments: json.RawMessage(`{"task":"rate?"}`)},
					provider.ToolCall{ID: mode.id(i + 100), Name: "pay", Arguments: json.RawMessage(`{}`)})}, nil
			})
			lead, err := agent.NewReact(model, agent.WithTools(rates, pay))
			if err != nil {
				t.Fatal(err)
			}
			run := journaledRun(t, lead, "go")
			out1, err := run(ctx)
			var in *tool.Interrupted
			if !errors.As(err, &in) {
				t.Fatalf("first run: %v, want the approval", err)
			}
			rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out2, err := run(rctx)
			if err != nil {
				t.Fatal(err)
			}
			if out1.Cost != 0.25 || out2.Cost != 0.25 || out2.EarlierCost != 0.25 {
				t.Errorf("costs $%g, then $%g with $%g earlier; want the remote's $0.25 in each, earlier in the second", out1.Cost, out2.Cost, out2.EarlierCost)
			}
			if asked.Load() != 1 || paid.Load() != 1 {
				t.Errorf("the remote expert was asked %d times and the payment made %d; want 1 and 1", asked.Load(), paid.Load())
			}
		})
	}
}

// journaledRun returns a function that runs lead on text under the
// journal of one turn, opened afresh on each call as a process that
// resumes the turn opens it; the store goes with the test.
func journaledRun(t testing.TB, lead agent.Agent, text string) func(context.Context) (agent.Output, error) {
	t.Helper()
	st, err := store.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return func(ctx context.Context) (agent.Output, error) {
		j, err := st.Journal(ctx, "turn")
		if err != nil {
			t.Fatal(err)
		}
		return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: text})
	}
}
