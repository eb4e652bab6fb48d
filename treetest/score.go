package treetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/internal/jsonextract"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
)

// Score is one evaluator's verdict on one answer.
type Score struct {
	// Evaluator is the evaluator's name (gen_ai.evaluation.name), Path
	// the node it scored ("" for the run's own answer).
	Evaluator string `json:"evaluator"`
	Path      string `json:"path,omitempty"`
	// Value is the score, from 0 to 1; Label names it ("pass", "fail");
	// Explanation says why. Pass is the verdict a dataset counts.
	Value       float64 `json:"value"`
	Label       string  `json:"label"`
	Explanation string  `json:"explanation,omitempty"`
	Pass        bool    `json:"pass"`
	// Err is set when the evaluator could not score (a judge's provider
	// failed): the score is no verdict, and does not pass.
	Err string `json:"error,omitempty"`
}

// Evaluator scores an answer. Fn must be safe for concurrent use.
type Evaluator struct {
	// Name is the evaluation's name, as the event and report carry it.
	Name string
	// Fn scores answer, the text a node (or the run) answered with.
	Fn func(ctx context.Context, answer string) (Score, error)
}

func verdict(pass bool, explanation string) Score {
	if pass {
		return Score{Value: 1, Label: "pass", Pass: true, Explanation: explanation}
	}
	return Score{Value: 0, Label: "fail", Explanation: explanation}
}

// Equals passes an answer equal to want, spaces around it aside.
func Equals(want string) Evaluator {
	return Evaluator{Name: "equals", Fn: func(_ context.Context, answer string) (Score, error) {
		got := strings.TrimSpace(answer)
		return verdict(got == strings.TrimSpace(want), fmt.Sprintf("answer %q, want %q", clip(got, 200), clip(want, 200))), nil
	}}
}

// Contains passes an answer that holds s.
func Contains(s string) Evaluator {
	return Evaluator{Name: "contains", Fn: func(_ context.Context, answer string) (Score, error) {
		return verdict(strings.Contains(answer, s), fmt.Sprintf("looked for %q in %q", s, clip(answer, 200))), nil
	}}
}

// MatchesSchema passes an answer whose JSON (a bare value, a fenced block,
// or the last object in prose) matches schema; it fails when schema does
// not compile.
func MatchesSchema(schema json.RawMessage) (Evaluator, error) {
	s, err := jsonschema.Compile(schema)
	if err != nil {
		return Evaluator{}, fmt.Errorf("treetest: MatchesSchema: %w", err)
	}
	return Evaluator{Name: "schema", Fn: func(ctx context.Context, answer string) (Score, error) {
		doc, ok := jsonextract.Find(answer)
		if !ok {
			return verdict(false, "the answer holds no JSON value"), nil
		}
		if err := s.ValidateText(ctx, doc); err != nil {
			return verdict(false, err.Error()), nil
		}
		return verdict(true, "the answer matches the schema"), nil
	}}, nil
}

// Func makes an evaluator of a Go func that says whether an answer
// passes, and why.
func Func(name string, fn func(answer string) (pass bool, why string)) Evaluator {
	return Evaluator{Name: name, Fn: func(_ context.Context, answer string) (Score, error) {
		pass, why := fn(answer)
		return verdict(pass, why), nil
	}}
}

// judgeSystem is the judge's instructions.
const judgeSystem = `You grade an answer against a criterion. Reply with one JSON object and nothing else: {"score": a number from 0 to 1, "label": "pass" or "fail", "explanation": one sentence}.`

// judgeMaxTokens bounds the judge's reply.
const judgeMaxTokens = 512

// Judge is a model-graded evaluator: it asks p whether an answer meets
// criterion, and reads back a score from 0 to 1, a label and an
// explanation; an answer passes when the label is "pass" (or, without
// one, when the score is at least 0.5). p is any Provider — a cassette's,
// so that the judge's calls are recorded and replayed with the tree's:
// each judge call runs at the place "judge <name> <path>" of a cassette.
// A reply that is no such object is an error, and so no verdict.
func Judge(p provider.Provider, name, criterion string) Evaluator {
	return Evaluator{Name: name, Fn: func(ctx context.Context, answer string) (Score, error) {
		req := provider.Request{System: judgeSystem, MaxTokens: judgeMaxTokens, Messages: []provider.Message{
			provider.UserMessage("Criterion: " + criterion + "\n\nAnswer:\n" + answer),
		}}
		resp, err := p.Complete(ctx, req)
		if err != nil {
			return Score{}, fmt.Errorf("judge %q: %w", name, err)
		}
		var v struct {
			Score       *float64 `json:"score"`
			Label       string   `json:"label"`
			Explanation string   `json:"explanation"`
		}
		doc, ok := jsonextract.Find(resp.Message.Content)
		if !ok || json.Unmarshal([]byte(doc), &v) != nil || v.Score == nil || *v.Score < 0 || *v.Score > 1 {
			return Score{}, fmt.Errorf("judge %q: the reply is not {\"score\": 0..1, \"label\", \"explanation\"}: %q", name, clip(resp.Message.Content, 200))
		}
		s := Score{Value: *v.Score, Label: clip(v.Label, 64), Explanation: clip(v.Explanation, 1000)}
		s.Pass = s.Label == "pass" || s.Label == "" && s.Value >= 0.5
		return s, nil
	}}
}

