package temporal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.temporal.io/sdk/client"
	tracing "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
)

// traced is what a tree's spans say: its chat spans and the tokens they
// carry, its execute_tool spans by tool, its policy decisions (span
// events) by point, and the trace of each span.
type traced struct {
	chats          int
	input, output  int64
	tools          map[string]int
	decisions      map[string]int
	denied, traces map[string]int
}

func readSpans(spans []sdktrace.ReadOnlySpan) traced {
	tr := traced{tools: map[string]int{}, decisions: map[string]int{}, denied: map[string]int{}, traces: map[string]int{}}
	for _, s := range spans {
		tr.traces[s.SpanContext().TraceID().String()]++
		name := s.Name()
		switch {
		case strings.HasPrefix(name, "chat"):
			tr.chats++
			for _, a := range s.Attributes() {
				switch a.Key {
				case semconv.GenAIUsageInputTokensKey:
					tr.input += a.Value.AsInt64()
				case semconv.GenAIUsageOutputTokensKey:
					tr.output += a.Value.AsInt64()
				}
			}
		case strings.HasPrefix(name, "execute_tool "):
			tr.tools[strings.TrimPrefix(name, "execute_tool ")]++
		}
		for _, e := range s.Events() {
			if e.Name != policy.EventName {
				continue
			}
			attrs := attribute.NewSet(e.Attributes...)
			point, _ := attrs.Value("deputy.policy.point")
			verdict, _ := attrs.Value("deputy.policy.verdict")
			tool, _ := attrs.Value("deputy.policy.tool")
			tr.decisions[point.AsString()]++
			if verdict.AsString() == "deny" {
				tr.denied[tool.AsString()]++
			}
		}
	}
	return tr
}

// checkTraced checks the spans of a run of the whole policy tree against
// what its models were asked and billed, what its tools ran and what its
// policy decided.
func checkTraced(t *testing.T, got traced, tr *policyTree, w *watcher) {
	t.Helper()
	requests := 0
	for _, m := range tr.models() {
		n, _ := m.sent("")
		requests += n
	}
	// Each request of the test's models bills 10 tokens in and 2 out.
	if got.chats != requests || requests == 0 || got.input != 10*int64(requests) || got.output != 2*int64(requests) {
		t.Errorf("%d chat spans with %d tokens in and %d out; the models were asked %d times and billed %d and %d",
			got.chats, got.input, got.output, requests, 10*requests, 2*requests)
	}
	for _, name := range []string{"search", "leaf", "lookup", "record"} {
		if got.tools[name] != tr.tools.runs(name) || got.tools[name] == 0 {
			t.Errorf("%d execute_tool %s spans; the tool ran %d times", got.tools[name], name, tr.tools.runs(name))
		}
	}
	if got.tools["worker"] != int(tr.builds.Load()) {
		t.Errorf("%d execute_tool worker spans; the factory built its agent %d times", got.tools["worker"], tr.builds.Load())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range []policy.Point{policy.BeforeTool, policy.BeforeModel, policy.BeforeDelegation, policy.AfterResult} {
		if got.decisions[string(p)] != w.points[p] || w.points[p] == 0 {
			t.Errorf("%d policy span events at %s; the policy decided %d times there (all the points: spans %v, decisions %v)", got.decisions[string(p)], p, w.points[p], got.decisions, w.points)
		}
	}
	if got.denied["rm"] != 7 {
		t.Errorf("%d span events deny rm, want the 7 the policy denied", got.denied["rm"])
	}
}

// With Runtime.TracerProvider, a worker traces the tree's activities as
// a run is traced in process: a chat span per model call with the tokens
// it billed (the factory's agent's own, run in process, under its call's
// execute_tool span), an execute_tool span per tool call, and each policy
// decision a span event — whatever ids the models give their calls.
func TestWorkerTracesItsActivities(t *testing.T) {
	for _, mode := range policyIDModes {
		t.Run(mode.name, func(t *testing.T) {
			w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}}
			pol, err := policy.New(w, policy.DenyTools("no-rm", policy.AnyDepth, "rm"))
			if err != nil {
				t.Fatal(err)
			}
			tr := newPolicyTree(t, mode.id, pol, true)
			rec := tracetest.NewSpanRecorder()
			tr.rt.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			env := newEnv(t, tr.rt)
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: tr.spec, Text: "audit the account"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			checkTraced(t, readSpans(rec.Ended()), tr, w)
		})
	}
}

// With go.temporal.io/sdk/contrib/opentelemetry's tracing interceptor on
// the client and the worker, and no TracerProvider, a whole tree on a
// server is one trace, that of the span its program started it under:
// its child workflows' activities, its factory child's run in process,
// every model call and tool call, and every policy decision.
func TestTreeIsOneTraceOnTemporal(t *testing.T) {
	hostPort, ns := serverAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	in, err := tracing.NewTracingInterceptor(tracing.TracerOptions{Tracer: tp.Tracer("temporal")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: ns, Interceptors: []interceptor.ClientInterceptor{in}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := &watcher{points: map[policy.Point]int{}, tools: map[string]int{}}
	pol, err := policy.New(w, policy.DenyTools("no-rm", policy.AnyDepth, "rm"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newPolicyTree(t, policyIDModes[0].id, pol, true)
	queue := id.New("trace-")
	wk := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{in}})
	Register(wk, tr.rt)
	if err := wk.Start(); err != nil {
		t.Fatal(err)
	}
	defer wk.Stop()

	ctx, root := tp.Tracer("test").Start(ctx, "audit")
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, AgentWorkflowName, RunInput{Spec: tr.spec, Text: "audit the account"})
	if err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	root.End()
	wk.Stop()

	spans := rec.Ended()
	got := readSpans(spans)
	checkTraced(t, got, tr, w)
	if want := root.SpanContext().TraceID().String(); len(got.traces) != 1 || got.traces[want] == 0 {
		t.Errorf("the tree's %d spans are in the traces %v, want all in the program's, %s", len(spans), got.traces, want)
	}
	if t.Failed() {
		for _, s := range spans {
			fmt.Printf("%s %s parent %s\n", s.SpanContext().TraceID(), s.Name(), s.Parent().SpanID())
		}
	}
}

// A model call whose provider panics is traced as failed, with the
// panic's error, not as a call that succeeded.
func TestPanickedModelCallIsTracedAsFailed(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	panicky := provider.Func(func(context.Context, provider.Request) (provider.Response, error) { panic("out of cheese") })
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": panicky}, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m"}, Text: "hello"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "out of cheese") {
		t.Fatalf("the run ended %v, want the provider's panic", err)
	}
	spans := rec.Ended()
	if len(spans) == 0 {
		t.Fatal("no span was recorded")
	}
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "chat") && (s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "out of cheese")) {
			t.Errorf("the chat span ended %v %q, want an error naming the panic", s.Status().Code, s.Status().Description)
		}
	}
}
