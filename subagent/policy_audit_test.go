package subagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/resumetest"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// childToken is a secret the tools below the lead find: the tree's
// redactor rewrites the results that carry it, in children and
// grandchildren.
const childToken = "tok-child-4242"

// echo is a tool that answers with its name, its query and childToken,
// so that a result says whose call it was.
type echo struct{ name string }

func (e echo) Definition() tool.Definition {
	return tool.Definition{Name: e.name, Description: "Does " + e.name + ".", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (e echo) Call(_ context.Context, call tool.Call) (tool.Result, error) {
	var args struct{ Q string }
	_ = json.Unmarshal(call.Arguments, &args)
	return tool.Result{Content: e.name + " of " + args.Q + " found " + childToken}, nil
}

// auditForms are everyForm's calls with a tag in each child's task that
// names the child: everything below the lead's call carries it, down to
// the grandchild's tool calls and results.
var auditForms = [][2]string{
	{"expert", `{"task":"to-expert {task}"}`},
	{"worker", `{"task":"to-worker {task}"}`},
	{"improv", `{"task":"to-improv {task}","system_prompt":"be brief"}`},
	{subagent.SpawnToolName, `{"task":"to-analyst {task}","agent":"analyst"}`},
	{subagent.SpawnToolName, `{"task":"to-fork {task}"}`},
	{subagent.SpawnToolName, `{"task":"to-bgfork {task}","background":true}`},
}

// childOf returns the name of the child whose tag s holds, or "".
func childOf(s string) string {
	for _, c := range [][2]string{{"to-expert", "expert"}, {"to-worker", "worker"}, {"to-improv", "improv"},
		{"to-analyst", "analyst"}, {"to-fork", subagent.DefaultForkName}, {"to-bgfork", subagent.DefaultForkName}} {
		if strings.Contains(s, c[0]) {
			return c[1]
		}
	}
	return ""
}

// A decision as the audit trail tells it: where, at which point, what
// was decided and by which rule.
type decision struct {
	path          string
	point         policy.Point
	verdict, rule string
	answer        string // a person's, to the question of an Ask
}

func (d decision) String() string {
	if d.answer != "" {
		return fmt.Sprintf("%s %s %s:%s (%s)", d.path, d.point, d.verdict, d.rule, d.answer)
	}
	return fmt.Sprintf("%s %s %s:%s", d.path, d.point, d.verdict, d.rule)
}

// checked is what the auditor noted of one check: the decision the
// policy makes on it, and what the check said and must say of its place.
type checked struct {
	decision
	tool          string
	depth         int
	owner, thread string
	wantPath      string // "" when the check cannot be placed
}

// what names the check, for a message.
func (c checked) what() string {
	if c.tool == "" {
		return fmt.Sprintf("a %s check", c.point)
	}
	return fmt.Sprintf("a %s check of %s", c.point, c.tool)
}

// auditor is the first rule of the tree's policy: it sees every check
// before any other rule rewrites it, and notes what the policy will
// decide on it (what the rules after it say: deny rm, ask before leaf,
// redact the secrets), where the check says it is, whom it says it acts
// for, and where the check must be, by the tag of the child below the
// lead that its text carries.
type auditor struct {
	mu   sync.Mutex
	seen []checked
}

func (a *auditor) Name() string { return "auditor" }

func (a *auditor) Decide(_ context.Context, c *policy.Check) policy.Decision {
	d := checked{decision: decision{path: c.Path, point: c.Point, verdict: "allow"},
		tool: c.Tool, depth: c.Depth, owner: c.Owner, thread: c.Thread, wantPath: placeOf(c)}
	switch {
	case (c.Point == policy.BeforeTool || c.Point == policy.BeforeDelegation) && c.Tool == "rm":
		d.verdict, d.rule = "deny", "no-rm"
	case c.Point == policy.BeforeTool && c.Tool == "leaf":
		d.verdict, d.rule = "ask", "ask-leaf"
	case holdsSecret(c):
		d.verdict, d.rule = "rewrite", "secrets"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, d)
	return policy.Decision{}
}

// holdsSecret reports whether the redactor of the tree finds a secret in
// what it reads of c: not the top-level agent's model requests, which
// carry what it was given.
func holdsSecret(c *policy.Check) bool {
	var texts []string
	switch c.Point {
	case policy.BeforeTool:
		texts = append(texts, string(c.Arguments))
	case policy.BeforeDelegation:
		texts = append(texts, c.Task)
		for _, m := range c.Context {
			texts = append(texts, m.Content)
			for _, tc := range m.ToolCalls {
				texts = append(texts, string(tc.Arguments))
			}
		}
	case policy.AfterResult:
		texts = append(texts, c.Result)
	case policy.BeforeModel:
		if c.Depth == 0 || c.Request == nil {
			return false
		}
		texts = append(texts, c.Request.System)
		for _, m := range c.Request.Messages {
			texts = append(texts, m.Content)
			for _, tc := range m.ToolCalls {
				texts = append(texts, string(tc.Arguments))
			}
		}
	}
	for _, s := range texts {
		if strings.Contains(s, secret) || strings.Contains(s, childToken) {
			return true
		}
	}
	return false
}

// placeOf returns the path in the tree of the agent whose check c must
// be, by what c is about: the lead's tools are called by the lead, a
// child's (lookup, deep) by the child whose tag their arguments, task or
// result carry, a grandchild's (leaf, rm) by that child's grandchild; a
// model call is the lead's, a child's or a grandchild's by the tools it
// offers, and the child's by the tag of its task. It returns "" for a
// check it cannot place.
func placeOf(c *policy.Check) string {
	var level int
	var text string
	switch c.Point {
	case policy.BeforeTool, policy.AfterResult:
		text = string(c.Arguments) + c.Result
		switch c.Tool {
		case "lookup", "deep":
			level = 1
		case "leaf", "rm":
			level = 2
		}
	case policy.BeforeDelegation:
		text = c.Task
		if c.Tool == "deep" {
			level = 1
		}
	case policy.BeforeModel:
		if c.Request == nil {
			return ""
		}
		for _, t := range c.Request.Tools {
			switch t.Name {
			case "lookup":
				level = 1
			case "leaf":
				level = 2
			}
		}
		for _, m := range c.Request.Messages {
			if m.Role == provider.RoleUser {
				text = m.Content
				break
			}
		}
	}
	if level == 0 {
		return "lead"
	}
	child := childOf(text)
	if child == "" {
		return ""
	}
	if level == 1 {
		return "lead/" + child
	}
	return "lead/" + child + "/grandchild"
}

// Every decision the policy of a three-level tree makes is in the audit
// trail, once on the event sink (a CUSTOM event) and once on a span, at
// every depth and for every verdict — a deny, an ask and a rewrite in
// the children and grandchildren included — and says which rule made it
// and at which place in the tree; and every check names the owner and
// the thread the run was started for, and the place of the call it is
// about — whatever ids the models give their calls, across the resumes
// that answer the questions.
func TestPolicyAuditsEveryDecision(t *testing.T) {
	for _, ids := range []int{resumetest.IDsFresh, resumetest.IDsNone, resumetest.IDsRestart} {
		t.Run(fmt.Sprint("ids=", ids), func(t *testing.T) {
			aud := &auditor{}
			root, err := policy.New(aud,
				policy.DenyTools("no-rm", policy.AnyDepth, "rm"),
				policy.AskBefore("ask-leaf", "leaf"),
				policy.Redact("secrets", []string{secret, childToken}))
			if err != nil {
				t.Fatal(err)
			}
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			lead, _ := buildTree(t, treeSpec{
				ids:             ids,
				fresh:           new(atomic.Int64),
				lead:            [][][2]string{append([][2]string{{"search", `{"q":"{task}"}`}}, auditForms...), {waitJob}},
				child:           [][][2]string{{{"lookup", `{"q":"{task}"}`}, {"deep", `{"task":"{task}"}`}}},
				grandchild:      [][][2]string{{{"leaf", `{"q":"{task}"}`}, {"rm", `{"path":"/","for":"{task}"}`}}},
				leadTools:       []tool.Tool{echo{"search"}},
				childTools:      []tool.Tool{echo{"lookup"}},
				grandchildTools: []tool.Tool{echo{"leaf"}, echo{"rm"}},
				leadOpts:        []agent.Option{agent.WithPolicy(root), agent.WithTracerProvider(tp)},
			})
			st, err := store.New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			const owner, thread = "owner-7", "thread-7"
			base := agent.WithOwner(agent.WithThread(context.Background(), thread), owner)
			j, err := st.Journal(base, "turn")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var events []event.Event
			sink := event.SinkFunc(func(e event.Event) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			})
			// Round after round, every question is approved, until the
			// turn ends.
			asked := 0
			answerRounds(t, base, 5, func(ctx context.Context) error {
				_, err := lead.Run(event.WithSink(agent.WithJournal(ctx, j), sink), agent.Input{Text: "audit the account with key " + secret})
				return err
			}, func(int, tool.Interrupt) bool {
				asked++
				return true
			})
			if asked != 6 {
				t.Errorf("%d questions, want one per grandchild's leaf call (6)", asked)
			}

			// What the policy decided, check by check.
			aud.mu.Lock()
			seen := slices.Clone(aud.seen)
			aud.mu.Unlock()
			want := map[decision]int{}
			for _, d := range seen {
				if d.owner != owner || d.thread != thread {
					t.Errorf("%s at %s was told owner %q and thread %q, want %q and %q", d.what(), d.path, d.owner, d.thread, owner, thread)
				}
				if d.wantPath == "" || d.path != d.wantPath || d.depth != strings.Count(d.wantPath, "/") {
					t.Errorf("%s says it is at %q, depth %d; want %q", d.what(), d.path, d.depth, d.wantPath)
				}
				want[d.decision]++
			}

			// What the event sink was told.
			mu.Lock()
			var strangers struct{ events, spans int } // decisions that name another owner or thread: the first is reported
			gotEvents := map[decision]int{}
			for _, e := range events {
				if e.Type != event.Custom || e.Name != policy.EventName {
					continue
				}
				var v struct {
					Point   policy.Point
					Verdict string
					Rule    string
					Path    string
					Depth   int
					Owner   string
					Thread  string
					Answer  string
				}
				if err := json.Unmarshal(e.Value, &v); err != nil {
					t.Fatal(err)
				}
				if strings.Count(v.Path, "/") != v.Depth {
					t.Errorf("a decision event at %s says depth %d", v.Path, v.Depth)
				}
				if v.Owner != owner || v.Thread != thread {
					if strangers.events == 0 {
						t.Errorf("a decision event at %s names owner %q and thread %q, want %q and %q", v.Path, v.Owner, v.Thread, owner, thread)
					}
					strangers.events++
				}
				gotEvents[decision{path: v.Path, point: v.Point, verdict: v.Verdict, rule: v.Rule, answer: v.Answer}]++
			}
			mu.Unlock()

			// What the spans were told.
			gotSpans := map[decision]int{}
			for _, sp := range rec.Ended() {
				if sp.DroppedEvents() > 0 {
					t.Errorf("span %q dropped %d events", sp.Name(), sp.DroppedEvents())
				}
				for _, e := range sp.Events() {
					if e.Name != policy.EventName {
						continue
					}
					var d decision
					var whose [2]string
					for _, kv := range e.Attributes {
						switch kv.Key {
						case "deputy.policy.owner":
							whose[0] = kv.Value.AsString()
						case "deputy.policy.thread":
							whose[1] = kv.Value.AsString()
						case "deputy.policy.point":
							d.point = policy.Point(kv.Value.AsString())
						case "deputy.policy.verdict":
							d.verdict = kv.Value.AsString()
						case "deputy.policy.rule":
							d.rule = kv.Value.AsString()
						case "deputy.policy.path":
							d.path = kv.Value.AsString()
						case "deputy.policy.answer":
							d.answer = kv.Value.AsString()
						}
					}
					if whose != [2]string{owner, thread} {
						if strangers.spans == 0 {
							t.Errorf("a decision's span event at %s names owner and thread %q, want %q and %q", d.path, whose, owner, thread)
						}
						strangers.spans++
					}
					gotSpans[d]++
				}
			}

			// Each verdict is in the trail from below the lead.
			below := map[string]map[int]int{} // by verdict, by depth
			for d, n := range want {
				if below[d.verdict] == nil {
					below[d.verdict] = map[int]int{}
				}
				below[d.verdict][strings.Count(d.path, "/")] += n
			}
			for _, v := range []string{"deny", "ask", "rewrite"} {
				if below[v][2] == 0 {
					t.Errorf("the policy made no %s decision in a grandchild: the test checks too little (%v)", v, below)
				}
			}
			if below["rewrite"][1] == 0 || below["rewrite"][0] == 0 {
				t.Errorf("the policy rewrote nothing in the lead or in a child: the test checks too little (%v)", below)
			}
			if len(seen) == 0 {
				t.Fatal("the policy decided nothing")
			}
			// An Ask is recorded as its question is put, and the answer
			// once it comes: each time the policy asked about a call, one
			// or the other (not the question again, as a resumed run that
			// decides the call anew once did), and one answer for each
			// question answered.
			asks := map[string]int{} // by path, what the policy decided
			for d, n := range want {
				if d.verdict == "ask" {
					asks[d.path] += n
					delete(want, d)
				}
			}
			for _, trail := range []struct {
				name string
				got  map[decision]int
			}{{"CUSTOM events", gotEvents}, {"span events", gotSpans}} {
				got := maps.Clone(trail.got)
				put, answered := map[string]int{}, map[string]int{}
				total := 0
				for d, n := range got {
					switch {
					case d.verdict == "ask" && d.answer == "":
						put[d.path] += n
					case d.answer != "":
						if d.answer != string(policy.Approved) || d.verdict != "allow" || d.rule != "ask-leaf" {
							t.Errorf("the %s record an answer %v, want ask-leaf's questions approved", trail.name, d)
						}
						answered[d.path] += n
						total += n
					default:
						continue
					}
					delete(got, d)
				}
				if total != asked {
					t.Errorf("the %s record %d answers (%v), want one for each of the %d questions answered", trail.name, total, answered, asked)
				}
				for path, n := range asks {
					if answered[path] == 0 || put[path]+answered[path] != n {
						t.Errorf("at %s the policy asked %d times, and the %s record %d questions put and %d answers: want each ask one or the other, and one answer at least",
							path, n, trail.name, put[path], answered[path])
					}
				}
				if !maps.Equal(got, want) {
					t.Errorf("the %s do not tell the %d decisions the policy made: %s", trail.name, len(seen), diff(want, got))
				}
			}
		})
	}
}

// diff says how got differs from want, by decision.
func diff(want, got map[decision]int) string {
	var out []string
	for d, n := range want {
		if got[d] != n {
			out = append(out, fmt.Sprintf("%v: %d recorded, %d made", d, got[d], n))
		}
	}
	for d, n := range got {
		if _, ok := want[d]; !ok {
			out = append(out, fmt.Sprintf("%v: %d recorded, none made", d, n))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
