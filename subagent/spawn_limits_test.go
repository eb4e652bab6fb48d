package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// TestSpawnMaxSpawnsPerRun checks the spawn limit: counted per parent run
// (a second run starts again; two runs sharing the spawner count apart),
// with invalid calls not counted.
func TestSpawnMaxSpawnsPerRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const limitMsg = "subagent: spawn limit reached: this run has started its 2 sub-agents"

	t.Run("sequential turns, then a second run", func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"a"}`).For("lead"),
			spawns(`{"task":""}`).For("lead"), // invalid: not counted
			spawns(`{"task":"b"}`).For("lead"),
			spawns(`{"task":"c"}`).For("lead"),
			fake.Text("first run done").For("lead"),
			spawns(`{"task":"d"}`).For("lead"),
			fake.Text("second run done").For("lead"),
			fake.Text("A").For(subagent.DefaultForkName),
			fake.Text("B").For(subagent.DefaultForkName),
			fake.Text("D").For(subagent.DefaultForkName),
		)
		reg, sp := spied(t, p, []subagent.SpawnOption{subagent.WithMaxSpawns(2)})
		a := lead(t, p, reg)
		out, err := a.Run(t.Context(), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		got := toolResults(out.Messages)
		if len(got) != 4 || got[0] != "A" || got[2] != "B" || !strings.Contains(got[3], limitMsg) {
			t.Errorf("first run's tool results: %q", got)
		}
		if n := sp.count(subagent.ErrMaxSpawns); n != 1 {
			t.Errorf("%d correctable ErrMaxSpawns, want 1", n)
		}
		out, err = a.Run(t.Context(), agent.Input{Text: "again"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"D"}, toolResults(out.Messages)); diff != "" {
			t.Errorf("second run's tool results (-want +got):\n%s", diff)
		}
	})

	t.Run("default limit in one turn", func(t *testing.T) {
		args := make([]string, subagent.DefaultMaxSpawns+1)
		for i := range args {
			args[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
		}
		p := fake.NewProvider(spawns(args...).For("lead"), fake.Text("ok").For(subagent.DefaultForkName), fake.Text("done").For("lead")).Loop()
		reg, _ := setup(t, p, false, nil)
		var rec recorder
		out, err := lead(t, p, reg).Run(event.WithSink(t.Context(), &rec), agent.Input{Text: "go"})
		if err != nil {
			t.Fatal(err)
		}
		// The refusal is an event and a count, not only what the model reads.
		var refused []event.Event
		for _, e := range rec.of(event.Custom) {
			if e.Name != agent.UsageEvent {
				refused = append(refused, e)
			}
		}
		if out.Refused != 1 || len(refused) != 1 || refused[0].Name != subagent.RefusedEvent {
			t.Errorf("Output.Refused %d, refusal events %+v; want 1 and one %s event", out.Refused, refused, subagent.RefusedEvent)
		} else {
			var v struct{ Reason, ToolCallID, Name, Message string }
			if err := json.Unmarshal(refused[0].Value, &v); err != nil || v.Reason != "max_spawns" || v.ToolCallID == "" || v.Name != subagent.DefaultForkName || !strings.Contains(v.Message, "spawn limit reached") {
				t.Errorf("refusal value %s (%v); want reason max_spawns, the call's id, the fork's name and the message", refused[0].Value, err)
			}
		}
		var ok, limited int
		for _, c := range toolResults(out.Messages) {
			switch {
			case c == "ok":
				ok++
			case strings.Contains(c, "subagent: spawn limit reached: this run has started its 8 sub-agents"):
				limited++
			default:
				t.Errorf("unexpected result %q", c)
			}
		}
		if ok != 8 || limited != 1 {
			t.Errorf("%d spawns ran and %d were refused, want 8 and 1", ok, limited)
		}
	})

	t.Run("two runs sharing the spawner", func(t *testing.T) {
		p := fake.NewProvider(
			spawns(`{"task":"a"}`, `{"task":"b"}`).For("lead1"),
			fake.Text("done").For("lead1"),
			spawns(`{"task":"a"}`, `{"task":"b"}`).For("lead2"),
			fake.Text("done").For("lead2"),
			fake.Text("ok").For(subagent.DefaultForkName),
		).Loop()
		reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithMaxSpawns(2)})
		var wg sync.WaitGroup
		for _, name := range []string{"lead1", "lead2"} {
			a := lead(t, p, reg, agent.WithName(name))
			wg.Go(func() {
				out, err := a.Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Error(err)
					return
				}
				if diff := cmp.Diff([]string{"ok", "ok"}, toolResults(out.Messages)); diff != "" {
					t.Errorf("%s's tool results (-want +got):\n%s", name, diff)
				}
			})
		}
		wg.Wait()
	})
}

// TestSpawnChildBudget checks the token limit a fork gets: what the parent
// has left, or WithChildTokenBudget if less, observed by a tool the fork
// calls.
func TestSpawnChildBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name        string
		parentLimit int64
		parentSpent int64 // by the parent's first model call
		childBudget int64 // 0 for no WithChildTokenBudget
		want        string
	}{
		// The parent keeps back what its next call reads (the 3,000 of
		// its first, and what was added since, and the 64 of the note
		// that makes it the wrap-up), and splits the rest in two: a share
		// for the child, one for its own reply.
		{"what the parent has left", 10000, 3000, 0, "1968"},
		{"the per-child budget when less", 10000, 3000, 1500, "1500"},
		{"what is left when less than the budget", 10000, 2000, 5000, "2968"},
		{"the per-child budget of an unlimited parent", 0, 3000, 2500, "2500"},
		{"unlimited", 0, 3000, 0, "unlimited"},
		// What is left pays for the parent's next call's input only.
		{"nothing left", 10000, 5000, 0, "error"},
		{"nothing left, with a budget", 10000, 5000, 1000, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr := &probe{}
			p := fake.NewProvider(
				spawns(`{"task":"t"}`).For("lead").WithUsage(usage(tc.parentSpent)),
				fake.Call("probe", `{}`).For(subagent.DefaultForkName).WithUsage(provider.Usage{Requests: 1}),
				fake.Text("ok").For(subagent.DefaultForkName).WithUsage(provider.Usage{Requests: 1}),
				fake.Text("done").For("lead").WithUsage(provider.Usage{Requests: 1}),
			)
			var opts []subagent.SpawnOption
			if tc.childBudget > 0 {
				opts = append(opts, subagent.WithChildTokenBudget(tc.childBudget))
			}
			reg, sp := spied(t, p, opts, pr.tool())
			out, err := lead(t, p, reg, agent.WithTokenLimit(tc.parentLimit)).Run(t.Context(), agent.Input{Text: "go"})
			if tc.want == "error" {
				if !errors.Is(err, agent.ErrUsageLimit) {
					t.Errorf("the parent ended with %v, want ErrUsageLimit: no room is left for its reply", err)
				}
				got := toolResults(out.Messages)
				if len(got) != 1 || !strings.Contains(got[0], "subagent: no token budget left") || sp.count(subagent.ErrNoBudget) != 1 {
					t.Errorf("tool results %q, want ErrNoBudget", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.want}, pr.sorted()); diff != "" {
				t.Errorf("the fork's tokens left (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSpawnBudgetNote checks that a fork near the end of its budget is told
// so in a note after the conversation, leaving the system prompt (the start
// of the cached prefix) as it was, and can hand back a partial result.
func TestSpawnBudgetNote(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	p := fake.NewProvider(
		spawns(`{"task":"survey the field"}`).For("lead").WithUsage(usage(300)),
		fake.Call("lookup", `{}`).For(fork).WithUsage(usage(2000)),
		fake.Text(`{"status":"partial","summary":"surveyed half"}`).For(fork).WithUsage(usage(50)),
		fake.Text("done").For("lead").WithUsage(usage(1)),
	)
	reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithReport()})
	// The fork's share: 9,700 left, less the 300 the lead's next call
	// reads and the 64 of the note that makes it the wrap-up, in two
	// (the fork's and the lead's reply's).
	out, err := lead(t, p, reg, agent.WithTokenLimit(10000)).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`{"status":"partial","summary":"surveyed half"}`}, toolResults(out.Messages)); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	reqs := p.RequestsFor(fork)
	for _, m := range reqs[0].Messages {
		if strings.Contains(m.Content, "Budget note") {
			t.Errorf("first request already has a budget note:\n%s", m.Content)
		}
	}
	if reqs[1].System != reqs[0].System {
		t.Errorf("the budget note changed the system prompt:\n%s\nwas\n%s", reqs[1].System, reqs[0].System)
	}
	mustContain(t, reqs[1].System, subagent.ReportPrompt())
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != provider.RoleUser {
		t.Errorf("the note travels as a %s message, want user", last.Role)
	}
	mustContain(t, last.Content,
		`Budget note: you have used 2000 of your 4668 tokens, and another step would pass the limit. This is your last reply`, `status "partial"`)
	if len(reqs[1].Tools) != 0 {
		t.Errorf("the wrap-up turn offered %d tools, want none", len(reqs[1].Tools))
	}
	if diff := cmp.Diff(reqs[0].Messages, reqs[1].Messages[:len(reqs[0].Messages)]); diff != "" {
		t.Errorf("the second request does not repeat the first's conversation (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(provider.Usage{InputTokens: 2050, Requests: 2}, out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
}

// TestSpawnChildOverBudget checks a fork whose reply passes its limit: an
// answer is kept; a reply that asks for tools ends the child, which answers
// partially with what it said; what it spent comes back either way.
func TestSpawnChildOverBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("an answer that passes it is kept", func(t *testing.T) {
		p := fake.NewProvider(fake.Text("a long answer").For(subagent.DefaultForkName).WithUsage(usage(1500)))
		reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithChildTokenBudget(1000)})
		res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].IsError || res[0].Content != "a long answer" {
			t.Errorf("result %+v, want the answer", res[0])
		}
		if diff := cmp.Diff(usage(1500), res[0].Usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
	})
	t.Run("cut short, it answers partially with what it said", func(t *testing.T) {
		p := fake.NewProvider(fake.Respond(func(context.Context, provider.Request) (provider.Response, error) {
			call := provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)}
			return provider.Response{Message: provider.AssistantMessage("Half of it: X is 4.", call), Usage: usage(1500)}, nil
		}).For(subagent.DefaultForkName))
		reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithChildTokenBudget(1000), subagent.WithReport()})
		res, err := reg.Execute(t.Context(), []tool.Call{{ID: "c1", Name: subagent.SpawnToolName, Arguments: json.RawMessage(`{"task":"t"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := res[0].Value.(subagent.Report)
		if res[0].IsError || !ok || r.Status != subagent.ReportPartial || !strings.Contains(r.Summary, "Half of it: X is 4.") {
			t.Errorf("result %+v, want a partial Report with what the child said", res[0])
		}
		if diff := cmp.Diff(usage(1500), res[0].Usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
	})
}

