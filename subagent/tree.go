package subagent

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
)

// Tree is an event.Sink that builds a Node per invocation (docs/events.md).
type Tree struct {
	next  event.Sink
	mu    sync.Mutex
	roots []*Node
	byRun map[string]*Node            // sub-agent run id -> its node
	args  map[string]*strings.Builder // tool call -> its arguments so far
	done  map[string]json.RawMessage  // tool call -> its arguments, ended, until a sub-agent claims them
	// order is each tool call's place in the order calls were announced,
	// until a sub-agent claims it or the call has its result; a run
	// announces a step's calls in the order the model gave them, so
	// siblings sort by it whatever order they start in. seq counts.
	order map[string]int64
	seq   int64
	// answered keeps, for the last maxAnswered calls whose result came
	// before any sub-agent claimed them, their arguments and place: a
	// background job's SUBAGENT_STARTED may reach the Tree after the
	// receipt its spawn returned, and still claims them.
	answered  map[string]answeredCall
	answeredQ []answeredAt // in the order answered; an entry claimed since, or kept again, is stale
	answers   int64        // counts keepAnswered
}

// answeredAt is a place in Tree.answeredQ: the call, and its answer's
// number (answeredCall.n).
type answeredAt struct {
	call string
	n    int64
}

// answeredCall is a call that had its result, kept until a sub-agent
// claims it or maxAnswered later ones push it out.
type answeredCall struct {
	args     json.RawMessage
	hasArgs  bool
	order    int64
	hasOrder bool
	n        int64 // which answer it was (Tree.answers)
}

// maxAnswered bounds Tree.answered: a sub-agent whose start comes after
// this many later calls had their results has no arguments in its Node.
const maxAnswered = 256

// callKey keys a tool call by the sub-agent invocation whose run made it
// ("" for the top-level run) and its id: ids repeat across runs, as a
// model's call_0 does in every response.
func callKey(runID, callID string) string { return runID + "\x1f" + callID }

// NewTree returns an empty Tree that passes every event on to next (or nil).
func NewTree(next event.Sink) *Tree {
	return &Tree{next: next, byRun: map[string]*Node{}, args: map[string]*strings.Builder{}, done: map[string]json.RawMessage{}, order: map[string]int64{},
		answered: map[string]answeredCall{}}
}

// State is where a sub-agent invocation stands.
type State string

const (
	StateRunning   State = "running"   // started, not finished
	StateQueued    State = "queued"    // its model call waits for admission (provider.AdmissionEvent)
	StateSucceeded State = "succeeded" // answered its parent
	StateSuspended State = "suspended" // waits for a person's answer; a later run resumes it
	StateFailed    State = "failed"    // Node.Error says why
	StateCancelled State = "cancelled" // by the caller, or the run stopped
	StateRefused   State = "refused"   // a limit refused it (RefusedEvent): it never ran; Code says which
)

// Node is one sub-agent invocation in a Tree.
type Node struct {
	RunID, Name, ToolCallID string                // its run id, the tool called, the call's id
	Arguments               json.RawMessage       // nil when not streamed
	State                   State                 // where it stands
	Result                  json.RawMessage       // the answer the parent got
	Error, Code             string                // why it failed; Code "timeout", "cancelled", …
	Model                   string                // answered its first request (before: the menu's choice)
	Usage                   []provider.ModelUsage // per model, sub-agents' included; so far while it runs
	Earlier                 provider.Usage        // spent by earlier runs of a journaled turn
	EarlierCost             float64               // their cost
	Started, Finished       time.Time             // Finished zero while it runs
	Children                []*Node               // in call order
	Retries, Rejected       int                   // the validator's retries and rejections

	order int64 // the place of its tool call in the Tree's order
	// While it runs: what its own model calls spent since it (re)started
	// (agent.UsageEvent), and how many of its Children started before.
	own   []provider.ModelUsage
	since int
}

// Wall returns how long the invocation ran, or has run so far.
func (n *Node) Wall() time.Duration {
	if n.Finished.IsZero() {
		return time.Since(n.Started)
	}
	return n.Finished.Sub(n.Started)
}

// TotalUsage returns the sum of Usage.
func (n *Node) TotalUsage() provider.Usage {
	var u provider.Usage
	for _, m := range n.Usage {
		u = u.Add(m.Usage)
	}
	return u
}

// Cost returns its cost, children's included, at prices (nil: the run's).
func (n *Node) Cost(prices *provider.Prices) (dollars float64, unpriced []string) {
	if prices == nil {
		for _, m := range n.Usage {
			dollars += m.Cost
		}
		return dollars, nil
	}
	return prices.Cost(n.Usage...)
}

// CacheSaved returns what the prompt cache saved it, children's included.
func (n *Node) CacheSaved(prices *provider.Prices) float64 {
	if prices == nil {
		var dollars float64
		for _, m := range n.Usage {
			dollars += m.CacheSaved
		}
		return dollars
	}
	return prices.Saved(n.Usage...)
}

