package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/conversation"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// notesModel answers a question starting "look up" with a call of the
// lookup tool, the tool's result with "found", and anything else with
// "ok". It records the system prompt of every request.
type notesModel struct {
	mu      sync.Mutex
	systems []string
	calls   int
}

func (m *notesModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.systems = append(m.systems, req.System)
	m.calls++
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	var msg provider.Message
	switch {
	case last.Role == provider.RoleTool:
		msg = provider.AssistantMessage("found")
	case strings.HasPrefix(last.Content, "look up"):
		msg = provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{Name: "lookup", Arguments: json.RawMessage(`{"q":"x"}`)}}}
	default:
		msg = provider.AssistantMessage("ok")
	}
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg)}, nil
}

func lookupTool(t *testing.T) tool.Tool {
	t.Helper()
	lt, err := tool.New("lookup", "Looks things up.", func(context.Context, struct {
		Q string `json:"q"`
	}) (string, error) {
		return "the answer", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lt
}

// question i of a conversation: every third looks something up.
func question(i int) string {
	if i%3 == 0 {
		return "look up item " + strconv.Itoa(i)
	}
	return "note " + strconv.Itoa(i)
}

// A compaction folds the older turns, whole, into a bounded summary: the
// conversation stays one a model accepts, the system prompt is sent as
// it was, the summarizer sees every tool call with its result, and what
// the summary cost counts in the run's usage.
func TestCompactionFoldsOlderTurnsIntoABoundedSummary(t *testing.T) {
	summarizer := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		text := req.Messages[0].Content
		if n, m := strings.Count(text, "(called the tool"), strings.Count(text, "Tool result: the answer"); n != m {
			t.Errorf("the summarizer saw %d tool calls and %d results", n, m)
		}
		msg := provider.AssistantMessage(strings.Repeat("summary ", 1000)) // 8 KB, over the bound
		return provider.Response{Message: msg, Usage: provider.Usage{Requests: 1, InputTokens: 100, OutputTokens: 7}}, nil
	})
	m := &notesModel{}
	r, err := agent.NewReact(m, agent.WithSystemPrompt("Keep notes."), agent.WithTools(lookupTool(t)),
		agent.WithCompaction(agent.Compaction{MaxMessages: 12, KeepTurns: 2, MaxSummaryBytes: 400, Summarizer: summarizer}))
	if err != nil {
		t.Fatal(err)
	}
	compactions := 0
	for i := range 30 {
		out, err := r.Run(context.Background(), agent.Input{Text: question(i)})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if out.Compactions > 0 {
			compactions += out.Compactions
			if out.Usage.InputTokens < 100 || out.Usage.Requests < 2 {
				t.Errorf("run %d compacted, but its usage %+v leaves out the summary's", i, out.Usage)
			}
		}
		if got := len(r.History()); got > 12+4 {
			t.Errorf("run %d: %d messages kept, the bound is 12 (plus the run's own turn)", i, got)
		}
	}
	if compactions < 3 {
		t.Fatalf("%d compactions in 30 runs with a bound of 12 messages", compactions)
	}
	h := r.History()
	if err := conversation.Check(h); err != nil {
		t.Fatalf("the compacted conversation is one a model would refuse: %v", err)
	}
	if h[0].Role != provider.RoleUser || !strings.Contains(h[0].Content, "summary summary") || len(h[0].Content) > 400 {
		t.Errorf("first message %q (%d bytes): want the summary, at most 400 bytes", h[0].Content[:min(80, len(h[0].Content))], len(h[0].Content))
	}
	if !strings.Contains(h[0].Content, "[output truncated:") {
		t.Error("the cut summary carries no marker")
	}
	for _, s := range m.systems {
		if s != "Keep notes." {
			t.Fatalf("a request's system prompt was %q", s)
		}
	}
}

