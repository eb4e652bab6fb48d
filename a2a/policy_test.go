package a2a_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// stepModel is the model of one kind of agent: on a new task it makes its
// steps' tool calls, one step a reply, then answers with what they
// returned. "{task}" in a call's arguments stands for the task as a JSON
// string's content. It names its calls as the id mode says (with ids
// restarting at call_0, call_0, call_1, … in each response), and counts
// the calls it asked for and keeps the requests it was sent.
type stepModel struct {
	name  string
	id    func(int64) string
	n     *atomic.Int64 // shared by a tree's models, for fresh ids
	steps [][][2]string

	mu       sync.Mutex
	requests []provider.Request
	calls    int
	tasks    int
}

func (m *stepModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	last := -1
	for i, msg := range req.Messages {
		if msg.Role == provider.RoleUser {
			last = i
		}
	}
	task, step := "", 0
	var results []string
	if last >= 0 {
		task = req.Messages[last].Content
		for _, msg := range req.Messages[last+1:] {
			switch msg.Role {
			case provider.RoleAssistant:
				step++
			case provider.RoleTool:
				results = append(results, msg.Content)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, req)
	if step == 0 {
		m.tasks++
	}
	u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	if step >= len(m.steps) {
		return provider.Response{Message: provider.AssistantMessage(m.name + "(" + strings.Join(results, "; ") + ")"), Usage: u}, nil
	}
	quoted, _ := json.Marshal(task)
	var calls []provider.ToolCall
	for i, c := range m.steps[step] {
		id := m.id(m.n.Add(1))
		if id == "call_0" {
			id = fmt.Sprint("call_", i)
		}
		args := strings.ReplaceAll(c[1], "{task}", string(quoted[1:len(quoted)-1]))
		calls = append(calls, provider.ToolCall{ID: id, Name: c[0], Arguments: json.RawMessage(args)})
	}
	m.calls += len(calls)
	return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
}

func (m *stepModel) sent(s string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.requests {
		if b, _ := json.Marshal(req); strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// countedTool counts its runs and keeps their arguments; it answers
// with answer.
type countedTool struct {
	name, answer string
	mu           sync.Mutex
	args         []string
}

func (c *countedTool) Definition() tool.Definition {
	return tool.Definition{Name: c.name, Description: "Does " + c.name + ".", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (c *countedTool) Call(_ context.Context, call tool.Call) (tool.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.args = append(c.args, string(call.Arguments))
	return tool.Result{Content: c.answer}, nil
}

func (c *countedTool) runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.args)
}

// observer is a rule that counts every check by point, the tool calls by
// name, and the owners and threads the checks name.
type observer struct {
	name    string
	mu      sync.Mutex
	points  map[policy.Point]int
	tools   map[string]int
	owners  map[string]int
	threads map[string]int
}

func newObserver(name string) *observer {
	return &observer{name: name, points: map[policy.Point]int{}, tools: map[string]int{}, owners: map[string]int{}, threads: map[string]int{}}
}

func (o *observer) Name() string { return o.name }

func (o *observer) Decide(_ context.Context, c *policy.Check) policy.Decision {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.points[c.Point]++
	if c.Point == policy.BeforeTool {
		o.tools[c.Tool]++
	}
	o.owners[c.Owner]++
	o.threads[c.Thread]++
	return policy.Decision{}
}

const (
	leadSecret   = "sk-live-0123456789abcdef" // given to the lead
	remoteSecret = "acct-internal-778899"     // what the remote's own tool tells
)

// remoteTree is a lead that delegates to an A2A remote, served by deputy
// in-process, twice: directly, and through a local child. The lead calls
// search, clerk (the remote) and worker (FromFactory) in one step; the
// worker calls clerk; the remote agent, built per task, calls its own
// ledger, whose answer holds remoteSecret, and answers with it.
type remoteTree struct {
	lead                   *agent.React
	leadModel, workerModel *stepModel
	remoteModel            *stepModel
	search, ledger         *countedTool
	served                 *observer // the serving side's policy
	builds                 atomic.Int64
	bodies                 bodies // what the remote agent was sent
}

// bodies keeps the bodies of the requests a server was sent.
type bodies struct {
	mu   sync.Mutex
	sent []string
}

func (b *bodies) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		if len(data) > 0 {
			b.sent = append(b.sent, string(data))
		}
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(data))
		h.ServeHTTP(w, r)
	})
}

func (b *bodies) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sent)
}

