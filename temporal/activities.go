package temporal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/ledger"
	drun "github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/spans"
	"github.com/deputy-go/deputy/internal/subcode"
	"github.com/deputy-go/deputy/internal/usage"
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
	// ErrTypeGuardrailTripped: a guardrail's tripwire (Spec.Guardrails)
	// stopped the run, and every run above it; the message is the
	// *policy.GuardrailError's.
	ErrTypeGuardrailTripped = "deputy.guardrail_tripped"
	// ErrTypeGuardrail: an output guardrail failed a run's answer again
	// after its one correction, or a check could not decide.
	ErrTypeGuardrail = "deputy.guardrail"
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
	// (policy.BeforeModel; compaction's summaries included) is checked
	// before it is sent, and a denied one fails its run; each plain tool
	// call is checked before it runs and its result before it is
	// recorded; each sub-agent call (a fixed or react child, a spawned
	// fork, a factory's agent) is checked before it starts, its hand-off
	// too, and its answer before the model reads it; a factory's agent
	// runs in process under it, its whole subtree bound. A call or
	// hand-off the policy asks about waits for a person, durably, as a
	// tool.RequireApproval call does. Checks carry the path and depth of
	// the agent that makes them (policy.Check.Path, Depth). Every worker
	// of a task queue must be given the same policy.
	Policy *policy.Policy
	// Guardrails are the guardrails a Spec's Guardrails name, by their
	// Name (policy.Guardrail; subagent.Judge for a model's judgement).
	Guardrails []policy.Guardrail
	// Prices, when set, prices the model calls the worker makes: in each
	// call's usage event (agent.UsageEvent's costUsd), in RunOutput.Cost,
	// and against a Spec's CostLimit, as agent.WithPrices in process. A
	// model it lacks costs nothing. Every worker of a task queue must be
	// given the same prices.
	Prices *provider.Prices
	// Events, when set, receives the AG-UI events of the runs whose
	// activities this worker runs, as an in-process run emits them
	// (SUBAGENT_* attribution included), each with its tree. A Hub hands
	// them to subscribers in this process. Nil: no event is built.
	Events EventSink
	// TracerProvider, when set, traces the activities this worker runs
	// with OpenTelemetry, by the gen_ai conventions as agent.WithTracerProvider
	// does in process: a span per model call ("chat <model>", with its
	// usage and, under Prices, its cost), per tool call ("execute_tool
	// <tool>") and per call of a factory's agent (an execute_tool span,
	// the agent's own run traced in process under it), and each policy
	// decision a span event (policy.EventName) on the span of the call it
	// decides. Without it, activities are traced under a recording span in
	// their context: go.temporal.io/sdk/contrib/opentelemetry's tracing
	// interceptor, on the client and the worker, starts one for each and
	// joins the spans of a whole tree, child workflows included, in one
	// trace. Nil and no such span: nothing is traced.
	TracerProvider trace.TracerProvider
}

// Activities are the activities of a Runtime.
type Activities struct {
	rt *Runtime
	// served: they run on a worker of a server, which an activity can
	// ask about its workflow (the job of a factory's agent reads its
	// messages so), not in the SDK's test environment, which has none.
	served bool
	// published is what PublishJobEvents published last.
	published recentKeys
}

// Register puts the workflows and the activities of rt on a worker. On a
// registry that is not a worker.Worker (the SDK's test environment, which
// has no server an activity could ask), the job of a Factory member of a
// Spec's Roster takes no message: its messages stay queued, and end
// undelivered.
func Register(w worker.Registry, rt *Runtime) {
	w.RegisterWorkflowWithOptions(AgentWorkflow, workflow.RegisterOptions{Name: AgentWorkflowName})
	w.RegisterWorkflowWithOptions(FactoryWorkflow, workflow.RegisterOptions{Name: FactoryWorkflowName})
	w.RegisterWorkflowWithOptions(FactoryJobWorkflow, workflow.RegisterOptions{Name: FactoryJobWorkflowName})
	w.RegisterWorkflowWithOptions(ResidentWorkflow, workflow.RegisterOptions{Name: ResidentWorkflowName})
	a := &Activities{rt: rt}
	_, a.served = w.(worker.Worker)
	w.RegisterActivityWithOptions(a.Complete, activity.RegisterOptions{Name: CompleteActivityName})
	w.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: CallToolActivityName})
	w.RegisterActivityWithOptions(a.RunFactory, activity.RegisterOptions{Name: RunFactoryActivity})
	w.RegisterActivityWithOptions(a.CheckDelegation, activity.RegisterOptions{Name: CheckActivityName})
	w.RegisterActivityWithOptions(a.CheckDelegations, activity.RegisterOptions{Name: ChecksActivityName})
	w.RegisterActivityWithOptions(a.Guard, activity.RegisterOptions{Name: GuardActivityName})
	w.RegisterActivityWithOptions(a.PublishJobEvents, activity.RegisterOptions{Name: PublishActivityName})
	w.RegisterActivityWithOptions(a.AwaitJob, activity.RegisterOptions{Name: AwaitJobActivityName})
	w.RegisterActivityWithOptions(a.OwnerJobs, activity.RegisterOptions{Name: OwnerJobsActivityName})
	w.RegisterWorkflowWithOptions(ownerWorkflow, workflow.RegisterOptions{Name: ownerWorkflowName})
	w.RegisterActivityWithOptions(a.takeOwnerSlot, activity.RegisterOptions{Name: ownerSlotActivityName})
	w.RegisterActivityWithOptions(a.jobsRunning, activity.RegisterOptions{Name: jobsRunningActivityName})
}

