package temporal

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agent/runtime"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	drun "github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/jsonschema"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"
)

// Events on Temporal are published by the activities, never by workflow
// code: an activity runs once per attempt outside the workflow's
// deterministic replay, so publishing there cannot change a decision or
// be repeated by a replay, and it costs no activity of its own. A model
// call publishes its step, its text and its tool calls (and, for a child,
// its start and its end when it can tell the run ends there); a tool call
// its result; the next model call of the parent the results the workflow
// made itself (a failed child, a refused call). Without Runtime.Events,
// nothing is built. What a run decides about its background jobs, which
// no activity of its own follows, it publishes through a local activity
// (PublishJobEvents), recorded as a marker: a replay reads it and does
// not publish again.

// EventSink receives the events of the runs whose activities a worker
// runs, each with tree, the ID of the tree's top-level workflow. Emit is
// called from the activities' goroutines and must be safe for concurrent
// use, and quick: an activity waits for it.
type EventSink interface {
	Emit(tree string, e event.Event)
}

// Trace is where a run stands in its tree, for the events its activities
// publish: the workflow puts it in the run's input and in each of its
// activities' inputs.
type Trace struct {
	// Tree is the ID of the tree's top-level workflow.
	Tree string `json:"tree"`
	// TreeRun is the run id of the tree's top-level workflow ("" for
	// a tree started before it was kept).
	TreeRun string `json:"tree_run,omitempty"`
	// Subagent is the run's sub-agent run id, its workflow's ID ("" for
	// the top-level run).
	Subagent string `json:"subagent,omitempty"`
	// Name, Description, Parent (the parent's sub-agent run id) and
	// ParentToolCall say what started the run, for its SUBAGENT_STARTED.
	Name           string `json:"name,omitempty"`
	Description    string `json:"description,omitempty"`
	Parent         string `json:"parent,omitempty"`
	ParentToolCall string `json:"parent_tool_call,omitempty"`
	// Job is the workflow id of the job of a thread (Spec.JobsAcrossTurns)
	// the run works under, itself or an ancestor: the questions of the
	// job's descendants go through it, which asks them again of the next
	// turn of the thread when no turn runs ("": none).
	Job string `json:"job,omitempty"`

	// Step is the model call's step, from 1; for the check of an answer
	// by output guardrails, the step of the answer, which one that passes
	// ends.
	Step int `json:"step,omitempty"`
	// Ended are the calls of the previous step whose results no activity
	// published (a child's, or one the workflow made itself).
	Ended []EndedCall `json:"ended,omitempty"`
	// Corrected, Spent, TokenLimit and MaxOutput let the model call tell
	// whether a reply without tool calls ends the run, and with what.
	Corrected bool `json:"corrected,omitempty"`
	// SpentCost and CostLimit do for a cost limit what Spent and
	// TokenLimit do for a token limit.
	SpentCost float64 `json:"spent_cost,omitempty"`
	CostLimit float64 `json:"cost_limit,omitempty"`
	// Guarded: output guardrails check the run's answer, so a reply
	// cannot tell it ends the run; the guardrail activity publishes the
	// end instead.
	Guarded bool `json:"guarded,omitempty"`
	// PastLimit: a reply with text that ends the run with its answer ends
	// it past the run's limits too (answerPastLimitChange).
	PastLimit  bool           `json:"past_limit,omitempty"`
	Spent      provider.Usage `json:"spent"`
	TokenLimit int64          `json:"token_limit,omitempty"`
	MaxOutput  int            `json:"max_output,omitempty"`
	// Models and Earlier are the run's RunOutput.Models and Earlier so
	// far, for the usage of its end.
	Models  []provider.ModelUsage `json:"models,omitempty"`
	Earlier []provider.ModelUsage `json:"earlier,omitempty"`
	// Announced: the run is a background job whose parent published its
	// SUBAGENT_STARTED as it started it, as in process; its first model
	// call does not. Delivered are the messages its parent sent that the
	// run took before this step, published as deputy.job_delivered.
	Announced bool               `json:"announced,omitempty"`
	Delivered []subagent.Receipt `json:"delivered,omitempty"`
}

