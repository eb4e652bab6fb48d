package devui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/internal/rerun"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// rerunRequest asks to re-run a thread's turn from one of the lead's calls:
// with its task edited (Task) or its answer (Answer), exactly one.
//
// A model may give the same id to calls of different turns, or of
// different steps of one turn (call_0 again in every reply): FromRunID,
// the recorded run whose tree the call is in, names the turn, and Step,
// the lead's step that made the call (from 1, as its events number them),
// the message. Without them the id must be the thread's only one, and the
// recorded run is the one that holds it.
//
// A call a child of the lead made (a grandchild's, or a tool's) is named by
// SubagentRunID too, the child's invocation in the recorded run (found by
// it when FromRunID is left out), and Step
// is then the child's step; ParentStep is the lead's step that called the
// child. The child goes on from its call, edited, and the lead from its
// call to the child, answered with what the child answers now.
type rerunRequest struct {
	ThreadID      string  `json:"threadId"`
	RunID         string  `json:"runId"`
	FromRunID     string  `json:"fromRunId,omitempty"`
	SubagentRunID string  `json:"subagentRunId,omitempty"`
	ParentStep    int     `json:"parentStep,omitempty"`
	Step          int     `json:"step,omitempty"`
	ToolCallID    string  `json:"toolCallId"`
	Task          *string `json:"task,omitempty"`
	Answer        *string `json:"answer,omitempty"`
}

// maxRerunBytes bounds a re-run request.
const maxRerunBytes = 1 << 20