func (rt *Runtime) payloadLimit() int { return cmp.Or(max(rt.PayloadLimit, 0), DefaultPayloadLimit) }

// Complete is the model activity: one provider call. A provider.Error
// becomes an application error whose retryability follows its kind; the
// reply's text is capped at the payload limit, and a reply whose tool calls
// go over it fails without retry.
func (a *Activities) Complete(ctx context.Context, in ModelCall) (reply ModelReply, err error) {
	p, ok := a.rt.Providers[in.Provider]
	if !ok {
		return ModelReply{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no provider %q on this worker: add it to Runtime.Providers", in.Provider), ErrTypeConfig, nil)
	}
	var (
		priced bool    // the call's model has a price
		saved  float64 // what the prompt cache saved, at that price
	)
	if tr := a.rt.tracer(ctx); tr != nil {
		// Ended after a panic is recovered below, with its error.
		var span trace.Span
		providerName, model := identity(p, in.Request, provider.Response{})
		ctx, span = spans.StartChat(ctx, tr, model, providerName, "", messageLinks(in.Links))
		defer func() {
			if sc := span.SpanContext(); err == nil && sc.IsValid() && span.IsRecording() {
				reply.TraceID, reply.SpanID = sc.TraceID().String(), sc.SpanID().String()
			}
			spans.EndChat(span, reply.Response, err, reply.Cost, saved, priced)
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			reply, err = ModelReply{}, sdktemporal.NewNonRetryableApplicationError(fmt.Sprintf("provider %q panicked: %v", in.Provider, v), ErrTypePanic, nil)
		}
	}()
	named := toolBytes(in.Request.Tools) // as the workflow estimated them
	in.Request.Tools = a.definitions(in.Request.Tools)
	ctx, stop := heartbeat(ctx)
	defer stop()
	em := a.emitter(in.Trace)
	if pol := a.rt.Policy; pol != nil {
		chk := policy.Check{Point: policy.BeforeModel, Request: &in.Request}
		out := pol.Decide(em.scope(runtime.WithPlace(ctx, in.Path, in.Depth)), &chk)
		if out.Verdict == policy.Deny {
			// The step starts, ending the one before it, and fails: the
			// workflow ends it (closeStep).
			em.before(in.Request)
			return ModelReply{}, sdktemporal.NewNonRetryableApplicationError(out.Err(&chk).Error(), ErrTypePolicy, nil)
		}
	}
	wrapUp := false
	var turn *treeTurnOf
	if r := in.Reserve; r != nil {
		asked := in.Request
		if wrapUp, err = a.reserve(&in, r, named); err == nil && a.served && r.Tree != "" && !a.covered(&in, r, named, wrapUp && !r.WrapUp) {
			// Its worst case may pass what its run has left: it takes the
			// tree's turn, and is planned again with what the tree's calls
			// passed their runs' limits by taken off what is left.
			if turn, err = takeRunTurn(ctx, r.Tree, r.TreeRun, r.Job, activity.GetInfo(ctx).StartToCloseTimeout+HeartbeatTimeout); err == nil && turn != nil {
				in.Request = asked
				wrapUp, err = a.reserve(&in, r.less(turn.debt), named)
			}
		}
		if err != nil {
			turn.done(ctx, 0, 0)
			em.before(in.Request) // as for a denial
			return ModelReply{}, err
		}
	}
	em.before(in.Request)
	resp, err := p.Complete(ctx, in.Request)
	if turn != nil {
		// What the call passed what its run had left by, as planned
		// before the tree's debt was taken off.
		var tokens int64
		var dollars float64
		if r := in.Reserve; err == nil {
			if r.Tokens > 0 {
				tokens = max(resp.Usage.Tokens()-r.Tokens, 0)
			}
			if price, ok := a.price(identity(p, in.Request, resp)); ok && r.Cost {
				dollars = max(price.Cost(resp.Usage)-r.Dollars, 0)
			}
		}
		turn.done(ctx, tokens, dollars)
	}
	if err != nil {
		return ModelReply{}, classify(err)
	}
	name, model := identity(p, in.Request, resp)
	reply = ModelReply{Response: resp, WrapUp: wrapUp, Model: model, ProviderName: name}
	// Named before anything is published or recorded, as in process, so
	// that each result, and each event, names its call.
	var taken []provider.Message // the conversation, whose calls' ids a reply's calls must not take
	if in.DistinctIDs {
		taken = in.Request.Messages
	}
	reply.Message.ToolCalls = namedCalls(reply.Message.ToolCalls, taken)
	if price, ok := a.price(name, model); ok {
		reply.Cost, reply.InputPrice, reply.OutputPrice = price.Cost(resp.Usage), price.Input, price.Output
		priced, saved = true, price.Saved(resp.Usage)
	}
	// Paid for: its usage is reported as the call ends, as in process.
	em.usage(provider.ModelUsage{Provider: name, Model: model, Usage: resp.Usage, Cost: reply.Cost})
	// The run's wrap-up turn, made so by the workflow or by the
	// reservation above: the workflow reads its reply as the answer.
	wrapUp = wrapUp || (in.Reserve != nil && in.Reserve.WrapUp)
	defer func() {
		if err == nil {
			em.after(name, model, in.Request, reply.Response, reply.Cost, wrapUp)
		}
	}()
	limit := a.rt.payloadLimit()
	reply.Message.Content = capText(reply.Message.Content, limit)
	n := 0
	for _, c := range reply.Message.ToolCalls {
		n += len(c.Arguments) + len(c.Name) + len(c.ID)
	}
	if n > limit {
		return ModelReply{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("model reply's tool calls are %d bytes, over the payload limit of %d (Runtime.PayloadLimit)", n, limit), ErrTypeTooLarge, nil)
	}
	return reply, nil
}

// namedCalls returns calls with an id on each call that has none,
// repeats an earlier call's or names a call of the messages of taken (a
// model may number its calls from call_0 in every reply, and the events
// of a run must tell each call apart), as the core's agent names them
// (call_…), copying calls before it changes them: the slice is the
// provider's.
func namedCalls(calls []provider.ToolCall, taken []provider.Message) []provider.ToolCall {
	seen := make(map[string]bool, len(calls))
	for _, m := range taken {
		for _, c := range m.ToolCalls {
			seen[c.ID] = true
		}
	}
	copied := false
	for i := range calls {
		if c := calls[i].ID; c != "" && !seen[c] {
			seen[c] = true
			continue
		}
		if !copied {
			calls, copied = slices.Clone(calls), true
		}
		calls[i].ID = id.New("call_")
		seen[calls[i].ID] = true
	}
	return calls
}

// reserve reserves a model call against what its run has left (r), as
// the core's agent does: it sets the request's MaxTokens to what the call
// may produce, makes it the wrap-up turn (no tools, a note to answer now)
// when a second call like it would not fit after it, or fails it when no
// reply fits. The estimate counts the plain tools' definitions, which
// the worker filled in, and prices the call at the model that answered
// the run's last call, else the one the request names, else the
// provider's default (the dearest of the prices when there is none), as
// in process (reservedPrice).
func (a *Activities) reserve(in *ModelCall, r *Reserve, named int64) (wrapUp bool, err error) {
	req := &in.Request
	est := r.Estimate
	if extra := toolBytes(req.Tools) - named; r.Named && extra > 0 {
		est += (extra + 3) / 4
	}
	var price provider.Price
	priced := false
	if r.Cost {
		price, priced = a.reservedPrice(in, r)
	}
	room := func(est int64) int64 {
		out := int64(math.MaxInt64)
		if r.Tokens > 0 {
			out = r.Tokens - est
			if r.ReadBack {
				out >>= 1
			}
		}
		if r.Cost {
			if r.Dollars <= 0 {
				return min(out, 0)
			}
			if priced {
				per := price.Output
				if r.ReadBack {
					per += price.Input
				}
				if per > 0 {
					out = min(out, int64(math.Floor((r.Dollars-float64(est)*price.Input)/per)))
				} else if float64(est)*price.Input > r.Dollars {
					out = min(out, 0)
				}
			}
		}
		return out
	}
	out := room(est)
	last := out < est+2*max(r.LastOut, 1)+1
	if !r.WrapUp && !last && r.Follow > 0 && len(req.Tools) > 0 {
		// Its reply is read again by the next call, as in process.
		f := follow(r, est, price, priced)
		last = f < drun.CallTokens(req.Tools)
		out = min(out, f)
	}
	if !r.WrapUp && last {
		wrapUp = true
		req.Tools = nil
		req.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)], provider.UserMessage(wrapUpNote))
		est += (int64(len(wrapUpNote)) + 3) / 4
		out = room(est)
	}
	if out < 1 {
		setting := cmp.Or(r.TokenSetting, "Spec.TokenLimit")
		what := fmt.Sprintf("the %d tokens left of its limit (%s)", r.Tokens, setting)
		if r.Cost && (r.Tokens == 0 || r.Tokens-est >= 1) {
			setting = cmp.Or(r.CostSetting, "Spec.CostLimit")
			what = fmt.Sprintf("the $%.6f left of its cost limit (%s)", max(r.Dollars, 0), setting)
		}
		return false, sdktemporal.NewNonRetryableApplicationError(fmt.Sprintf("the next model call, reading about %d tokens, would leave no room for a reply in %s: raise %s or give a smaller task", est, what, setting), ErrTypeUsageLimit, nil)
	}
	req.MaxTokens = int(min(out, int64(max(r.Ceiling, 1))))
	return wrapUp, nil
}

