package temporal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Error types of the application errors the activities return; a workflow
// can branch on them with temporal.ApplicationError.Type.
const (
	// ErrTypeProvider prefixes a provider failure's kind, e.g.
	// "deputy.provider.rate limit".
	ErrTypeProvider = "deputy.provider."
	// ErrTypeConfig: the Spec names something the worker does not have.
	ErrTypeConfig = "deputy.config"
	// ErrTypeTooLarge: a reply's tool calls went over the payload limit.
	ErrTypeTooLarge = "deputy.too_large"
	// ErrTypePanic: the provider or agent panicked.
	ErrTypePanic = "deputy.panic"
	// ErrTypePolicy: the worker's policy (Runtime.Policy) denied a model
	// call; the message is the *policy.Denial's.
	ErrTypePolicy = "deputy.policy"
)

// Runtime holds what a worker's activities run: the providers, tools and
// factories a Spec names.
type Runtime struct {
	// Providers by the name a Spec's Provider gives.
	Providers map[string]provider.Provider
	// Tools are the plain tools a Spec's Tools name.
	Tools *tool.Registry
	// Factories build the agents of SubAgent.Factory, by name.
	Factories map[string]subagent.Factory
	// PayloadLimit caps a model reply's text and a tool result before it is
	// recorded (DefaultPayloadLimit when 0).
	PayloadLimit int
	// Policy, when set, binds every run whose activities this worker
	// runs, as agent.WithPolicy binds a tree in process: each model call
	// (policy.BeforeModel, at the run's depth; compaction's summaries
	// included) is checked before it is sent, and a denied one fails its
	// run; each plain tool call is checked before it runs and its result
	// before it is recorded (a call the policy asks about waits for a
	// person, durably, as a tool.RequireApproval call does); and a
	// factory's agent (SubAgent.Factory) runs in process under it, its
	// whole subtree bound. Every worker of a task queue must be given the
	// same policy. Not yet checked: the hand-off to a sub-agent that runs
	// as a child workflow (a fixed or react child, a spawned fork) and
	// the answer it returns — the child's own model and tool calls are.
	Policy *policy.Policy
	// Events, when set, receives the AG-UI events of the runs whose
	// activities this worker runs, as an in-process run emits them
	// (SUBAGENT_* attribution included), each with its tree. A Hub hands
	// them to subscribers in this process. Nil: no event is built.
	Events EventSink
}

// Activities are the activities of a Runtime.
type Activities struct{ rt *Runtime }

// Register puts the workflows and the activities of rt on a worker.
func Register(w worker.Registry, rt *Runtime) {
	w.RegisterWorkflowWithOptions(AgentWorkflow, workflow.RegisterOptions{Name: AgentWorkflowName})
	w.RegisterWorkflowWithOptions(FactoryWorkflow, workflow.RegisterOptions{Name: FactoryWorkflowName})
	w.RegisterWorkflowWithOptions(ResidentWorkflow, workflow.RegisterOptions{Name: ResidentWorkflowName})
	a := &Activities{rt: rt}
	w.RegisterActivityWithOptions(a.Complete, activity.RegisterOptions{Name: CompleteActivityName})
	w.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: CallToolActivityName})
	w.RegisterActivityWithOptions(a.RunFactory, activity.RegisterOptions{Name: RunFactoryActivity})
}

func (rt *Runtime) payloadLimit() int { return cmp.Or(max(rt.PayloadLimit, 0), DefaultPayloadLimit) }

