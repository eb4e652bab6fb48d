package subagent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// A resident expert's conversation accumulates across calls.
func TestFromAgentThirdAnswerBuildsOnFirst(t *testing.T) {
	p := fake.NewProvider(
		fake.Text("Noted: the code is 7.").For("expert"),
		fake.Text("Paris.").For("expert"),
		fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
			for _, m := range req.Messages {
				if m.Role == provider.RoleAssistant && strings.Contains(m.Content, "the code is 7") {
					return reply("You told me the code is 7.")
				}
			}
			return reply("Nobody told me a code.")
		}).For("expert"),
	)
	expert := newReact(t, p, agent.WithName("expert"))
	sub := must(FromAgent("expert", "Answers questions and remembers what it was told.", expert))(t)

	questions := []string{`{"task":"Remember the code 7."}`, `{"task":"Capital of France?"}`, `{"task":"What was the code?"}`}
	var answers []string
	for i, q := range questions {
		res, err := callTool(context.Background(), sub, fmt.Sprint("call_", i), q)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		answers = append(answers, res.Content)
	}
	if diff := cmp.Diff([]string{"Noted: the code is 7.", "Paris.", "You told me the code is 7."}, answers); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor("expert")
	if len(reqs) != 3 {
		t.Fatalf("the expert's model was called %d times, want 3", len(reqs))
	}
	want := []provider.Message{
		// With the default parameters the expert is handed each task's text.
		provider.UserMessage("Remember the code 7."), provider.AssistantMessage("Noted: the code is 7."),
		provider.UserMessage("Capital of France?"), provider.AssistantMessage("Paris."),
		provider.UserMessage("What was the code?"),
	}
	if diff := cmp.Diff(want, reqs[2].Messages); diff != "" {
		t.Errorf("third request's messages (-want +got):\n%s", diff)
	}
}

// Concurrent calls to one resident take whole turns: the history is n
// complete user→assistant turns, each answer after its own question.
func TestFromAgentConcurrentCallsTakeTurns(t *testing.T) {
	const n = 50
	p := fake.NewProvider(fake.Respond(func(_ context.Context, req provider.Request) (provider.Response, error) {
		runtime.Gosched() // invite another call to interleave, were the turns not kept
		return reply("re: " + req.Messages[len(req.Messages)-1].Content)
	}).For("expert")).Loop()
	expert := newReact(t, p, agent.WithName("expert"))
	sub := must(FromAgent("expert", "Answers questions.", expert))(t)

	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			task := fmt.Sprintf("question %d", i)
			res, err := callTool(context.Background(), sub, fmt.Sprint("call_", i), `{"task":"`+task+`"}`)
			if err == nil && res.Content != "re: "+task {
				err = fmt.Errorf("answer %q, want %q", res.Content, "re: "+task)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	hist := expert.History()
	if len(hist) != 2*n {
		t.Fatalf("history has %d messages, want %d", len(hist), 2*n)
	}
	seen := map[string]bool{}
	for i := 0; i < len(hist); i += 2 {
		q, a := hist[i], hist[i+1]
		if q.Role != provider.RoleUser || a.Role != provider.RoleAssistant || a.Content != "re: "+q.Content {
			t.Fatalf("turn %d is not a whole user→assistant turn: %+v, %+v", i/2, q, a)
		}
		seen[q.Content] = true
	}
	if len(seen) != n {
		t.Errorf("history holds %d distinct questions, want %d", len(seen), n)
	}
}

// A caller waiting its turn gives up when its context ends; the call
// holding the turn is not disturbed and the waiter leaves no trace.
func TestFromAgentWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := fake.NewProvider(
			fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
				<-release
				return reply("the slow answer")
			}).For("expert"),
			fake.Text("never used").For("expert"),
		)
		expert := newReact(t, p, agent.WithName("expert"))
		sub := must(FromAgent("expert", "Answers questions.", expert))(t)

		type outcome struct {
			res tool.Result
			err error
		}
		holder := make(chan outcome, 1)
		go func() {
			res, err := callTool(context.Background(), sub, "call_1", `{"task":"slow"}`)
			holder <- outcome{res, err}
		}()
		synctest.Wait() // the holder is in the model call

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := callTool(ctx, sub, "call_2", `{"task":"impatient"}`)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiter's error = %v, want one wrapping context.DeadlineExceeded", err)
		}
		if tool.IsCorrectable(err) {
			t.Errorf("waiter's error %v is correctable; the caller's own deadline is the program's business", err)
		}

		close(release)
		h := <-holder
		if h.err != nil || h.res.Content != "the slow answer" {
			t.Errorf("holder got (%q, %v), want the slow answer", h.res.Content, h.err)
		}
		want := []provider.Message{provider.UserMessage("slow"), provider.AssistantMessage("the slow answer")}
		if diff := cmp.Diff(want, expert.History()); diff != "" {
			t.Errorf("history (-want +got):\n%s", diff)
		}
		if p.Calls() != 1 {
			t.Errorf("model calls = %d, want 1: the waiter must not reach the model", p.Calls())
		}
	})
}

