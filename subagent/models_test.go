package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/internal/eventcheck"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// menuPrices prices the two models of the menu tests: cheap-1 at $1 and
// $5 a million input and output tokens, expert-1 at $15 and $75.
func menuPrices(t testing.TB) *provider.Prices {
	t.Helper()
	prices, err := provider.NewPrices(map[string]provider.Price{
		"acme/cheap-1":  {Input: 1e-6, Output: 5e-6},
		"acme/expert-1": {Input: 15e-6, Output: 75e-6},
	})
	if err != nil {
		t.Fatal(err)
	}
	return prices
}

// menuWorld is a lead on a cheap model whose spawn tool offers a menu of
// two: "cheap" (the lead's own provider) and "expert".
type menuWorld struct {
	leadP, expertP *fake.Provider
	spawner        *subagent.Spawner
	lead           *agent.React
	prices         *provider.Prices
}

func newMenuWorld(t *testing.T, lead, forks, expert []fake.Reply, opts ...subagent.SpawnOption) *menuWorld {
	t.Helper()
	w := &menuWorld{prices: menuPrices(t)}
	var replies []fake.Reply
	for _, r := range lead {
		replies = append(replies, r.For("lead"))
	}
	for _, r := range forks {
		replies = append(replies, r.For(subagent.DefaultForkName))
	}
	w.leadP = fake.NewProvider(replies...).Named("acme", "cheap-1")
	w.expertP = fake.NewProvider(expert...).Named("acme", "expert-1")
	reg := mk(tool.NewRegistry())(t)
	opts = append([]subagent.SpawnOption{subagent.WithModelMenu(w.prices,
		subagent.ModelChoice{Name: "cheap", Model: "cheap-1"},
		subagent.ModelChoice{Name: "expert", Provider: w.expertP, Model: "expert-1"},
	)}, opts...)
	w.spawner = mk(subagent.NewSpawner(w.leadP, reg, opts...))(t)
	if err := reg.Register(w.spawner); err != nil {
		t.Fatal(err)
	}
	w.lead = mk(agent.NewReact(w.leadP, agent.WithName("lead"), agent.WithModel("cheap-1"), agent.WithRegistry(reg), agent.WithPrices(w.prices)))(t)
	return w
}

var (
	tenIn  = provider.Usage{InputTokens: 1000, OutputTokens: 100, Requests: 1}
	tenOut = provider.Usage{InputTokens: 2000, OutputTokens: 300, Requests: 1}
)

