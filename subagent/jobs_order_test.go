package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Four messages sent to one job in one step reach it in the order the
// model gave the sends, numbered so, and the turn run again from its
// journal numbers them the same: before, the sends raced and were
// delivered and numbered in the order they won.
func TestSendsToOneJobInOneStepKeepTheirOrder(t *testing.T) {
	texts := []string{"first", "second", "third", "fourth"}
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			var n atomic.Int64
			var mu sync.Mutex
			var childGot []string
			sent := make(chan struct{})
			var once sync.Once
			model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
				k := n.Add(1)
				reply := func(content string, calls ...provider.ToolCall) (provider.Response, error) {
					for i := range calls {
						calls[i].ID = mode.id(k, i)
					}
					return provider.Response{Message: provider.AssistantMessage(content, calls...), Usage: usage(1)}, nil
				}
				if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
					if len(toolResults(req.Messages)) == 0 {
						return reply("", provider.ToolCall{Name: "hold", Arguments: json.RawMessage(`{}`)})
					}
					var got []string
					for _, m := range inbound(req) {
						for _, sm := range regexp.MustCompile(`from the agent that started you:\n(\w+)`).FindAllStringSubmatch(m, -1) {
							got = append(got, sm[1])
						}
					}
					mu.Lock()
					childGot = got
					mu.Unlock()
					return reply(strings.Join(got, ","))
				}
				jobs := withKey(req.Messages, "job_id")
				switch {
				case len(jobs) == 0:
					return reply("", spawn(`{"task":"listen","background":true}`))
				case len(withKey(req.Messages, "message_id")) == 0:
					var calls []provider.ToolCall
					for _, text := range texts {
						calls = append(calls, provider.ToolCall{Name: subagent.JobsToolName,
							Arguments: json.RawMessage(fmt.Sprintf(`{"action":"send","job_id":%q,"message":%q}`, jobs[0]["job_id"], text))})
					}
					return reply("", calls...)
				case !slices.ContainsFunc(toolResults(req.Messages), func(s string) bool { return !strings.HasPrefix(s, "{") }):
					once.Do(func() { close(sent) })
					return reply("", provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":600}`)})
				}
				rs := toolResults(req.Messages)
				return reply(rs[len(rs)-1])
			})
			hold := tool.Func{Def: tool.Definition{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`)},
				Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
					select {
					case <-sent: // every send of the step has been made
					case <-ctx.Done():
						return tool.Result{}, ctx.Err()
					}
					return tool.Result{Content: "held"}, nil
				}}
			reg, err := tool.NewRegistry(hold)
			if err != nil {
				t.Fatal(err)
			}
			s, err := subagent.NewSpawner(model, reg, subagent.WithBackground())
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Register(s); err != nil {
				t.Fatal(err)
			}
			if err := reg.Register(s.JobsTool()); err != nil {
				t.Fatal(err)
			}
			want := strings.Join(texts, ",")
			for run := range 2 { // the second run replays the first from the journal
				j, err := st.Journal(t.Context(), "ordered-sends")
				if err != nil {
					t.Fatal(err)
				}
				out, err := lead(t, model, reg).Run(agent.WithJournal(t.Context(), j), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				if out.Answer != want {
					t.Errorf("run %d: the child read %q, want %q", run, out.Answer, want)
				}
				receipts := withKey(out.Messages, "message_id")
				if len(receipts) != len(texts) {
					t.Fatalf("run %d: %d receipts, want %d", run, len(receipts), len(texts))
				}
				for i, r := range receipts {
					if r["seq"] != float64(i+1) {
						t.Errorf("run %d: send %d (%s) was numbered %v, want %d", run, i, texts[i], r["seq"], i+1)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if got := strings.Join(childGot, ","); got != want {
				t.Errorf("the child's conversation holds %q, want %q", got, want)
			}
		})
	}
}

// A wait that finds two jobs waiting for a person and one that answered
// suspends the parent with both questions at once, and counts what all
// three spent; the answered one stays to be collected by the wait run
// again, which hands the parent all three. Before, the wait suspended
// with the first question alone and dropped what the jobs after it
// spent, and the answered job's result with it.
func TestWaitSuspendsWithEveryQuestionAndLosesNoSpending(t *testing.T) {
	for _, mode := range callIDModes {
		t.Run(mode.name, func(t *testing.T) {
			st := newStore(t)
			var n atomic.Int64
			var billedMu sync.Mutex
			var billed provider.Usage
			var published atomic.Int64
			task := regexp.MustCompile(`(ask|answer) (\w+)`)
			model := provider.Func(func(_ context.Context, req provider.Request) (provider.Response, error) {
				k := n.Add(1)
				reply := func(content string, calls ...provider.ToolCall) (provider.Response, error) {
					for i := range calls {
						calls[i].ID = mode.id(k, i)
					}
					u := provider.Usage{InputTokens: 10 + k, Requests: 1}
					billedMu.Lock()
					billed = billed.Add(u)
					billedMu.Unlock()
					return provider.Response{Message: provider.AssistantMessage(content, calls...), Usage: u}, nil
				}
				if strings.HasPrefix(req.System, subagent.DefaultForkPrompt[:20]) {
					m := task.FindStringSubmatch(firstUser(req))
					if m[1] == "ask" && len(toolResults(req.Messages)) == 0 {
						return reply("", provider.ToolCall{Name: "publish", Arguments: json.RawMessage(`{"what":"` + m[2] + `"}`)})
					}
					return reply("done " + m[2])
				}
				switch rs := toolResults(req.Messages); {
				case len(rs) == 0:
					return reply("", spawn(`{"task":"ask a","background":true}`), spawn(`{"task":"answer b","background":true}`), spawn(`{"task":"ask c","background":true}`))
				case len(rs) == 3:
					return reply("", provider.ToolCall{Name: subagent.JobsToolName, Arguments: json.RawMessage(`{"action":"wait","timeout_seconds":600}`)})
				default:
					done := regexp.MustCompile(`done \w`).FindAllString(rs[len(rs)-1], -1)
					slices.Sort(done) // the jobs started at once; the wait lists them as they started
					return reply(strings.Join(done, ", "))
				}
			})
			publish, err := tool.New("publish", "Publishes.", func(_ context.Context, in struct {
				What string `json:"what"`
			}) (string, error) {
				published.Add(1)
				return "published " + in.What, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tool.NewRegistry(tool.RequireApproval(publish, "", 0))
			if err != nil {
				t.Fatal(err)
			}
			s, err := subagent.NewSpawner(model, reg, subagent.WithBackground())
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Register(s); err != nil {
				t.Fatal(err)
			}
			if err := reg.Register(s.JobsTool()); err != nil {
				t.Fatal(err)
			}
			runTurn := func(ctx context.Context) (agent.Output, error) {
				j, err := st.Journal(ctx, "two-questions")
				if err != nil {
					t.Fatal(err)
				}
				return lead(t, model, reg).Run(agent.WithJournal(ctx, j), agent.Input{Text: "go"})
			}
			out, err := runTurn(t.Context())
			var in *tool.Interrupted
			if !errors.As(err, &in) {
				t.Fatalf("the first run ended with %v, want it suspended", err)
			}
			if len(in.Interrupts) != 2 {
				t.Errorf("the run asked %d questions, want both jobs' at once: %+v", len(in.Interrupts), in.Interrupts)
			}
			billedMu.Lock()
			if got := out.TotalUsage(); got != billed {
				t.Errorf("the suspended run reports %+v spent, the model billed %+v", got, billed)
			}
			billedMu.Unlock()
			var answers []tool.Answer
			for _, it := range in.Interrupts {
				answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			}
			ctx, err := tool.Resume(t.Context(), in, answers...)
			if err != nil {
				t.Fatal(err)
			}
			out, err = runTurn(ctx)
			if err != nil {
				t.Fatalf("the resumed run: %v", err)
			}
			if out.Answer != "done a, done b, done c" {
				t.Errorf("the lead answered %q, want every job's result", out.Answer)
			}
			if got := published.Load(); got != 2 {
				t.Errorf("publish ran %d times, want 2", got)
			}
			billedMu.Lock()
			if got := out.TotalUsage(); got != billed {
				t.Errorf("the turn reports %+v spent, the model billed %+v", got, billed)
			}
			billedMu.Unlock()
		})
	}
}

// firstUser returns the first user message of req: a child's task.
func firstUser(req provider.Request) string {
	for _, m := range req.Messages {
		if m.Role == provider.RoleUser {
			return m.Content
		}
	}
	return ""
}