// A cancelled call followed by a good one: the history holds only the
// good one.
func TestFromAgentCancelledCallLeavesNoTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.NewProvider(
			fake.Text("too late").After(time.Hour).For("expert"),
			fake.Text("the good answer").For("expert"),
		)
		expert := newReact(t, p, agent.WithName("expert"))
		sub := must(FromAgent("expert", "Answers questions.", expert))(t)

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := callTool(ctx, sub, "call_1", `{"task":"cancelled"}`)
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call's error = %v, want one wrapping context.Canceled", err)
		}

		res, err := callTool(context.Background(), sub, "call_2", `{"task":"good"}`)
		if err != nil || res.Content != "the good answer" {
			t.Fatalf("good call = (%q, %v)", res.Content, err)
		}
		want := []provider.Message{provider.UserMessage("good"), provider.AssistantMessage("the good answer")}
		if diff := cmp.Diff(want, expert.History()); diff != "" {
			t.Errorf("history (-want +got):\n%s", diff)
		}
	})
}

// A call that fails leaves the conversation exactly as it was, however
// it fails: also after a corrective retry whose first run had succeeded.
func TestFromAgentFailedCallLeavesConversation(t *testing.T) {
	lookup := tool.Must(tool.New("lookup", "Looks a word up.", func(_ context.Context, in struct {
		Word string `json:"word"`
	}) (string, error) {
		return "a word", nil
	}))
	tests := []struct {
		name    string
		replies []fake.Reply // after the first, good call
		wantErr func(error) bool
	}{
		{"model error", []fake.Reply{fake.Error(errors.New("model down"))},
			func(err error) bool { return errors.Is(err, ErrChildFailed) }},
		{"error after a tool call", []fake.Reply{fake.Call("lookup", `{"word":"x"}`), fake.Error(errors.New("model down"))},
			func(err error) bool { return errors.Is(err, ErrChildFailed) }},
		{"no JSON twice", []fake.Reply{fake.Text("no JSON here"), fake.Text("still none")},
			func(err error) bool { return errors.Is(err, ErrNoJSON) }},
		{"retry fails", []fake.Reply{fake.Text("no JSON here"), fake.Error(errors.New("model down"))},
			func(err error) bool { return errors.Is(err, ErrChildFailed) }},
		{"retry's provider panics", []fake.Reply{fake.Text("no JSON here"), fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
			panic("model adapter bug")
		})}, func(err error) bool { return errors.Is(err, agent.ErrProviderPanic) }},
		{"retry panics", []fake.Reply{fake.Text("no JSON here"), fake.Text("panic")},
			func(err error) bool { return errors.Is(err, tool.ErrPanic) }},
		{"empty reply", []fake.Reply{fake.Text("")},
			func(err error) bool { return errors.Is(err, agent.ErrEmptyReply) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replies := []fake.Reply{fake.Text(`{"status":"success","summary":"first"}`).For("expert")}
			for _, r := range tt.replies {
				replies = append(replies, r.For("expert"))
			}
			p := fake.NewProvider(replies...)
			expert := newReact(t, p, agent.WithName("expert"), agent.WithTools(lookup))
			sub := must(FromAgent("expert", "Answers questions.", panicOnAnswer{expert}, WithReport()))(t)

			if _, err := callTool(context.Background(), sub, "call_1", `{"task":"first"}`); err != nil {
				t.Fatal(err)
			}
			before := expert.History()
			_, err := callTool(context.Background(), sub, "call_2", `{"task":"second"}`)
			if !tt.wantErr(err) {
				t.Errorf("error = %v, not the kind wanted", err)
			}
			if !tool.IsCorrectable(err) {
				t.Errorf("error %v is not correctable: the parent's model should read it", err)
			}
			if diff := cmp.Diff(before, expert.History()); diff != "" {
				t.Errorf("history changed by the failed call (-before +after):\n%s", diff)
			}
			if err := conversation.Check(expert.History()); err != nil {
				t.Error(err)
			}
		})
	}
}