// The spawn tool's schema offers exactly the menu's names, and says what
// each costs, from the price table.
func TestModelMenuOffersItsModelsWithTheirPrices(t *testing.T) {
	w := newMenuWorld(t, nil, nil, nil)
	def := w.spawner.Definition()
	var schema struct {
		Properties map[string]struct {
			Enum        []string `json:"enum"`
			Description string   `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(def.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	m, ok := schema.Properties["model"]
	if !ok {
		t.Fatalf("the spawn tool offers no model argument: %s", def.Parameters)
	}
	if fmt.Sprint(m.Enum) != "[cheap expert]" {
		t.Errorf("model enum = %v, want [cheap expert]", m.Enum)
	}
	for _, want := range []string{"cheap ($1 input, $5 output", "expert ($15 input, $75 output", "per million tokens", "your own model"} {
		if !strings.Contains(m.Description, want) || !strings.Contains(def.Description, want) {
			t.Errorf("the model argument's description or the tool's does not say %q:\n%s\n%s", want, m.Description, def.Description)
		}
	}

	// Without a menu there is no model argument.
	plain := mk(subagent.NewSpawner(w.leadP, mk(tool.NewRegistry())(t)))(t)
	if strings.Contains(string(plain.Definition().Parameters), `"model"`) {
		t.Errorf("a spawn tool without a menu offers a model: %s", plain.Definition().Parameters)
	}
}

// A spawn that names a model not on the menu starts nothing and costs
// nothing: the model reads why, with the choices; the Go caller gets
// ErrUnknownModel. So is a model named for a roster member, which runs
// on its own.
func TestModelMenuRefusesAModelNotOnIt(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		want       []string
	}{
		{"not on the menu", `{"task":"prove it","model":"gpt-9"}`,
			[]string{`model "gpt-9" is not one you may choose`, "nothing was started", "cheap ($1 input, $5 output", "expert ($15 input, $75 output"}},
		{"blank", `{"task":"prove it","model":""}`, []string{`model "" is not one you may choose`, "expert ($15 input"}},
		{"for a roster member", `{"task":"prove it","model":"expert","agent":"helper"}`,
			[]string{`"helper" is a named sub-agent, which runs on its own model`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			helperRan := new(atomic.Int64)
			helper := mk(subagent.FromFactory("helper", "Helps.", func(context.Context, json.RawMessage) (agent.Agent, error) {
				helperRan.Add(1)
				return agent.Func(func(context.Context, agent.Input) (agent.Output, error) { return agent.Output{Answer: "helped"}, nil }), nil
			}))(t)
			w := newMenuWorld(t,
				[]fake.Reply{fake.Calls(spawn(tc.args)).WithUsage(tenIn), fake.Text("I could not").WithUsage(tenIn)},
				[]fake.Reply{fake.Text("fork ran").WithUsage(tenIn)},
				[]fake.Reply{fake.Text("expert ran").WithUsage(tenIn)},
				subagent.WithRoster(helper))
			out, err := w.lead.Run(context.Background(), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(w.expertP.Requests()); n != 0 {
				t.Errorf("the expert's model was called %d times", n)
			}
			for _, r := range w.leadP.Requests() {
				if r.Agent != "lead" {
					t.Errorf("a %s ran on the lead's provider", r.Agent)
				}
			}
			if helperRan.Load() != 0 {
				t.Error("the roster member ran")
			}
			if !out.ChildUsage.IsZero() {
				t.Errorf("the refused spawn spent %+v", out.ChildUsage)
			}
			// The lead's model read the refusal.
			reqs := w.leadP.Requests()
			msgs := reqs[len(reqs)-1].Messages
			read := msgs[len(msgs)-1]
			if read.Role != provider.RoleTool || !read.IsError {
				t.Fatalf("the lead's model read %+v, want the spawn's error", read)
			}
			for _, want := range tc.want {
				if !strings.Contains(read.Content, want) {
					t.Errorf("the model read %q, want it to say %q", read.Content, want)
				}
			}

			// The Go caller's error.
			_, err = w.spawner.Call(context.Background(), tool.Call{ID: "c", Name: subagent.SpawnToolName, Arguments: json.RawMessage(tc.args)})
			if !errors.Is(err, subagent.ErrUnknownModel) || !errors.Is(err, tool.ErrInvalidArguments) {
				t.Errorf("Call = %v, want ErrUnknownModel and tool.ErrInvalidArguments", err)
			}
		})
	}
}

// A fork runs on the model its spawn picked, or on the default route;
// its events, its Tree node and its cost name that model, and it is priced
// at that model's prices, not its parent's.
func TestModelMenuChildRunsAndIsPricedAtItsModel(t *testing.T) {
	for _, route := range []bool{false, true} {
		t.Run(fmt.Sprint("default route ", route), func(t *testing.T) {
			var opts []subagent.SpawnOption
			if route {
				opts = append(opts, subagent.WithDefaultModel("expert"))
			}
			w := newMenuWorld(t,
				[]fake.Reply{
					fake.Calls(spawn(`{"task":"think hard","model":"expert"}`), spawn(`{"task":"look it up","model":"cheap"}`), spawn(`{"task":"what you like"}`)).WithUsage(tenIn),
					fake.Text("done").WithUsage(tenIn),
				},
				[]fake.Reply{fake.Text("looked").WithUsage(tenOut), fake.Text("liked").WithUsage(tenOut)},
				[]fake.Reply{fake.Text("thought").WithUsage(tenOut), fake.Text("liked").WithUsage(tenOut)},
				opts...)
			tree := subagent.NewTree(nil)
			var rec eventcheck.Recorder
			out, err := w.lead.Run(event.WithSink(context.Background(), event.SinkFunc(func(e event.Event) { tree.Emit(e); rec.Emit(e) })), agent.Input{Text: "go"})
			if err != nil {
				t.Fatal(err)
			}
			// Where each ran: the third, naming no model, on the default
			// route, else on the lead's provider and model as without a
			// menu.
			expertTasks := []string{"think hard"}
			if route {
				expertTasks = append(expertTasks, "what you like")
			}
			var got []string
			for _, r := range w.expertP.Requests() {
				got = append(got, r.Messages[0].Content)
				if r.Model != "expert-1" {
					t.Errorf("the expert was sent model %q", r.Model)
				}
			}
			slices.Sort(got)
			if fmt.Sprint(got) != fmt.Sprint(expertTasks) {
				t.Errorf("the expert was given %q, want %q", got, expertTasks)
			}
			for _, r := range w.leadP.Requests() {
				if r.Agent == subagent.DefaultForkName && r.Messages[0].Content == "look it up" && r.Model != "cheap-1" {
					t.Errorf("the cheap fork was sent model %q", r.Model)
				}
			}

			// The tree: each node's model and cost at its model's prices.
			cheapCost := 2000*1e-6 + 300*5e-6
			expertCost := 2000*15e-6 + 300*75e-6
			want := map[string][2]any{"think hard": {"expert-1", expertCost}, "look it up": {"cheap-1", cheapCost}, "what you like": {"cheap-1", cheapCost}}
			if route {
				want["what you like"] = [2]any{"expert-1", expertCost}
			}
			roots := tree.Roots()
			if len(roots) != 3 {
				t.Fatalf("the tree has %d roots, want 3", len(roots))
			}
			var childCost float64
			for _, n := range roots {
				var a struct{ Task string }
				_ = json.Unmarshal(n.Arguments, &a)
				wm := want[a.Task]
				cost, unpriced := n.Cost(nil)
				if n.Model != wm[0] || math.Abs(cost-wm[1].(float64)) > 1e-12 || len(unpriced) != 0 {
					t.Errorf("node %q: model %q, cost %v; want %v, %v", a.Task, n.Model, cost, wm[0], wm[1])
				}
				if again, _ := n.Cost(w.prices); math.Abs(again-cost) > 1e-12 {
					t.Errorf("node %q: its events priced it at %v, the table at %v", a.Task, cost, again)
				}
				childCost += cost
			}
			leadCost := 2 * (1000*1e-6 + 100*5e-6)
			if math.Abs(out.Cost-(leadCost+childCost)) > 1e-12 {
				t.Errorf("the lead's Output.Cost = %v, want %v (its own at cheap-1, each child at its own model)", out.Cost, leadCost+childCost)
			}

			// SUBAGENT_STARTED names the model a chosen fork runs on, in
			// its metadata; SUBAGENT_FINISHED the one that answered.
			var started []string
			for _, e := range rec.Events() {
				if e.Type == event.SubagentStarted {
					b, err := json.Marshal(e)
					if err != nil {
						t.Fatal(err)
					}
					var m struct{ Metadata struct{ Model string } }
					_ = json.Unmarshal(b, &m)
					started = append(started, m.Metadata.Model)
				}
			}
			slices.Sort(started)
			wantStarted := "[cheap-1 expert-1]" // the third, naming no model, runs as without a menu
			if route {
				wantStarted = "[cheap-1 expert-1 expert-1]"
			}
			if fmt.Sprint(slices.DeleteFunc(started, func(s string) bool { return s == "" })) != wantStarted {
				t.Errorf("SUBAGENT_STARTED carried the models %q, want %s", started, wantStarted)
			}
			if probs := eventcheck.Check(rec.Events(), eventcheck.Options{}); len(probs) > 0 {
				t.Errorf("the stream breaks the protocol: %v", probs)
			}
		})
	}
}

// The menu's options are checked when the spawn tool is built.
func TestModelMenuOptionsAreChecked(t *testing.T) {
	p := fake.NewProvider().Named("acme", "cheap-1")
	prices := menuPrices(t)
	for _, tc := range []struct {
		name string
		opts []subagent.SpawnOption
		want string
	}{
		{"no prices", []subagent.SpawnOption{subagent.WithModelMenu(nil, subagent.ModelChoice{Name: "a"})}, "pass the price table"},
		{"no choices", []subagent.SpawnOption{subagent.WithModelMenu(prices)}, "no choices"},
		{"unpriced", []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "big", Model: "big-9"})}, `no price for model "big-9"`},
		{"twice the name", []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "a", Model: "cheap-1"}, subagent.ModelChoice{Name: "a", Model: "expert-1"})}, `two choices are named "a"`},
		{"bad name", []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "a b", Model: "cheap-1"})}, "without spaces"},
		{"default off the menu", []subagent.SpawnOption{subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "a", Model: "cheap-1"}), subagent.WithDefaultModel("b")}, `no choice of WithModelMenu is named so: name one of a`},
		{"default without a menu", []subagent.SpawnOption{subagent.WithDefaultModel("b")}, "no menu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subagent.NewSpawner(p, mk(tool.NewRegistry())(t), tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSpawner = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// A choice naming no model is priced at its provider's default.
	if _, err := subagent.NewSpawner(p, mk(tool.NewRegistry())(t), subagent.WithModelMenu(prices, subagent.ModelChoice{Name: "mine"})); err != nil {
		t.Errorf("a choice of the provider's default model: %v", err)
	}
}

// menuModel is a model of the resume test: a lead that spawns a child on
// the expert model, or a child that deletes a file (which a person must
// approve) and then answers. It names its tool calls as ids says.
type menuModel struct {
	name, model string
	lead        bool
	ids         int
	fresh       *atomic.Int64

	mu   sync.Mutex
	reqs []provider.Request
}

func (m *menuModel) Name() string  { return "acme" }
func (m *menuModel) Model() string { return m.model }

func (m *menuModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	var results []string
	for _, msg := range req.Messages {
		if msg.Role == provider.RoleTool {
			results = append(results, msg.Content)
		}
	}
	resp := provider.Response{Model: m.model, Usage: tenIn}
	if len(results) > 0 {
		resp.Message = provider.AssistantMessage(m.name + " done: " + strings.Join(results, "; "))
		return resp, nil
	}
	c := provider.ToolCall{Name: "delete", Arguments: json.RawMessage(`{"path":"/tmp/x"}`)}
	if m.lead {
		c = spawn(`{"task":"clean up","model":"expert"}`)
	}
	switch m.ids {
	case resumetest.IDsFresh:
		c.ID = fmt.Sprint("call_", m.fresh.Add(1))
	case resumetest.IDsRestart:
		c.ID = "call_0"
	}
	resp.Message = provider.AssistantMessage("", c)
	resp.StopReason = provider.StopToolUse
	return resp, nil
}

func (m *menuModel) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.reqs)
}

// A journaled turn whose child, on the model its spawn chose, waits for a
// person's approval resumes with the child on that model: the resumed
// child's requests go to the expert, none to the lead's model, the
// approved tool runs once, and the tree's node keeps the expert's model
// and price — whatever ids the models give their calls.
func TestModelMenuResumeKeepsTheChildOnItsModel(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			fresh := new(atomic.Int64)
			leadM := &menuModel{name: "lead", model: "cheap-1", lead: true, ids: ids, fresh: fresh}
			expertM := &menuModel{name: "expert", model: "expert-1", ids: ids, fresh: fresh}
			prices := menuPrices(t)
			deletes := new(atomic.Int64)
			type pathIn struct {
				Path string `json:"path"`
			}
			del := mk(tool.New("delete", "Deletes a file.", func(_ context.Context, in pathIn) (string, error) {
				deletes.Add(1)
				return "deleted " + in.Path, nil
			}))(t)
			reg := mk(tool.NewRegistry(tool.RequireApproval(del, "deletes data", 0)))(t)
			sp := mk(subagent.NewSpawner(leadM, reg, subagent.WithModelMenu(prices,
				subagent.ModelChoice{Name: "cheap"},
				subagent.ModelChoice{Name: "expert", Provider: expertM, Model: "expert-1"})))(t)
			if err := reg.Register(sp); err != nil {
				t.Fatal(err)
			}
			lead := mk(agent.NewReact(leadM, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithPrices(prices)))(t)
			st := mk(store.New(memory.New()))(t)
			tree := subagent.NewTree(nil)
			ctx := event.WithSink(context.Background(), tree)
			runTurn := func(ctx context.Context) (agent.Output, error) {
				j, err := st.Journal(ctx, "turn-1")
				if err != nil {
					t.Fatal(err)
				}
				return lead.Run(agent.WithJournal(ctx, j), agent.Input{Text: "tidy up"})
			}

			_, err := runTurn(ctx)
			var in *tool.Interrupted
			if !errors.As(err, &in) || len(in.Interrupts) != 1 {
				t.Fatalf("first run: want one interrupt, got %v", err)
			}
			if deletes.Load() != 0 || expertM.requests() != 1 || leadM.requests() != 1 {
				t.Fatalf("before the answer: %d deletes, %d expert requests, %d lead requests; want 0, 1, 1", deletes.Load(), expertM.requests(), leadM.requests())
			}
			rctx, err := tool.Resume(ctx, in, tool.Answer{InterruptID: in.Interrupts[0].ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Fatal(err)
			}
			out, err := runTurn(rctx)
			if err != nil {
				t.Fatalf("resumed run: %v", err)
			}
			if want := "lead done: expert done: deleted /tmp/x"; out.Answer != want {
				t.Errorf("answer %q, want %q", out.Answer, want)
			}
			if deletes.Load() != 1 {
				t.Errorf("the approved tool ran %d times, want once", deletes.Load())
			}
			// The child went on on the expert: its second request, and no
			// request of the lead's model but the lead's own two.
			if expertM.requests() != 2 || leadM.requests() != 2 {
				t.Errorf("%d expert requests, %d lead requests; want 2 and 2", expertM.requests(), leadM.requests())
			}
			leadM.mu.Lock()
			for _, r := range leadM.reqs {
				if len(r.Messages) == 0 || r.Messages[0].Content != "tidy up" {
					t.Errorf("the lead's model was sent a child's request: %+v", r.Messages)
				}
			}
			leadM.mu.Unlock()
			roots := tree.Roots()
			if len(roots) != 1 {
				t.Fatalf("the tree has %d roots, want the one child", len(roots))
			}
			n := roots[0]
			cost, _ := n.Cost(nil)
			if want := 2 * (1000*15e-6 + 100*75e-6); n.Model != "expert-1" || math.Abs(cost-want) > 1e-12 || n.State != subagent.StateSucceeded {
				t.Errorf("the child's node: model %q, cost %v, state %s; want expert-1, %v, succeeded", n.Model, cost, n.State, want)
			}
			if want := 2*(1000*1e-6+100*5e-6) + 2*(1000*15e-6+100*75e-6); math.Abs(out.Cost-want) > 1e-12 {
				t.Errorf("the turn cost %v, want %v (each call once, at its model's price)", out.Cost, want)
			}
		})
	}
}

// mk returns v, failing the test when err is not nil: mk(f(…))(t).
func mk[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// A background job runs on the model its start chose, and is announced
// with it; the Go API chooses as the tool does, and is refused as the
// tool is.
func TestModelMenuBackgroundJobRunsOnItsModel(t *testing.T) {
	var sp *subagent.Spawner
	var results []subagent.JobResult
	var errs []error
	driver := tool.Func{Def: tool.Definition{Name: "drive", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(ctx context.Context, _ tool.Call) (tool.Result, error) {
			jobs := sp.Jobs(ctx)
			_, err := jobs.Start(ctx, subagent.Task{Task: "nope", Model: "gpt-9"})
			errs = append(errs, err)
			j, err := jobs.Start(ctx, subagent.Task{Task: "think in the background", Model: "expert"})
			errs = append(errs, err)
			results, err = jobs.Wait(ctx, subagent.WaitFor{IDs: []string{j.ID}})
			errs = append(errs, err)
			var u provider.Usage
			for _, r := range results {
				u = u.Add(r.Result.Usage)
			}
			return tool.Result{Content: "driven", Usage: u}, nil
		}}
	prices := menuPrices(t)
	leadP := fake.NewProvider(fake.Call("drive", `{}`).For("lead"), fake.Text("done").For("lead")).Named("acme", "cheap-1")
	expertP := fake.NewProvider(fake.Text("thought").WithUsage(tenOut)).Named("acme", "expert-1")
	reg := mk(tool.NewRegistry(driver))(t)
	sp = mk(subagent.NewSpawner(leadP, reg, subagent.WithBackground(), subagent.WithModelMenu(prices,
		subagent.ModelChoice{Name: "cheap", Model: "cheap-1"},
		subagent.ModelChoice{Name: "expert", Provider: expertP, Model: "expert-1"})))(t)
	if err := reg.Register(sp); err != nil {
		t.Fatal(err)
	}
	lead := mk(agent.NewReact(leadP, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithPrices(prices)))(t)
	tree := subagent.NewTree(nil)
	if _, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || !errors.Is(errs[0], subagent.ErrUnknownModel) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v, want the unknown model refused, then none", errs)
	}
	if len(results) != 1 || results[0].Result.Content != "thought" || len(expertP.Requests()) != 1 {
		t.Fatalf("the job gave %+v, and the expert was asked %d times; want its answer, once", results, len(expertP.Requests()))
	}
	roots := tree.Roots()
	if len(roots) != 1 || roots[0].Model != "expert-1" {
		t.Fatalf("the tree holds %d nodes; want one, on expert-1", len(roots))
	}
	if cost, _ := roots[0].Cost(nil); math.Abs(cost-(2000*15e-6+300*75e-6)) > 1e-12 {
		t.Errorf("the job cost %v, want it at expert-1's prices", cost)
	}
}

// A context fork on a chosen model starts from its parent's conversation
// and asks the chosen model, not its parent's.
func TestModelMenuContextForkAsksItsOwnModel(t *testing.T) {
	w := newMenuWorld(t,
		[]fake.Reply{fake.Calls(spawn(`{"task":"judge it","model":"expert"}`)).WithUsage(tenIn), fake.Text("done").WithUsage(tenIn)},
		nil,
		[]fake.Reply{fake.Text("judged").WithUsage(tenOut)},
		subagent.WithContextForks())
	if _, err := w.lead.Run(context.Background(), agent.Input{Text: "the long context"}); err != nil {
		t.Fatal(err)
	}
	reqs := w.expertP.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the expert was asked %d times, want once", len(reqs))
	}
	r := reqs[0]
	if r.Model != "expert-1" || r.SharedPrefix == 0 || r.Messages[0].Content != "the long context" {
		t.Errorf("the fork asked model %q with a shared prefix of %d, first message %q; want expert-1, its parent's conversation",
			r.Model, r.SharedPrefix, r.Messages[0].Content)
	}
}
