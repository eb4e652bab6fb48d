package agent_test

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
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
	"github.com/deputy-go/deputy/tool"
)

// idModes are the ways real providers name tool calls: afresh on every
// request, not at all, or from call_0 again in every response. None of
// them repeats the ids of the run that asked.
var idModes = []struct {
	name string
	id   func(n int64) string // of the n-th request's call
}{
	{"fresh ids", func(n int64) string { return "call_" + strconv.FormatInt(1000+n, 10) }},
	{"no ids", func(int64) string { return "" }},
	{"ids restarting at call_0", func(int64) string { return "call_0" }},
}

// transferModel asks for the same transfer twice, one step after the other,
// then answers: a function of what it is sent, as a real model is. It
// counts the requests it answers.
func transferModel(id func(int64) string, calls *atomic.Int64) provider.Provider {
	return provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if crash, _ := ctx.Value(crashKey{}).(func()); crash != nil {
			// The process dies as the model is asked: nothing is answered.
			crash()
			return provider.Response{}, ctx.Err()
		}
		n := calls.Add(1)
		results := 0
		for _, m := range req.Messages {
			if m.Role == provider.RoleTool {
				results++
			}
		}
		usage := provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}
		if results >= 2 {
			return provider.Response{Message: provider.AssistantMessage("moved it twice"), Usage: usage}, nil
		}
		call := provider.ToolCall{ID: id(n), Name: "transfer", Arguments: json.RawMessage(`{"amount":100}`)}
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
	})
}

func journalStore(t testing.TB) *store.Store {
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

// crashKey carries, in a test, the function that stops a run as its
// model is asked.
type crashKey struct{}

// A model that asks for the same approved transfer in two steps: each
// "yes" moves the money once, the second transfer is asked for on its own,
// a round of questions never asks again what an earlier round answered,
// and a recovery after a crash runs nothing twice — whatever ids the
// provider gives the calls. Nothing is wrapped.
func TestOneApprovalRunsItsCallOnce(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, transfers atomic.Int64
			transfer := tool.RequireApproval(toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				transfers.Add(1)
				return tool.Result{Content: "moved 100"}, nil
			}), "moves money", 0)
			lead := newReact(t, transferModel(mode.id, &modelCalls), agent.WithName("lead"), agent.WithTools(transfer))
			// run runs the turn once under a journal opened afresh, as a
			// new process would; with crash, it stops at its first model
			// call.
			run := func(ctx context.Context, crash bool) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				defer cancel()
				if crash {
					rctx = context.WithValue(rctx, crashKey{}, func() { cancel() })
				}
				return lead.Run(agent.WithJournal(rctx, j), agent.Input{Text: "pay twice"})
			}
			ask := func(err error) tool.Interrupt {
				t.Helper()
				var in *tool.Interrupted
				if !errors.As(err, &in) || len(in.Interrupts) != 1 {
					t.Fatalf("%v, want one question", err)
				}
				return in.Interrupts[0]
			}
			yes := func(it tool.Interrupt) context.Context {
				t.Helper()
				ctx, err := tool.Resume(context.Background(), &tool.Interrupted{Interrupts: []tool.Interrupt{it}},
					tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
				if err != nil {
					t.Fatal(err)
				}
				return ctx
			}

			_, err := run(context.Background(), false)
			first := ask(err)
			// The same question, asked again by a run that recovers before
			// it was answered, has the same id.
			_, err = run(context.Background(), false)
			if again := ask(err); again.ID != first.ID {
				t.Fatalf("asked again as %s, first asked as %s: an answer to the first would never be found", again.ID, first.ID)
			}
			// Approved; the run crashes in its next model call, after the
			// transfer ran.
			ctx1 := yes(first)
			if _, err := run(ctx1, true); !errors.Is(err, context.Canceled) {
				t.Fatalf("the crashing run: %v, want it cancelled", err)
			}
			if got := transfers.Load(); got != 1 {
				t.Fatalf("%d transfers after the first approval, want 1", got)
			}
			// Recovered with the same answer: the transfer does not run
			// again, and the second one is asked for on its own.
			_, err = run(ctx1, false)
			second := ask(err)
			if second.ID == first.ID {
				t.Fatalf("the second transfer was asked as %s, the first's id: the first answer would approve it", second.ID)
			}
			if got := transfers.Load(); got != 1 {
				t.Fatalf("%d transfers after the recovery, want 1: the approved call ran again", got)
			}
			out, err := run(yes(second), false)
			if err != nil || out.Answer != "moved it twice" {
				t.Fatalf("the last run: %q, %v", out.Answer, err)
			}
			if got := transfers.Load(); got != 2 {
				t.Fatalf("%d transfers for two approvals, want 2", got)
			}
			// Three steps, each asked of the model once, and paid once.
			if got := modelCalls.Load(); got != 3 {
				t.Errorf("%d model calls over every run, want 3: a journaled answer was asked for again", got)
			}
			// Every run reports the whole turn: the last one, all three
			// answers, two of them spent by the runs before it.
			if u := out.TotalUsage(); u.Requests != 3 || u.InputTokens != 30 || u.OutputTokens != 3 {
				t.Errorf("the last run's usage %+v, want the whole turn: 3 requests, 30 tokens in, 3 out", u)
			}
			if out.Earlier.Requests != 2 || out.Earlier.InputTokens != 20 {
				t.Errorf("the last run's Earlier %+v, want the 2 answers paid for before it", out.Earlier)
			}
		})
	}
}

