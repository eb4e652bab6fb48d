package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// script is a provider whose answer depends on the request: it counts its
// calls and the usage it handed out.
type script struct {
	mu    sync.Mutex
	calls int
	usage provider.Usage
	fn    func(ctx context.Context, n int, req provider.Request) (provider.Message, error)
	model string // the model each reply names ("": none)
}

func (s *script) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	msg, err := s.fn(ctx, n, req)
	if err != nil {
		return provider.Response{}, err
	}
	u := fake.Usage(req, msg)
	s.mu.Lock()
	s.usage = s.usage.Add(u)
	s.mu.Unlock()
	return provider.Response{Message: msg, Usage: u, StopReason: provider.StopEndTurn, Model: s.model}, nil
}

func (s *script) total() (int, provider.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.usage
}

// The SDK's test environment does two things inside a workflow's
// coroutine that a worker does not: it writes its log to standard output
// line by line (a line per child started, per activity: a pipe that
// blocks while a loaded machine starves go test's reader), and the first
// activity a test process schedules hashes the test binary for the
// worker's default build id, about 100 ms of CPU under the race detector,
// where a worker hashes it once as it is made, before any workflow task.
// So the tests set the build id and discard the log, as example_test.go
// does.
func init() { worker.SetBinaryChecksum("deputy-test") }

// testDeadlockTimeout is the SDK's deadlock detector's bound on a
// workflow task in the test environment, in place of its 1 s of wall
// time: the environment builds a whole environment for each child a
// workflow starts, inside the workflow's coroutine, and under the race
// detector on two cores shared with other work, a task of 50 ms of CPU
// (a lead starting a hundred children, a turn decoding a 768 KiB input)
// was seen to take over a second. Workers keep the SDK's default; code
// that blocks outside the SDK still fails here, after 10 s.
const testDeadlockTimeout = 10 * time.Second

func newEnv(t *testing.T, rt *Runtime) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := ts.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: testDeadlockTimeout})
	Register(env, rt)
	return env
}

func spawnCalls(n int) provider.Message {
	calls := make([]provider.ToolCall, n)
	for i := range calls {
		calls[i] = provider.ToolCall{ID: fmt.Sprintf("c%d", i), Name: SpawnToolName, Arguments: json.RawMessage(fmt.Sprintf(`{"task":"part %d"}`, i))}
	}
	return provider.AssistantMessage("", calls...)
}

func lastUser(req provider.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == provider.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}

// fanOut answers as a lead that spawns n children, each of which answers
// "done: <task>", and then sums up.
func fanOut(n int) *script {
	return &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage("done: " + task), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			return provider.AssistantMessage(fmt.Sprintf("all %d parts done", n)), nil
		default:
			return spawnCalls(n), nil
		}
	}}
}

func TestFanOutAsChildWorkflows(t *testing.T) {
	p := fanOut(5)
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	var children atomic.Int32
	env.SetOnChildWorkflowStartedListener(func(*workflow.Info, workflow.Context, converter.EncodedValues) { children.Add(1) })
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Name: "lead", Provider: "m", Spawn: true}, Text: "do it"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Answer != "all 5 parts done" {
		t.Fatalf("answer %q", out.Answer)
	}
	if got := children.Load(); got != 5 {
		t.Fatalf("%d child workflows, want 5", got)
	}
	calls, total := p.total()
	if calls != 7 {
		t.Fatalf("%d model calls, want 7", calls)
	}
	if out.TotalUsage() != total {
		t.Fatalf("usage %v, the provider handed out %v", out.TotalUsage(), total)
	}
	if out.ChildUsage.Requests != 5 || out.Usage.Requests != 2 {
		t.Fatalf("own %v child %v", out.Usage, out.ChildUsage)
	}
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool && (m.IsError || !strings.HasPrefix(m.Content, "done: part ")) {
			t.Fatalf("tool message %+v", m)
		}
	}
}

