package treetest_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/log/embedded"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/treetest"
)

// logs is an in-memory OpenTelemetry logger: each record with the span
// its context carried.
type logs struct {
	embedded.Logger
	mu   sync.Mutex
	recs []logged
}

type logged struct {
	rec  otellog.Record
	span trace.SpanContext
}

func (l *logs) Emit(ctx context.Context, r otellog.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, logged{r.Clone(), trace.SpanContextFromContext(ctx)})
}

func (l *logs) Enabled(context.Context, otellog.EnabledParameters) bool { return true }

func attrs(r otellog.Record) map[string]string {
	m := map[string]string{}
	r.WalkAttributes(func(kv attribute.KeyValue) bool {
		m[string(kv.Key)] = kv.Value.String()
		return true
	})
	return m
}

// reviewTree runs a lead that asks two critics at once, traced.
func reviewTree(t *testing.T, p provider.Provider, tp trace.TracerProvider) (agent.Output, *subagent.Tree) {
	t.Helper()
	critic, err := subagent.FromReact("critic", "Checks one aspect.", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.NewReact(p, agent.WithName("lead"), agent.WithTools(critic), agent.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	tree := subagent.NewTree(nil)
	out, err := lead.Run(event.WithSink(context.Background(), tree), agent.Input{Text: "Review."})
	if err != nil {
		t.Fatal(err)
	}
	return out, tree
}

func reviewModel() *fake.Provider {
	return fake.NewProvider(
		fake.Calls(provider.ToolCall{ID: "a", Name: "critic", Arguments: json.RawMessage(`{"task":"the numbers"}`)},
			provider.ToolCall{ID: "b", Name: "critic", Arguments: json.RawMessage(`{"task":"the prose"}`)}).For("lead"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if strings.Contains(req.Messages[0].Content, "numbers") {
				return provider.Response{Message: provider.AssistantMessage("The numbers hold.")}, nil
			}
			return provider.Response{Message: provider.AssistantMessage("The prose rambles.")}, nil
		}).For("critic"),
		fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
			if strings.Contains(req.Messages[0].Content, "numbers") {
				return provider.Response{Message: provider.AssistantMessage("The numbers hold.")}, nil
			}
			return provider.Response{Message: provider.AssistantMessage("The prose rambles.")}, nil
		}).For("critic"),
		fake.Text("One of two holds.").For("lead"),
	)
}

