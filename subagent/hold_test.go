package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/tool"
)

// payingExpert is a resident whose model pays with "send", a tool that
// needs a person's approval, and then answers "paid".
func payingExpert(t *testing.T) *agent.React {
	t.Helper()
	send := must(tool.New("send", "Sends money.", func(ctx context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		return "sent", nil
	}))(t)
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return provider.Response{Message: provider.AssistantMessage("paid")}, nil
		}
		m := provider.AssistantMessage("")
		m.ToolCalls = []provider.ToolCall{call("e1", "send", `{"amount":5}`)}
		return provider.Response{Message: m}, nil
	})
	return newReact(t, model, agent.WithName("expert"), agent.WithTools(tool.RequireApproval(send, "", 0)))
}

// underJournal returns ctx under the journal of turn in st.
func underJournal(t *testing.T, ctx context.Context, st *store.Store, turn string) context.Context {
	t.Helper()
	j, err := st.Journal(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	return agent.WithJournal(ctx, j)
}

// checkBusy checks that a call of expert under ctx finds it held for a
// suspended call: refused with ErrBusy (refuse), or else waiting until the
// caller gives up.
func checkBusy(t *testing.T, expert *SubAgentTool, ctx context.Context, refuse bool) {
	t.Helper()
	if refuse {
		if _, err := callTool(ctx, expert, "l1", `{"task":"pay"}`); !errors.Is(err, ErrBusy) || !tool.IsCorrectable(err) {
			t.Fatalf("another call while suspended: %v, want a correctable ErrBusy", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err := callTool(ctx, expert, "l1", `{"task":"pay"}`)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("another call while suspended: %v, want it to wait until its context ends", err)
	}
}

// Two tools on one stored expert (two processes, or two replicas, sharing
// the SQLite file) behave as one resident: while a call is suspended
// through one, calls through the other wait or are refused, the suspended
// call resumes through either, a waiting caller then gets its turn, and a
// turn that is abandoned (its journal deleted) lets the expert go.
func TestSuspendedStoredExpertIsBusyInEveryProcess(t *testing.T) {
	path := t.TempDir() + "/s.db"
	st1, st2 := openStore(t, path), openStore(t, path)
	tool1 := must(FromAgent("expert", "Pays.", payingExpert(t), WithInputFromArgs(argsTask), WithStore(st1, "expert")))(t)
	tool2 := must(FromAgent("expert", "Pays.", payingExpert(t), WithInputFromArgs(argsTask), WithStore(st2, "expert")))(t)
	refusing2 := must(FromAgent("expert", "Pays.", payingExpert(t), WithInputFromArgs(argsTask), WithStore(st2, "expert"), WithRefuseWhenBusy()))(t)
	ctx := context.Background()

	_, err := callTool(underJournal(t, ctx, st1, "a"), tool1, "l1", `{"task":"pay"}`)
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("first call: %v, want an interrupt", err)
	}
	checkBusy(t, tool2, underJournal(t, ctx, st2, "b"), false)
	checkBusy(t, refusing2, underJournal(t, ctx, st2, "b"), true)
	checkBusy(t, tool1, underJournal(t, ctx, st1, "b"), false)

	waiter := make(chan error, 1)
	go func() {
		_, err := callTool(underJournal(t, ctx, st2, "b"), tool2, "l1", `{"task":"pay"}`)
		waiter <- err
	}()
	select {
	case err := <-waiter:
		t.Fatalf("a call went through while the expert was held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	// The other process resumes the suspended call.
	rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := callTool(underJournal(t, rctx, st2, "a"), tool2, "l1", `{"task":"pay"}`); err != nil || res.Content != "paid" {
		t.Fatalf("the call resumed through the other tool: %+v %v", res, err)
	}
	if msgs, _ := storedMessages(t, st1); len(msgs) != 4 || msgs[3].Content != "paid" {
		t.Fatalf("stored conversation after the resume: %+v, want the whole turn", msgs)
	}
	// The waiting caller got its turn, and was suspended in its own turn.
	select {
	case err := <-waiter:
		if !errors.As(err, &in) {
			t.Fatalf("the waiting call: %v, want its own interrupt", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call did not get its turn after the resume")
	}
	checkBusy(t, refusing2, underJournal(t, ctx, st2, "c"), true)

	// Turn b is abandoned: the expert is free.
	if err := st1.DeleteJournal(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(underJournal(t, ctx, st2, "c"), refusing2, "l1", `{"task":"pay"}`); !errors.As(err, &in) {
		t.Fatalf("a call after the suspended turn was abandoned: %v, want it to run (and ask)", err)
	}
}

// A hold whose questions have all expired lets the expert go.
func TestExpiredHoldLetsTheExpertGo(t *testing.T) {
	st := openStore(t, t.TempDir()+"/s.db")
	expert := must(FromAgent("expert", "Pays.", payingExpert(t), WithInputFromArgs(argsTask), WithStore(st, "expert"), WithRefuseWhenBusy()))(t)
	ctx := context.Background()
	if _, err := callTool(underJournal(t, ctx, st, "a"), expert, "l1", `{"task":"pay"}`); !interrupted(err) {
		t.Fatalf("first call: %v, want an interrupt", err)
	}
	// Make the stored hold one whose question expired a moment ago.
	data, _, err := st.Get(ctx, "expert-suspended/expert")
	if err != nil {
		t.Fatal(err)
	}
	var h hold
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatal(err)
	}
	checkBusy(t, expert, underJournal(t, ctx, st, "b"), true)
	h.Until = time.Now().Add(-time.Millisecond)
	data, _ = json.Marshal(h)
	if err := st.Put(ctx, "expert-suspended/expert", data, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := callTool(underJournal(t, ctx, st, "b"), expert, "l1", `{"task":"pay"}`); !interrupted(err) {
		t.Fatalf("a call after the hold expired: %v, want it to run (and ask)", err)
	}
}