// A compaction that cannot be made fails the run with ErrCompaction, saying
// why, and leaves the conversation exactly as it was; the next run, with a
// working summarizer, compacts.
func TestFailedCompactionLeavesTheConversationAsItWas(t *testing.T) {
	transient := &provider.Error{Provider: "sum", Kind: provider.KindTransient, StatusCode: 503}
	tests := []struct {
		name    string
		fail    func(ctx context.Context) (provider.Response, error)
		ctx     func() (context.Context, context.CancelFunc)
		wantErr string
		is      error
	}{
		{name: "the summarizer errs", fail: func(context.Context) (provider.Response, error) {
			return provider.Response{}, transient
		}, wantErr: "summary's model call", is: transient},
		{name: "the summarizer answers nothing", fail: func(context.Context) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage("  "), StopReason: provider.StopMaxTokens}, nil
		}, wantErr: "answered with no text"},
		{name: "the summarizer panics", fail: func(context.Context) (provider.Response, error) {
			panic("boom")
		}, wantErr: "panicked: boom"},
		{name: "the summary times out", fail: func(ctx context.Context) (provider.Response, error) {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, wantErr: "deadline exceeded", is: context.DeadlineExceeded},
		{name: "the caller cancels during the summary", fail: func(ctx context.Context) (provider.Response, error) {
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}, ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}, wantErr: "context canceled", is: context.Canceled},
	}
	for _, tt := range tests {
		// In a bubble, the 20 ms pass only once every goroutine waits:
		// on a loaded machine the deadline cannot come before the summary.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var failing atomic.Bool
				summarizer := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					if failing.Load() {
						return tt.fail(ctx)
					}
					return provider.Response{Message: provider.AssistantMessage("the notes so far")}, nil
				})
				m := &notesModel{}
				r, err := agent.NewReact(m, agent.WithTools(lookupTool(t)),
					agent.WithCompaction(agent.Compaction{MaxMessages: 8, KeepTurns: 1, Summarizer: summarizer}))
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					if _, err := r.Run(context.Background(), agent.Input{Text: question(i + 1)}); err != nil {
						t.Fatal(err)
					}
				}
				before := r.History()
				calls := m.calls
				failing.Store(true)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tt.ctx != nil {
					ctx, cancel = tt.ctx()
				}
				defer cancel()
				_, err = r.Run(ctx, agent.Input{Text: "note 99"})
				if !errors.Is(err, agent.ErrCompaction) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want ErrCompaction saying %q", err, tt.wantErr)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("the error %v does not wrap %v", err, tt.is)
				}
				if diff := cmp.Diff(before, r.History()); diff != "" {
					t.Errorf("the conversation changed (-before +after):\n%s", diff)
				}
				if m.calls != calls {
					t.Errorf("the model was asked %d times after the compaction failed", m.calls-calls)
				}
				failing.Store(false)
				out, err := r.Run(context.Background(), agent.Input{Text: "note 100"})
				if err != nil || out.Compactions != 1 {
					t.Fatalf("with the summarizer back: %d compactions, %v", out.Compactions, err)
				}
			})
		})
	}
}

// A run whose own turn cannot fit the window fails before anything is
// sent; with compaction turned off, the error says to turn it on.
func TestContextWindowRefusesWhatCannotFit(t *testing.T) {
	m := &notesModel{}
	r, err := agent.NewReact(m, agent.WithContextWindow(100))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), agent.Input{Text: strings.Repeat("long ", 200)})
	if !errors.Is(err, agent.ErrContextWindow) || !strings.Contains(err.Error(), "the window is 100") {
		t.Fatalf("got %v, want ErrContextWindow naming the window", err)
	}
	if m.calls != 0 {
		t.Errorf("%d requests sent that could not fit", m.calls)
	}

	off, err := agent.NewReact(m, agent.WithContextWindow(100), agent.WithoutCompaction())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := off.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)})
		if err == nil {
			continue
		}
		if !errors.Is(err, agent.ErrContextWindow) || !strings.Contains(err.Error(), "leave WithoutCompaction out") {
			t.Fatalf("got %v, want ErrContextWindow saying to compact", err)
		}
		break
	}
	for _, bad := range []agent.Option{agent.WithContextWindow(0), agent.WithCompaction(agent.Compaction{MaxTokens: -1}),
		agent.WithCompaction(agent.Compaction{Summarize: func(context.Context, []provider.Message) (string, error) { return "", nil }, SummaryModel: "m"})} {
		if _, err := agent.NewReact(m, bad); !errors.Is(err, agent.ErrInvalidOption) {
			t.Errorf("got %v, want ErrInvalidOption", err)
		}
	}
}