// EndedCall is a call of a step whose result the next model call
// publishes: Subagent is the sub-agent run id it started ("" for none).
// For a sub-agent that failed, Code names its failure as in process
// (RUN_ERROR's codes), and Usage and Cost are what it spent.
type EndedCall struct {
	CallID   string         `json:"call_id"`
	Subagent string         `json:"subagent,omitempty"`
	IsError  bool           `json:"is_error,omitempty"`
	Code     string         `json:"code,omitempty"`
	Usage    provider.Usage `json:"usage,omitzero"`
	Cost     float64        `json:"cost,omitempty"`
	// Model is the model that answered the failed child's first call;
	// Models and Earlier what it spent per provider and model, and the
	// part of it spent before the last answer (RunOutput.Models, Earlier).
	Model   string                `json:"model,omitempty"`
	Models  []provider.ModelUsage `json:"models,omitempty"`
	Earlier []provider.ModelUsage `json:"earlier,omitempty"`
	// Content is the call's result when the model reads none (a call its
	// run could not pay to read); else the result is read from the request.
	Content string `json:"content,omitempty"`
}

// emitter publishes a run's events to the worker's sink.
type emitter struct {
	sink EventSink
	t    *Trace
	pol  *policy.Policy // the workers', whose redactors a child's answer passes (redact)
}

func (a *Activities) emitter(t *Trace) emitter {
	if a.rt.Events == nil || t == nil {
		return emitter{}
	}
	return emitter{sink: a.rt.Events, t: t, pol: a.rt.Policy}
}

// redact returns s, a child's answer or failure, as the redactors of the
// workers' policy leave it: SUBAGENT_FINISHED and SUBAGENT_ERROR go out
// before the parent's check of the result they tell of, as in process.
func (em emitter) redact(s string) string {
	if em.pol == nil {
		return s
	}
	ctx, err := policy.With(context.Background(), em.pol)
	if err != nil {
		return s // never: the context carries no policy to widen
	}
	return drun.Scrub(ctx, s)
}

func (em emitter) on() bool { return em.sink != nil }

// scope is ctx whose events go to the run's tree, attributed to the run:
// what a policy decides under it (a CUSTOM policy.EventName event), as in
// process, and what a tool or an agent run under it emits.
func (em emitter) scope(ctx context.Context) context.Context {
	if !em.on() {
		return ctx
	}
	return event.WithSubagent(event.WithSink(ctx, treeSink{em}), em.t.Subagent)
}

// emit publishes e as the run's own: attributed to its sub-agent run.
func (em emitter) emit(e event.Event) {
	if em.sink == nil {
		return
	}
	if e.SubagentRunID == "" {
		e.SubagentRunID = em.t.Subagent
	}
	// A child's calls are named apart from the tree's others, as in
	// process (event.CallID).
	e.ToolCallID = event.CallID(em.t.Subagent, e.ToolCallID)
	e.ParentToolCallID = event.CallID(em.t.Subagent, e.ParentToolCallID)
	em.sink.Emit(em.t.Tree, e)
}

// runKey names the run in its message ids.
func (em emitter) runKey() string {
	if em.t.Subagent != "" {
		return em.t.Subagent
	}
	return em.t.Tree
}

func (em emitter) stepName(step int) string { return em.runKey() + "/step-" + strconv.Itoa(step) }

// before publishes what precedes a model call: the results of the
// previous step no activity published, its end, the run's start for a
// child's first call, and the step's start.
func (em emitter) before(req provider.Request) {
	if !em.on() {
		return
	}
	t := em.t
	for _, c := range t.Ended {
		content := cmp.Or(c.Content, resultOf(req.Messages, c.CallID))
		if c.Subagent != "" && c.IsError {
			// A call recorded before ended calls carried their code has none.
			em.emit(event.Event{Type: event.SubagentError, SubagentRunID: c.Subagent, Message: em.redact(content), Code: cmp.Or(c.Code, "error"), Usage: usageJSON(c.Models, c.Earlier, c.Usage, c.Cost), Model: c.Model})
		}
		em.emit(event.Event{Type: event.ToolCallResult, MessageID: em.stepName(t.Step-1) + "/result-" + c.CallID, ToolCallID: c.CallID, Content: content, Role: "tool"})
	}
	if t.Step > 1 {
		em.emit(event.Event{Type: event.StepFinished, StepName: em.stepName(t.Step - 1)})
	}
	if t.Step == 1 && t.Subagent != "" && !t.Announced {
		em.sink.Emit(t.Tree, startedEvent(t))
	}
	for _, r := range t.Delivered {
		// Taken at the step boundary, before the step: the job's own.
		em.emit(jobEvent(subagent.JobDeliveredEvent, "", jobMessageEvent{Receipt: r, RunID: t.Subagent}))
	}
	em.emit(event.Event{Type: event.StepStarted, StepName: em.stepName(t.Step)})
}