// Complete is the model activity: one provider call. A provider.Error
// becomes an application error whose retryability follows its kind; the
// reply's text is capped at the payload limit, and a reply whose tool calls
// go over it fails without retry.
func (a *Activities) Complete(ctx context.Context, in ModelCall) (resp provider.Response, err error) {
	p, ok := a.rt.Providers[in.Provider]
	if !ok {
		return provider.Response{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no provider %q on this worker: add it to Runtime.Providers", in.Provider), ErrTypeConfig, nil)
	}
	defer func() {
		if v := recover(); v != nil {
			err = sdktemporal.NewNonRetryableApplicationError(fmt.Sprintf("provider %q panicked: %v", in.Provider, v), ErrTypePanic, nil)
		}
	}()
	in.Request.Tools = a.definitions(in.Request.Tools)
	ctx, stop := heartbeat(ctx)
	defer stop()
	if pol := a.rt.Policy; pol != nil {
		chk := policy.Check{Point: policy.BeforeModel, Request: &in.Request}
		out := pol.Decide(runtime.WithDepth(ctx, in.Depth), &chk)
		if out.Verdict == policy.Deny {
			return provider.Response{}, sdktemporal.NewNonRetryableApplicationError(out.Err(&chk).Error(), ErrTypePolicy, nil)
		}
	}
	em := a.emitter(in.Trace)
	em.before(in.Request)
	resp, err = p.Complete(ctx, in.Request)
	if err != nil {
		return provider.Response{}, classify(err)
	}
	defer func() {
		if err == nil {
			em.after(in.Provider, in.Request, resp)
		}
	}()
	limit := a.rt.payloadLimit()
	resp.Message.Content = capText(resp.Message.Content, limit)
	n := 0
	for _, c := range resp.Message.ToolCalls {
		n += len(c.Arguments) + len(c.Name) + len(c.ID)
	}
	if n > limit {
		return provider.Response{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("model reply's tool calls are %d bytes, over the payload limit of %d (Runtime.PayloadLimit)", n, limit), ErrTypeTooLarge, nil)
	}
	return resp, nil
}

// definitions fills in the plain tools' definitions, which the workflow
// names only, from the worker's registry.
func (a *Activities) definitions(defs []provider.ToolDef) []provider.ToolDef {
	out := make([]provider.ToolDef, len(defs))
	for i, d := range defs {
		out[i] = d
		// The workflow sends a plain tool's name only; its empty
		// parameters arrive as JSON null after the round trip.
		if (len(d.Parameters) == 0 || string(d.Parameters) == "null") && a.rt.Tools != nil {
			if t, ok := a.rt.Tools.Lookup(d.Name); ok {
				out[i] = t.Definition()
			}
		}
	}
	return out
}

// classify maps a provider failure to a Temporal application error: rate
// limits, transient and unclassified failures retry; everything else does not.
func classify(err error) error {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return sdktemporal.NewApplicationErrorWithCause(err.Error(), ErrTypeProvider+provider.KindUnknown.String(), err)
	}
	typ := ErrTypeProvider + pe.Kind.String()
	switch pe.Kind {
	case provider.KindRateLimit, provider.KindTransient, provider.KindUnknown:
		return sdktemporal.NewApplicationErrorWithCause(pe.Error(), typ, err)
	default:
		return sdktemporal.NewNonRetryableApplicationError(pe.Error(), typ, err)
	}
}

// CallTool is the tool activity: one call of a Runtime tool. Failures the
// model can read (unknown tool, bad arguments, a tool's error or panic)
// come back as an error result, as in the core loop; the content is capped.
func (a *Activities) CallTool(ctx context.Context, in ToolCall) (ToolResult, error) {
	if a.rt.Tools == nil {
		return ToolResult{Content: fmt.Sprintf("tool %q is not available", in.Call.Name), IsError: true}, nil
	}
	ctx, stop := heartbeat(ctx)
	defer stop()
	ctx = runtime.WithDepth(policy.With(ctx, a.rt.Policy), in.Depth)
	if len(in.Answers) > 0 {
		var err error
		if ctx, err = tool.Resume(ctx, &tool.Interrupted{Interrupts: in.Asked}, in.Answers...); err != nil {
			return ToolResult{Content: err.Error(), IsError: true}, nil
		}
	}
	res, err := a.rt.Tools.Execute(ctx, []tool.Call{in.Call})
	var asked *tool.Interrupted
	if errors.As(err, &asked) {
		// The workflow waits for a person, durably, and runs the call
		// again with the answers.
		return ToolResult{Asked: asked.Interrupts}, nil
	}
	if err != nil {
		return ToolResult{}, err
	}
	r := res[0]
	out := ToolResult{Content: capText(r.Content, min(cmp.Or(max(in.MaxOutputBytes, 0), DefaultMaxOutputBytes), a.rt.payloadLimit())), IsError: r.IsError, Usage: r.Usage}
	if em := a.emitter(in.Trace); em.on() {
		em.emit(event.Event{Type: event.ToolCallResult, MessageID: em.stepName(in.Trace.Step) + "/result-" + in.Call.ID, ToolCallID: in.Call.ID, Content: out.Content, Role: "tool"})
	}
	return out, nil
}