// A request the provider itself refuses as too long for the window is
// compacted and sent once more; a second refusal is the run's error.
func TestProviderWindowErrorCompactsAndAsksOnce(t *testing.T) {
	tooLong := &provider.Error{Provider: "p", Kind: provider.KindContextWindow, StatusCode: 400, Message: "prompt is too long"}
	var limit atomic.Int64
	limit.Store(8)
	var sent atomic.Int64
	m := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		sent.Add(1)
		if int64(len(req.Messages)) > limit.Load() {
			return provider.Response{}, tooLong
		}
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	})
	r, err := agent.NewReact(m, agent.WithCompaction(agent.Compaction{KeepTurns: 1,
		Summarize: func(_ context.Context, older []provider.Message) (string, error) {
			return strconv.Itoa(len(older)) + " messages folded", nil
		}}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := r.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	sent.Store(0)
	out, err := r.Run(context.Background(), agent.Input{Text: "note 4"}) // 9 messages: refused once
	if err != nil || out.Compactions != 1 || sent.Load() != 2 {
		t.Fatalf("%d requests, %d compactions, %v: want the refused request compacted and sent once more", sent.Load(), out.Compactions, err)
	}
	limit.Store(1)
	sent.Store(0)
	if _, err := r.Run(context.Background(), agent.Input{Text: "note 5"}); !errors.Is(err, tooLong) || sent.Load() != 2 {
		t.Fatalf("%d requests, %v: want the provider's refusal after one retry", sent.Load(), err)
	}
}

// Runs append to the kept history in place, yet no earlier run's
// messages change: not after a rollback, a restored checkpoint or a
// failed run.
func TestAppendingInPlaceChangesNoEarlierOutput(t *testing.T) {
	p := fake.NewProvider(fake.Text("one"), fake.Error(errors.New("down")), fake.Text("three"), fake.Text("four"), fake.Text("five"), fake.Text("six"))
	r, err := agent.NewReact(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var outs [][]provider.Message
	var wants [][]provider.Message
	keep := func(out agent.Output) {
		outs = append(outs, out.Messages)
		wants = append(wants, append([]provider.Message(nil), out.Messages...))
	}
	out, _ := r.Run(ctx, agent.Input{Text: "q1"})
	keep(out)
	out, _ = r.Run(ctx, agent.Input{Text: "q2"}) // fails
	keep(out)
	out, _ = r.Run(ctx, agent.Input{Text: "q3"})
	keep(out)
	hctx, turn, err := r.Hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ = r.Run(hctx, agent.Input{Text: "q4"})
	keep(out)
	turn.Rollback()
	turn.Release()
	restore := r.Checkpoint()
	out, _ = r.Run(ctx, agent.Input{Text: "q5"})
	keep(out)
	restore()
	out, _ = r.Run(ctx, agent.Input{Text: "q6"})
	keep(out)
	for i := range outs {
		if diff := cmp.Diff(wants[i], outs[i]); diff != "" {
			t.Errorf("run %d's messages changed (-then +now):\n%s", i+1, diff)
		}
	}
	var texts []string
	for _, m := range r.History() {
		texts = append(texts, m.Content)
	}
	if want := []string{"q1", "one", "q3", "three", "q6", "six"}; !cmp.Equal(want, texts) {
		t.Errorf("history %q, want %q", texts, want)
	}
}

// A turn that compacted and then waited for an approval does not pay for
// its summary again when it is resumed, whatever ids the model gives its
// calls: the summary is in the journal, like the model's answers, and
// each approved call runs once.
func TestResumedTurnDoesNotSummarizeAgain(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, transfers, summaries atomic.Int64
			transfer := tool.RequireApproval(toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				transfers.Add(1)
				return tool.Result{Content: "moved 100"}, nil
			}), "moves money", 0)
			summarizer := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				summaries.Add(1)
				return provider.Response{Message: provider.AssistantMessage("Earlier: four notes."), Usage: provider.Usage{Requests: 1, InputTokens: 50, OutputTokens: 5}}, nil
			})
			lead := newReact(t, transferModel(mode.id, &modelCalls), agent.WithName("lead"), agent.WithTools(transfer),
				agent.WithCompaction(agent.Compaction{MaxMessages: 6, KeepTurns: 1, Summarizer: summarizer}))
			// Four earlier turns, without tool calls, so that the turn
			// compacts before its first model call.
			earlier := newReact(t, provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				return provider.Response{Message: provider.AssistantMessage("ok")}, nil
			}), agent.WithoutCompaction())
			for i := range 4 {
				if _, err := earlier.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := earlier.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := lead.Restore(snap); err != nil {
				t.Fatal(err)
			}
			var usage provider.Usage
			run := func(ctx context.Context) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				out, err := lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "pay twice"})
				usage = out.TotalUsage() // each run reports the whole turn so far
				return out, err
			}
			approve := func(err error) context.Context {
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
			_, err = run(context.Background())
			_, err = run(approve(err))
			out, err := run(approve(err))
			if err != nil || out.Answer != "moved it twice" || out.Compactions != 1 {
				t.Fatalf("the last run: %q, %d compactions, %v", out.Answer, out.Compactions, err)
			}
			if got := summaries.Load(); got != 1 {
				t.Errorf("the summary was asked for %d times over three runs of one turn, want 1", got)
			}
			if got, calls := transfers.Load(), modelCalls.Load(); got != 2 || calls != 3 {
				t.Errorf("%d transfers and %d model calls, want 2 and 3", got, calls)
			}
			if usage.Requests != 4 || usage.InputTokens != 80 {
				t.Errorf("the last run's usage %+v, want the whole turn: 4 requests, three answers and one summary", usage)
			}
			h := lead.History()
			if !strings.HasPrefix(h[0].Content, "[Summary") || conversation.Check(h) != nil {
				t.Errorf("the kept conversation does not start with the summary, or a model would refuse it: %q", h[0].Content)
			}
		})
	}
}