func TestEvaluationEventsGoOnTheNodesSpans(t *testing.T) {
	spans := treetest.NewSpans()
	exported := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSpanProcessor(exported))
	out, tree := reviewTree(t, reviewModel(), tp)

	judgeModel := fake.NewProvider(fake.Respond(func(ctx context.Context, req provider.Request) (provider.Response, error) {
		if strings.Contains(req.Messages[0].Content, "rambles") {
			return provider.Response{Message: provider.AssistantMessage(`{"score":0.2,"label":"fail","explanation":"It judges without saying why."}`)}, nil
		}
		return provider.Response{Message: provider.AssistantMessage(`{"score":0.9,"label":"pass","explanation":"Precise."}`)}, nil
	})).Loop()
	judge := cassette.Record(judgeModel)
	l := &logs{}
	sc := &treetest.Scorer{Logger: l, Spans: spans, Rules: []treetest.Rule{
		{Pattern: "critic", Evaluators: []treetest.Evaluator{treetest.Contains("The"), treetest.Judge(judge, "helpful", "Says something useful and why.")}},
		{Evaluators: []treetest.Evaluator{treetest.Equals("One of two holds.")}},
	}}
	rep := sc.Score(context.Background(), out.Answer, tree.Roots())
	if len(rep.Scores) != 5 || rep.Passed() {
		t.Fatalf("scores %+v: want 5, one failing", rep.Scores)
	}
	if s := rep.Scores[3]; s.Path != "critic#1" || s.Evaluator != "helpful" || s.Pass || s.Value != 0.2 || s.Label != "fail" {
		t.Errorf("the judge's score of the second critic: %+v", s)
	}

	// Each node's events are on the span of that node's run.
	spanOf := map[string]trace.SpanContext{}
	for _, s := range exported.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == agent.AttrSubagentRunID {
				spanOf[kv.Value.AsString()] = s.SpanContext()
			}
		}
	}
	roots := tree.Roots()
	if len(l.recs) != 5 || len(spanOf) != 2 {
		t.Fatalf("%d events, %d sub-agent spans; want 5 and 2", len(l.recs), len(spanOf))
	}
	for i, want := range []struct {
		span  trace.SpanContext
		name  string
		value string
		label string
	}{
		{spanOf[roots[0].RunID], "contains", "1", "pass"},
		{spanOf[roots[0].RunID], "helpful", "0.9", "pass"},
		{spanOf[roots[1].RunID], "contains", "1", "pass"},
		{spanOf[roots[1].RunID], "helpful", "0.2", "fail"},
		{trace.SpanContext{}, "equals", "1", "pass"},
	} {
		r := l.recs[i]
		a := attrs(r.rec)
		if r.rec.EventName() != "gen_ai.evaluation.result" || a["gen_ai.evaluation.name"] != want.name ||
			a["gen_ai.evaluation.score.value"] != want.value || a["gen_ai.evaluation.score.label"] != want.label || a["gen_ai.evaluation.explanation"] == "" {
			t.Errorf("event %d: %s %v, want %s %s %s", i, r.rec.EventName(), a, want.name, want.value, want.label)
		}
		if r.span.SpanID() != want.span.SpanID() || r.span.TraceID() != want.span.TraceID() {
			t.Errorf("event %d (%s) is on span %v, want %v", i, want.name, r.span.SpanID(), want.span.SpanID())
		}
	}

	// The judge's calls were recorded, each at a place of its own, and
	// replay with no model.
	c, err := judge.Cassette()
	if err != nil || c.Len() != 2 {
		t.Fatalf("the judge's cassette: %d calls, %v", c.Len(), err)
	}
	if p := c.Entries()[0].Position; p != "judge helpful critic#0" {
		t.Errorf("the judge's first call is at %q", p)
	}
	calls := judgeModel.Calls()
	sc.Rules[0].Evaluators[1] = treetest.Judge(cassette.Replay(c), "helpful", "Says something useful and why.")
	sc.Logger = nil
	again := sc.Score(context.Background(), out.Answer, tree.Roots())
	if judgeModel.Calls() != calls || len(again.Scores) != 5 || again.Scores[3] != rep.Scores[3] {
		t.Errorf("the replayed judge: %+v, model calls %d more", again.Scores, judgeModel.Calls()-calls)
	}
}

func TestEvaluators(t *testing.T) {
	schema, err := treetest.MatchesSchema(json.RawMessage(`{"type":"object","required":["status"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := treetest.MatchesSchema(json.RawMessage(`{"type":12}`)); err == nil {
		t.Error("a schema that does not compile was taken")
	}
	bad := fake.NewProvider(fake.Text("I think it is good.")).Loop()
	for _, tc := range []struct {
		e      treetest.Evaluator
		answer string
		pass   bool
		err    bool
	}{
		{treetest.Equals("yes"), " yes\n", true, false},
		{treetest.Equals("yes"), "no", false, false},
		{treetest.Contains("hold"), "it holds", true, false},
		{schema, "Here: ```json\n{\"status\":\"success\"}\n```", true, false},
		{schema, `{"summary":"x"}`, false, false},
		{schema, `no JSON at all`, false, false},
		{treetest.Func("short", func(a string) (bool, string) { return len(a) < 5, "length" }), "abc", true, false},
		{treetest.Judge(bad, "j", "anything"), "x", false, true},
	} {
		s := (&treetest.Scorer{Rules: []treetest.Rule{{Evaluators: []treetest.Evaluator{tc.e}}}}).Score(context.Background(), tc.answer, nil).Scores[0]
		if s.Pass != tc.pass || (s.Err != "") != tc.err {
			t.Errorf("%s on %q: %+v, want pass %v, error %v", tc.e.Name, tc.answer, s, tc.pass, tc.err)
		}
	}
}