// TestSpawnBudgetIsReserved checks that forks running side by side are not
// promised the same tokens: each child's budget, an equal share of what the
// parent had left when the turn began (or WithChildTokenBudget when less),
// is set aside from what the parent has left while it runs.
func TestSpawnBudgetIsReserved(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name        string
		budget      int64
		concurrency int
		childSpent  int64
		want        []string // the children's limits, sorted
		wantNoBudge int      // spawns refused for want of tokens
	}{
		// 9,000 left, less the 1,000 the lead's next call reads and the
		// 64 of the note that makes it the wrap-up, for three calls and
		// the lead's reply: a share of 1,984 each.
		{"side by side", 0, 3, 0, []string{"1984", "1984", "1984"}, 0},
		{"side by side, the per-child budget when less", 1500, 3, 0, []string{"1500", "1500", "1500"}, 0},
		// One at a time, each spending 1,900 of its share: the shares
		// were set aside before the first started, so the third still
		// has its own.
		{"one at a time", 0, 1, 1900, []string{"1984", "1984", "1984"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fork := subagent.DefaultForkName
				pr := &probe{}
				p := fake.NewProvider(
					spawns(`{"task":"a"}`, `{"task":"b"}`, `{"task":"c"}`).For("lead").WithUsage(usage(1000)),
					fake.Text("done").For("lead").WithUsage(provider.Usage{Requests: 1}),
				)
				// A child calls probe, then answers; every call takes a
				// second, so every child takes its budget before the
				// first answers.
				child := fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
					if len(req.Messages) == 1 {
						return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{Name: "probe", Arguments: json.RawMessage(`{}`)}),
							Usage: provider.Usage{Requests: 1}}, nil
					}
					return provider.Response{Message: provider.AssistantMessage("ok"), Usage: usage(tc.childSpent)}, nil
				}).For(fork).After(time.Second)
				for range 2 * (3 - tc.wantNoBudge) {
					p.Add(child)
				}
				opts := []subagent.SpawnOption{subagent.WithSpawnConcurrency(tc.concurrency)}
				if tc.budget > 0 {
					opts = append(opts, subagent.WithChildTokenBudget(tc.budget))
				}
				reg, _ := setup(t, p, false, opts, pr.tool())
				out, err := lead(t, p, reg, agent.WithTokenLimit(10000)).Run(t.Context(), agent.Input{Text: "go"})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, pr.sorted()); diff != "" {
					t.Errorf("the children's limits (-want +got):\n%s", diff)
				}
				refused := 0
				for _, c := range toolResults(out.Messages) {
					if strings.Contains(c, "subagent: no token budget left") {
						refused++
					}
				}
				if refused != tc.wantNoBudge {
					t.Errorf("%d spawns refused for want of tokens, want %d", refused, tc.wantNoBudge)
				}
			})
		})
	}
}