// A React's parts (what subagent.WithStore stores): Mark's epoch stays while runs only add to the conversation, and then
// SnapshotFrom returns exactly what they added: a snapshot and the parts
// after it restore the same conversation. A rollback, a compaction, a
// Restore or a Reset changes the epoch.
func TestMarkAndPartsFollowTheConversation(t *testing.T) {
	m := &notesModel{}
	r, err := agent.NewReact(m, agent.WithTools(lookupTool(t)), agent.WithCompaction(agent.Compaction{MaxMessages: 20,
		Summarize: func(context.Context, []provider.Message) (string, error) { return "notes", nil }}))
	if err != nil {
		t.Fatal(err)
	}
	parts := func(r *agent.React) conversation.Parts { return r.Parts(conversation.Key{}) }
	ctx := context.Background()
	run := func(i int) {
		t.Helper()
		if _, err := r.Run(ctx, agent.Input{Text: question(i)}); err != nil {
			t.Fatal(err)
		}
	}
	run(1)
	base := must(r.Snapshot())(t)
	epoch, n := parts(r).Mark()
	run(2)
	run(3) // a tool call and its result
	if e, _ := parts(r).Mark(); e != epoch {
		t.Fatal("the epoch changed while runs only added messages")
	}
	part := must(parts(r).SnapshotFrom(n))(t)
	other := newReact(t, m)
	if err := parts(other).RestoreParts(base, part); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r.History(), other.History()); diff != "" {
		t.Fatalf("a snapshot and the part after it restore another conversation (-want +got):\n%s", diff)
	}
	// The same, a part at a time: the part added to what another holds.
	third := newReact(t, m)
	if err := third.Restore(base); err != nil {
		t.Fatal(err)
	}
	before, _ := parts(third).Mark()
	if err := parts(third).AppendParts(part); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r.History(), third.History()); diff != "" {
		t.Fatalf("a part appended to its snapshot gives another conversation (-want +got):\n%s", diff)
	}
	if after, _ := parts(third).Mark(); after != before {
		t.Error("appending parts changed the epoch: a store would write the whole again")
	}
	if _, err := parts(r).SnapshotFrom(len(r.History()) + 1); err == nil {
		t.Error("SnapshotFrom past the end did not fail")
	}
	// The messages from the tool result on: a result without its call.
	if err := parts(other).RestoreParts(must(parts(r).SnapshotFrom(6))(t)); !errors.Is(err, agent.ErrBadSnapshot) {
		t.Errorf("a part alone, whose tool result lacks its call: %v, want ErrBadSnapshot", err)
	}

	changes := map[string]func(){
		"a rollback": func() {
			hctx, turn, err := r.Hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Run(hctx, agent.Input{Text: "note"}); err != nil {
				t.Fatal(err)
			}
			turn.Rollback()
			turn.Release()
		},
		"a compaction": func() {
			for i := 0; ; i++ {
				out, err := r.Run(ctx, agent.Input{Text: question(10 + i)})
				if err != nil {
					t.Fatal(err)
				}
				if out.Compactions > 0 {
					return
				}
			}
		},
		"a restore": func() {
			if err := r.Restore(base); err != nil {
				t.Fatal(err)
			}
		},
		"a reset": r.Reset,
	}
	for _, name := range []string{"a rollback", "a compaction", "a restore", "a reset"} {
		before, _ := parts(r).Mark()
		changes[name]()
		if after, _ := parts(r).Mark(); after == before {
			t.Errorf("the epoch did not change after %s", name)
		}
	}
}

