package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// approvalTree is a lead that asks a child and a sibling at once; the child
// asks a grandchild, whose "delete" tool needs a person's approval (and a
// second grandchild tool, "purge", when two asks are wanted).
type approvalTree struct {
	lead                  *agent.React
	deletes, purges, sibs atomic.Int64
	leadP, childP, grandP *fake.Provider
	siblingP              *fake.Provider
}

func call(id, name, args string) provider.ToolCall {
	return provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

var someUsage = provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}

func newApprovalTree(t *testing.T, twoAsks bool) *approvalTree {
	t.Helper()
	a := &approvalTree{}
	grandCalls := []provider.ToolCall{call("g1", "delete", `{"path":"/tmp/x"}`)}
	if twoAsks {
		grandCalls = append(grandCalls, call("g2", "purge", `{"path":"/tmp/y"}`))
	}
	a.grandP = fake.NewProvider(fake.Calls(grandCalls...).WithUsage(someUsage), fake.Text("cleaned").WithUsage(someUsage))
	a.childP = fake.NewProvider(fake.Calls(call("c1", "grandchild", `{"task":"clean up"}`)).WithUsage(someUsage), fake.Text("child done").WithUsage(someUsage))
	a.siblingP = fake.NewProvider(fake.Text("sibling done").WithUsage(someUsage))
	a.leadP = fake.NewProvider(
		fake.Calls(call("l1", "child", `{"task":"tidy"}`), call("l2", "sibling", `{"task":"look"}`)).WithUsage(someUsage),
		fake.Text("all done").WithUsage(someUsage))

	type pathIn struct {
		Path string `json:"path"`
	}
	del := must(tool.New("delete", "Deletes a file.", func(ctx context.Context, in pathIn) (string, error) {
		a.deletes.Add(1)
		return "deleted " + in.Path, nil
	}))(t)
	purge := must(tool.New("purge", "Purges a file.", func(ctx context.Context, in pathIn) (string, error) {
		a.purges.Add(1)
		return "purged " + in.Path, nil
	}))(t)
	grandTools := must(tool.NewRegistry(tool.RequireApproval(del, "deletes data", 0), tool.RequireApproval(purge, "", 0)))(t)
	grand := must(FromFactory("grandchild", "Cleans.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(a.grandP, agent.WithName("grandchild"), agent.WithRegistry(grandTools))
	}, WithInputFromArgs(argsTask), WithMaxDepth(2)))(t)
	childTools := must(tool.NewRegistry(grand))(t)
	child := must(FromFactory("child", "Tidies.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(a.childP, agent.WithName("child"), agent.WithRegistry(childTools))
	}, WithInputFromArgs(argsTask)))(t)
	sibling := must(FromFactory("sibling", "Looks.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		a.sibs.Add(1)
		return agent.NewReact(a.siblingP, agent.WithName("sibling"))
	}, WithInputFromArgs(argsTask)))(t)
	a.lead = newReact(t, a.leadP, agent.WithName("lead"), agent.WithTools(child, sibling))
	return a
}

func total(o agent.Output) provider.Usage { return o.Usage.Add(o.ChildUsage) }