// TestSpawnUsageFoldsOnce checks exact usage sums: every child's usage,
// failed, retried and cancelled ones included, reaches the parent once.
func TestSpawnUsageFoldsOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fork := subagent.DefaultForkName
	// Each child's task names what it does; a Respond reply routes on it.
	byTask := func(ctx context.Context, req provider.Request) (provider.Response, error) {
		task := req.Messages[0].Content
		n := len(req.Messages)
		text := func(s string, u provider.Usage) (provider.Response, error) {
			return provider.Response{Message: provider.AssistantMessage(s), Usage: u}, nil
		}
		switch {
		case strings.HasPrefix(task, "ok"):
			return text(`{"n":1}`, usage(10))
		case strings.HasPrefix(task, "retry") && !strings.Contains(task, "rejected"):
			return text("no JSON here", usage(100))
		case strings.HasPrefix(task, "retry"):
			return text(`{"n":2}`, usage(1000))
		case strings.HasPrefix(task, "fail") && n == 1:
			return provider.Response{Message: provider.AssistantMessage("", provider.ToolCall{ID: "l1", Name: "lookup", Arguments: json.RawMessage(`{}`)}), Usage: usage(10000)}, nil
		case strings.HasPrefix(task, "fail"):
			return provider.Response{}, errors.New("model crashed")
		}
		return provider.Response{}, fmt.Errorf("unexpected task %q", task)
	}
	p := fake.NewProvider(
		spawns(
			`{"task":"ok","output_schema":`+numberSchema+`}`,
			`{"task":"retry","output_schema":`+numberSchema+`}`,
			`{"task":"fail"}`,
			`{"task":""}`,
		).For("lead").WithUsage(usage(1)),
		fake.Text("done").For("lead").WithUsage(usage(2)),
	)
	for range 5 {
		p.Add(fake.Respond(byTask).For(fork))
	}
	reg, _ := setup(t, p, false, nil)
	out, err := lead(t, p, reg).Run(t.Context(), agent.Input{Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	got := toolResults(out.Messages)
	if len(got) != 4 || got[0] != `{"n":1}` || got[1] != `{"n":2}` ||
		!strings.Contains(got[2], "model crashed") || !strings.Contains(got[3], "at /task: minLength") {
		t.Errorf("tool results %q", got)
	}
	if diff := cmp.Diff(provider.Usage{InputTokens: 1 + 2, Requests: 2}, out.Usage); diff != "" {
		t.Errorf("parent usage (-want +got):\n%s", diff)
	}
	want := provider.Usage{InputTokens: 10 + 100 + 1000 + 10000, Requests: 4}
	if diff := cmp.Diff(want, out.ChildUsage); diff != "" {
		t.Errorf("child usage (-want +got):\n%s", diff)
	}
	if p.Remaining() != 0 {
		t.Errorf("%d replies unused", p.Remaining())
	}
}

// A fork whose answer passes its budget and fails the report check has
// no budget left for the corrective run: its partial result keeps what it
// answered.
func TestForkAnswerKeptWhenNoCorrectionIsLeft(t *testing.T) {
	p := fake.NewProvider(
		fake.Call(subagent.SpawnToolName, `{"task":"a"}`).For("lead"),
		fake.Text("done").For("lead"),
		fake.Text("THE FINDINGS: 42").WithUsage(provider.Usage{InputTokens: 500_000, OutputTokens: 10, Requests: 1}).For(subagent.DefaultForkName),
	).DontRecord()
	reg, _ := setup(t, p, false, []subagent.SpawnOption{subagent.WithReport()})
	// The child's input counted far more than its estimate: the lead has
	// nothing left to answer with, and its Output keeps the result.
	out, err := lead(t, p, reg, agent.WithTokenLimit(100_000)).Run(t.Context(), agent.Input{Text: "go"})
	if !errors.Is(err, agent.ErrUsageLimit) {
		t.Fatalf("the lead ended with %v, want ErrUsageLimit", err)
	}
	for _, c := range toolResults(out.Messages) {
		if !strings.Contains(c, "42") {
			t.Errorf("the child's answer is lost from its result: %q", c)
		}
	}
}

// denyTask is a rule that denies handing a sub-agent the task it names.
type denyTask string

func (d denyTask) Name() string { return "no-" + string(d) }

func (d denyTask) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point == policy.BeforeDelegation && c.Task == string(d) {
		return policy.Denied(string(d) + " is not handed off")
	}
	return policy.Decision{}
}