// covered reports whether what the run has left (r) pays for in's call,
// reserved, at its worst: its input at a token a byte of what the
// workflow's estimate counts at four (Reserve.Worst, and the plain tools'
// definitions, and the wrap-up note when the worker added it: noted),
// and its output bound.
func (a *Activities) covered(in *ModelCall, r *Reserve, named int64, noted bool) bool {
	req := &in.Request
	worst := r.Worst
	if extra := toolBytes(req.Tools) - named; r.Named && extra > 0 {
		worst += extra
	}
	if noted {
		worst += int64(len(wrapUpNote))
	}
	out := int64(req.MaxTokens)
	if r.Tokens > 0 && worst+out > r.Tokens {
		return false
	}
	if r.Cost {
		if price, ok := a.reservedPrice(in, r); ok {
			return float64(worst)*price.Input+float64(out)*price.Output <= r.Dollars
		}
	}
	return true
}

// reservedPrice is the price in's call is reserved at under a cost limit:
// that of the model that answered its run's last call (r.Model) when the
// worker's prices hold it, as in process, else that of the model the
// request names, or of the provider's default (identity), else, for a
// model the prices lack (a router's "auto"), the dearest they hold, so
// that the call is bounded (drun.ReservePriceOf in process).
func (a *Activities) reservedPrice(in *ModelCall, r *Reserve) (provider.Price, bool) {
	p := a.rt.Providers[in.Provider]
	if r.Model != "" {
		if price, ok := a.price(identity(p, in.Request, provider.Response{Model: r.Model})); ok {
			return price, true
		}
	}
	if price, ok := a.price(identity(p, in.Request, provider.Response{})); ok || a.rt.Prices == nil {
		return price, ok
	}
	return a.rt.Prices.Dearest()
}

