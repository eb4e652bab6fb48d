package agentfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agentfile"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// idModes are the ways real providers name tool calls: afresh on every
// request, not at all, or from call_0 again in every response.
var idModes = []struct {
	name string
	id   func(n int64) string
}{
	{"fresh ids", func(n int64) string { return "call_" + strconv.FormatInt(1000+n, 10) }},
	{"no ids", func(int64) string { return "" }},
	{"ids restarting at call_0", func(int64) string { return "call_0" }},
}

// turnWorld is a lead that consults a scout, then an asker whose tool
// needs a person's approval: the turn suspends in the asker.
type turnWorld struct {
	dir                  string
	requests             atomic.Int64
	scoutCalls, confirms atomic.Int64
	p                    provider.Provider
}

func newTurnWorld(t *testing.T, id func(int64) string) *turnWorld {
	w := &turnWorld{dir: t.TempDir()}
	write(t, w.dir, "scout.md", "---\nname: scout\ndescription: Looks around.\ntools: []\n---\nscout version one\n")
	write(t, w.dir, "asker.md", "---\nname: asker\ndescription: Asks first.\ntools: [confirm]\n---\nasker version one\n")
	w.p = provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := w.requests.Add(1)
		r := results(req)
		usage := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
		reply := func(m provider.Message) (provider.Response, error) {
			return provider.Response{Message: m, Usage: usage}, nil
		}
		call := func(name, args string) (provider.Response, error) {
			return reply(provider.AssistantMessage("", provider.ToolCall{ID: id(n), Name: name, Arguments: json.RawMessage(args)}))
		}
		switch {
		case strings.HasPrefix(req.System, "scout"):
			w.scoutCalls.Add(1)
			return reply(provider.AssistantMessage("scouted by " + req.System))
		case strings.HasPrefix(req.System, "asker"):
			if len(r) == 0 {
				return call("confirm", `{}`)
			}
			return reply(provider.AssistantMessage("asked: " + r[0]))
		}
		switch len(r) {
		case 0:
			return call("scout", `{"task":"look"}`)
		case 1:
			return call("asker", `{"task":"ask"}`)
		}
		return reply(provider.AssistantMessage("done: " + strings.Join(r, " | ")))
	})
	return w
}

// lead loads the directory as it is now and builds the lead on it.
func (w *turnWorld) lead(t *testing.T) *agent.React {
	t.Helper()
	confirm := tool.RequireApproval(tool.Func{Def: tool.Definition{Name: "confirm", Description: "Confirms.", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, c tool.Call) (tool.Result, error) {
			w.confirms.Add(1)
			return tool.Result{Content: "confirmed"}, nil
		}}, "confirms", 0)
	l, err := agentfile.NewLoader(agentfile.WithProvider("p", w.p), agentfile.WithTools(mustRegistry(t, confirm)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.LoadDir(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewReact(w.p, agent.WithName("lead"), agent.WithTools(r.Tools()...))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	b, err := sqlite.Open(filepath.Join(t.TempDir(), "deputy.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// run runs the turn under its journal, opened afresh as a new process
// would.
func run(t *testing.T, ctx context.Context, st *store.Store, a *agent.React) (agent.Output, error) {
	t.Helper()
	j, err := st.Journal(ctx, "turn")
	if err != nil {
		t.Fatal(err)
	}
	return a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
}

func approve(t *testing.T, err error) context.Context {
	t.Helper()
	var in *tool.Interrupted
	if !errors.As(err, &in) || len(in.Interrupts) != 1 {
		t.Fatalf("%v, want one question", err)
	}
	ctx, rerr := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if rerr != nil {
		t.Fatal(rerr)
	}
	return ctx
}

// A definition edited after its turn started does not change the turn: a
// sub-agent that finished is replayed as it ran (its model is not asked
// again), and the turn finishes; a sub-agent that was suspended and whose
// file changed refuses to continue under the new definition, and the
// approved action does not run. Whatever ids the provider gives.
func TestEditedDefinitionDoesNotChangeARunningTurn(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name+", the finished sub-agent's file edited", func(t *testing.T) {
			w := newTurnWorld(t, mode.id)
			st := openStore(t)
			_, err := run(t, context.Background(), st, w.lead(t))
			ctx := approve(t, err)
			write(t, w.dir, "scout.md", "---\nname: scout\ndescription: Looks around.\ntools: []\n---\nscout version two\n")
			out, err := run(t, ctx, st, w.lead(t))
			if err != nil {
				t.Fatal(err)
			}
			if want := "done: scouted by scout version one | asked: confirmed"; out.Answer != want {
				t.Fatalf("answer %q, want %q", out.Answer, want)
			}
			if w.scoutCalls.Load() != 1 || w.confirms.Load() != 1 {
				t.Fatalf("the scout's model asked %d times, the action ran %d times; want once each", w.scoutCalls.Load(), w.confirms.Load())
			}
		})
		t.Run(mode.name+", the suspended sub-agent's file edited", func(t *testing.T) {
			w := newTurnWorld(t, mode.id)
			st := openStore(t)
			_, err := run(t, context.Background(), st, w.lead(t))
			ctx := approve(t, err)
			write(t, w.dir, "asker.md", "---\nname: asker\ndescription: Asks first.\ntools: [confirm]\n---\nasker version two\n")
			_, err = run(t, ctx, st, w.lead(t))
			if !errors.Is(err, agentfile.ErrChanged) || !strings.Contains(err.Error(), "asker.md") {
				t.Fatalf("resumed with an edited definition: %v; want ErrChanged naming the file", err)
			}
			if w.confirms.Load() != 0 {
				t.Fatalf("the approved action ran %d times under another definition", w.confirms.Load())
			}
			// Put back, the definition resumes the turn.
			write(t, w.dir, "asker.md", "---\nname: asker\ndescription: Asks first.\ntools: [confirm]\n---\nasker version one\n")
			out, err := run(t, ctx, st, w.lead(t))
			if err != nil {
				t.Fatal(err)
			}
			if out.Answer != "done: scouted by scout version one | asked: confirmed" || w.confirms.Load() != 1 || w.scoutCalls.Load() != 1 {
				t.Fatalf("answer %q; %d actions, %d scout calls", out.Answer, w.confirms.Load(), w.scoutCalls.Load())
			}
		})
	}
}
