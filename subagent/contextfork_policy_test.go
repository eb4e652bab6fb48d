package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// forkingModel is the model of a lead, or of its context forks: on a new
// task it makes one step of calls, then answers with what they returned.
// A fork copies the first message of its conversation, the lead's input
// it inherited, into a lookup call, as a model that read it would; a
// fork whose task is not "nested: …" forks again. It names its calls as
// ids says and keeps every request it was sent.
type forkingModel struct {
	lead  bool
	ids   int
	fresh *atomic.Int64

	mu       sync.Mutex
	requests []provider.Request
	calls    int
	tasks    int
}

func (m *forkingModel) Complete(_ context.Context, req provider.Request) (provider.Response, error) {
	last, first := -1, ""
	for i, msg := range req.Messages {
		if msg.Role == provider.RoleUser {
			if last < 0 {
				first = msg.Content
			}
			last = i
		}
	}
	var task string
	step := 0
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
	if step > 0 {
		return provider.Response{Message: provider.AssistantMessage("done(" + strings.Join(results, "; ") + ")"), Usage: u}, nil
	}
	arg := func(v map[string]any) json.RawMessage { b, _ := json.Marshal(v); return b }
	var calls []provider.ToolCall
	if m.lead {
		calls = []provider.ToolCall{
			{Name: subagent.SpawnToolName, Arguments: arg(map[string]any{"task": "check " + first})},
			{Name: subagent.SpawnToolName, Arguments: arg(map[string]any{"task": "check the account again", "inherit_context": true})},
		}
	} else {
		calls = []provider.ToolCall{
			{Name: "lookup", Arguments: arg(map[string]any{"q": first})},
			{Name: "rm", Arguments: arg(map[string]any{"path": "/"})},
		}
		if !strings.HasPrefix(task, "nested: ") {
			calls = append(calls, provider.ToolCall{Name: subagent.SpawnToolName, Arguments: arg(map[string]any{"task": "nested: " + task})})
		}
	}
	resumetest.NameCalls(m.ids, calls, m.fresh)
	m.calls += len(calls)
	return provider.Response{Message: provider.AssistantMessage("", calls...), Usage: u}, nil
}