// less is what is left (r) with debt, what the tree's calls passed their
// runs' limits by so far, taken off; a limit it uses up leaves a token,
// or nothing, which no call fits.
func (r *Reserve) less(debt treeDebt) *Reserve {
	c := *r
	if c.Tokens > 0 && debt.Tokens > 0 {
		c.Tokens = max(c.Tokens-debt.Tokens, 1)
	}
	if c.Cost {
		c.Dollars -= debt.Dollars
	}
	return &c
}

// follow is the output bound of a call estimated to read est tokens that
// offers tools, as in process: its reply, m tokens, is read again by the
// next call with the wrap-up note (r.Follow tokens), which writes a token
// (two when the run's answer is read again): 2·est + 2·m + note + reply
// fit what is left, in tokens and at price.
func follow(r *Reserve, est int64, price provider.Price, priced bool) int64 {
	reply := int64(1)
	if r.ReadBack {
		reply = 2
	}
	tokens := int64(-1)
	if r.Tokens > 0 {
		tokens = r.Tokens
	}
	return drun.FollowBound(tokens, est, r.Follow, reply, r.Cost && priced, r.Dollars, price, r.ReadBack)
}

// wrapUpNote is what a call the worker made its run's wrap-up turn ends with.
const wrapUpNote = "Budget note: another step would pass what this work may spend. This is your last reply, and no tools are available: answer now with what you have, " +
	"and say plainly what is unfinished (status \"partial\" if you report a status)."

// toolBytes is what tool definitions weigh, as the estimate counts them
// (empty parameters arrive as JSON null from the workflow, and weigh
// nothing).
func toolBytes(defs []provider.ToolDef) int64 {
	n := 0
	for _, t := range defs {
		n += len(t.Name) + len(t.Description)
		if string(t.Parameters) != "null" {
			n += len(t.Parameters)
		}
	}
	return int64(n)
}

// identity names the provider and the model of a call as the core's
// agent names them, for its usage and its price: the provider's own name
// (provider.Namer), and the model that answered, else the one asked for,
// else the provider's default.
func identity(p provider.Provider, req provider.Request, resp provider.Response) (name, model string) {
	if n, ok := p.(provider.Namer); ok {
		name = n.Name()
	}
	model = cmp.Or(resp.Model, req.Model)
	if m, ok := p.(interface{ Model() string }); ok && model == "" {
		model = m.Model()
	}
	return name, model
}