// usage publishes what one model call spent, as the core's agent does
// after each call it pays for (agent.UsageEvent).
func (em emitter) usage(m provider.ModelUsage) {
	if !em.on() {
		return
	}
	em.emit(event.Event{Type: event.Custom, Name: agent.UsageEvent, Value: runtime.CallUsage(m)})
}

// after publishes a model's reply: its text and tool calls; for a reply
// that ends the run, the step's end and, for a child, its end with the
// answer its parent gets. The reply of a wrap-up turn (wrapUp) is read as
// the workflow reads it: its tool calls are dropped, and one with no text
// ends nothing, since the workflow fails the run, and ends its step, then.
func (em emitter) after(providerName, model string, req provider.Request, resp provider.Response, cost float64, wrapUp bool) {
	if !em.on() {
		return
	}
	if wrapUp {
		resp.Message.ToolCalls = nil
		if strings.TrimSpace(resp.Message.Content) == "" {
			return
		}
	}
	t := em.t
	msgID := em.stepName(t.Step)
	if resp.Message.Content != "" {
		em.emit(event.Event{Type: event.TextMessageStart, MessageID: msgID, Role: "assistant"})
		em.emit(event.Event{Type: event.TextMessageContent, MessageID: msgID, Delta: resp.Message.Content})
		em.emit(event.Event{Type: event.TextMessageEnd, MessageID: msgID})
	}
	parent := "" // a reply with no text has no message for its calls, as in process
	if resp.Message.Content != "" {
		parent = msgID
	}
	for _, c := range resp.Message.ToolCalls {
		em.emit(event.Event{Type: event.ToolCallStart, ToolCallID: c.ID, ToolCallName: c.Name, ParentMessageID: parent})
		em.emit(event.Event{Type: event.ToolCallArgs, ToolCallID: c.ID, Delta: string(c.Arguments)})
		em.emit(event.Event{Type: event.ToolCallEnd, ToolCallID: c.ID})
	}
	if len(resp.Message.ToolCalls) > 0 {
		return
	}
	spent := t.Spent.Add(resp.Usage)
	content, ends := finalContent(req.ResponseSchema, resp.Message.Content, t.Corrected, t.MaxOutput)
	past := (t.TokenLimit > 0 && spent.Tokens() > t.TokenLimit) || (t.CostLimit > 0 && t.SpentCost+cost > t.CostLimit)
	if past && t.PastLimit && strings.TrimSpace(resp.Message.Content) != "" {
		past = false // its answer stands, as in process
	}
	if !ends || t.Guarded || past {
		return // the workflow corrects it, or fails it at its limit
	}
	em.emit(event.Event{Type: event.StepFinished, StepName: msgID})
	if t.Subagent != "" {
		models := addModels(slices.Clone(t.Models), provider.ModelUsage{Provider: providerName, Model: model, Usage: resp.Usage, Cost: cost})
		em.emit(event.Event{Type: event.SubagentFinished, SubagentRunID: t.Subagent, Result: event.JSONString(em.redact(content)),
			Usage: usageJSON(models, t.Earlier, spent, t.SpentCost+cost), Model: model})
	}
}

// addModels adds ms to into, by provider and model, and returns it.
func addModels(into []provider.ModelUsage, ms ...provider.ModelUsage) []provider.ModelUsage {
	for _, m := range ms {
		if m.Usage.IsZero() && m.Cost == 0 {
			continue
		}
		i := slices.IndexFunc(into, func(e provider.ModelUsage) bool { return e.Provider == m.Provider && e.Model == m.Model })
		if i < 0 {
			into = append(into, m)
		} else {
			into[i] = into[i].Add(m)
		}
	}
	return into
}