func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// Under a journal, a step that compacts twice — its first result refused
// by the provider as still too long — asks for a second summary rather
// than taking the first one's again, which would drop the turns between.
func TestJournaledStepCompactingTwiceAsksForTwoSummaries(t *testing.T) {
	tooLong := &provider.Error{Provider: "p", Kind: provider.KindContextWindow, StatusCode: 400}
	var refuseOver atomic.Int64
	refuseOver.Store(1 << 30)
	m := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
		if int64(len(req.Messages)) > refuseOver.Load() {
			return provider.Response{}, tooLong
		}
		return provider.Response{Message: provider.AssistantMessage("ok")}, nil
	})
	var seen []string
	r, err := agent.NewReact(m, agent.WithCompaction(agent.Compaction{MaxMessages: 12, KeepTurns: 4,
		Summarize: func(_ context.Context, older []provider.Message) (string, error) {
			var b strings.Builder
			for _, o := range older {
				if o.Role == provider.RoleUser {
					b.WriteString(strings.TrimPrefix(o.Content, "[Summary of the conversation so far: earlier turns were compacted into it.]\n\n") + ";")
				}
			}
			seen = append(seen, b.String())
			return b.String(), nil
		}}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := r.Run(context.Background(), agent.Input{Text: "n" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	refuseOver.Store(7) // the first compaction keeps 4 turns: still too long
	j, err := journalStore(t).Journal(context.Background(), "turn")
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Run(agent.WithJournal(context.Background(), j), agent.Input{Text: "n6"})
	if err != nil || out.Compactions != 2 {
		t.Fatalf("%d compactions, %v", out.Compactions, err)
	}
	if len(seen) != 2 || !strings.Contains(seen[1], "n0;") || !strings.Contains(seen[1], "n2;") {
		t.Fatalf("summaries %q: want a second one that folds the first and the turns after it", seen)
	}
}

// A turn whose provider refused a request as too long compacted then, and
// the turn resumed after an approval compacts the same way, with the
// summary it recorded: the summary is paid for once, the resumed run's
// requests fit, and the last run reports the whole turn, the summary
// included — whatever ids the model gives its calls.
func TestForcedCompactionIsNotPaidAgainOnResume(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, refusals, transfers, summaries atomic.Int64
			transfer := tool.RequireApproval(toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				transfers.Add(1)
				return tool.Result{Content: "moved 100"}, nil
			}), "moves money", 0)
			inner := transferModel(mode.id, &modelCalls)
			// The model's window holds the turn only once the earlier
			// notes are folded into a summary.
			model := provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				for _, m := range req.Messages {
					if m.Content == "note 0" {
						refusals.Add(1)
						return provider.Response{}, &provider.Error{Provider: "p", Kind: provider.KindContextWindow, StatusCode: 400, Message: "prompt is too long"}
					}
				}
				return inner.Complete(ctx, req)
			})
			summarizer := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				summaries.Add(1)
				return provider.Response{Message: provider.AssistantMessage("Earlier: four notes."), Usage: provider.Usage{Requests: 1, InputTokens: 50, OutputTokens: 5}}, nil
			})
			// The bounds never call for a compaction: only the refusal does.
			lead := newReact(t, model, agent.WithName("lead"), agent.WithTools(transfer),
				agent.WithCompaction(agent.Compaction{KeepTurns: 1, Summarizer: summarizer}))
			earlier := newReact(t, provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				return provider.Response{Message: provider.AssistantMessage("ok")}, nil
			}), agent.WithoutCompaction())
			for i := range 4 {
				if _, err := earlier.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := earlier.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := lead.Restore(snap); err != nil {
				t.Fatal(err)
			}
			run := func(ctx context.Context) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "pay twice"})
			}
			approve := func(err error) context.Context {
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
			first, err := run(context.Background())
			if first.Compactions != 1 || refusals.Load() != 1 {
				t.Fatalf("the first run compacted %d times after %d refusals, want once after one", first.Compactions, refusals.Load())
			}
			_, err = run(approve(err))
			out, err := run(approve(err))
			if err != nil || out.Answer != "moved it twice" {
				t.Fatalf("the last run: %q, %v", out.Answer, err)
			}
			if got := summaries.Load(); got != 1 {
				t.Errorf("the summary was paid for %d times over three runs of one turn, want 1", got)
			}
			if got := refusals.Load(); got != 1 {
				t.Errorf("the provider refused %d requests as too long, want 1: a resumed run sent the conversation it had compacted", got)
			}
			if got, calls := transfers.Load(), modelCalls.Load(); got != 2 || calls != 3 {
				t.Errorf("%d transfers and %d model answers, want 2 and 3", got, calls)
			}
			if u := out.TotalUsage(); u.Requests != 4 || u.InputTokens != 80 {
				t.Errorf("the last run's usage %+v, want the whole turn: three answers and one summary", u)
			}
			if out.Earlier.Requests != 3 || out.Earlier.InputTokens != 70 {
				t.Errorf("the last run's Earlier %+v, want the summary and two answers", out.Earlier)
			}
		})
	}
}