func (b *bodies) holds(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, body := range b.sent {
		if strings.Contains(body, s) {
			return true
		}
	}
	return false
}

func newRemoteTree(t *testing.T, id func(int64) string, leadOpts ...agent.Option) *remoteTree {
	t.Helper()
	n := new(atomic.Int64)
	tr := &remoteTree{
		search: &countedTool{name: "search", answer: "found"},
		ledger: &countedTool{name: "ledger", answer: "balance 42 on " + remoteSecret},
		served: newObserver("served"),
	}
	tr.remoteModel = &stepModel{name: "clerk", id: id, n: n, steps: [][][2]string{{{"ledger", `{"q":"{task}"}`}}}}
	served, err := policy.New(tr.served)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := a2a.NewPerTask(func(context.Context, a2a.Task) (agent.Agent, error) {
		tr.builds.Add(1)
		return agent.NewReact(tr.remoteModel, agent.WithName("clerk"), agent.WithTools(tr.ledger), agent.WithPolicy(served))
	}, a2a.WithName("clerk"), a2a.WithDescription("Keeps the books."),
		a2a.WithAuthorize(func(*http.Request) (string, error) { return "acme", nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(tr.bodies.wrap(srv))
	t.Cleanup(hs.Close)
	remote, err := a2a.Connect(context.Background(), hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	clerk, err := remote.Tool(subagent.WithMaxDepth(2)) // the worker delegates to it too
	if err != nil {
		t.Fatal(err)
	}
	tr.workerModel = &stepModel{name: "worker", id: id, n: n, steps: [][][2]string{{{"clerk", `{"task":"{task}"}`}}}}
	worker, err := subagent.FromFactory("worker", "Works.", func(context.Context, json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(tr.workerModel, agent.WithName("worker"), agent.WithTools(clerk))
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.leadModel = &stepModel{name: "lead", id: id, n: n, steps: [][][2]string{{
		{"search", `{"q":"{task}"}`}, {"clerk", `{"task":"{task}"}`}, {"worker", `{"task":"{task}"}`}}}}
	tr.lead, err = agent.NewReact(tr.leadModel, append([]agent.Option{agent.WithName("lead"), agent.WithTools(tr.search, clerk, worker)}, leadOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The root's policy binds the edge to an A2A remote, at any depth: it
// sees the call of the remote's tool, the hand-off and the answer, and
// none of the remote's own tool calls, which the serving side's policy
// sees, acting for the owner the server named; a secret given to the lead
// never reaches the remote (no request to it holds it), and a secret the
// remote's answer holds never reaches the lead's model — whatever ids the
// models give their calls.
func TestPolicyBindsTheRemoteEdge(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			g := newObserver("observer")
			root, err := policy.New(g, policy.Redact("secrets", []string{leadSecret, remoteSecret}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newRemoteTree(t, mode.id, agent.WithPolicy(root))
			out, err := tr.lead.Run(context.Background(), agent.Input{Text: "audit the account with key " + leadSecret})
			if err != nil {
				t.Fatal(err)
			}
			calls := tr.leadModel.calls + tr.workerModel.calls
			if calls != 4 || tr.builds.Load() != 2 || tr.remoteModel.tasks != 2 {
				t.Fatalf("the models asked for %d calls (want 4) and the remote ran %d tasks (want 2): the tree did not run as built", calls, tr.remoteModel.tasks)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if got := g.points[policy.BeforeTool]; got != calls {
				t.Errorf("the root's policy saw %d tool calls; the lead and the worker asked for %d", got, calls)
			}
			if got, want := g.points[policy.BeforeDelegation], tr.workerModel.tasks+tr.remoteModel.tasks; got != want {
				t.Errorf("the root's policy saw %d hand-offs; the worker and the remote started %d tasks", got, want)
			}
			if got := g.points[policy.AfterResult]; got != calls {
				t.Errorf("the root's policy saw %d results, want %d", got, calls)
			}
			if g.tools["clerk"] != 2 || g.tools["search"] != tr.search.runs() {
				t.Errorf("the root's policy saw the tool calls %v; search ran %d times", g.tools, tr.search.runs())
			}
			if g.tools["ledger"] != 0 || tr.ledger.runs() != 2 {
				t.Errorf("the root's policy saw %d of the remote's own ledger calls (want none: they are the remote's); ledger ran %d times", g.tools["ledger"], tr.ledger.runs())
			}
			// The serving side's policy saw the remote's own work, for
			// the owner the server named.
			tr.served.mu.Lock()
			if got := tr.served.tools["ledger"]; got != tr.ledger.runs() {
				t.Errorf("the served agent's policy saw %d ledger calls; ledger ran %d times", got, tr.ledger.runs())
			}
			var checks int
			for _, n := range tr.served.points {
				checks += n
			}
			if tr.served.owners["acme"] != checks || checks == 0 {
				t.Errorf("the served agent's policy saw the owners %v over %d checks, want acme on every one", tr.served.owners, checks)
			}
			if tr.served.threads[""] != 0 {
				t.Errorf("the served agent's policy saw checks without a thread: %v", tr.served.threads)
			}
			tr.served.mu.Unlock()
			// The lead's secret stayed with the lead.
			if !tr.leadModel.sent(leadSecret) {
				t.Fatal("the lead's model was not given the secret: the test tries nothing")
			}
			if tr.bodies.count() == 0 {
				t.Fatal("no request reached the remote agent")
			}
			if tr.bodies.holds(leadSecret) || tr.remoteModel.sent(leadSecret) || tr.workerModel.sent(leadSecret) {
				t.Errorf("the lead's secret reached the remote agent (its requests %v, its model %v) or the worker's model (%v)",
					tr.bodies.holds(leadSecret), tr.remoteModel.sent(leadSecret), tr.workerModel.sent(leadSecret))
			}
			for _, a := range tr.ledger.args {
				if strings.Contains(a, leadSecret) {
					t.Errorf("the lead's secret reached the remote's ledger: %s", a)
				}
			}
			// The remote's answer held its secret; what came back did not.
			if !tr.remoteModel.sent(remoteSecret) {
				t.Fatal("the remote's model never read the remote's secret: the test tries nothing")
			}
			if tr.leadModel.sent(remoteSecret) || tr.workerModel.sent(remoteSecret) || strings.Contains(out.Answer, remoteSecret) {
				t.Errorf("the remote's secret came back past the policy: %q", out.Answer)
			}
		})
	}
}

// A hand-off to the remote agent that the root's policy denies is never
// sent: the remote runs no task, the models read the denial, and the Go
// caller finds it in Output.Denials — whatever ids the models give their
// calls.
func TestPolicyDeniesTheRemoteEdge(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			g := newObserver("observer")
			root, err := policy.New(g, policy.Func("no-remote", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation && c.Tool == "clerk" {
					return policy.Denied("the clerk is off limits")
				}
				return policy.Decision{}
			}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newRemoteTree(t, mode.id, agent.WithPolicy(root))
			cards := tr.bodies.count()
			out, err := tr.lead.Run(context.Background(), agent.Input{Text: "audit"})
			if err != nil {
				t.Fatal(err)
			}
			if tr.builds.Load() != 0 || tr.bodies.count() != cards || tr.ledger.runs() != 0 {
				t.Errorf("a denied hand-off reached the remote: %d tasks built, %d requests sent, ledger ran %d times",
					tr.builds.Load(), tr.bodies.count()-cards, tr.ledger.runs())
			}
			if calls := tr.leadModel.calls + tr.workerModel.calls; calls != 4 {
				t.Fatalf("the models asked for %d calls, want 4", calls)
			}
			g.mu.Lock()
			if g.tools["clerk"] != 2 || g.points[policy.BeforeDelegation] != 3 {
				t.Errorf("the root's policy saw %d clerk calls and %d hand-offs, want 2 and 3", g.tools["clerk"], g.points[policy.BeforeDelegation])
			}
			g.mu.Unlock()
			if len(out.Denials) != 2 {
				t.Fatalf("Output.Denials %v, want the two hand-offs to clerk", out.Denials)
			}
			paths := map[string]bool{}
			for _, d := range out.Denials {
				if d.Rule != "no-remote" || d.Point != policy.BeforeDelegation || d.Tool != "clerk" || !errors.Is(d, policy.ErrDenied) {
					t.Errorf("denial %+v", d)
				}
				paths[d.Path] = true
			}
			if !paths["lead"] || !paths["lead/worker"] {
				t.Errorf("denied at %v, want lead and lead/worker", paths)
			}
			if !strings.Contains(out.Answer, "off limits") {
				t.Errorf("the lead's answer %q does not carry the denial the models read", out.Answer)
			}
		})
	}
}

// A hand-off to the remote agent that the root's policy asks a person
// about waits for them: nothing is sent before they answer; each is asked
// once, across the resume; the one approved is sent once, the one
// refused never — whatever ids the models give their calls.
func TestPolicyAsksBeforeTheRemoteEdge(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			root, err := policy.New(policy.Func("ask-remote", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation && c.Tool == "clerk" {
					return policy.Asked("send " + c.Task + " to the clerk?")
				}
				return policy.Decision{}
			}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newRemoteTree(t, mode.id, agent.WithPolicy(root))
			run := journaledRun(t, tr.lead, "audit")
			ctx := context.Background()
			rctx := ctx
			asked := map[string]bool{}
			approved := 0
			var out agent.Output
			for round := 0; ; round++ {
				if round > 4 {
					t.Fatal("no end after 4 rounds")
				}
				out, err = run(rctx)
				var in *tool.Interrupted
				if !errors.As(err, &in) {
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					break
				}
				if round == 0 && (tr.builds.Load() != 0 || tr.ledger.runs() != 0) {
					t.Errorf("before any answer, the remote built %d tasks and ledger ran %d times", tr.builds.Load(), tr.ledger.runs())
				}
				var answers []tool.Answer
				for _, it := range in.Interrupts {
					if it.Reason != tool.ApprovalReason || !strings.Contains(it.Message, "ask-remote") {
						t.Errorf("question %+v", it)
					}
					if asked[it.ID] {
						t.Errorf("round %d: %s was asked again", round, it.ID)
					}
					yes := len(asked) == 0
					asked[it.ID] = true
					if yes {
						approved++
					}
					answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(fmt.Sprintf(`{"approved":%v}`, yes))})
				}
				if rctx, err = tool.Resume(ctx, in, answers...); err != nil {
					t.Fatal(err)
				}
			}
			if len(asked) != 2 || approved != 1 {
				t.Fatalf("%d questions, %d approved: want one question per hand-off to clerk (2), one approved", len(asked), approved)
			}
			if tr.builds.Load() != 1 || tr.ledger.runs() != 1 || tr.remoteModel.tasks != 1 {
				t.Errorf("the remote built %d tasks and ran %d, ledger ran %d times: want the approved hand-off's once", tr.builds.Load(), tr.remoteModel.tasks, tr.ledger.runs())
			}
			if tr.search.runs() != 1 {
				t.Errorf("search ran %d times: what ran before the question ran again", tr.search.runs())
			}
			if !strings.Contains(out.Answer, "did not approve") || !strings.Contains(out.Answer, "clerk(") {
				t.Errorf("the answer %q should hold the clerk's answer and the refusal", out.Answer)
			}
		})
	}
}

// The text a remote A2A agent streams reaches the caller's event sink
// under the root's policy too: a secret the remote's answer holds is
// redacted there as in what the lead's model reads, whatever ids the
// models give their calls.
func TestPolicyRedactsTheRemoteStream(t *testing.T) {
	for _, mode := range idModes {
		t.Run(mode.name, func(t *testing.T) {
			root, err := policy.New(policy.Redact("secrets", []string{leadSecret, remoteSecret}))
			if err != nil {
				t.Fatal(err)
			}
			tr := newRemoteTree(t, mode.id, agent.WithPolicy(root))
			var mu sync.Mutex
			var streamed strings.Builder
			sink := event.SinkFunc(func(e event.Event) {
				if e.Type == event.TextMessageContent && strings.HasPrefix(e.MessageID, "msg_a2a_") {
					mu.Lock()
					streamed.WriteString(e.Delta + "\n")
					mu.Unlock()
				}
			})
			out, err := tr.lead.Run(event.WithSink(context.Background(), sink), agent.Input{Text: "audit the account"})
			if err != nil {
				t.Fatal(err)
			}
			if tr.ledger.runs() != 2 || !tr.remoteModel.sent(remoteSecret) {
				t.Fatalf("ledger ran %d times (want 2), and the remote's model read its secret: %v; the test tries nothing", tr.ledger.runs(), tr.remoteModel.sent(remoteSecret))
			}
			mu.Lock()
			defer mu.Unlock()
			got := streamed.String()
			if !strings.Contains(got, "clerk(") {
				t.Fatalf("the sink got no text from the remote agent (%q): the test tries nothing", got)
			}
			if strings.Contains(got, remoteSecret) || !strings.Contains(got, policy.Redacted) {
				t.Errorf("the remote's stream reached the sink as %q, want its secret redacted", got)
			}
			if strings.Contains(out.Answer, remoteSecret) {
				t.Errorf("the answer holds the remote's secret: %q", out.Answer)
			}
		})
	}
}