func TestDepthCapHidesAndRefusesSpawn(t *testing.T) {
	var childTools [][]provider.ToolDef
	var mu sync.Mutex
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			mu.Lock()
			childTools = append(childTools, req.Tools)
			mu.Unlock()
			last := req.Messages[len(req.Messages)-1]
			if last.Role == provider.RoleTool {
				return provider.AssistantMessage("child saw: " + last.Content), nil
			}
			// A direct call of a tool the child was not offered.
			return spawnCalls(1), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			return provider.AssistantMessage(req.Messages[len(req.Messages)-1].Content), nil
		default:
			return spawnCalls(1), nil
		}
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true}, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if len(childTools) == 0 || len(childTools[0]) != 0 {
		t.Fatalf("child was offered %v, want nothing at the depth cap", childTools)
	}
	if !strings.Contains(out.Answer, "max delegation depth") {
		t.Fatalf("answer %q does not report the depth cap", out.Answer)
	}
}

func TestProviderErrorKindsDecideRetries(t *testing.T) {
	for _, tc := range []struct {
		kind      provider.ErrorKind
		wantCalls int
		wantOK    bool
	}{
		{provider.KindRateLimit, 2, true},
		{provider.KindTransient, 2, true},
		{provider.KindBadRequest, 1, false},
		{provider.KindMalformed, 1, false},
		{provider.KindResponseTooLarge, 1, false},
		{provider.KindAuth, 1, false},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
				if n == 1 {
					return provider.Message{}, &provider.Error{Provider: "x", Kind: tc.kind, Message: "boom"}
				}
				return provider.AssistantMessage("ok"), nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m"}, Text: "go"})
			err := env.GetWorkflowError()
			calls, _ := p.total()
			if calls != tc.wantCalls || (err == nil) != tc.wantOK {
				t.Fatalf("calls %d err %v; want %d calls, ok=%v", calls, err, tc.wantCalls, tc.wantOK)
			}
			var app *sdktemporal.ApplicationError
			if err != nil && (!errors.As(err, &app) || app.Type() != ErrTypeProvider+tc.kind.String()) {
				t.Fatalf("error %v does not carry the kind", err)
			}
		})
	}
}