// usageJSON is the usage of a run's end, as in process: one TokenUsage per
// provider and model of models, with its cost and, under "earlier", the
// part of it spent before the last answer (earlier); what total, which
// cost dollars in all, holds beyond them in one entry without a model.
func usageJSON(models, earlier []provider.ModelUsage, total provider.Usage, dollars float64) json.RawMessage {
	if total.IsZero() && len(models) == 0 {
		return nil
	}
	return ledger.EncodeParts(models, earlier, total, dollars)
}

// finalContent is what a run's reply without tool calls ends the run
// with, as the workflow decides it, and whether it ends the run (not when
// the answer fails the schema and has not been corrected yet).
func finalContent(schema json.RawMessage, answer string, corrected bool, maxOutput int) (string, bool) {
	out := RunOutput{Answer: capText(answer, maxOutput)}
	// (No schema arrives as JSON null after the activity's round trip.)
	if len(schema) > 0 && string(schema) != "null" {
		s, err := jsonschema.Compile(schema)
		if err != nil {
			return "", false
		}
		if _, verr := validate(s, answer); verr != nil {
			if !corrected {
				return "", false
			}
			out.Invalid = capText(verr.Error(), 2048)
		}
	}
	return capText(childContent(out), maxOutput), true
}

// resultOf is the content of the last tool message for callID.
func resultOf(msgs []provider.Message, callID string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Role == provider.RoleTool && m.ToolCallID == callID {
			return m.Content
		}
	}
	return ""
}

// Hub is an EventSink that hands each tree's events to the subscribers of
// that tree in this process: give it to Runtime.Events on a worker, and
// to an Agent in the same process, and the Agent's runs report their
// trees' events as an in-process agent does. Workers in other processes
// need a sink of the application's that carries events across (a message
// bus); a Hub does not.
type Hub struct {
	mu   sync.RWMutex
	subs map[string][]*subscription
}

type subscription struct{ em event.Emitter }

// NewHub returns a Hub with no subscribers.
func NewHub() *Hub { return &Hub{subs: map[string][]*subscription{}} }

// Emit hands e to the subscribers of tree; with none, it is dropped.
func (h *Hub) Emit(tree string, e event.Event) {
	h.mu.RLock()
	subs := h.subs[tree]
	h.mu.RUnlock()
	for _, s := range subs {
		s.em.Emit(e)
	}
}

// Subscribe sends the events of tree to the sink of ctx (event.WithSink),
// attributed under the sub-agent of ctx if any, until the returned
// function is called.
func (h *Hub) Subscribe(ctx context.Context, tree string) (unsubscribe func()) {
	s := &subscription{em: event.From(ctx)}
	h.mu.Lock()
	h.subs[tree] = append(h.subs[tree], s)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		list := h.subs[tree]
		for i, x := range list {
			if x == s {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(h.subs, tree)
		} else {
			h.subs[tree] = list
		}
	}
}

// forkName is the name of a spawned fork in its events, as in process.
const forkName = subagent.DefaultForkName

// treeSink is an event.Sink that publishes to a run's tree: what an agent
// run in an activity emits.
type treeSink struct{ em emitter }

func (s treeSink) Emit(e event.Event) { s.em.sink.Emit(s.em.t.Tree, e) }

// startedEvent is a child's SUBAGENT_STARTED: the call that started it is
// its parent's, named as the parent's calls are.
func startedEvent(t *Trace) event.Event {
	return event.Event{Type: event.SubagentStarted, SubagentRunID: t.Subagent, Name: t.Name, Description: t.Description,
		ParentSubagentRunID: t.Parent, ParentToolCallID: event.CallID(t.Parent, t.ParentToolCall)}
}

// The values of a job's CUSTOM events, as in process: a job's status, or
// a message's receipt, with the job's sub-agent run id.
type jobStatusEvent struct {
	subagent.JobStatus
	RunID string `json:"subagent_run_id"`
}

type jobMessageEvent struct {
	subagent.Receipt
	RunID string `json:"subagent_run_id"`
	Text  string `json:"text,omitempty"`
}

// jobEvent is the CUSTOM event name of a job, with v, attributed to by
// ("": the run that publishes it).
func jobEvent(name, by string, v any) event.Event {
	b, _ := json.Marshal(v) // plain fields: it cannot fail
	return event.Event{Type: event.Custom, Name: name, SubagentRunID: by, Value: b}
}