// Different resident tools run in parallel: each expert's model call
// waits until both are in.
func TestFromAgentDistinctToolsRunInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		arrived := 0
		both := make(chan struct{})
		barrier := fake.Respond(func(ctx context.Context, _ provider.Request) (provider.Response, error) {
			mu.Lock()
			if arrived++; arrived == 2 {
				close(both)
			}
			mu.Unlock()
			select {
			case <-both:
				return reply("together")
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			}
		})
		p := fake.NewProvider(barrier.For("a"), barrier.For("b"))
		subs := []*SubAgentTool{
			must(FromAgent("a", "Expert a.", newReact(t, p, agent.WithName("a"))))(t),
			must(FromAgent("b", "Expert b.", newReact(t, p, agent.WithName("b"))))(t),
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, len(subs))
		for i, s := range subs {
			wg.Go(func() { _, errs[i] = callTool(ctx, s, "call", `{"task":"meet"}`) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("tool %d: %v (the two experts did not run at the same time)", i, err)
			}
		}
	})
}

// WithRefuseWhenBusy refuses a call at once while another holds the
// turn; without it the caller waits (see the concurrency test).
func TestFromAgentRefuseWhenBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := fake.NewProvider(
			fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
				<-release
				return reply("first")
			}).For("expert"),
			fake.Text("third").For("expert"),
		)
		expert := newReact(t, p, agent.WithName("expert"))
		sub := must(FromAgent("expert", "Answers questions.", expert, WithRefuseWhenBusy()))(t)
		reg := must(tool.NewRegistry(sub))(t)

		done := make(chan error, 1)
		go func() {
			_, err := callTool(context.Background(), sub, "call_1", `{"task":"one"}`)
			done <- err
		}()
		synctest.Wait()

		_, err := callTool(context.Background(), sub, "call_2", `{"task":"two"}`)
		if !errors.Is(err, ErrBusy) || !tool.IsCorrectable(err) {
			t.Errorf("busy call's error = %v, want a correctable ErrBusy", err)
		}
		results, err := reg.Execute(context.Background(), []tool.Call{{ID: "call_3", Name: "expert", Arguments: []byte(`{"task":"two"}`)}})
		if err != nil || !results[0].IsError || !strings.Contains(results[0].Content, "busy") {
			t.Errorf("through a registry: (%+v, %v), want an error result saying busy", results[0], err)
		}

		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		res, err := callTool(context.Background(), sub, "call_4", `{"task":"three"}`)
		if err != nil || res.Content != "third" {
			t.Errorf("call after the turn ended = (%q, %v), want third", res.Content, err)
		}
	})
}

// FromAgent rejects a nil agent.
func TestFromAgentNil(t *testing.T) {
	if _, err := FromAgent("expert", "x", nil); err == nil {
		t.Error("FromAgent(nil agent) did not fail")
	}
}

// The tool itself serializes the calls, also for a resident that does
// not serialize its own runs.
func TestFromAgentSerializesAnyAgent(t *testing.T) {
	var inside, most atomic.Int32
	expert := agent.Func(func(context.Context, agent.Input) (agent.Output, error) {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		runtime.Gosched()
		inside.Add(-1)
		return agent.Output{Answer: "ok"}, nil
	})
	sub := must(FromAgent("expert", "Answers.", expert))(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := callTool(context.Background(), sub, fmt.Sprint("call_", i), `{"task":"q"}`); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d runs of the resident at once, want 1", most.Load())
	}
}

// panicOnAnswer is a resident that panics, after its run, when the answer
// is "panic". Its Checkpoint is the React's.
type panicOnAnswer struct{ *agent.React }

func (a panicOnAnswer) Run(ctx context.Context, in agent.Input) (agent.Output, error) {
	out, err := a.React.Run(ctx, in)
	if out.Answer == "panic" {
		panic("bug after the run")
	}
	return out, err
}