// price is the worker's price of a model (Runtime.Prices); a call that
// names no model, and whose answer names none, is priced at the dearest,
// as in process.
func (a *Activities) price(name, model string) (provider.Price, bool) {
	if a.rt.Prices == nil {
		return provider.Price{}, false
	}
	if p, ok := a.rt.Prices.Lookup(name, model); ok || model != "" {
		return p, ok
	}
	return a.rt.Prices.Dearest()
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

// policed returns ctx bound by the workers' policy (Runtime.Policy), added
// to any its context carries; one the workers' would widen fails the
// activity for good, as a bad Runtime does.
func (a *Activities) policed(ctx context.Context) (context.Context, error) {
	ctx, err := policy.With(ctx, a.rt.Policy)
	if err != nil {
		return ctx, sdktemporal.NewNonRetryableApplicationError("Runtime.Policy: "+err.Error(), ErrTypeConfig, err)
	}
	return ctx, nil
}

// messageLinks are the links of a model call's span to the spans of the
// calls that sent the messages its step took (ModelCall.Links); a link
// whose ids do not parse is left out.
func messageLinks(ls []MessageLink) []trace.Link {
	var out []trace.Link
	for _, l := range ls {
		tid, err1 := trace.TraceIDFromHex(l.TraceID)
		sid, err2 := trace.SpanIDFromHex(l.SpanID)
		if err1 != nil || err2 != nil {
			continue
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
		out = append(out, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{agent.AttrMessageID.String(l.ID)}})
	}
	return out
}

// CallTool is the tool activity: one call of a Runtime tool. Failures the
// model can read (unknown tool, bad arguments, a tool's error or panic)
// come back as an error result, as in the core loop; the content is capped.
func (a *Activities) CallTool(ctx context.Context, in ToolCall) (out ToolResult, err error) {
	if a.rt.Tools == nil {
		return ToolResult{Content: fmt.Sprintf("tool %q is not available", in.Call.Name), IsError: true}, nil
	}
	if tr := a.rt.tracer(ctx); tr != nil {
		var end func(tool.Result, error)
		ctx, end = spans.StartTool(ctx, tr, in.Call)
		defer func() { end(tool.Result{Content: out.Content, IsError: out.IsError}, err) }()
	}
	ctx, stop := heartbeat(ctx)
	defer stop()
	if ctx, err = a.policed(ctx); err != nil {
		return ToolResult{}, err
	}
	ctx = a.emitter(in.Trace).scope(runtime.WithPlace(ctx, in.Path, in.Depth))
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
	out = ToolResult{Content: capText(r.Content, min(cmp.Or(max(in.MaxOutputBytes, 0), DefaultMaxOutputBytes), a.rt.payloadLimit())), IsError: r.IsError, Usage: r.Usage}
	if em := a.emitter(in.Trace); em.on() {
		em.emit(event.Event{Type: event.ToolCallResult, MessageID: em.stepName(in.Trace.Step) + "/result-" + in.Call.ID, ToolCallID: in.Call.ID, Content: out.Content, Role: "tool"})
	}
	return out, nil
}

// RunFactory builds the factory's agent from the call's arguments and runs
// it. A factory error comes back as an error result, marked Unbuilt unless
// the model can correct it (tool.Correctable), as in process, where only
// such an error reaches the model. The answer is capped before it is
// recorded.
func (a *Activities) RunFactory(ctx context.Context, in FactoryCall) (out ToolResult, err error) {
	f, ok := a.rt.Factories[in.Factory]
	if !ok {
		return ToolResult{}, sdktemporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no factory %q on this worker: add it to Runtime.Factories", in.Factory), ErrTypeConfig, nil)
	}
	if tr := a.rt.tracer(ctx); tr != nil {
		// The factory's agent's run is traced in process under the call's
		// span.
		var end func(tool.Result, error)
		ctx, end = spans.StartTool(ctx, tr, tool.Call{ID: in.Trace.ParentToolCall, Name: cmp.Or(in.Tool, in.Factory), Arguments: in.Arguments})
		defer func() { end(tool.Result{Content: out.Content, IsError: out.IsError}, err) }()
	}
	var finish func() // publishes how the child ended, once the panic below is recovered
	defer func() {
		if finish != nil {
			finish()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			// Its SUBAGENT_ERROR's code is "panic", as in process.
			out, err = ToolResult{Content: fmt.Sprintf("sub-agent %q panicked: %v", in.Factory, v), IsError: true, Code: "panic"}, nil
		}
	}()
	ctx, stop := heartbeat(ctx)
	defer stop()
	// The factory's agent runs as the caller's child, one level down.
	if ctx, err = a.policed(ctx); err != nil {
		return ToolResult{}, err
	}
	ctx = runtime.WithPlace(ctx, in.Path, in.Depth)
	if em := a.emitter(in.Trace); em.on() {
		// The factory's agent runs here, in process: its own events go to
		// the sink, attributed to the child.
		t := in.Trace
		if !t.Announced {
			// (A job's run that started it announced it.)
			em.sink.Emit(t.Tree, startedEvent(t))
		}
		ctx = event.WithSubagent(event.WithSink(ctx, treeSink{em}), t.Subagent)
		finish = func() {
			switch {
			case err != nil, out.IsError:
				// The parent's next model call publishes the failure.
			default:
				em.emit(event.Event{Type: event.SubagentFinished, SubagentRunID: t.Subagent, Result: event.JSONString(em.redact(out.Content)), Usage: usageJSON(out.Models, nil, out.Usage, out.Cost)})
			}
		}
	}
	text, _ := delegatedTask(true, false, in.Arguments)
	if in.Checked {
		// The caller's workflow decided the task (and asked its policy
		// about the call and its hand-off, if there is one): the call's
		// task from deputy.factory-task on, its arguments before.
		text = in.Task
	}
	var g *factoryGuard
	if a.rt.Policy != nil {
		g = &factoryGuard{pol: a.rt.Policy, name: cmp.Or(in.Tool, in.Factory), depth: in.Depth - 1, path: in.Path}
		if !in.Checked {
			// A call of a workflow that ran before the workflow asked:
			// it is asked here, where no person can be waited for.
			call := provider.ToolCall{Name: g.name, Arguments: in.Arguments}
			args, task, refused, asked := g.before(ctx, call, true, false, "")
			if asked != nil {
				refused = fmt.Sprintf("policy: a rule asks a person before %s, and a sub-agent run by a factory on a workflow started before such questions could be waited for cannot wait: do the work another way", g.name)
			}
			if refused != "" {
				return ToolResult{Content: capText(refused, in.MaxOutputBytes), IsError: true}, nil
			}
			in.Arguments, text = args, task
		}
	}
	actx := ctx // the activity's: cancelled, the job is
	var jl *workflowLog
	if a.served {
		// Its run is recorded in its workflow: an attempt that runs again
		// replays it.
		ctx, jl = journaled(ctx, a.rt.payloadLimit())
	}
	if in.Job != "" {
		// A job: the agent takes its messages at its step boundaries, and
		// stops at its time.
		var stop context.CancelFunc
		if a.served {
			ctx = jobMailboxFor(ctx, in)
		}
		if in.JobDeadline.IsZero() {
			ctx, stop = context.WithTimeout(ctx, in.JobTime)
		} else {
			ctx, stop = context.WithDeadline(ctx, in.JobDeadline)
		}
		defer stop()
	}
	if t := in.Trace; a.served && t != nil && t.TreeRun != "" {
		// Its model calls that may pass their limits take the turn of the
		// workflow's tree, as the tree's own calls do.
		ctx = drun.WithOuterTurn(ctx, newFactoryTurn(actx, t.Tree, t.TreeRun, t.Job))
	}
	ag, err := f(ctx, in.Arguments)
	if err != nil || ag == nil {
		// Not built: what the attempts before spent, which this one does
		// not replay, comes back with how it ended.
		before := jl.paid().plus(jl.unrecordedBefore())
		res := ToolResult{Content: fmt.Sprintf("sub-agent %q: the factory returned no agent and no error", in.Factory), IsError: true, Unbuilt: true,
			Usage: before.Usage, Cost: before.Cost, Models: before.Models, Model: before.Model}
		switch {
		case err != nil && actx.Err() != nil && in.Job != "" && !workerStopping(actx):
			// A job cancelled as its agent was built.
			return ToolResult{}, sdktemporal.NewCanceledError(spent(before)...)
		case err != nil && actx.Err() != nil:
			// Cancelled, or its worker stopping: the activity runs again.
			return ToolResult{}, actx.Err()
		case err != nil && ctx.Err() != nil && in.Job != "":
			res.Content, res.Code, res.Unbuilt = jobTimeText(in.JobTime), "timeout", false
		case err != nil:
			// Its SUBAGENT_ERROR has the error's code, as in process (a
			// provider's error: provider_error).
			res.Content, res.Code, res.Unbuilt = err.Error(), subcode.Of(err), !tool.IsCorrectable(err)
		}
		res.Content = capText(res.Content, in.MaxOutputBytes)
		return res, nil
	}
	// It spends its shares of its caller's limits, priced as the workers
	// price their calls.
	// Its model calls are counted per provider and model, as in process;
	// the first names the model its SUBAGENT_ERROR has if it fails.
	ctx, models := ledger.With(ctx)
	o, err := ag.Run(runtime.WithShare(ctx, in.TokenLimit, in.CostLimit, a.rt.Prices), agent.Input{Text: text})
	_, model := models.Spent(provider.Usage{})
	if c, ok := ag.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	sp := RunOutput{Usage: o.TotalUsage(), Cost: o.Cost, Models: models.Entries(), Model: model}
	if p := jl.paid(); p.Usage.Requests > sp.Usage.Requests {
		// The agent stopped before it replayed its journal (its job's
		// time was past): what the attempts before paid for counts.
		sp = RunOutput{Usage: usage.Most(sp.Usage, p.Usage), Cost: max(sp.Cost, p.Cost), Models: p.Models, Model: cmp.Or(sp.Model, p.Model)}
	}
	// And what the attempts before paid for past the journal, which this
	// one paid for again.
	sp = sp.plus(jl.unrecordedBefore())
	timedOut := false // a job past its time
	switch {
	case jl.err() != nil && actx.Err() == nil:
		// The workflow did not take a record (the server was away): the
		// attempt fails, and the next replays what was taken.
		return ToolResult{}, jl.err()
	case err != nil && actx.Err() != nil && in.Job != "" && !workerStopping(actx):
		// A job cancelled: what its agent spent comes back with it, as a
		// cancelled agent's job's does (withSettled). (Its worker
		// stopping is no cancel: the activity runs again, from its
		// journal, below.)
		return ToolResult{}, sdktemporal.NewCanceledError(spent(sp)...)
	case err != nil && actx.Err() != nil:
		return ToolResult{}, actx.Err()
	case err != nil && ctx.Err() != nil && in.Job != "":
		err, timedOut = errors.New(jobTimeText(in.JobTime)), true
		ctx = context.WithoutCancel(ctx) // for the policy's check below
	case err == nil && o.Partial && in.Job != "":
		// Stopped by its limits, answering partially: a job so ends with
		// a partial report naming them, as an agent's job does.
		err = jobLimitError(in)
	}
	var fail *policy.GuardrailError
	if errors.As(err, &fail) && fail.Tripwire {
		// A tripwire stops every run above the agent, as in process.
		return ToolResult{}, sdktemporal.NewNonRetryableApplicationError(err.Error(), ErrTypeGuardrailTripped, nil, sp.Usage, sp.Cost, sp.Model)
	}
	res := ToolResult{Content: o.Answer, Usage: sp.Usage, Cost: sp.Cost, Models: sp.Models}
	limit := min(cmp.Or(max(in.MaxOutputBytes, 0), DefaultMaxOutputBytes), a.rt.payloadLimit())
	if err != nil {
		res.Content, res.IsError, limit = err.Error(), true, in.MaxOutputBytes
		res.Code, res.Model = subcode.Of(err), sp.Model
		if timedOut {
			res.Code = "timeout" // as a job's past its time in process
		}
	}
	if g != nil {
		res = g.after(ctx, in.Arguments, res)
	}
	res.Content = capText(res.Content, limit)
	return res, nil
}

// Guard is the guardrail activity: it checks an agent's text with the
// worker's guardrails the agent's Spec names, as agent.WithGuardrails
// does in process, each decision an event of the agent's tree. A check
// that could not decide fails it (ErrTypeGuardrail), without retry.
func (a *Activities) Guard(ctx context.Context, in GuardCall) (Guarded, error) {
	gs := make([]policy.Guardrail, 0, len(in.Guardrails))
	for _, name := range in.Guardrails {
		i := slices.IndexFunc(a.rt.Guardrails, func(g policy.Guardrail) bool { return g.Name == name })
		if i < 0 {
			return Guarded{}, sdktemporal.NewNonRetryableApplicationError(
				fmt.Sprintf("no guardrail %q on this worker: add it to Runtime.Guardrails", name), ErrTypeConfig, nil)
		}
		gs = append(gs, a.rt.Guardrails[i])
	}
	guards, err := runtime.NewGuards(gs...)
	if err != nil {
		return Guarded{}, sdktemporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConfig, nil)
	}
	ctx, stop := heartbeat(ctx)
	defer stop()
	// A judge's run is bound and priced as the agent's calls are.
	if ctx, err = a.policed(ctx); err != nil {
		return Guarded{}, err
	}
	ctx = runtime.WithShare(runtime.WithPlace(ctx, in.Path, in.Depth), 0, 0, a.rt.Prices)
	em := a.emitter(in.Trace)
	if em.on() {
		ctx = event.WithSubagent(event.WithSink(ctx, treeSink{em}), in.Trace.Subagent)
	}
	// The judges' model calls are counted per provider and model, as in
	// process, where the tree's ledger counts them.
	ctx, judged := ledger.With(ctx)
	fail, spent, cost, err := guards.Check(ctx, in.Stage, in.Text, in.Retried)
	models := judged.Entries()
	if err != nil {
		return Guarded{}, sdktemporal.NewNonRetryableApplicationError(err.Error(), ErrTypeGuardrail, nil, spent, cost)
	}
	if fail == nil {
		if t := in.Trace; em.on() && in.Stage == policy.Output {
			// The answer ends its step (left open by the model activity)
			// and its run.
			if t.Step > 0 {
				em.emit(event.Event{Type: event.StepFinished, StepName: em.stepName(t.Step)})
			}
			if t.Subagent != "" {
				em.emit(event.Event{Type: event.SubagentFinished, SubagentRunID: t.Subagent, Result: event.JSONString(em.redact(in.Text)), Usage: usageJSON(addModels(slices.Clone(t.Models), models...), t.Earlier, t.Spent.Add(spent), t.SpentCost+cost)})
			}
		}
		return Guarded{Usage: spent, Cost: cost, Models: models}, nil
	}
	if !fail.Tripwire {
		fail.Unretried = in.Unretried
	}
	return Guarded{Failed: true, Guardrail: fail.Guardrail, Tripwire: fail.Tripwire, Message: fail.Error(), Note: runtime.GuardNote(fail), Usage: spent, Cost: cost, Models: models}, nil
}