// RunFactory builds the factory's agent from the call's arguments and runs
// it. A factory error is the model's to correct: it comes back as an error
// result. The answer is capped before it is recorded.
func (a *Activities) RunFactory(ctx context.Context, in FactoryCall) (out ToolResult, err error) {
	f, ok := a.rt.Factories[in.Factory]
	if !ok {
		return ToolResult{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no factory %q on this worker: add it to Runtime.Factories", in.Factory), ErrTypeConfig, nil)
	}
	var finish func() // publishes how the child ended, once the panic below is recovered
	defer func() {
		if finish != nil {
			finish()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			out, err = ToolResult{Content: fmt.Sprintf("sub-agent %q panicked: %v", in.Factory, v), IsError: true}, nil
		}
	}()
	ctx, stop := heartbeat(ctx)
	defer stop()
	ctx = runtime.WithDepth(policy.With(ctx, a.rt.Policy), in.Depth)
	if em := a.emitter(in.Trace); em.on() {
		// The factory's agent runs here, in process: its own events go to
		// the sink, attributed to the child.
		t := in.Trace
		em.sink.Emit(t.Tree, startedEvent(t))
		ctx = event.WithSubagent(event.WithSink(ctx, treeSink{em}), t.Subagent)
		finish = func() {
			switch {
			case err != nil, out.IsError:
				// The parent's next model call publishes the failure.
			default:
				em.emit(event.Event{Type: event.SubagentFinished, SubagentRunID: t.Subagent, Result: event.JSONString(out.Content), Usage: tokenUsage("", "", out.Usage)})
			}
		}
	}
	var text string
	if len(in.Arguments) > 0 {
		text = string(in.Arguments)
	}
	var g *factoryGuard
	if a.rt.Policy != nil {
		g = &factoryGuard{pol: a.rt.Policy, name: cmp.Or(in.Tool, in.Factory), depth: in.Depth - 1}
		var refused string
		if in.Arguments, text, refused = g.before(ctx, in.Arguments, text); refused != "" {
			return ToolResult{Content: capText(refused, in.MaxOutputBytes), IsError: true}, nil
		}
	}
	ag, err := f(ctx, in.Arguments)
	if err != nil {
		return ToolResult{Content: capText(err.Error(), in.MaxOutputBytes), IsError: true}, nil
	}
	o, err := ag.Run(ctx, agent.Input{Text: text})
	if c, ok := ag.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	if err != nil && ctx.Err() != nil {
		return ToolResult{}, ctx.Err()
	}
	res := ToolResult{Content: o.Answer, Usage: o.TotalUsage()}
	limit := min(cmp.Or(max(in.MaxOutputBytes, 0), DefaultMaxOutputBytes), a.rt.payloadLimit())
	if err != nil {
		res.Content, res.IsError, limit = err.Error(), true, in.MaxOutputBytes
	}
	if g != nil {
		res = g.after(ctx, in.Arguments, res)
	}
	res.Content = capText(res.Content, limit)
	return res, nil
}

// factoryGuard asks a worker's policy about the call of a factory child,
// its hand-off and its answer, as the registry and a sub-agent tool ask
// in process: the checks are made at the caller's depth (its path is not
// known on a worker).
type factoryGuard struct {
	pol   *policy.Policy
	name  string
	depth int
}

// before checks the call and its hand-off: it returns the arguments and
// the task to go on with (rewritten, when a rule rewrote them), or what
// the model reads when the call does not go on. A question to a person
// is not yet something a factory child's call can wait for on Temporal:
// it is refused, saying so.
func (g *factoryGuard) before(ctx context.Context, args json.RawMessage, text string) (json.RawMessage, string, string) {
	ctx = runtime.WithDepth(ctx, g.depth)
	chk := policy.Check{Point: policy.BeforeTool, Tool: g.name, Arguments: args}
	if refused := g.decide(ctx, &chk); refused != "" {
		return args, text, refused
	}
	if string(chk.Arguments) != string(args) {
		args, text = chk.Arguments, string(chk.Arguments)
	}
	chk = policy.Check{Point: policy.BeforeDelegation, Tool: g.name, Arguments: args, Task: text}
	if refused := g.decide(ctx, &chk); refused != "" {
		return args, text, refused
	}
	return args, chk.Task, ""
}

// decide returns what the model reads of a Deny or an Ask, "" otherwise.
func (g *factoryGuard) decide(ctx context.Context, chk *policy.Check) string {
	out := g.pol.Decide(ctx, chk)
	switch out.Verdict {
	case policy.Deny:
		return out.Err(chk).Error()
	case policy.Ask:
		return fmt.Sprintf("policy: rule %q asks a person before %s, and a sub-agent run by a factory on Temporal cannot wait for an answer yet: do the work another way", out.Rule, g.name)
	}
	return ""
}

// after checks the answer before the model reads it.
func (g *factoryGuard) after(ctx context.Context, args json.RawMessage, res ToolResult) ToolResult {
	chk := policy.Check{Point: policy.AfterResult, Tool: g.name, Arguments: args, Result: res.Content, IsError: res.IsError}
	out := g.pol.Decide(runtime.WithDepth(ctx, g.depth), &chk)
	switch out.Verdict {
	case policy.Deny:
		return ToolResult{Content: out.Err(&chk).Error(), IsError: true, Usage: res.Usage}
	case policy.Rewrite:
		res.Content = chk.Result
	}
	return res
}

// HeartbeatInterval is how often a running activity tells the server it is
// alive. A cancellation reaches an activity only through its heartbeats, and
// a lost worker's attempt is retried once HeartbeatTimeout passes without one.
const (
	HeartbeatInterval = 2 * time.Second
	HeartbeatTimeout  = 10 * time.Second
)

// heartbeat records heartbeats until stop is called; stop waits for the
// goroutine to end.
func heartbeat(ctx context.Context) (context.Context, func()) {
	if !activity.IsActivity(ctx) {
		return ctx, func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return ctx, func() { close(done); wg.Wait() }
}

// capText cuts s to at most limit bytes as the core cuts a sub-agent's
// answer (runtime.CapOutput), when limit is set.
func capText(s string, limit int) string {
	if limit <= 0 {
		return s
	}
	return runtime.CapOutput(s, limit)
}