// JobEvents is the input of PublishActivityName: the events a run's
// workflow publishes of its background jobs, in order — the job's
// SUBAGENT_STARTED and deputy.job_started as it starts it, a message
// queued, a status asked, a cancel, its end — as the run (Trace) it is;
// and the end of the step a run that fails was in.
type JobEvents struct {
	Trace  *Trace        `json:"trace"`
	Events []event.Event `json:"events"`
	// Update is the id of the update whose handler publishes them (a
	// program's StartJob), "" for none.
	Update string `json:"update,omitempty"`
}

// jobEvents is what the workflow of ctx publishes of evs as the run t.
func jobEvents(ctx workflow.Context, t *Trace, evs []event.Event) JobEvents {
	return JobEvents{Trace: t, Events: evs, Update: handlingUpdate(ctx)}
}

// handlingUpdate is the id of the update whose handler ctx is, "" for none.
// (The SDK's GetCurrentUpdateInfo panics outside an update's handler,
// where it has nothing to return.)
func handlingUpdate(ctx workflow.Context) (id string) {
	defer func() { _ = recover() }()
	if u := workflow.GetCurrentUpdateInfo(ctx); u != nil {
		id = u.ID
	}
	return id
}

// PublishJobEvents publishes what a run's workflow decided about its
// background jobs to the worker's Runtime.Events (nothing without it).
// It is a local activity: it runs on the worker that runs the workflow,
// once, and a replay reads its marker instead of running it again. A
// workflow task the server refuses (the speculative task of an update,
// a program's StartJob, once it is gone) runs again without that
// marker, and this activity with it: the worker publishes what it
// published already, the same events at the same place in the same run,
// only once (it keeps the last publishedKeys it published).
func (a *Activities) PublishJobEvents(ctx context.Context, in JobEvents) error {
	em := a.emitter(in.Trace)
	if !em.on() {
		return nil
	}
	if !a.published.first(publishKey(ctx, in)) {
		return nil
	}
	for _, e := range in.Events {
		switch e.Type {
		case event.SubagentStarted:
			em.sink.Emit(in.Trace.Tree, e) // named as startedEvent names it
			continue
		case event.SubagentError:
			// A job's end tells what it answered, or why it failed, as the
			// workers' redactors leave it, as a child's does (redact).
			e.Message = em.redact(e.Message)
		case event.SubagentFinished:
			var answer string
			if json.Unmarshal(e.Result, &answer) == nil {
				e.Result = event.JSONString(em.redact(answer))
			}
		}
		em.emit(e)
	}
	return nil
}

// publishedKeys bounds what a worker keeps of the events it published
// (PublishJobEvents): a refused workflow task runs again at once.
const publishedKeys = 4096

// publishKey names one publication of in by the local activity of ctx:
// its run; its place, which a workflow task run again gives it again —
// the update whose handler publishes it (a refused task of an update runs
// again after what came in meanwhile, which may put other local
// activities before it), or else its place among the run's local
// activities; and what it publishes (which another local activity at
// that place, in a task that went another way, does not share). It is ""
// outside an activity.
func publishKey(ctx context.Context, in JobEvents) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	info := activity.GetInfo(ctx)
	return publishKeyOf(info.WorkflowExecution.RunID, info.ActivityID, in)
}

// publishKeyOf is publishKey of in, published by the local activity
// activityID of run runID.
func publishKeyOf(runID, activityID string, in JobEvents) string {
	h := sha256.New()
	_ = json.NewEncoder(h).Encode(in) // plain fields: it cannot fail
	place := "a" + activityID
	if in.Update != "" {
		place = "u" + in.Update
	}
	return runID + "/" + place + "/" + hex.EncodeToString(h.Sum(nil)[:16])
}

// recentKeys is a bounded set of keys, the oldest let go first.
type recentKeys struct {
	mu    sync.Mutex
	set   map[string]bool
	order []string // as added, a ring of publishedKeys
	next  int
}

// first reports whether k is new, and keeps it; "" is always new.
func (r *recentKeys) first(k string) bool {
	if k == "" {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set[k] {
		return false
	}
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if len(r.order) < publishedKeys {
		r.order = append(r.order, k)
	} else {
		delete(r.set, r.order[r.next])
		r.order[r.next] = k
		r.next = (r.next + 1) % publishedKeys
	}
	r.set[k] = true
	return true
}
