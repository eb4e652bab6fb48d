package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// auditModel is the model of a lead and of its context forks (a request
// with a shared prefix is a fork's). The lead looks something up, then
// starts two forks at once, then answers; a fork calls lookup and delete,
// then answers. It names its calls as ids says and keeps every request.
type auditModel struct {
	ids   int
	fresh atomic.Int64

	mu       sync.Mutex
	requests []provider.Request
}

func (m *auditModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	task, step := "", 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if msg := req.Messages[i]; msg.Role == provider.RoleUser {
			task = msg.Content
			break
		} else if msg.Role == provider.RoleAssistant {
			step++
		}
	}
	m.mu.Lock()
	req.Messages = slices.Clone(req.Messages)
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	arg := func(v map[string]any) json.RawMessage { b, _ := json.Marshal(v); return b }
	var calls []provider.ToolCall
	switch fork := req.SharedPrefix > 0; {
	case !fork && step == 0:
		calls = []provider.ToolCall{{Name: "lookup", Arguments: arg(map[string]any{"q": "the sites"})}}
	case !fork && step == 1:
		calls = []provider.ToolCall{
			{Name: subagent.SpawnToolName, Arguments: arg(map[string]any{"task": auditTask(0)})},
			{Name: subagent.SpawnToolName, Arguments: arg(map[string]any{"task": auditTask(1)})},
		}
	case fork && step == 0:
		calls = []provider.ToolCall{
			{Name: "lookup", Arguments: arg(map[string]any{"q": task})},
			{Name: "delete", Arguments: arg(map[string]any{"path": task})},
		}
	default:
		return provider.Response{Message: provider.AssistantMessage(fmt.Sprintf("done after %d steps", step)), Usage: u}, nil
	}
	resumetest.NameCalls(m.ids, calls, &m.fresh)
	return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
}

func auditTask(i int) string { return fmt.Sprintf("audit site %d", i) }

// forkRequests returns, for each fork's task, the requests the model was
// sent for it, in order.
func (m *auditModel) forkRequests() map[string][]provider.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]provider.Request{}
	for _, r := range m.requests {
		if n := r.SharedPrefix; n > 0 && n < len(r.Messages) {
			task := r.Messages[n].Content
			out[task] = append(out[task], r)
		}
	}
	return out
}

func (m *auditModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// auditTree is a lead with lookup and delete (approval first, when gated)
// and a spawn tool of context forks, all on p.
func auditTree(t *testing.T, p provider.Provider, gated bool) (lead *agent.React, lookup, del *counted) {
	t.Helper()
	lookup, del = &counted{name: "lookup"}, &counted{name: "delete"}
	var d tool.Tool = del
	if gated {
		d = tool.RequireApproval(del, "deletes data", 0)
	}
	reg, err := tool.NewRegistry(lookup, d)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subagent.NewSpawner(p, reg, subagent.WithContextForks())
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	lead, err = agent.NewReact(p, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithSystemPrompt("You audit sites."))
	if err != nil {
		t.Fatal(err)
	}
	return lead, lookup, del
}

// forkPrefix is what a fork's request shares with the other requests of
// its fork, as bytes: system prompt, tools, model, cache key and the
// shared messages, then the task.
func forkPrefix(t *testing.T, r provider.Request) string {
	t.Helper()
	n := r.SharedPrefix
	if n <= 0 || n >= len(r.Messages) {
		t.Fatalf("a request of a fork shares %d of its %d messages: no context fork's", n, len(r.Messages))
	}
	b, err := json.Marshal(provider.Request{System: r.System, Tools: r.Tools, Model: r.Model, CacheKey: r.CacheKey, SharedPrefix: n, Messages: r.Messages[:n+1]})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A journaled turn whose context forks each stop for a person's approval
// resumes with the forks' requests still starting with the prefix they
// sent before the pause, byte for byte — the provider's cache still holds
// it — whatever ids the model gives its calls; and nothing runs twice.
func TestResumedContextForkKeepsItsPrefix(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			m := &auditModel{ids: ids}
			lead, lookup, del := auditTree(t, m, true)
			st := newStore(t)
			ctx := context.Background()
			runTurn := func(ctx context.Context) (agent.Output, error) {
				j, err := st.Journal(ctx, "turn-1")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "audit every site"})
			}
			_, err := runTurn(ctx)
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 2 {
				t.Fatalf("first run: want two approvals asked, got %v", err)
			}
			before := m.forkRequests()
			if lookup.runs() != 3 || del.runs() != 0 || m.count() != 4 || len(before) != 2 {
				t.Fatalf("before the answers: lookup ran %d times (want 3), delete %d (want 0); %d model calls (want 4), %d forks (want 2)",
					lookup.runs(), del.runs(), m.count(), len(before))
			}
			var answers []tool.Answer
			for _, it := range in.Interrupts {
				answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			}
			rctx, err := tool.Resume(ctx, in, answers...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := runTurn(rctx)
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			if out.Answer != "done after 2 steps" {
				t.Errorf("answer %q", out.Answer)
			}
			// The lead: 3 calls; each fork: 2. Lookup ran once for the
			// lead and once a fork, delete once a fork, after its approval.
			if lookup.runs() != 3 || del.runs() != 2 || m.count() != 7 {
				t.Errorf("after the answers: lookup ran %d times (want 3), delete %d (want 2); %d model calls (want 7)", lookup.runs(), del.runs(), m.count())
			}
			after := m.forkRequests()
			for i := range 2 {
				task := auditTask(i)
				if len(before[task]) != 1 || len(after[task]) != 2 {
					t.Fatalf("fork %q: %d requests before the pause (want 1), %d in all (want 2)", task, len(before[task]), len(after[task]))
				}
				first, resumed := forkPrefix(t, before[task][0]), forkPrefix(t, after[task][1])
				if first != resumed {
					t.Errorf("fork %q: the resumed request's prefix is not the one sent before the pause:\nbefore  %s\nresumed %s", task, first, resumed)
				}
			}
		})
	}
}