// CheckDelegation is the delegation check activity: it asks the worker's
// policy about a sub-agent call its workflow makes, as the registry and a
// sub-agent tool ask in process. Before the call: the call itself
// (policy.BeforeTool) and the hand-off (policy.BeforeDelegation), each of
// which may be denied, rewritten or asked about (the question comes back
// in Asked; the workflow waits for the person and checks again with the
// answers); after it (in.After): the child's answer. A corrective retry
// (in.Retry) is checked as a hand-off alone, and a call the workflow
// answers itself (in.Plain: subagent_jobs) as a call alone. Without a
// policy it allows everything as it is.
func (a *Activities) CheckDelegation(ctx context.Context, in Delegation) (Delegated, error) {
	pol := a.rt.Policy
	ctx, end := a.startCheck(ctx, in.Call)
	defer end()
	ctx = a.emitter(in.Trace).scope(ctx)
	if in.After {
		out := Delegated{Result: in.Result, IsError: in.IsError}
		if pol != nil {
			g := &factoryGuard{pol: pol, name: in.Call.Name, depth: in.Depth, path: in.Path}
			r := g.after(ctx, in.Call.Arguments, ToolResult{Content: in.Result, IsError: in.IsError})
			out.Result, out.IsError = r.Content, r.IsError
		}
		return out, nil
	}
	out := Delegated{Arguments: in.Call.Arguments}
	switch {
	case in.Retry:
		out.Task = in.Task
	case !in.Plain:
		out.Task, _ = delegatedTask(in.rawTask(), in.Spawn, in.Call.Arguments)
	}
	if pol == nil {
		return out, nil
	}
	if len(in.Answers) > 0 {
		var err error
		if ctx, err = tool.Resume(ctx, &tool.Interrupted{Interrupts: in.Asked}, in.Answers...); err != nil {
			return Delegated{Refused: err.Error()}, nil
		}
	}
	g := &factoryGuard{pol: pol, name: in.Call.Name, depth: in.Depth, path: in.Path}
	switch {
	case in.Retry:
		chk := policy.Check{Point: policy.BeforeDelegation, Tool: in.Call.Name, CallID: in.Call.ID, Arguments: in.Call.Arguments, Task: in.Task}
		if out.Refused, out.Asked = g.decide(runtime.WithPlace(ctx, in.Path, in.Depth), in.Call, &chk); out.Refused == "" && out.Asked == nil {
			out.Task = chk.Task
		}
	case in.Plain:
		chk := policy.Check{Point: policy.BeforeTool, Tool: in.Call.Name, CallID: in.Call.ID, Arguments: in.Call.Arguments}
		if out.Refused, out.Asked = g.decide(runtime.WithPlace(ctx, in.Path, in.Depth), in.Call, &chk); out.Refused == "" && out.Asked == nil {
			out.Arguments = chk.Arguments
		}
	default:
		out.Arguments, out.Task, out.Refused, out.Asked = g.before(ctx, in.Call, in.rawTask(), in.Spawn, in.Member)
	}
	return out, nil
}