// A resumed run that does not reach the call an answer was for — it was
// run without the journal of the turn that asked — fails saying so,
// instead of asking the person again.
func TestResumeWithoutItsJournalFailsLoudly(t *testing.T) {
	var modelCalls atomic.Int64
	transfer := tool.RequireApproval(toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Content: "moved 100"}, nil
	}), "moves money", 0)
	lead := newReact(t, transferModel(idModes[0].id, &modelCalls), agent.WithName("lead"), agent.WithTools(transfer))
	_, err := lead.Run(context.Background(), agent.Input{Text: "pay"})
	var in *tool.Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("%v, want a question", err)
	}
	ctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lead.Run(ctx, agent.Input{Text: "pay"})
	if !errors.Is(err, tool.ErrUnusedAnswer) || !strings.Contains(err.Error(), in.Interrupts[0].ID) {
		t.Fatalf("%v, want tool.ErrUnusedAnswer naming %s", err, in.Interrupts[0].ID)
	}
	if got := errcode.Of(err); got != "unused_answer" {
		t.Errorf("error code %q", got)
	}
}

// A streaming provider keeps streaming under a journal: the loop records
// the assembled reply itself, and a replayed reply is not streamed again.
func TestJournaledRunStreams(t *testing.T) {
	st := journalStore(t)
	var calls atomic.Int64
	p := &piecesStreamer{text: []string{"one ", "two ", "three"}, calls: &calls}
	a := newReact(t, p, agent.WithName("lead"))
	deltas := func() int {
		j, err := st.Journal(context.Background(), "turn")
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int64
		ctx := event.WithSink(agent.WithJournal(context.Background(), j), event.SinkFunc(func(e event.Event) {
			if e.Type == event.TextMessageContent {
				n.Add(1)
			}
		}))
		a.Reset()
		out, err := a.Run(ctx, agent.Input{Text: "count"})
		if err != nil || out.Answer != "one two three" {
			t.Fatalf("%q, %v", out.Answer, err)
		}
		return int(n.Load())
	}
	if got := deltas(); got != 3 || p.streamed.Load() != 1 {
		t.Fatalf("%d text deltas, %d streamed calls; want 3 and 1: the journal turned streaming off", got, p.streamed.Load())
	}
	if got := deltas(); got != 0 || calls.Load() != 1 {
		t.Fatalf("the replay sent %d deltas and made %d model calls in all; want 0 and 1", got, calls.Load())
	}
}

// piecesStreamer streams its text in pieces.
type piecesStreamer struct {
	text     []string
	calls    *atomic.Int64
	streamed atomic.Int64
}

func (s *piecesStreamer) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	s.calls.Add(1)
	return provider.Response{Message: provider.AssistantMessage(strings.Join(s.text, ""))}, nil
}

func (s *piecesStreamer) Stream(ctx context.Context, req provider.Request, yield func(provider.Delta) error) (provider.Response, error) {
	s.calls.Add(1)
	s.streamed.Add(1)
	for _, t := range s.text {
		if err := yield(provider.Delta{Text: t}); err != nil {
			return provider.Response{}, err
		}
	}
	return provider.Response{Message: provider.AssistantMessage(strings.Join(s.text, ""))}, nil
}