// serveRerun re-runs a stored thread's turn from one of the lead's calls
// (WithRerun), streaming the run's events as the AG-UI endpoint does.
func (d *Handler) serveRerun(w http.ResponseWriter, r *http.Request) {
	if d.rerun == nil {
		httpError(w, http.StatusNotFound, "re-runs are off: serve the viewer WithRerun")
		return
	}
	var req rerunRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRerunBytes+1))
	if err == nil && len(body) > maxRerunBytes {
		err = fmt.Errorf("more than %d bytes", maxRerunBytes)
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && (req.ThreadID == "" || req.RunID == "" || req.ToolCallID == "" || (req.Task == nil) == (req.Answer == nil)) {
		err = errors.New("send threadId, runId, toolCallId, and either task or answer")
	}
	if err != nil {
		httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
		return
	}
	owner := ""
	if d.authorize != nil {
		if owner, err = d.authorize(r, req.ThreadID); err != nil {
			refuse(w, err)
			return
		}
	}
	th, err := d.agui.ReadThread(r.Context(), owner, req.ThreadID)
	switch {
	case errors.Is(err, agui.ErrNoThread):
		httpError(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		httpError(w, http.StatusInternalServerError, "reading the thread: "+err.Error())
		return
	case len(th.Interrupts) > 0:
		httpError(w, http.StatusConflict, "the thread waits for answers: answer them before re-running a turn")
		return
	}
	turn := -1 // unknown
	var from *runLog
	switch {
	case req.FromRunID != "":
		from, err = d.runLog(r.Context(), owner, req.ThreadID, req.FromRunID)
	case req.SubagentRunID != "" && d.store == nil:
		err = errors.New("a call inside a sub-agent is re-run from the run it is in, and runs are not recorded here (WithStore)")
	case req.SubagentRunID != "":
		// The recorded run the sub-agent's invocation is in.
		from, err = d.turnLog(r.Context(), owner, req.ThreadID, func(e recordedEvent) bool {
			return e.Type == event.SubagentStarted && e.SubagentRunID == req.SubagentRunID
		}, fmt.Sprintf("sub-agent %q", req.SubagentRunID))
		if err == nil && from == nil {
			err = fmt.Errorf("no sub-agent %q in the thread's recorded runs", req.SubagentRunID)
		}
	}
	if err != nil {
		httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
		return
	}
	if from != nil {
		turn = from.Turn
	}
	leadReq := req
	var inner *childCall
	if req.SubagentRunID != "" {
		if inner, err = childCallOf(from, req); err != nil {
			httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
			return
		}
		// Left open: the lead runs it again (rerun.WithCall).
		leadReq = rerunRequest{ToolCallID: inner.call.ID, Step: req.ParentStep}
	}
	msgs, err := cut(th.Messages, leadReq, turn)
	if err == nil && from == nil && d.store != nil {
		// The call, the thread's only one so named, is the lead's in the
		// recorded run of its turn: what the turn spent before it is read
		// from there, as from a run named, by the call's id.
		from, err = d.turnLog(r.Context(), owner, req.ThreadID, func(e recordedEvent) bool {
			return e.Type == event.ToolCallStart && e.SubagentRunID == "" && e.ToolCallID == req.ToolCallID
		}, fmt.Sprintf("the lead's call %q", req.ToolCallID))
		leadReq.Step = 0 // counted in the thread, not the run: the run's events place the call
		if from != nil {
			turn = from.Turn
		}
	}
	if err != nil {
		httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
		return
	}
	lead, err := d.rerun(r.Context(), &agui.RunInput{ThreadID: req.ThreadID, RunID: req.RunID, Owner: owner})
	switch {
	case err != nil && errors.Is(err, agui.ErrBadInput):
		httpError(w, http.StatusBadRequest, "building the agent: "+err.Error())
		return
	case err != nil:
		httpError(w, http.StatusInternalServerError, "building the agent: "+err.Error())
		return
	case lead == nil:
		httpError(w, http.StatusInternalServerError, "building the agent: the builder returned no agent and no error")
		return
	}
	if inner != nil {
		if _, err = subAgentOf(lead, inner.call.Name); err != nil {
			httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
			return
		}
	}
	if c, ok := lead.(io.Closer); ok {
		// As the AG-UI handler does with the agents it builds.
		defer func() {
			if err := c.Close(); err != nil {
				d.log.Warn("devui: closing the re-run's agent", "thread", req.ThreadID, "err", err)
			}
		}()
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	out := &frames{w: w, rc: http.NewResponseController(w)}
	// The re-run's ledger: what its model calls spend, the lead's and the
	// sub-agents', is its RUN_FINISHED's usage, as the AG-UI handler
	// reports a run's.
	ctx, spent := ledger.With(r.Context())
	ctx = event.WithThread(event.WithSink(ctx, event.Stamped(spending{out, spent})), req.ThreadID)
	if from != nil {
		// The turn goes on from what it had spent before the call: its
		// limits hold over the whole turn, as over a resumed one's.
		tokens, dollars := spentBefore(from.Events, leadReq, inner, req)
		ctx = rerun.WithSpent(ctx, tokens, dollars)
	}
	if inner != nil {
		// The lead's call to the child is left open: the lead runs it
		// again, within its budget, and the child goes on from its own
		// call, edited.
		ctx = rerun.WithCall(ctx, inner.call.ID, inner.call.Name, inner.after)
	}
	_, err = lead.Run(ctx, agent.Input{Messages: msgs})
	if err != nil && r.Context().Err() == nil {
		d.log.Warn("devui: a re-run failed", "thread", req.ThreadID, "err", err)
	}
	d.record(r.Context(), owner, req, turn, out)
}

// record ends the re-run's frames and keeps its events beside the
// thread's runs.
func (d *Handler) record(ctx context.Context, owner string, req rerunRequest, turn int, out *frames) {
	events, truncated := out.end()
	if d.store == nil || len(events) == 0 {
		return
	}
	l := runLog{RunID: req.RunID, Turn: max(turn, 0), Events: events, Truncated: truncated, Rerun: &req}
	if err := d.save(context.WithoutCancel(ctx), owner, req.ThreadID, l); err != nil {
		d.log.Warn("devui: recording a re-run", "thread", req.ThreadID, "err", err)
	}
}

// suspended reports whether the events end with a run waiting for answers.
func suspended(events []json.RawMessage) bool {
	for i := len(events) - 1; i >= 0; i-- {
		var e struct {
			Type    event.Type
			Outcome struct{ Type string }
		}
		if json.Unmarshal(events[i], &e) == nil && e.Type == event.RunFinished {
			return e.Outcome.Type == "interrupt"
		}
	}
	return false
}

// childCall is a call made inside one of the lead's children, to re-run:
// the lead's call to the child (its arguments filled in from the
// conversation later), and the child's turns up to the call, edited.
type childCall struct {
	call  tool.Call
	after []provider.Message
}

// childCallOf finds, in the recorded run, the child req.SubagentRunID and
// its call req.ToolCallID, and rebuilds the child's turns from the run's
// events up to the call, edited as req says.
func childCallOf(l *runLog, req rerunRequest) (*childCall, error) {
	var started *event.Event
	var own []event.Event
	for _, raw := range l.Events {
		var e event.Event
		if json.Unmarshal(raw, &e) != nil || e.SubagentRunID != req.SubagentRunID {
			continue
		}
		if e.Type == event.SubagentStarted {
			if started == nil {
				started = &e
			}
			continue
		}
		own = append(own, e)
	}
	switch {
	case started == nil:
		return nil, fmt.Errorf("no sub-agent %q in run %q", req.SubagentRunID, req.FromRunID)
	case started.ParentSubagentRunID != "":
		return nil, fmt.Errorf("sub-agent %q was started by another sub-agent: re-run calls of the lead's children, or of the lead", started.Name)
	case l.Truncated:
		return nil, fmt.Errorf("run %q was recorded only in part: its sub-agents' turns cannot be rebuilt", req.FromRunID)
	}
	after, err := cut(turnsOf(own), rerunRequest{ToolCallID: req.ToolCallID, Step: req.Step, Task: req.Task, Answer: req.Answer}, 0)
	if err != nil {
		return nil, fmt.Errorf("in %s: %w", started.Name, err)
	}
	// The events name the child's calls apart from the tree's others
	// (event.CallID); its model named them without the prefix.
	prefix := event.CallID(req.SubagentRunID, "x")
	prefix = prefix[:len(prefix)-1]
	for i := range after {
		after[i].ToolCallID = strings.TrimPrefix(after[i].ToolCallID, prefix)
		if len(after[i].ToolCalls) > 0 {
			after[i].ToolCalls = slices.Clone(after[i].ToolCalls)
			for k := range after[i].ToolCalls {
				after[i].ToolCalls[k].ID = strings.TrimPrefix(after[i].ToolCalls[k].ID, prefix)
			}
		}
	}
	return &childCall{call: tool.Call{ID: started.ParentToolCallID, Name: started.Name}, after: after}, nil
}

// turnsOf rebuilds an agent's turns from its events: each assistant
// message with its text and tool calls, and each call's result.
func turnsOf(events []event.Event) []provider.Message {
	var msgs []provider.Message
	at := map[string]int{}    // assistant message id → its index
	calls := map[string]int{} // tool call id → its message's index
	cur := -1                 // the current step's assistant message
	assistant := func(id string) int {
		if i, ok := at[id]; ok && id != "" {
			return i
		}
		msgs = append(msgs, provider.Message{Role: provider.RoleAssistant})
		if id != "" {
			at[id] = len(msgs) - 1
		}
		return len(msgs) - 1
	}
	for _, e := range events {
		switch e.Type {
		case event.StepStarted:
			cur = -1
		case event.TextMessageStart:
			if e.Role == "" || e.Role == "assistant" {
				cur = assistant(e.MessageID)
			}
		case event.TextMessageContent:
			if i, ok := at[e.MessageID]; ok {
				msgs[i].Content += e.Delta
			}
		case event.ToolCallStart:
			// A reply with no text names no message: its calls are the
			// step's.
			i := cur
			if e.ParentMessageID != "" || cur < 0 {
				i = assistant(e.ParentMessageID)
			}
			cur = i
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, provider.ToolCall{ID: e.ToolCallID, Name: e.ToolCallName})
			calls[e.ToolCallID] = i
		case event.ToolCallArgs:
			if i, ok := calls[e.ToolCallID]; ok {
				tcs := msgs[i].ToolCalls
				if k := slices.IndexFunc(tcs, func(c provider.ToolCall) bool { return c.ID == e.ToolCallID }); k >= 0 {
					tcs[k].Arguments = append(tcs[k].Arguments, e.Delta...)
				}
			}
		case event.ToolCallResult:
			msgs = append(msgs, provider.Message{Role: provider.RoleTool, ToolCallID: e.ToolCallID, Content: e.Content})
		}
	}
	return msgs
}

// subAgentOf returns the lead's sub-agent tool name, which a call inside
// it is re-run through.
func subAgentOf(lead agent.Agent, name string) (*subagent.SubAgentTool, error) {
	tl, ok := lead.(interface{ Tools() *tool.Registry })
	if !ok || tl.Tools() == nil {
		return nil, fmt.Errorf("the agent the builder returned shows no tools: re-run the lead's call to %s instead", name)
	}
	t, ok := tl.Tools().Lookup(name)
	if !ok {
		return nil, fmt.Errorf("the lead has no tool %q now", name)
	}
	sa, ok := t.(*subagent.SubAgentTool)
	if !ok {
		return nil, fmt.Errorf("%s is not a sub-agent tool: re-run the lead's call to it instead", name)
	}
	return sa, nil
}

// cut returns the thread's conversation cut at the turn of the call
// req names, with the call edited: the lead's message that made it, the
// other calls' results, and the edited call's result when its answer is
// the edit (else it is left open, to run again). turn is where the call's
// turn starts (-1: unknown, and then the id must be the thread's only
// one); req.Step, when set, is the lead's message of the turn that made
// it.
func cut(msgs []provider.Message, req rerunRequest, turn int) ([]provider.Message, error) {
	from, to := 0, len(msgs)
	if turn >= 0 {
		from = min(turn, len(msgs))
		for i := from + 1; i < len(msgs); i++ {
			if msgs[i].Role == provider.RoleUser {
				to = i
				break
			}
		}
	}
	at, j, found, step := -1, -1, 0, 0
	for i := from; i < to; i++ {
		m := msgs[i]
		if m.Role != provider.RoleAssistant {
			continue
		}
		step++
		if req.Step > 0 && step != req.Step {
			continue
		}
		if k := slices.IndexFunc(m.ToolCalls, func(c provider.ToolCall) bool { return c.ID == req.ToolCallID }); k >= 0 {
			at, j = i, k
			found++
		}
	}
	switch {
	case found == 0:
		return nil, fmt.Errorf("no call %q of the lead in that turn of the thread's conversation: re-run a call the lead made itself", req.ToolCallID)
	case found > 1:
		return nil, fmt.Errorf("the lead made %d calls with the id %q: name the run (fromRunId) and the step (step) to re-run one", found, req.ToolCallID)
	}
	out := slices.Clone(msgs[:at+1])
	m := out[at]
	m.ToolCalls = slices.Clone(m.ToolCalls)
	if req.Task != nil {
		var args map[string]any
		if json.Unmarshal(m.ToolCalls[j].Arguments, &args) != nil || args["task"] == nil {
			return nil, fmt.Errorf("the arguments of %s have no task to edit: edit its answer instead", m.ToolCalls[j].Name)
		}
		args["task"] = *req.Task
		b, _ := json.Marshal(args)
		m.ToolCalls[j].Arguments = b
	}
	out[at] = m
	for _, r := range msgs[at+1:] {
		if r.Role != provider.RoleTool {
			break
		}
		if r.ToolCallID == req.ToolCallID {
			if req.Answer != nil {
				r.Content, r.IsError = *req.Answer, false
				out = append(out, r)
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// spending passes a re-run's events on to next, its RUN_FINISHED with
// what the re-run spent (the lead's own carries no usage).
type spending struct {
	next  event.Sink
	spent *ledger.Ledger
}

func (s spending) Emit(e event.Event) {
	if e.Type == event.RunFinished && len(e.Usage) == 0 && e.SubagentRunID == "" {
		e.Usage = ledger.JSON(s.spent, provider.Usage{})
	}
	s.next.Emit(e)
}

// frames writes events as server-sent events, one frame each, flushed, and
// keeps them up to MaxRunLogBytes, until the re-run's terminal event or
// its end (end): an event of a job that outlives the re-run, emitted from
// its own goroutine, is neither written after the terminal event, in the
// same hold of the lock, nor after the handler returns.
type frames struct {
	mu        sync.Mutex
	w         io.Writer
	rc        *http.ResponseController
	buf       []byte
	events    []json.RawMessage
	size      int
	truncated bool
	done      bool
}

func (f *frames) Emit(e event.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if e.SubagentRunID == "" && (e.Type == event.RunFinished || e.Type == event.RunError) {
		f.done = true // written below, the last
	}
	b, err := e.AppendJSON(f.buf[:0])
	if err != nil {
		return
	}
	f.buf = b
	var sb strings.Builder
	sb.WriteString("data: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	if _, err := io.WriteString(f.w, sb.String()); err == nil {
		_ = f.rc.Flush()
	}
	if f.size+len(b) > MaxRunLogBytes {
		f.truncated = true
		return
	}
	f.size += len(b)
	f.events = append(f.events, slices.Clone(b))
}

// end stops the frames and returns what they kept.
func (f *frames) end() (events []json.RawMessage, truncated bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	return f.events, f.truncated
}

// spentBefore returns what the turn recorded in events had spent, in
// tokens and dollars, before the point a re-run goes on from: the lead's
// model calls up to the step of lead's call (lead.Step, or the step that
// made it), and what the calls of those steps spent, but for the call
// itself; of that call, when inner names a call inside it (its child's,
// req.Step and req.ToolCallID), the child's part up to that call, counted
// the same way one level down. It reads each model call's usage event
// (agent.UsageEvent), placed by the step of the agent that made it or of
// the call that started its sub-agent: a model answer or a call replayed
// in a resumed run of the turn was counted in the run that paid for it,
// whose events the record holds before the resumed run's.
func spentBefore(events []json.RawMessage, lead rerunRequest, inner *childCall, req rerunRequest) (tokens int64, dollars float64) {
	type node struct {
		parent, call string
		step         int
	}
	type paid struct {
		agent   string // "" for the lead
		step    int
		tokens  int64
		dollars float64
	}
	nodes := map[string]node{}
	step := map[string]int{}     // each agent's step now
	callStep := map[string]int{} // the step of each agent's call, by agent and id
	var calls []paid
	for _, raw := range events {
		var e struct {
			Type                                               event.Type
			StepName, SubagentRunID, ParentSubagentRunID, Name string
			ParentToolCallID, ToolCallID                       string
			Value                                              json.RawMessage
		}
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		switch e.Type {
		case event.StepStarted:
			if i := strings.LastIndex(e.StepName, "/step-"); i >= 0 {
				if n, err := strconv.Atoi(e.StepName[i+len("/step-"):]); err == nil {
					step[e.SubagentRunID] = n
				}
			}
		case event.SubagentStarted:
			if _, ok := nodes[e.SubagentRunID]; !ok {
				nodes[e.SubagentRunID] = node{parent: e.ParentSubagentRunID, call: e.ParentToolCallID, step: step[e.ParentSubagentRunID]}
			}
		case event.ToolCallStart:
			k := e.SubagentRunID + "\x00" + e.ToolCallID
			if _, ok := callStep[k]; !ok {
				callStep[k] = step[e.SubagentRunID]
			}
		case event.Custom:
			if e.Name != agent.UsageEvent {
				continue
			}
			var v struct {
				Usage []struct {
					InputTokens, OutputTokens int64
					CostUsd                   float64
				}
			}
			if json.Unmarshal(e.Value, &v) != nil {
				continue
			}
			p := paid{agent: e.SubagentRunID, step: step[e.SubagentRunID]}
			for _, u := range v.Usage {
				p.tokens += u.InputTokens + u.OutputTokens
				p.dollars += u.CostUsd
			}
			calls = append(calls, p)
		}
	}
	type point struct {
		agent, call string
		step        int
	}
	at := func(agent, call string, n int) point {
		if n == 0 {
			n = callStep[agent+"\x00"+call]
		}
		return point{agent, call, n}
	}
	points := []point{at("", lead.ToolCallID, lead.Step)}
	if inner != nil {
		points = append(points, at(req.SubagentRunID, req.ToolCallID, req.Step))
	}
	// kept reports whether a model call of agent a at step n is kept.
	kept := func(a string, n int) bool {
		for _, p := range points {
			if a == p.agent {
				return n <= p.step
			}
			// The child of p.agent a works under, if any.
			c, seen := a, 0
			for c != "" && nodes[c].parent != p.agent && seen <= len(nodes) {
				c, seen = nodes[c].parent, seen+1
			}
			nd, ok := nodes[c]
			if c == "" || !ok || nd.parent != p.agent {
				return false // not under the point's agent: not of the turn kept
			}
			if nd.step != p.step || nd.call != p.call {
				return nd.step <= p.step
			}
			// Under the call re-run: kept only as far as the next point
			// keeps it.
		}
		return false
	}
	for _, c := range calls {
		if kept(c.agent, c.step) {
			tokens += c.tokens
			dollars += c.dollars
		}
	}
	return tokens, dollars
}
