package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func decide(v policy.Verdict, reason string) policy.Rule {
	return policy.Func("r-"+string(v)+reason, func(context.Context, *policy.Check) policy.Decision {
		return policy.Decision{Verdict: v, Reason: reason}
	})
}

// Rules are asked in order; a Deny beats an Ask, an Ask a Rewrite; a
// rule that panics or answers nonsense denies; Ask where no person can
// be asked denies.
func TestDecideCombinesRules(t *testing.T) {
	panics := policy.Func("panics", func(context.Context, *policy.Check) policy.Decision { panic("boom") })
	tests := []struct {
		name  string
		rules []policy.Rule
		point policy.Point
		want  policy.Outcome
	}{
		{"none object", []policy.Rule{decide(policy.Allow, "")}, policy.BeforeTool, policy.Outcome{}},
		{"deny beats ask", []policy.Rule{decide(policy.Ask, "q"), decide(policy.Deny, "no")}, policy.BeforeTool, policy.Outcome{Verdict: policy.Deny, Rule: "r-denyno", Reason: "no"}},
		{"ask beats rewrite", []policy.Rule{decide(policy.Rewrite, "w"), decide(policy.Ask, "q")}, policy.BeforeTool, policy.Outcome{Verdict: policy.Ask, Rule: "r-askq", Reason: "q"}},
		{"first deny wins", []policy.Rule{decide(policy.Deny, "a"), decide(policy.Deny, "b")}, policy.BeforeDelegation, policy.Outcome{Verdict: policy.Deny, Rule: "r-denya", Reason: "a"}},
		{"rewrite", []policy.Rule{decide(policy.Rewrite, "w")}, policy.BeforeModel, policy.Outcome{Verdict: policy.Rewrite, Rule: "r-rewritew", Reason: "w"}},
		{"panic denies", []policy.Rule{panics}, policy.BeforeTool, policy.Outcome{Verdict: policy.Deny, Rule: "panics", Reason: "the rule panicked: boom"}},
		{"nonsense denies", []policy.Rule{decide("maybe", "")}, policy.BeforeTool, policy.Outcome{Verdict: policy.Deny, Rule: "r-maybe", Reason: `the rule returned an unknown verdict "maybe"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.New(tt.rules...)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Decide(context.Background(), &policy.Check{Point: tt.point}); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	p, _ := policy.New(decide(policy.Ask, "q"))
	if got := p.Decide(context.Background(), &policy.Check{Point: policy.AfterResult}); got.Verdict != policy.Deny {
		t.Errorf("Ask after a result: %+v, want a denial", got)
	}
}

func TestNewRefusesBadRules(t *testing.T) {
	r := decide(policy.Allow, "")
	for name, rules := range map[string][]policy.Rule{
		"nil":       {nil},
		"no name":   {policy.Func("", nil)},
		"same name": {r, decide(policy.Allow, "")},
	} {
		if _, err := policy.New(rules...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p, err := policy.New(r, r)
	if err != nil || len(p.Rules()) != 1 {
		t.Errorf("the same rule twice: %v, %d rules", err, len(p.Rules()))
	}
}

func TestToolLists(t *testing.T) {
	allow := policy.AllowTools("allow", 1, "search_*", "read")
	deny := policy.DenyTools("deny", policy.AnyDepth, "*delete*")
	tests := []struct {
		tool   string
		depth  int
		denied string // the rule, or ""
	}{
		{"search_web", 1, ""},
		{"search_", 1, ""},
		{"search", 1, "allow"},
		{"read", 1, ""},
		{"write", 1, "allow"},
		{"write", 0, ""},
		{"bulk_delete_all", 0, "deny"},
		{"delete", 2, "deny"},
		{"read", 1, ""},
	}
	p, err := policy.New(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		c := &policy.Check{Point: policy.BeforeTool, Tool: tt.tool, Depth: tt.depth}
		// Decide fills in the depth from the context: ask the rules.
		got := ""
		for _, r := range p.Rules() {
			if d := r.Decide(context.Background(), c); d.Verdict == policy.Deny && got == "" {
				got = r.Name()
			}
		}
		if got != tt.denied {
			t.Errorf("%s at depth %d: denied by %q, want %q", tt.tool, tt.depth, got, tt.denied)
		}
	}
}

func TestPathUnder(t *testing.T) {
	r := policy.PathUnder("sandbox", "write_*", "path", "/srv/work")
	for args, ok := range map[string]bool{
		`{"path":"/srv/work/a.txt"}`:         true,
		`{"path":"notes/b.txt"}`:             true,
		`{"path":"/srv/work"}`:               true,
		`{"path":"/srv/work/../etc/passwd"}`: false,
		`{"path":"../x"}`:                    false,
		`{"path":"/srv/workshop/x"}`:         false,
		`{"path":"/etc/passwd"}`:             false,
		`{"path":7}`:                         false,
		`{}`:                                 false,
		`[1]`:                                false,
	} {
		d := r.Decide(context.Background(), &policy.Check{Point: policy.BeforeTool, Tool: "write_file", Arguments: json.RawMessage(args)})
		if (d.Verdict == policy.Allow) != ok {
			t.Errorf("%s: %+v", args, d)
		}
	}
	if d := r.Decide(context.Background(), &policy.Check{Point: policy.BeforeTool, Tool: "read_file", Arguments: json.RawMessage(`{"path":"/etc"}`)}); d.Verdict != policy.Allow {
		t.Errorf("another tool: %+v", d)
	}
}

// The redactor replaces named values and patterns in everything it
// guards, without writing into what it was given.
func TestRedact(t *testing.T) {
	const key = `sk-"quoted"\key`
	r := policy.Redact("secrets", []string{key, ""}, regexp.MustCompile(`AKIA[0-9A-Z]{16}`))
	args, _ := json.Marshal(map[string]string{"q": "use " + key})
	c := &policy.Check{Point: policy.BeforeTool, Arguments: args}
	if d := r.Decide(context.Background(), c); d.Verdict != policy.Rewrite || strings.Contains(string(c.Arguments), "quoted") || !json.Valid(c.Arguments) {
		t.Errorf("arguments: %+v, %s", d, c.Arguments)
	}
	msgs := []provider.Message{provider.UserMessage("aws AKIAABCDEFGHIJKLMNOP and " + key), provider.AssistantMessage("fine")}
	c = &policy.Check{Point: policy.BeforeDelegation, Task: "key " + key, Context: msgs}
	r.Decide(context.Background(), c)
	if c.Task != "key "+policy.Redacted || c.Context[0].Content != "aws "+policy.Redacted+" and "+policy.Redacted {
		t.Errorf("hand-off: %q, %q", c.Task, c.Context[0].Content)
	}
	if !strings.Contains(msgs[0].Content, key) {
		t.Error("the redactor wrote into the messages it was given")
	}
	c = &policy.Check{Point: policy.BeforeModel, Depth: 1, Request: &provider.Request{System: key, Messages: msgs}}
	r.Decide(context.Background(), c)
	if c.Request.System != policy.Redacted || strings.Contains(c.Request.Messages[0].Content, key) {
		t.Errorf("a child's request: %+v", c.Request)
	}
	c = &policy.Check{Point: policy.BeforeModel, Depth: 0, Request: &provider.Request{System: key}}
	if d := r.Decide(context.Background(), c); d.Verdict != policy.Allow {
		t.Errorf("the top-level agent's own request was rewritten: %+v", d)
	}
	c = &policy.Check{Point: policy.AfterResult, Result: "it is " + key}
	if r.Decide(context.Background(), c); c.Result != "it is "+policy.Redacted {
		t.Errorf("result %q", c.Result)
	}
}

// A pattern is found wherever it matches, whether or not every match
// begins with the same text, in a text and in JSON arguments, and a text
// without a match is left as it was.
func TestRedactPatterns(t *testing.T) {
	r := policy.Redact("secrets", nil, regexp.MustCompile(`tok_[a-z]{6}`), regexp.MustCompile(`(?i)password=\w+`), regexp.MustCompile(`[0-9]{4}-[0-9]{4}`))
	c := &policy.Check{Point: policy.AfterResult, Result: "tok_abcdef, PassWord=hunter2 and 1234-5678"}
	if d := r.Decide(context.Background(), c); d.Verdict != policy.Rewrite || c.Result != strings.Repeat(policy.Redacted+", ", 1)+policy.Redacted+" and "+policy.Redacted {
		t.Errorf("result %q (%+v)", c.Result, d)
	}
	c = &policy.Check{Point: policy.BeforeTool, Arguments: json.RawMessage(`{"a":"tok_qwerty","b":"password=x1"}`)}
	if r.Decide(context.Background(), c); string(c.Arguments) != `{"a":"`+policy.Redacted+`","b":"`+policy.Redacted+`"}` {
		t.Errorf("arguments %s", c.Arguments)
	}
	c = &policy.Check{Point: policy.AfterResult, Result: "tok_ABCDEF and tok_abc: no secret"}
	if d := r.Decide(context.Background(), c); d.Verdict != policy.Allow || c.Result != "tok_ABCDEF and tok_abc: no secret" {
		t.Errorf("a text without a secret: %q (%+v)", c.Result, d)
	}
}

type sink struct {
	mu  sync.Mutex
	got []event.Event
}

func (s *sink) Emit(e event.Event) { s.mu.Lock(); s.got = append(s.got, e); s.mu.Unlock() }

// Every decision is a CUSTOM event and a span event, a denial names its
// rule, the model reads why, and the Go caller gets the *Denial.
func TestDecisionsAreRecorded(t *testing.T) {
	p, err := policy.New(policy.DenyTools("no-shell", policy.AnyDepth, "shell"))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	shell := tool.Func{Def: tool.Definition{Name: "shell", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(context.Context, tool.Call) (tool.Result, error) {
			ran = true
			return tool.Result{Content: "ok"}, nil
		}}
	model := fake.NewProvider(fake.Call("shell", `{"cmd":"rm -rf /"}`), fake.Text("could not"))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	a, err := agent.NewReact(model, agent.WithName("lead"), agent.WithTools(shell), agent.WithPolicy(p), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	out, err := a.Run(event.WithSink(context.Background(), &s), agent.Input{Text: "clean up"})
	if err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Fatal("the denied call ran")
	}
	reqs := model.Requests()
	last := reqs[len(reqs)-1].Request.Messages
	if got := last[len(last)-1]; !got.IsError || !strings.Contains(got.Content, `rule "no-shell"`) {
		t.Errorf("the model read %+v", got)
	}
	if len(out.Denials) != 1 || out.Denials[0].Rule != "no-shell" || out.Denials[0].Path != "lead" || !errors.Is(out.Denials[0], policy.ErrDenied) {
		t.Errorf("denials %+v", out.Denials)
	}
	var verdicts []string
	for _, e := range s.got {
		if e.Type == event.Custom && e.Name == policy.EventName {
			var v struct{ Point, Verdict, Rule string }
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatal(err)
			}
			verdicts = append(verdicts, v.Point+":"+v.Verdict+":"+v.Rule)
		}
	}
	want := "model:allow:,tool:deny:no-shell,model:allow:"
	if got := strings.Join(verdicts, ","); got != want {
		t.Errorf("decision events %s, want %s", got, want)
	}
	spanEvents := 0
	for _, sp := range rec.Ended() {
		for _, e := range sp.Events() {
			if e.Name == policy.EventName {
				spanEvents++
			}
		}
	}
	if spanEvents != 3 {
		t.Errorf("%d span events, want 3", spanEvents)
	}
}

// A model call a policy denies fails the run with the *Denial.
func TestDeniedModelCallFailsTheRun(t *testing.T) {
	p, _ := policy.New(policy.Func("no-models", func(_ context.Context, c *policy.Check) policy.Decision {
		if c.Point == policy.BeforeModel {
			return policy.Denied("offline")
		}
		return policy.Decision{}
	}))
	model := fake.NewProvider(fake.Text("hi"))
	a, _ := agent.NewReact(model, agent.WithPolicy(p))
	_, err := a.Run(context.Background(), agent.Input{Text: "hello"})
	var d *policy.Denial
	if !errors.As(err, &d) || d.Rule != "no-models" || model.Calls() != 0 {
		t.Fatalf("err %v, %d model calls", err, model.Calls())
	}
}

// A rule of the user's own is asked at every point, and at a point that
// is none of the four; the ready-made rules, asked only where they can
// decide, decide there as before.
func TestEveryRuleIsAskedWhereItCanDecide(t *testing.T) {
	var mu sync.Mutex
	asked := map[policy.Point]int{}
	own := policy.Func("own", func(_ context.Context, c *policy.Check) policy.Decision {
		mu.Lock()
		defer mu.Unlock()
		asked[c.Point]++
		return policy.Decision{}
	})
	p, err := policy.New(policy.DenyTools("no-shell", policy.AnyDepth, "shell"), policy.AskBefore("ask", "pay"), own,
		policy.Redact("secrets", []string{"s3cret"}), policy.PathUnder("sandbox", "write", "path", "/srv"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, pt := range []policy.Point{policy.BeforeTool, policy.BeforeDelegation, policy.AfterResult, policy.BeforeModel, "custom"} {
		p.Decide(ctx, &policy.Check{Point: pt, Tool: "lookup"})
	}
	for _, pt := range []policy.Point{policy.BeforeTool, policy.BeforeDelegation, policy.AfterResult, policy.BeforeModel, "custom"} {
		if asked[pt] != 1 {
			t.Errorf("the user's rule was asked %d times at %q, want 1", asked[pt], pt)
		}
	}
	for tool, want := range map[string]policy.Verdict{"shell": policy.Deny, "pay": policy.Ask, "write": policy.Deny} {
		if got := p.Decide(ctx, &policy.Check{Point: policy.BeforeTool, Tool: tool, Arguments: json.RawMessage(`{"path":"/etc/passwd"}`)}); got.Verdict != want {
			t.Errorf("a call of %s: %+v, want %s", tool, got, want)
		}
	}
	c := &policy.Check{Point: policy.AfterResult, Tool: "lookup", Result: "it is s3cret"}
	if got := p.Decide(ctx, c); got.Verdict != policy.Rewrite || c.Result != "it is "+policy.Redacted {
		t.Errorf("a result with the secret: %+v, %q", got, c.Result)
	}
	c = &policy.Check{Point: policy.BeforeDelegation, Tool: "child", Task: "use s3cret"}
	if got := p.Decide(ctx, c); got.Verdict != policy.Rewrite || c.Task != "use "+policy.Redacted {
		t.Errorf("a hand-off with the secret: %+v, %q", got, c.Task)
	}
}

// A secret in JSON arguments is found however JSON spells it — a
// character as a \u escape, "/" as "\/" — since the tool reads the
// arguments decoded: a value, or a match of a pattern, in any string of
// them (a key too) is redacted, and the arguments stay valid JSON.
func TestRedactEscapedArguments(t *testing.T) {
	r := policy.Redact("secrets", []string{"wJalr/K7MDENG"}, regexp.MustCompile(`tok_[a-z]{6}`))
	for _, args := range []string{
		`{"body":"key wJalr\/K7MDENG"}`,
		`{"body":"key \u0077Jalr/K7MDENG"}`,
		`{"a":[1,{"b":"tok_\u0061bcdef"}],"n":1.50}`,
		`{"tok_\u0071wertz":true}`,
	} {
		c := &policy.Check{Point: policy.BeforeTool, Arguments: json.RawMessage(args)}
		d := r.Decide(context.Background(), c)
		var v any
		if err := json.Unmarshal(c.Arguments, &v); err != nil {
			t.Errorf("%s: the arguments became %s: %v", args, c.Arguments, err)
			continue
		}
		decoded, _ := json.Marshal(v)
		if d.Verdict != policy.Rewrite || strings.Contains(string(decoded), "wJalr/K7MDENG") || strings.Contains(string(decoded), "tok_") ||
			!strings.Contains(string(c.Arguments), policy.Redacted) {
			t.Errorf("%s: %+v, %s: want the secret redacted", args, d, c.Arguments)
		}
	}
	c := &policy.Check{Point: policy.BeforeTool, Arguments: json.RawMessage(`{"code":"a\nb \"q\" \u00e9"}`)}
	if d := r.Decide(context.Background(), c); d.Verdict != policy.Allow || string(c.Arguments) != `{"code":"a\nb \"q\" \u00e9"}` {
		t.Errorf("arguments with escapes and no secret: %+v, %s: want them as they were", d, c.Arguments)
	}
}