// A Rule scores the answers of the nodes matching Pattern (see Match)
// with Evaluators; the empty pattern scores the run's own answer.
type Rule struct {
	Pattern    string
	Evaluators []Evaluator
}

// Report is the scores of one run.
type Report struct {
	Scores []Score `json:"scores"`
}

// Passed reports whether every score passed.
func (r Report) Passed() bool {
	for _, s := range r.Scores {
		if !s.Pass {
			return false
		}
	}
	return true
}

// The names of the evaluation event and its attributes, as the
// OpenTelemetry GenAI semantic conventions define them.
const (
	EventEvaluationResult = "gen_ai.evaluation.result"
	AttrEvaluationName    = attribute.Key("gen_ai.evaluation.name")
	AttrScoreValue        = attribute.Key("gen_ai.evaluation.score.value")
	AttrScoreLabel        = attribute.Key("gen_ai.evaluation.score.label")
	AttrExplanation       = attribute.Key("gen_ai.evaluation.explanation")
	AttrErrorType         = attribute.Key("error.type")
)

// Scorer scores runs: Rules, and where each score goes as an event.
type Scorer struct {
	// Rules are what to score.
	Rules []Rule
	// Logger, when set, receives each score as the event
	// gen_ai.evaluation.result, parented to the span of the node it
	// scored (found in Spans), or to the span of the context Score is
	// given for the run's own answer.
	Logger otellog.Logger
	// Spans finds each node's span (see Spans).
	Spans *Spans
}

// Score scores the run whose answer is answer and whose tree is roots,
// one rule after another, one node after another in the order of the
// calls, and returns the scores.
func (s *Scorer) Score(ctx context.Context, answer string, roots []*subagent.Node) Report {
	tr := (&Tree{roots: roots, byRun: map[string]*node{}}).build()
	var rep Report
	for _, r := range s.Rules {
		if r.Pattern == "" {
			for _, e := range r.Evaluators {
				rep.Scores = append(rep.Scores, s.one(ctx, trace.SpanContextFromContext(ctx), e, "", answer))
			}
			continue
		}
		for _, n := range tr.nodes {
			if !Match(r.Pattern, n.path) {
				continue
			}
			var sc trace.SpanContext
			if s.Spans != nil {
				sc, _ = s.Spans.Of(n.RunID)
			}
			for _, e := range r.Evaluators {
				rep.Scores = append(rep.Scores, s.one(ctx, sc, e, n.path, Answer(n.Node)))
			}
		}
	}
	return rep
}

func (s *Scorer) one(ctx context.Context, span trace.SpanContext, e Evaluator, path, answer string) Score {
	jctx := run.Start(ctx, "", strings.TrimSpace("judge "+e.Name+" "+path), 0)
	sc, err := e.Fn(jctx, answer)
	sc.Evaluator, sc.Path = e.Name, path
	if err != nil {
		sc = Score{Evaluator: e.Name, Path: path, Label: "error", Err: err.Error()}
	}
	if s.Logger != nil {
		var rec otellog.Record
		rec.SetEventName(EventEvaluationResult)
		rec.SetSeverity(otellog.SeverityInfo)
		rec.AddAttributes(AttrEvaluationName.String(e.Name), AttrScoreLabel.String(sc.Label))
		if err != nil {
			rec.AddAttributes(AttrErrorType.String("evaluation_failed"), AttrExplanation.String(clip(sc.Err, 1000)))
		} else {
			rec.AddAttributes(AttrScoreValue.Float64(sc.Value), AttrExplanation.String(sc.Explanation))
		}
		ectx := ctx
		if span.IsValid() {
			ectx = trace.ContextWithSpanContext(ctx, span)
		}
		s.Logger.Emit(ectx, rec)
	}
	return sc
}

// Spans is an OpenTelemetry span processor (sdktrace.SpanProcessor) that
// keeps the span context of each sub-agent invocation's run, by its
// sub-agent run id, so that a Scorer parents each node's evaluation event
// to the node's span. Register it with the tracer provider the agents use
// (sdktrace.WithSpanProcessor). It keeps at most 1<<16 spans.
type Spans struct {
	mu    sync.Mutex
	byRun map[string]trace.SpanContext
}

// NewSpans returns an empty Spans.
func NewSpans() *Spans { return &Spans{byRun: map[string]trace.SpanContext{}} }

// Of returns the span of the run of the sub-agent invocation runID.
func (s *Spans) Of(runID string) (trace.SpanContext, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.byRun[runID]
	return sc, ok
}

// OnStart keeps the span of an agent run that a sub-agent invocation
// started (the last, when it started more than one).
func (s *Spans) OnStart(_ context.Context, sp sdktrace.ReadWriteSpan) {
	for _, kv := range sp.Attributes() {
		if kv.Key == agent.AttrSubagentRunID {
			s.mu.Lock()
			// A corrected child runs again under the same id: its last
			// run, which gave the answer, is kept.
			if _, ok := s.byRun[kv.Value.AsString()]; ok || len(s.byRun) < 1<<16 {
				s.byRun[kv.Value.AsString()] = sp.SpanContext()
			}
			s.mu.Unlock()
			return
		}
	}
}

// OnEnd does nothing.
func (s *Spans) OnEnd(sdktrace.ReadOnlySpan) {}

// Shutdown does nothing.
func (s *Spans) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (s *Spans) ForceFlush(context.Context) error { return nil }