// A spawn whose hand-off the policy denies starts no child, and so does
// not count against WithMaxSpawns, as a call the policy denies before it
// reaches the spawn tool is not counted: of three spawns under a limit of
// two, the first denied, the other two run, in the foreground or as jobs
// (a job's hand-off is checked before it starts: the spawning call reads
// the denial, not a receipt).
func TestDeniedHandOffDoesNotCountAgainstMaxSpawns(t *testing.T) {
	for _, background := range []bool{false, true} {
		t.Run(fmt.Sprint("background=", background), func(t *testing.T) {
			bg := ""
			if background {
				bg = `,"background":true`
			}
			p := fake.NewProvider(
				spawns(`{"task":"a"`+bg+`}`).For("lead"),
				spawns(`{"task":"b"`+bg+`}`).For("lead"),
				spawns(`{"task":"c"`+bg+`}`).For("lead"),
				fake.Text("done").For("lead"),
				fake.Text("ok").For(subagent.DefaultForkName),
			).Loop()
			opts := []subagent.SpawnOption{subagent.WithMaxSpawns(2)}
			if background {
				opts = append(opts, subagent.WithBackground())
			}
			reg, sp := setup(t, p, false, opts)
			if background {
				if err := reg.Register(sp.JobsTool()); err != nil {
					t.Fatal(err)
				}
			}
			pol, err := policy.New(denyTask("a"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := lead(t, p, reg, agent.WithPolicy(pol)).Run(t.Context(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			got := toolResults(out.Messages)
			if len(got) != 3 {
				t.Fatalf("tool results %q, want one a call", got)
			}
			if denied := got[0]; !strings.Contains(denied, "a is not handed off") {
				t.Errorf("the denied spawn ended %q, want the denial", denied)
			}
			for i, r := range got[1:] {
				if strings.Contains(r, "spawn limit reached") {
					t.Errorf("spawn %d was refused (%q): the denied one was counted", i+1, r)
				}
			}
			if n := len(out.Denials); n != 1 {
				t.Errorf("%d denials, want the hand-off's: %v", n, out.Denials)
			}
		})
	}
}

// denyOnce denies the hand-off of the task it names and closes denied.
type denyOnce struct {
	task   string
	once   sync.Once
	denied chan struct{}
}

func (d *denyOnce) Name() string { return "no-" + d.task }

func (d *denyOnce) Decide(_ context.Context, c *policy.Check) policy.Decision {
	if c.Point == policy.BeforeDelegation && c.Task == d.task {
		d.once.Do(func() { close(d.denied) })
		return policy.Denied(d.task + " is not handed off")
	}
	return policy.Decision{}
}

// A thread's job started again after a restart was counted by the run
// that first started it, not by the run it restarts in: when the policy
// refuses its hand-off there, that run's count of spawns is left as it
// was, so that the run still starts no more than WithMaxSpawns.
func TestRestartedJobRefusedDoesNotFreeASpawn(t *testing.T) {
	forEachKept(t, func(t *testing.T, w *keptWorld) {
		ctx := agent.WithOwner(agent.WithThread(context.Background(), "t1"), "ann")
		p := w.start(subagent.WithMaxSpawns(1))
		p.run(t, ctx, "cmd start")
		select {
		case <-w.inDig:
		case <-time.After(30 * time.Second):
			t.Fatal("the job never reached its second step")
		}
		p.stop(t)

		rule := &denyOnce{task: "dig", denied: make(chan struct{})}
		pol, err := policy.New(rule)
		if err != nil {
			t.Fatal(err)
		}
		w.leadOpts, w.ready = []agent.Option{agent.WithPolicy(pol)}, rule.denied
		p = w.start(subagent.WithMaxSpawns(1))
		defer p.stop(t)
		defer close(w.dig)
		out := p.run(t, ctx, "cmd start2")
		got := toolResults(out.Messages)
		refused := 0
		for _, r := range got {
			if strings.Contains(r, "spawn limit reached") {
				refused++
			}
		}
		if refused != 1 {
			t.Errorf("of two spawns under WithMaxSpawns(1), %d were refused, want 1 (the restarted job's refusal freed a spawn): %q", refused, got)
		}
	})
}