// A reply that comes back as its run is cancelled (a background job whose
// parent suspends, a client that goes away) was paid for: it is journaled,
// and the turn run again uses it instead of asking the model again.
func TestReplyArrivingAsTheRunIsCancelledIsNotPaidTwice(t *testing.T) {
	st := journalStore(t)
	var asked atomic.Int64
	var cancel context.CancelFunc
	model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		asked.Add(1)
		if cancel != nil {
			cancel() // the run ends while the model is answering
		}
		return provider.Response{Message: provider.AssistantMessage("the answer"), Usage: provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}}, nil
	})
	a := newReact(t, model, agent.WithName("lead"))
	run := func(ctx context.Context) (agent.Output, error) {
		j, err := st.Journal(context.Background(), "cancelled-turn")
		if err != nil {
			t.Fatal(err)
		}
		return a.Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
	}
	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())
	first, err := run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled run: %q, %v; want context.Canceled", first.Answer, err)
	}
	if first.Usage.Requests != 1 {
		t.Errorf("the cancelled run reported %+v, want the one request it paid for", first.Usage)
	}
	cancel = nil
	second, err := run(context.Background())
	if err != nil || second.Answer != "the answer" {
		t.Fatalf("the turn run again: %q, %v", second.Answer, err)
	}
	// The second run pays nothing: it reports the turn's one request,
	// spent by the run before it.
	if n := asked.Load(); n != 1 || second.Usage.Requests != 1 || second.Earlier != second.Usage {
		t.Errorf("the model was asked %d times, the second run reported %+v, %+v of it earlier; want once, and the one request spent before", n, second.Usage, second.Earlier)
	}
}

// A tool that reserves something outside the program and then asks a
// person to confirm: the reservation is made once, whether the turn is
// run again before the answer (a recovery) or after it, whatever ids the
// provider gives the calls; and the resumed call gets the reservation it
// made, not a new one.
func TestOnceDoesAStepOnceAcrossResumes(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var reservations atomic.Int64
			book := toolFunc("book", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				hold, err := tool.Once(ctx, "reserve", func(context.Context) (json.RawMessage, error) {
					n := reservations.Add(1)
					return json.Marshal("hold-" + strconv.FormatInt(n, 10))
				})
				if err != nil {
					return tool.Result{}, err
				}
				if _, err := tool.Ask(ctx, c, tool.Question{Message: "confirm " + string(hold) + "?"}); err != nil {
					return tool.Result{}, err
				}
				return tool.Result{Content: "booked " + string(hold)}, nil
			})
			var modelCalls atomic.Int64
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				n := modelCalls.Add(1)
				usage := provider.Usage{InputTokens: 10, OutputTokens: 1, Requests: 1}
				if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleTool {
					return provider.Response{Message: provider.AssistantMessage(last.Content), Usage: usage}, nil
				}
				call := provider.ToolCall{ID: mode.id(n), Name: "book", Arguments: json.RawMessage(`{}`)}
				return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}, nil
			})
			lead := newReact(t, model, agent.WithTools(book))
			run := func(ctx context.Context) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "book it"})
			}
			_, err := run(context.Background())
			var in *tool.Interrupted
			if !errors.As(err, &in) {
				t.Fatalf("first run: %v, want a question", err)
			}
			if _, err := run(context.Background()); !errors.As(err, &in) {
				t.Fatalf("recovered run: %v, want the question again", err)
			}
			rctx, err := tool.Resume(context.Background(), in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved})
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(rctx)
			if err != nil || out.Answer != `booked "hold-1"` {
				t.Fatalf("resumed run: %q, %v; want the first reservation booked", out.Answer, err)
			}
			if got := reservations.Load(); got != 1 {
				t.Errorf("%d reservations over three runs of the turn, want 1", got)
			}
		})
	}
	// Outside a journaled turn there is nothing to replay from: the step
	// runs each time.
	var n int
	for range 2 {
		if _, err := tool.Once(context.Background(), "x", func(context.Context) (json.RawMessage, error) { n++; return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 {
		t.Errorf("Once outside a journal ran its step %d times in two calls, want 2", n)
	}
}