// Roots returns a copy of the top-level run's invocations, in call order.
func (t *Tree) Roots() []*Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyNodes(t.roots)
}

func copyNodes(nodes []*Node) []*Node {
	if nodes == nil {
		return nil
	}
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		out[i] = copyNode(n)
	}
	slices.SortStableFunc(out, func(a, b *Node) int { return cmp.Compare(a.order, b.order) })
	return out
}

// copyNode copies n and its children. A node that runs has spent so far
// what it reported before it was resumed (if it was), what its own model
// calls spent since, and what its children started since have spent so
// far: every model call under it as it ends, as the job's status says.
func copyNode(n *Node) *Node {
	c := *n
	c.Usage, c.own = slices.Clone(n.Usage), nil
	running := n.Finished.IsZero()
	if running {
		for _, m := range n.own {
			c.Usage = addModel(c.Usage, m)
		}
	}
	if n.Children != nil {
		c.Children = make([]*Node, len(n.Children))
		for i, k := range n.Children {
			c.Children[i] = copyNode(k)
			if running && i >= n.since {
				for _, m := range c.Children[i].Usage {
					c.Usage = addModel(c.Usage, m)
				}
			}
		}
		slices.SortStableFunc(c.Children, func(a, b *Node) int { return cmp.Compare(a.order, b.order) })
	}
	return &c
}

// addModel adds m to usage, under its provider and model.
func addModel(usage []provider.ModelUsage, m provider.ModelUsage) []provider.ModelUsage {
	for i := range usage {
		if usage[i].Provider == m.Provider && usage[i].Model == m.Model {
			usage[i] = usage[i].Add(m)
			return usage
		}
	}
	return append(usage, m)
}

// Emit records e, then passes it on.
func (t *Tree) Emit(e event.Event) {
	t.record(e)
	if t.next != nil {
		t.next.Emit(e)
	}
}