// CheckDelegations asks the worker's policy about a turn's hand-offs at
// once, in order, as CheckDelegation asks about one (a local activity of
// the workflow that calls them).
func (a *Activities) CheckDelegations(ctx context.Context, in []Delegation) (Checks, error) {
	if a.rt.Policy == nil {
		return Checks{}, nil
	}
	out := Checks{Policy: true, Decided: make([]Delegated, len(in))}
	for i, d := range in {
		if err := ctx.Err(); err != nil {
			return Checks{}, err
		}
		v, err := a.CheckDelegation(ctx, d)
		if err != nil {
			return Checks{}, err
		}
		if task, _ := delegatedTask(d.rawTask(), d.Spawn, v.Arguments); v.Task == task {
			v.Task = ""
		}
		if bytes.Equal(v.Arguments, d.Call.Arguments) {
			v.Arguments = nil
		}
		out.Decided[i] = v
	}
	return out, nil
}

// rawTask says d's task is its arguments whole: a factory's, in a
// workflow from before deputy.factory-task.
func (d Delegation) rawTask() bool { return d.Factory && !d.Tasked }

// decided is what the policy decided about d in checks, whole.
func (checks Checks) decided(i int, d Delegation) Delegated {
	if !checks.Policy {
		task, _ := delegatedTask(d.rawTask(), d.Spawn, d.Call.Arguments)
		return Delegated{Arguments: d.Call.Arguments, Task: task}
	}
	v := checks.Decided[i]
	if len(v.Arguments) == 0 {
		v.Arguments = d.Call.Arguments
	}
	if v.Task == "" {
		v.Task, _ = delegatedTask(d.rawTask(), d.Spawn, v.Arguments)
	}
	return v
}