// A context fork inherits its parent's conversation, and with it a secret
// the lead was given; under a root policy that redacts it, the secret
// reaches no request of any fork's model, at any depth, nor any tool. The
// root's rules see every fork's hand-off, with the conversation it
// inherits, and every tool call; a denied tool never runs — whatever ids
// the models give their calls.
func TestPolicyBindsContextForks(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			g := newGuard()
			var handOffs []policy.Check
			var hmu sync.Mutex
			seeHandOffs := policy.Func("hand-offs", func(_ context.Context, c *policy.Check) policy.Decision {
				if c.Point == policy.BeforeDelegation {
					hmu.Lock()
					defer hmu.Unlock()
					handOffs = append(handOffs, policy.Check{Path: c.Path, Depth: c.Depth, Task: c.Task, Context: c.Context})
				}
				return policy.Decision{}
			})
			root, err := policy.New(g,
				policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
				policy.Redact("secrets", []string{secret}),
				seeHandOffs)
			if err != nil {
				t.Fatal(err)
			}
			fresh := new(atomic.Int64)
			leadModel := &forkingModel{lead: true, ids: ids, fresh: fresh}
			forkModel := &forkingModel{ids: ids, fresh: fresh}
			lookup, rm := &counted{name: "lookup"}, &counted{name: "rm"}
			reg, err := tool.NewRegistry(lookup, rm)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := subagent.NewSpawner(forkModel, reg, subagent.WithContextForks(), subagent.WithMaxDepth(2))
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Register(sp); err != nil {
				t.Fatal(err)
			}
			// The lead runs on its own model with the forks' registry.
			lead, err := agent.NewReact(leadModel, agent.WithName("lead"), agent.WithRegistry(reg), agent.WithPolicy(root))
			if err != nil {
				t.Fatal(err)
			}
			out, err := lead.Run(context.Background(), agent.Input{Text: "audit the account with key " + secret})
			if err != nil {
				t.Fatal(err)
			}

			leadModel.mu.Lock()
			forkModel.mu.Lock()
			defer leadModel.mu.Unlock()
			defer forkModel.mu.Unlock()
			g.mu.Lock()
			defer g.mu.Unlock()
			hmu.Lock()
			defer hmu.Unlock()
			// The lead: 2 spawns; 2 forks: lookup, rm, spawn each; 2
			// nested forks: lookup, rm each.
			calls := leadModel.calls + forkModel.calls
			if calls != 12 || forkModel.tasks != 4 {
				t.Fatalf("the models asked for %d tool calls (want 12) and the forks started %d tasks (want 4): the tree did not run as built", calls, forkModel.tasks)
			}
			if b, _ := json.Marshal(leadModel.requests[0]); !strings.Contains(string(b), secret) {
				t.Fatal("the lead's model was not given the secret: the test tries nothing")
			}
			for i, req := range forkModel.requests {
				if b, _ := json.Marshal(req); strings.Contains(string(b), secret) {
					t.Errorf("the secret reached fork request %d: %s", i, b)
				}
				if req.SharedPrefix == 0 || !strings.Contains(req.Messages[0].Content, policy.Redacted) {
					t.Errorf("fork request %d is no context fork of the lead's conversation, redacted (shared prefix %d, first message %q)",
						i, req.SharedPrefix, req.Messages[0].Content)
				}
			}
			for _, a := range lookup.args {
				if strings.Contains(a, secret) {
					t.Errorf("the secret reached the tool lookup: %s", a)
				}
			}
			if got := g.points[policy.BeforeTool]; got != calls {
				t.Errorf("the root's policy saw %d tool calls; the models asked for %d", got, calls)
			}
			if got := g.points[policy.BeforeDelegation]; got != forkModel.tasks {
				t.Errorf("the root's policy saw %d hand-offs; the forks started %d tasks", got, forkModel.tasks)
			}
			if got, want := g.points[policy.BeforeModel], len(leadModel.requests)+len(forkModel.requests); got != want {
				t.Errorf("the root's policy saw %d model calls; the models were asked %d times", got, want)
			}
			if lookup.runs() != 4 || g.tools["lookup"] != 4 {
				t.Errorf("lookup ran %d times, the policy saw %d calls; want 4", lookup.runs(), g.tools["lookup"])
			}
			if rm.runs() != 0 || g.tools["rm"] != 4 {
				t.Errorf("rm, denied, ran %d times (the policy saw %d calls, want 4)", rm.runs(), g.tools["rm"])
			}
			if len(out.Denials) != 4 {
				t.Errorf("the lead's Output has %d denials, want 4: %v", len(out.Denials), out.Denials)
			}
			for _, d := range out.Denials {
				if d.Rule != "no-rm" || d.Tool != "rm" || !strings.Contains(d.Path, "/"+subagent.DefaultForkName) {
					t.Errorf("denial %+v", d)
				}
			}
			// Each hand-off shows the conversation the fork inherits, as
			// the rules before it left it: the secret redacted.
			for _, h := range handOffs {
				if len(h.Context) == 0 {
					t.Errorf("the hand-off at %s (depth %d) shows no inherited conversation: the rules cannot see what the fork is given", h.Path, h.Depth)
					continue
				}
				if b, _ := json.Marshal(h); strings.Contains(string(b), secret) {
					t.Errorf("the hand-off at %s shows the secret after the redacting rule: %s", h.Path, b)
				}
			}
			for _, p := range []string{"lead", "lead/" + subagent.DefaultForkName, "lead/" + subagent.DefaultForkName + "/" + subagent.DefaultForkName} {
				if !g.paths[p] {
					t.Errorf("no check at %s; seen: %v", p, g.paths)
				}
			}
		})
	}
}