func (t *Tree) record(e event.Event) {
	switch {
	case e.Type == event.ToolCallStart, e.Type == event.ToolCallArgs, e.Type == event.ToolCallEnd, e.Type == event.ToolCallResult,
		e.Type == event.SubagentStarted, e.Type == event.SubagentFinished, e.Type == event.SubagentError:
	case e.Type == event.Custom && e.Name == provider.AdmissionEvent && e.SubagentRunID != "":
		t.admission(e)
		return
	case e.Type == event.Custom && e.Name == ValidationEvent && e.SubagentRunID != "":
		t.validation(e)
		return
	case e.Type == event.Custom && e.Name == RefusedEvent:
		t.refused(e)
		return
	case e.Type == event.Custom && e.Name == agent.UsageEvent && e.SubagentRunID != "":
		t.spent(e)
		return
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	call := callKey(e.SubagentRunID, e.ToolCallID)
	switch e.Type {
	case event.ToolCallStart:
		t.args[call] = &strings.Builder{}
		t.seq++
		t.order[call] = t.seq
		delete(t.answered, call) // an id used again names a new call
	case event.ToolCallArgs:
		if b := t.args[call]; b != nil {
			b.WriteString(e.Delta)
		}
	case event.ToolCallEnd:
		if b := t.args[call]; b != nil {
			delete(t.args, call)
			t.done[call] = json.RawMessage(b.String())
		}
	case event.ToolCallResult:
		a, hasArgs := t.done[call]
		o, hasOrder := t.order[call]
		delete(t.args, call)
		delete(t.done, call)
		delete(t.order, call)
		if hasArgs || hasOrder {
			t.keepAnswered(call, answeredCall{args: a, hasArgs: hasArgs, order: o, hasOrder: hasOrder})
		}
	case event.SubagentStarted:
		call = callKey(e.ParentSubagentRunID, e.ParentToolCallID)
		t.claimAnswered(call)
		if n := t.byRun[e.SubagentRunID]; n != nil && e.SubagentRunID != "" {
			// A resumed run of the turn continues the invocation: the
			// same node, running again; its terminal event reports what
			// it spent over the whole turn.
			n.State, n.Finished, n.Error, n.Code = StateRunning, time.Time{}, "", ""
			n.own, n.since = nil, len(n.Children)
			n.ToolCallID = e.ParentToolCallID
			if e.Model != "" {
				n.Model = e.Model
			}
			if a, ok := t.done[call]; ok {
				n.Arguments = a
				delete(t.done, call)
			}
			delete(t.order, call) // it keeps its place
			return
		}
		n := &Node{RunID: e.SubagentRunID, Name: e.Name, ToolCallID: e.ParentToolCallID, State: StateRunning, Started: when(e), Model: e.Model}
		if a, ok := t.done[call]; ok {
			n.Arguments = a
			delete(t.done, call)
		}
		if o, ok := t.order[call]; ok {
			n.order = o
			delete(t.order, call)
		} else {
			t.seq++ // a call this Tree did not see announced: after those it saw
			n.order = t.seq
		}
		if parent := t.byRun[e.ParentSubagentRunID]; parent != nil && e.ParentSubagentRunID != "" {
			parent.Children = append(parent.Children, n)
		} else {
			t.roots = append(t.roots, n)
		}
		t.byRun[n.RunID] = n
	case event.SubagentFinished, event.SubagentError:
		n := t.byRun[e.SubagentRunID]
		if n == nil {
			return // it started in a stream this Tree did not see
		}
		n.Finished = when(e)
		if e.Model != "" {
			n.Model = e.Model
		}
		n.Usage, n.Earlier, n.EarlierCost = ledger.Decode(e.Usage)
		n.own = nil
		switch {
		case e.Type == event.SubagentError && e.Code == "cancelled":
			n.State, n.Error, n.Code = StateCancelled, e.Message, e.Code
		case e.Type == event.SubagentError:
			n.State, n.Error, n.Code = StateFailed, e.Message, e.Code
		case outcomeType(e.Outcome) == "suspended":
			n.State = StateSuspended
		case outcomeType(e.Outcome) == "cancelled":
			n.State = StateCancelled
		default:
			n.State, n.Result = StateSucceeded, e.Result
		}
	}
}

// keepAnswered keeps an answered call's arguments and place for a
// sub-agent that starts after its result, dropping the oldest past
// maxAnswered.
func (t *Tree) keepAnswered(call string, a answeredCall) {
	t.answers++
	a.n = t.answers
	t.answered[call] = a
	t.answeredQ = append(t.answeredQ, answeredAt{call, a.n})
	for len(t.answeredQ) > maxAnswered {
		old := t.answeredQ[0]
		if t.answered[old.call].n == old.n { // not claimed or kept again since
			delete(t.answered, old.call)
		}
		t.answeredQ = t.answeredQ[1:]
	}
}

// claimAnswered puts back what keepAnswered kept of call, for the
// sub-agent that starts now to claim.
func (t *Tree) claimAnswered(call string) {
	a, ok := t.answered[call]
	if !ok {
		return
	}
	delete(t.answered, call) // its place in answeredQ goes stale
	if a.hasArgs {
		t.done[call] = a.args
	}
	if a.hasOrder {
		t.order[call] = a.order
	}
}

// when is the event's time: its timestamp, or now.
func when(e event.Event) time.Time {
	if e.Timestamp != 0 {
		return time.UnixMilli(e.Timestamp)
	}
	return time.Now()
}

func outcomeType(raw json.RawMessage) string {
	var o struct {
		Type string `json:"type"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &o) != nil {
		return ""
	}
	return o.Type
}

// admission marks the node whose model call waits for admission as
// queued, and as running again once the call is admitted.
func (t *Tree) admission(e event.Event) {
	var v struct{ State string }
	if json.Unmarshal(e.Value, &v) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byRun[e.SubagentRunID]
	switch {
	case n == nil:
	case v.State == "queued" && n.State == StateRunning:
		n.State = StateQueued
	case v.State == "admitted" && n.State == StateQueued:
		n.State = StateRunning
	}
}

// spent adds one model call of a node that runs (agent.UsageEvent) to
// what it has spent so far.
func (t *Tree) spent(e event.Event) {
	var v struct{ Usage json.RawMessage }
	if json.Unmarshal(e.Value, &v) != nil {
		return
	}
	usage, _, _ := ledger.Decode(v.Usage)
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byRun[e.SubagentRunID]; n != nil && n.Finished.IsZero() {
		for _, m := range usage {
			n.own = addModel(n.own, m)
		}
	}
}

// validation counts an answer of a node the validator rejected, and
// whether it asked again.
func (t *Tree) validation(e event.Event) {
	var v struct{ Verdict string }
	if json.Unmarshal(e.Value, &v) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byRun[e.SubagentRunID]; n != nil {
		n.Rejected++
		if v.Verdict == "retry" {
			n.Retries++
		}
	}
}

// refused adds a node, in StateRefused, for the sub-agent a limit refused
// to the run that called it: it never ran, so it has no run id. A
// resumed run of the turn that is refused again keeps the one node.
func (t *Tree) refused(e event.Event) {
	var v struct{ Reason, ToolCallID, Name, Message string }
	if json.Unmarshal(e.Value, &v) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	siblings := &t.roots
	if parent := t.byRun[e.SubagentRunID]; parent != nil && e.SubagentRunID != "" {
		siblings = &parent.Children
	}
	if v.ToolCallID != "" && slices.ContainsFunc(*siblings, func(n *Node) bool { return n.State == StateRefused && n.ToolCallID == v.ToolCallID }) {
		return
	}
	at := when(e)
	n := &Node{Name: v.Name, ToolCallID: v.ToolCallID, State: StateRefused, Error: v.Message, Code: v.Reason, Started: at, Finished: at}
	call := callKey(e.SubagentRunID, v.ToolCallID)
	if a, ok := t.done[call]; ok {
		n.Arguments = a
		delete(t.done, call)
	}
	if o, ok := t.order[call]; ok && v.ToolCallID != "" {
		n.order = o
		delete(t.order, call)
	} else {
		t.seq++
		n.order = t.seq
	}
	*siblings = append(*siblings, n)
}