// factoryGuard asks a worker's policy about a sub-agent call, its
// hand-off and its answer, as the registry and a sub-agent tool ask in
// process, at the caller's depth and path.
type factoryGuard struct {
	pol   *policy.Policy
	name  string
	depth int
	path  string
}

// before checks the call and its hand-off: it returns the arguments and
// the task to go on with (rewritten, when a rule rewrote them), or what
// the model reads when the call does not go on, or the questions a rule
// asks a person first (tool.ApprovePolicy: answered, the check is made
// again under them). factory and spawn say how the task is read from the
// arguments (delegatedTask); arguments it cannot be read from are not
// handed off, and the task is "".
func (g *factoryGuard) before(ctx context.Context, call provider.ToolCall, factory, spawn bool, member string) (args json.RawMessage, task, refused string, asked []tool.Interrupt) {
	ctx = runtime.WithPlace(ctx, g.path, g.depth)
	args = call.Arguments
	chk := policy.Check{Point: policy.BeforeTool, Tool: g.name, CallID: call.ID, Arguments: args}
	if refused, asked = g.decide(ctx, call, &chk); refused != "" || asked != nil {
		return args, "", refused, asked
	}
	args = chk.Arguments
	task, ok := delegatedTask(factory, spawn, args)
	if !ok {
		return args, "", "", nil
	}
	// The hand-off to a roster member is asked about under its name, as
	// in process.
	chk = policy.Check{Point: policy.BeforeDelegation, Tool: cmp.Or(member, g.name), CallID: call.ID, Arguments: args, Task: task}
	if refused, asked = g.decide(ctx, call, &chk); refused != "" || asked != nil {
		return args, "", refused, asked
	}
	return args, chk.Task, "", nil
}

// decide returns what the model reads of a Deny or of a person's refusal,
// or the questions of an Ask not answered yet.
func (g *factoryGuard) decide(ctx context.Context, call provider.ToolCall, chk *policy.Check) (string, []tool.Interrupt) {
	out := g.pol.Decide(ctx, chk)
	switch out.Verdict {
	case policy.Deny:
		return out.Err(chk).Error(), nil
	case policy.Ask:
		err := tool.ApprovePolicy(ctx, tool.Call{ID: call.ID, Name: g.name, Arguments: chk.Arguments}, chk, out)
		var asked *tool.Interrupted
		if errors.As(err, &asked) {
			return "", asked.Interrupts
		}
		if err != nil {
			return err.Error(), nil
		}
	}
	return "", nil
}

// after checks the answer before the model reads it.
func (g *factoryGuard) after(ctx context.Context, args json.RawMessage, res ToolResult) ToolResult {
	chk := policy.Check{Point: policy.AfterResult, Tool: g.name, Arguments: args, Result: res.Content, IsError: res.IsError}
	out := g.pol.Decide(runtime.WithPlace(ctx, g.path, g.depth), &chk)
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