// runTurn runs the lead's turn under the journal of turn in st, with ctx's
// answers, and returns its output, error and the events it emitted.
func (a *approvalTree) runTurn(ctx context.Context, t *testing.T, st *store.Store, turn string) (agent.Output, []event.Event, error) {
	t.Helper()
	j, err := st.Journal(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	var rec eventcheck.Recorder
	out, err := a.lead.Run(event.WithSink(agent.WithJournal(ctx, j), &rec), agent.Input{Text: "tidy up"})
	return out, rec.Events(), err
}

func TestApprovalDeepInTheTreeSuspendsAndResumes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		answer      func(id string) tool.Answer
		wantDeletes int64
		wantInChild string
	}{
		{"approved", func(id string) tool.Answer {
			return tool.Answer{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)}
		}, 1, "deleted /tmp/x"},
		{"rejected", func(id string) tool.Answer {
			return tool.Answer{InterruptID: id, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":false,"note":"not that one"}`)}
		}, 0, "not that one"},
		{"cancelled", func(id string) tool.Answer { return tool.Answer{InterruptID: id, Status: tool.Cancelled} }, 0, "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApprovalTree(t, false)
			st := openStore(t, t.TempDir()+"/s.db")
			ctx := context.Background()
			out1, ev1, err := a.runTurn(ctx, t, st, "turn-1")
			var in *tool.Interrupted
			if !errors.As(err, &in) {
				t.Fatalf("first run: want an *tool.Interrupted, got %v", err)
			}
			if len(in.Interrupts) != 1 {
				t.Fatalf("interrupts = %+v, want one", in.Interrupts)
			}
			it := in.Interrupts[0]
			if it.Reason != "tool_approval" || it.ToolCallID != "g1" || !strings.Contains(it.Message, "deletes data") || len(it.ResponseSchema) == 0 {
				t.Errorf("interrupt = %+v", it)
			}
			grandRun := eventcheck.StartedRun(ev1, "grandchild")
			if it.SubagentRunID == "" || it.SubagentRunID != grandRun {
				t.Errorf("interrupt's sub-agent run id %q, want the grandchild's %q", it.SubagentRunID, grandRun)
			}
			if got := eventcheck.Outcome(ev1, grandRun); got != `{"type":"suspended","interruptIds":["`+it.ID+`"]}` {
				t.Errorf("grandchild's SUBAGENT_FINISHED outcome = %s", got)
			}
			if got := eventcheck.Outcome(ev1, eventcheck.StartedRun(ev1, "child")); got != `{"type":"suspended"}` {
				t.Errorf("child's SUBAGENT_FINISHED outcome = %s, want suspended without ids of its own", got)
			}
			if last := ev1[len(ev1)-1]; last.Type != event.RunFinished || !strings.HasPrefix(string(last.Outcome), `{"type":"interrupt","interrupts":[{"id":"`+it.ID) {
				t.Errorf("the run ended with %s %s, want RUN_FINISHED with the interrupt outcome", last.Type, last.Outcome)
			}
			if a.deletes.Load() != 0 || a.sibs.Load() != 1 {
				t.Fatalf("before the answer: deletes %d, sibling runs %d; want 0 and 1", a.deletes.Load(), a.sibs.Load())
			}

			rctx, err := tool.Resume(ctx, in, tc.answer(it.ID))
			if err != nil {
				t.Fatal(err)
			}
			out2, ev2, err := a.runTurn(rctx, t, st, "turn-1")
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			if out2.Answer != "all done" {
				t.Errorf("answer %q", out2.Answer)
			}
			if a.deletes.Load() != tc.wantDeletes || a.sibs.Load() != 1 {
				t.Errorf("after the answer: deletes %d, sibling runs %d; want %d and 1 (a finished sibling does not run again)", a.deletes.Load(), a.sibs.Load(), tc.wantDeletes)
			}
			if eventcheck.StartedRun(ev2, "grandchild") != grandRun || eventcheck.StartedRun(ev2, "child") != eventcheck.StartedRun(ev1, "child") {
				t.Errorf("the resumed run announced other sub-agent run ids")
			}
			// The grandchild's model read what became of the call.
			reqs := a.grandP.Requests()
			last := reqs[len(reqs)-1].Messages
			if got := last[len(last)-1].Content; !strings.Contains(got, tc.wantInChild) {
				t.Errorf("the grandchild's model read %q, want it to mention %q", got, tc.wantInChild)
			}
			// Every scripted reply was used once: no model call was made twice;
			// the resumed run reports the whole turn, each call once, and
			// marks what the first run spent as earlier.
			for name, p := range map[string]*fake.Provider{"lead": a.leadP, "child": a.childP, "grandchild": a.grandP, "sibling": a.siblingP} {
				if p.Remaining() != 0 {
					t.Errorf("%s: %d scripted replies unused", name, p.Remaining())
				}
			}
			if got := total(out2).Requests; got != 7 {
				t.Errorf("the resumed run counted %d requests, want the whole turn's 7 (each model call once)", got)
			}
			if out2.Earlier != total(out1) {
				t.Errorf("the resumed run counted %+v as earlier, want the %+v the first run reported", out2.Earlier, total(out1))
			}
		})
	}
}