// A run that compacted, recorded its summary and was then stopped paid
// for the summary; the run that goes on with the turn on an agent built
// afresh, with no history to compact, never reads it, and still reports
// it, as spent before, whatever ids the model gives its calls: what the
// turn paid is reported once.
func TestResumedTurnCountsTheSummaryItDoesNotReplay(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			st := journalStore(t)
			var modelCalls, transfers, summaries atomic.Int64
			transfer := toolFunc("transfer", func(ctx context.Context, c tool.Call) (tool.Result, error) {
				transfers.Add(1)
				return tool.Result{Content: "moved 100"}, nil
			})
			summarizer := provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				summaries.Add(1)
				return provider.Response{Message: provider.AssistantMessage("Earlier: four notes."), Usage: provider.Usage{Requests: 1, InputTokens: 50, OutputTokens: 5}}, nil
			})
			newLead := func() *agent.React {
				return newReact(t, transferModel(mode.id, &modelCalls), agent.WithName("lead"), agent.WithTools(transfer),
					agent.WithCompaction(agent.Compaction{MaxMessages: 6, KeepTurns: 1, Summarizer: summarizer}))
			}
			first := newLead()
			earlier := newReact(t, provider.Func(func(context.Context, provider.Request) (provider.Response, error) {
				return provider.Response{Message: provider.AssistantMessage("ok")}, nil
			}), agent.WithoutCompaction())
			for i := range 4 {
				if _, err := earlier.Run(context.Background(), agent.Input{Text: "note " + strconv.Itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := earlier.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Restore(snap); err != nil {
				t.Fatal(err)
			}
			run := func(ctx context.Context, lead *agent.React) (agent.Output, error) {
				t.Helper()
				j, err := st.Journal(ctx, "turn")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "pay twice"})
			}
			// The first run compacts, records its summary, and is stopped
			// as its model is asked.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out, err := run(context.WithValue(ctx, crashKey{}, func() { cancel() }), first)
			if err == nil || out.Compactions != 1 {
				t.Fatalf("the first run: %d compactions, %v; want one and a cancellation", out.Compactions, err)
			}
			// The turn goes on with an agent built afresh: nothing to compact.
			out, err = run(context.Background(), newLead())
			if err != nil || out.Answer != "moved it twice" || out.Compactions != 0 {
				t.Fatalf("the resumed run: %q, %d compactions, %v", out.Answer, out.Compactions, err)
			}
			if got, tr, calls := summaries.Load(), transfers.Load(), modelCalls.Load(); got != 1 || tr != 2 || calls != 3 {
				t.Errorf("%d summaries, %d transfers, %d model calls; want 1, 2 and 3", got, tr, calls)
			}
			want := provider.Usage{Requests: 4, InputTokens: 80, OutputTokens: 8}
			if got := out.TotalUsage(); got != want {
				t.Errorf("the resumed run reports %+v; the models billed %+v (three answers and the summary)", got, want)
			}
			if want := (provider.Usage{Requests: 1, InputTokens: 50, OutputTokens: 5}); out.Earlier != want {
				t.Errorf("the resumed run reports %+v as spent before; want the summary, %+v", out.Earlier, want)
			}
		})
	}
}