// A recorded run of context forks replays from its cassette with no model
// call, and each replayed fork asks with the prefix the recorded one sent:
// byte for byte when the model named its calls, and but for the ids the
// loop draws for calls the model left unnamed (which a cassette numbers);
// the tools run as often as when it was recorded.
func TestReplayedContextForkKeepsItsPrefix(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			live := &auditModel{ids: ids}
			rec := cassette.Record(live)
			lead, lookup, del := auditTree(t, rec, false)
			if _, err := lead.Run(t.Context(), agent.Input{Text: "audit every site"}); err != nil {
				t.Fatal(err)
			}
			c, err := rec.Cassette()
			if err != nil {
				t.Fatal(err)
			}
			if lookup.runs() != 3 || del.runs() != 2 || live.count() != 7 {
				t.Fatalf("recording: lookup ran %d times, delete %d, %d model calls; want 3, 2 and 7", lookup.runs(), del.runs(), live.count())
			}

			replay := cassette.Replay(c)
			seen := &auditModel{} // what the replayed run asked, answered from the cassette
			lead, lookup, del = auditTree(t, provider.Func(func(ctx context.Context, req provider.Request) (provider.Response, error) {
				seen.mu.Lock()
				r := req
				r.Messages = slices.Clone(req.Messages)
				seen.requests = append(seen.requests, r)
				seen.mu.Unlock()
				return replay.Complete(ctx, req)
			}), false)
			if _, err := lead.Run(t.Context(), agent.Input{Text: "audit every site"}); err != nil {
				t.Fatal(err)
			}
			if replay.LiveCalls() != 0 || len(replay.Misses()) != 0 || live.count() != 7 {
				t.Fatalf("replay: %d live calls, misses %v, %d calls of the model; want none", replay.LiveCalls(), replay.Misses(), live.count()-7)
			}
			if lookup.runs() != 3 || del.runs() != 2 || seen.count() != 7 {
				t.Errorf("replay: lookup ran %d times, delete %d, %d model calls asked; want 3, 2 and 7", lookup.runs(), del.runs(), seen.count())
			}
			recorded, replayed := live.forkRequests(), seen.forkRequests()
			for i := range 2 {
				task := auditTask(i)
				if len(recorded[task]) != 2 || len(replayed[task]) != 2 {
					t.Fatalf("fork %q: %d requests recorded, %d replayed; want 2 each", task, len(recorded[task]), len(replayed[task]))
				}
				for step := range 2 {
					a, b := forkPrefix(t, recorded[task][step]), forkPrefix(t, replayed[task][step])
					if ids == resumetest.IDsNone {
						a, b = numberIDs(a), numberIDs(b)
					}
					if a != b {
						t.Errorf("fork %q, step %d: the replayed request's prefix is not the recorded one's:\nrecorded %s\nreplayed %s", task, step, a, b)
					}
				}
			}
		})
	}
}

// drawnID is a tool call id the loop draws for a call the model left
// unnamed.
var drawnID = regexp.MustCompile(`"call_[0-9a-z]{13}"`)

// numberIDs replaces the tool call ids the loop drew by their order of
// appearance.
func numberIDs(s string) string {
	seen := map[string]int{}
	return drawnID.ReplaceAllStringFunc(s, func(id string) string {
		n, ok := seen[id]
		if !ok {
			n = len(seen)
			seen[id] = n
		}
		return fmt.Sprintf(`"#%d"`, n)
	})
}