func TestSeveralInterruptsOfOneTurnComeBackTogether(t *testing.T) {
	a := newApprovalTree(t, true)
	st := openStore(t, t.TempDir()+"/s.db")
	ctx := context.Background()
	_, ev, err := a.runTurn(ctx, t, st, "turn-2")
	var in *tool.Interrupted
	if !errors.As(err, &in) || len(in.Interrupts) != 2 {
		t.Fatalf("want two interrupts, got %v", err)
	}
	grandRun := eventcheck.StartedRun(ev, "grandchild")
	for _, it := range in.Interrupts {
		if it.SubagentRunID != grandRun {
			t.Errorf("interrupt %s of sub-agent run %q, want %q", it.ID, it.SubagentRunID, grandRun)
		}
	}
	want := `{"type":"suspended","interruptIds":["` + in.Interrupts[0].ID + `","` + in.Interrupts[1].ID + `"]}`
	if got := eventcheck.Outcome(ev, grandRun); got != want {
		t.Errorf("outcome %s, want %s", got, want)
	}
	// Answered in the other order, one cancelled and one approved.
	rctx, err := tool.Resume(ctx, in,
		tool.Answer{InterruptID: in.Interrupts[1].ID, Status: tool.Cancelled},
		tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := a.runTurn(rctx, t, st, "turn-2")
	if err != nil || out.Answer != "all done" {
		t.Fatalf("resumed: %q, %v", out.Answer, err)
	}
	if a.deletes.Load() != 1 || a.purges.Load() != 0 || a.sibs.Load() != 1 {
		t.Errorf("deletes %d purges %d sibling runs %d, want 1 0 1", a.deletes.Load(), a.purges.Load(), a.sibs.Load())
	}
}

func TestSuspendedStoredExpertKeepsNoHalfTurn(t *testing.T) {
	st := openStore(t, t.TempDir()+"/s.db")
	var sent atomic.Int64
	send := must(tool.New("send", "Sends money.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		sent.Add(int64(in.Amount))
		return "sent", nil
	}))(t)
	expertP := fake.NewProvider(fake.Calls(call("e1", "send", `{"amount":5}`)), fake.Text("paid"))
	r := newReact(t, expertP, agent.WithName("expert"), agent.WithTools(tool.RequireApproval(send, "moves money", 0)))
	expert := must(FromAgent("expert", "Pays.", r, WithInputFromArgs(argsTask), WithStore(st, "expert")))(t)
	leadP := fake.NewProvider(fake.Calls(call("l1", "expert", `{"task":"pay 5"}`)), fake.Text("done"))
	lead := newReact(t, leadP, agent.WithName("lead"), agent.WithTools(expert))

	ctx := context.Background()
	run := func(ctx context.Context) (agent.Output, error) {
		j, err := st.Journal(ctx, "pay")
		if err != nil {
			t.Fatal(err)
		}
		return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "pay"})
	}
	_, err := run(ctx)
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("want an interrupt, got %v", err)
	}
	if msgs, _ := storedMessages(t, st); len(msgs) != 0 {
		t.Fatalf("the suspended expert stored %d messages, want none (no half turn)", len(msgs))
	}
	if h := r.History(); len(h) != 0 {
		t.Fatalf("the suspended expert holds %d messages in memory, want none", len(h))
	}
	rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(rctx); err != nil || out.Answer != "done" {
		t.Fatalf("resumed: %q %v", out.Answer, err)
	}
	msgs, _ := storedMessages(t, st)
	if sent.Load() != 5 || len(msgs) != 4 || msgs[len(msgs)-1].Content != "paid" {
		t.Fatalf("after the resume: sent %d, stored %d messages %+v; want 5 and a whole turn", sent.Load(), len(msgs), msgs)
	}
}

func TestSuspendedResidentIsBusyForOtherCallsUntilResumed(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := "others wait"
		var opts []Option
		if refuse {
			name, opts = "others are refused", []Option{WithRefuseWhenBusy()}
		}
		t.Run(name, func(t *testing.T) {
			st := openStore(t, t.TempDir()+"/s.db")
			expert := must(FromAgent("expert", "Pays.", payingExpert(t), append([]Option{WithInputFromArgs(argsTask)}, opts...)...))(t)
			ctx := context.Background()
			under := func(ctx context.Context, turn string) context.Context { return underJournal(t, ctx, st, turn) }
			_, err := callTool(under(ctx, "a"), expert, "l1", `{"task":"pay"}`)
			var in *tool.Interrupted
			if !errors.As(err, &in) {
				t.Fatalf("first call: %v, want an interrupt", err)
			}
			checkBusy(t, expert, under(ctx, "b"), refuse)
			// A caller that waits gets its turn once the suspended call has
			// resumed and finished.
			var waiter chan error
			if !refuse {
				waiter = make(chan error, 1)
				go func() {
					_, err := callTool(under(ctx, "b"), expert, "l1", `{"task":"pay"}`)
					waiter <- err
				}()
			}
			rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Cancelled})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := callTool(under(rctx, "a"), expert, "l1", `{"task":"pay"}`); err != nil || res.Content != "paid" {
				t.Fatalf("resumed call: %+v %v", res, err)
			}
			if waiter != nil {
				// It went on and asked a question of its own.
				if err := <-waiter; !errors.As(err, &in) {
					t.Fatalf("the waiting call, after the resume: %v, want its own interrupt", err)
				}
				return
			}
			if _, err := callTool(under(ctx, "b"), expert, "l1", `{"task":"pay"}`); errors.Is(err, ErrBusy) {
				t.Fatalf("after the resume the expert is still busy: %v", err)
			}
		})
	}
}