func TestValidationCorrectsOnce(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	for _, tc := range []struct {
		name    string
		answers []string
		wantVal string
		invalid bool
	}{
		{"second try valid", []string{"no json here", `{"n": 3}`}, `{"n":3}`, false},
		{"both invalid", []string{`{"n":"x"}`, `{"m":1}`}, "", true},
		{"first valid", []string{"```json\n{\"n\":1}\n```"}, `{"n":1}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
				if !strings.Contains(req.System, `"required"`) {
					return provider.Message{}, errors.New("the schema was not shown to the model")
				}
				if n > 1 && !strings.Contains(lastUser(req), "Your answer was rejected: ") {
					return provider.Message{}, errors.New("the retry does not carry the validation error")
				}
				return provider.AssistantMessage(tc.answers[n-1]), nil
			}}
			env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
			env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", OutputSchema: schema, MaxAttempts: 1}, Text: "count"})
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if calls, _ := p.total(); calls != len(tc.answers) {
				t.Fatalf("%d calls, want %d", calls, len(tc.answers))
			}
			if string(out.Value) != tc.wantVal || (out.Invalid != "") != tc.invalid {
				t.Fatalf("value %s invalid %q", out.Value, out.Invalid)
			}
		})
	}
}

func TestChildAnswerIsCappedBeforeRecording(t *testing.T) {
	big := strings.Repeat("é", 5<<20/2) // 5 MB of two-byte runes
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		task := lastUser(req)
		switch {
		case strings.HasPrefix(task, "part "):
			return provider.AssistantMessage(big), nil
		case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
			return provider.AssistantMessage(req.Messages[len(req.Messages)-1].Content), nil
		default:
			return spawnCalls(1), nil
		}
	}}
	rt := &Runtime{Providers: map[string]provider.Provider{"m": p}}
	env := newEnv(t, rt)
	var biggest atomic.Int64
	env.SetOnActivityCompletedListener(func(_ *activity.Info, result converter.EncodedValue, _ error) {
		var r provider.Response
		if result != nil && result.Get(&r) == nil {
			biggest.Store(max(biggest.Load(), int64(len(r.Message.Content))))
		}
	})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true}, Text: "go"})
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if got := biggest.Load(); got > DefaultPayloadLimit || got == 0 {
		t.Fatalf("model activity recorded %d bytes, limit %d", got, DefaultPayloadLimit)
	}
	if len(out.Answer) > DefaultMaxOutputBytes || !strings.Contains(out.Answer, "[output truncated:") {
		t.Fatalf("lead got %d bytes, want at most %d with a marker", len(out.Answer), DefaultMaxOutputBytes)
	}
	if !strings.HasPrefix(out.Answer, "éé") || !strings.Contains(out.Answer, " shown]") {
		t.Fatalf("capped answer does not start with the text or name its size: %q", out.Answer[len(out.Answer)-81:])
	}
}

func TestCancellationReachesChildren(t *testing.T) {
	var childStarted, childCancelled atomic.Int32
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if strings.HasPrefix(lastUser(req), "part ") {
			childStarted.Add(1)
			select {
			case <-ctx.Done():
				childCancelled.Add(1)
				return provider.Message{}, ctx.Err()
			case <-time.After(10 * time.Second):
				return provider.AssistantMessage("too late"), nil
			}
		}
		return spawnCalls(2), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.SetTestTimeout(30 * time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true, ActivityTimeout: time.Hour}, Text: "go"})
	err := env.GetWorkflowError()
	if !sdktemporal.IsCanceledError(err) {
		t.Fatalf("error %v, want a cancellation", err)
	}
	// The lead's one model call that succeeded is counted, cancelled as
	// the run was.
	if u := UsageOf(err); u.Requests != 1 {
		t.Errorf("the cancelled run reports %v, want the lead's one call", u)
	}
	if childStarted.Load() != 2 {
		t.Fatalf("%d children started, want 2", childStarted.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for childCancelled.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := childCancelled.Load(); got != 2 {
		t.Fatalf("%d children saw the cancellation, want 2", got)
	}
}

func TestActivityPanicFailsWithoutRetry(t *testing.T) {
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) { panic("kaboom") }}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m"}, Text: "go"})
	var app *sdktemporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != ErrTypePanic || !strings.Contains(err.Error(), "kaboom") {
		t.Fatalf("error %v", err)
	}
	if calls, _ := p.total(); calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

func TestUnknownProviderIsAClearError(t *testing.T) {
	env := newEnv(t, &Runtime{})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "nope"}, Text: "go"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), `no provider "nope"`) {
		t.Fatalf("error %v", err)
	}
}

func TestOversizedToolCallsFailWithoutRetry(t *testing.T) {
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		args := json.RawMessage(`{"task":"` + strings.Repeat("x", DefaultPayloadLimit) + `"}`)
		return provider.AssistantMessage("", provider.ToolCall{ID: "1", Name: SpawnToolName, Arguments: args}), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true}, Text: "go"})
	var app *sdktemporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != ErrTypeTooLarge || !strings.Contains(err.Error(), "PayloadLimit") {
		t.Fatalf("error %v", err)
	}
	if calls, _ := p.total(); calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

func TestTokenLimitCountsChildren(t *testing.T) {
	// The lead keeps back its wrap-up, note included, before its three
	// children get their shares: under 300 no share paid for a child's
	// first call, and under 400 what is left after that reserve does not
	// pay to read three results of at least a refusal's length (the third
	// child is not run).
	const limit = 400
	p := fanOut(3)
	var before provider.Usage // what the model billed before the lead's last call
	var bound int             // that call's output bound
	inner := p.fn
	p.fn = func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
		if n == 5 {
			_, before = p.total()
			bound = req.MaxTokens
			return provider.AssistantMessage("all parts done"), nil // its wrap-up turn, maybe
		}
		return inner(ctx, n, req)
	}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true, TokenLimit: limit}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	calls, total := p.total()
	if calls != 5 {
		t.Fatalf("%d calls, want 5 (the lead's two, one per child); total %v", calls, total)
	}
	// The lead's last call reserves what its children spent too.
	if bound < 1 || int64(bound) > limit-before.Tokens() {
		t.Errorf("the lead's last call was bound to %d output tokens after the tree spent %d of %d", bound, before.Tokens(), limit)
	}
	if total.Tokens() > limit {
		t.Errorf("the tree spent %d tokens, past its limit of %d", total.Tokens(), limit)
	}
}

// TestUsageSurvivesFailure checks that a model call that succeeded is
// counted however its run ends: a spawned child whose second call is
// refused reports its first to the parent, and a top-level workflow whose
// second call fails reports what it spent with its error (UsageOf).
func TestUsageSurvivesFailure(t *testing.T) {
	t.Run("a failed child", func(t *testing.T) {
		p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
			task := lastUser(req)
			switch {
			case task == "part 0" && req.Messages[len(req.Messages)-1].Role == provider.RoleUser:
				return provider.AssistantMessage("", provider.ToolCall{ID: "t1", Name: "nothing", Arguments: json.RawMessage(`{}`)}), nil
			case strings.HasPrefix(task, "part "):
				return provider.Message{}, &provider.Error{Provider: "x", Kind: provider.KindBadRequest, Message: "refused"}
			case req.Messages[len(req.Messages)-1].Role == provider.RoleTool:
				return provider.AssistantMessage("done"), nil
			default:
				return spawnCalls(1), nil
			}
		}}
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Spawn: true}, Text: "go"})
		var out RunOutput
		if err := env.GetWorkflowResult(&out); err != nil {
			t.Fatal(err)
		}
		_, total := p.total()
		if out.TotalUsage() != total {
			t.Fatalf("the lead reports %v in all (%v its children's); the provider handed out %v", out.TotalUsage(), out.ChildUsage, total)
		}
		if out.ChildUsage.Requests != 1 {
			t.Errorf("children's usage %v, want the failed child's one call that succeeded", out.ChildUsage)
		}
	})
	t.Run("a failed top-level run", func(t *testing.T) {
		p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
			if n == 1 {
				return provider.AssistantMessage("", provider.ToolCall{ID: "t1", Name: "nothing", Arguments: json.RawMessage(`{}`)}), nil
			}
			return provider.Message{}, &provider.Error{Provider: "x", Kind: provider.KindAuth, Message: "no key"}
		}}
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m"}, Text: "go"})
		err := env.GetWorkflowError()
		var app *sdktemporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != ErrTypeProvider+provider.KindAuth.String() {
			t.Fatalf("error %v, want the provider's kind kept", err)
		}
		if _, total := p.total(); UsageOf(err) != total || total.Requests != 1 {
			t.Errorf("the failure carries %v; the provider handed out %v", UsageOf(err), total)
		}
	})
}

// TestSameMeaningAsTheCore checks, case by case, what used to drift from
// the core's loop: the output cap's note, the corrective prompt, the cap
// on failed tool steps in a row, and a token limit with no room left for
// a reply refusing the call.
func TestSameMeaningAsTheCore(t *testing.T) {
	t.Run("output cap", func(t *testing.T) {
		s := strings.Repeat("é", 5000)
		if got, want := capText(s, 1000), runtime.CapOutput(s, 1000); got != want {
			t.Errorf("capText ends %q, the core's cap %q", got[len(got)-60:], want[len(want)-60:])
		}
	})
	t.Run("correction", func(t *testing.T) {
		schema := json.RawMessage(`{"type":"object","required":["a"]}`)
		var sent []string
		p := &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
			sent = append(sent, req.Messages[len(req.Messages)-1].Content)
			return provider.AssistantMessage(`{"b":1}`), nil
		}}
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", OutputSchema: schema}, Text: "go"})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		if len(sent) != 2 || !strings.HasPrefix(sent[1], "Your answer was rejected: ") || !strings.HasSuffix(sent[1], subagent.SchemaPrompt(schema)) {
			t.Errorf("the corrective prompt was %q; want the core's (runtime.CorrectionPrompt)", sent[len(sent)-1])
		}
	})
	t.Run("failed tool steps", func(t *testing.T) {
		failing := func() *script {
			return &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
				return provider.AssistantMessage("", provider.ToolCall{ID: fmt.Sprintf("c%d", n), Name: "missing", Arguments: json.RawMessage(`{}`)}), nil
			}}
		}
		p := failing()
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m"}, Text: "go"})
		var app *sdktemporal.ApplicationError
		if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != ErrTypeToolRetries {
			t.Fatalf("error %v, want %s", err, ErrTypeToolRetries)
		}
		inProcess := failing()
		a, err := agent.NewReact(inProcess, agent.WithTools(tool.Func{Def: tool.Definition{Name: "other", Parameters: json.RawMessage(`{"type":"object"}`)}}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Run(t.Context(), agent.Input{Text: "go"}); !errors.Is(err, agent.ErrToolRetries) {
			t.Fatalf("in process: %v", err)
		}
		if wf, ip := p.calls, inProcess.calls; wf != ip {
			t.Errorf("the workflow gave up after %d model calls, the core after %d", wf, ip)
		}
	})
	t.Run("token limit with no room for a reply", func(t *testing.T) {
		answer := func() *script {
			return &script{fn: func(ctx context.Context, n int, req provider.Request) (provider.Message, error) {
				return provider.AssistantMessage("ok"), nil
			}}
		}
		// Learn what the one call costs, then give exactly that: the
		// call and a wrap-up after it do not fit, so neither runtime
		// makes it.
		p := answer()
		env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m"}, Text: "go"})
		_, spent := p.total()
		p = answer()
		env = newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}})
		env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", TokenLimit: spent.Tokens()}, Text: "go"})
		var app *sdktemporal.ApplicationError
		if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != ErrTypeUsageLimit {
			t.Errorf("error %v, want %s", err, ErrTypeUsageLimit)
		}
		inProcess := answer()
		a, err := agent.NewReact(inProcess, agent.WithTokenLimit(spent.Tokens()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Run(t.Context(), agent.Input{Text: "go"}); !errors.Is(err, agent.ErrUsageLimit) {
			t.Errorf("in process: %v, want agent.ErrUsageLimit", err)
		}
		if wf, ip := p.calls, inProcess.calls; wf != ip {
			t.Errorf("the workflow made %d model calls, the core %d", wf, ip)
		}
	})
}

// A turn's tool calls all run at once, as in process: a turn of 100 calls
// each of which waits until every other has started finishes, where the
// old bound of 64 would leave 36 waiting for a slot that never frees.
func TestTurnRunsEveryCallAtOnce(t *testing.T) {
	const n = 100
	var started atomic.Int32
	all := make(chan struct{})
	gate, err := tool.New("gate", "Waits for the others.", func(ctx context.Context, _ struct{}) (string, error) {
		if started.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return "through", nil
		case <-time.After(10 * time.Second):
			return "", errors.New("the other calls never started")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(gate)
	if err != nil {
		t.Fatal(err)
	}
	p := &script{fn: func(ctx context.Context, _ int, req provider.Request) (provider.Message, error) {
		if req.Messages[len(req.Messages)-1].Role == provider.RoleTool {
			return provider.AssistantMessage("all through"), nil
		}
		calls := make([]provider.ToolCall, n)
		for i := range calls {
			calls[i] = provider.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "gate", Arguments: json.RawMessage(`{}`)}
		}
		return provider.AssistantMessage("", calls...), nil
	}}
	env := newEnv(t, &Runtime{Providers: map[string]provider.Provider{"m": p}, Tools: reg})
	env.ExecuteWorkflow(AgentWorkflowName, RunInput{Spec: Spec{Provider: "m", Tools: []string{"gate"}}, Text: "go"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out RunOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		if m.Role == provider.RoleTool && m.Content != "through" {
			t.Fatalf("a call ended %q, want every call through at once", m.Content)
		}
	}
}
