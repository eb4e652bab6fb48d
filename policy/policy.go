package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A Point is where in a run a policy is asked.
type Point string

// The four points at which a policy decides.
const (
	// BeforeTool: a model asked for a tool call, which has not run
	// (Check.Tool, CallID, Arguments). A sub-agent tool's call is one too.
	BeforeTool Point = "tool"
	// BeforeDelegation: a sub-agent is about to be handed its work
	// (Check.Tool names the sub-agent tool; Task and Context are what the
	// child is given). Every form of delegation passes here, a remote
	// agent's included, and a corrective retry is a hand-off of its own.
	BeforeDelegation Point = "delegation"
	// AfterResult: a tool call ended and its result is about to go back to
	// the model that made it (Check.Result, IsError); a sub-agent's answer
	// is the result of its tool's call.
	AfterResult Point = "result"
	// BeforeModel: a model call is about to be sent (Check.Request), the
	// summary calls of compaction included.
	BeforeModel Point = "model"
)

// A Verdict is what a rule decides.
type Verdict string

// The verdicts. The zero Verdict is Allow.
const (
	// Allow: the rule has no objection. It never overrides another rule's
	// Deny or Ask.
	Allow Verdict = ""
	// Deny: the thing does not happen. A tool call or a delegation is
	// answered with an error result the model reads (Decision.Reason); a
	// model call fails its run with *Denial; a result is replaced by the
	// error.
	Deny Verdict = "deny"
	// Ask: a person decides, through the same interrupt a
	// tool.RequireApproval tool raises (tool.ApprovalReason). Only a tool
	// call or a delegation can be asked about; at the other points Ask is
	// taken as Deny. Once approved, what goes on is the Check as the other
	// rules rewrote it.
	Ask Verdict = "ask"
	// Rewrite: the rule changed the Check (new arguments, task, result or
	// request), and what it changed is what goes on.
	Rewrite Verdict = "rewrite"
)

// A Decision is a rule's answer to one Check.
type Decision struct {
	Verdict Verdict
	// Reason says why: what the model reads on Deny, what the person is
	// asked on Ask, what was changed on Rewrite.
	Reason string
}

// Denied returns a decision to deny, for the reason given.
func Denied(reason string) Decision { return Decision{Verdict: Deny, Reason: reason} }

// Asked returns a decision to ask a person, with the question.
func Asked(question string) Decision { return Decision{Verdict: Ask, Reason: question} }

// Rewrote returns a decision that says the rule changed the Check.
func Rewrote(what string) Decision { return Decision{Verdict: Rewrite, Reason: what} }

// A Check is what a policy is asked about: one point of one run. Rules
// read it, and a rule that rewrites assigns new values to its fields
// (never writing into the slices it was given, which the run still
// holds) and returns Rewrote. A rule must not keep the Check after
// Decide returns: it is reused for other checks, of this run or another.
type Check struct {
	Point Point
	// Path names the agents from the top-level run down to the one whose
	// call, hand-off or model call this is, joined by "/"
	// ("lead/researcher"); Depth is that agent's depth (0: top level).
	Path  string
	Depth int
	// RunID is the run of that agent; Owner and Thread the caller a
	// served endpoint named and the conversation (agent.WithOwner,
	// agent.WithThread), "" when none was named.
	RunID, Owner, Thread string

	// Tool is the tool called (BeforeTool, AfterResult) or the sub-agent
	// tool that hands work down (BeforeDelegation); CallID the model's id
	// for the call, which may be empty or reused, and Arguments the call's
	// arguments.
	Tool      string
	CallID    string
	Arguments json.RawMessage

	// Task and Context, at BeforeDelegation, are what the child is given:
	// its task text and the conversation it goes on from (usually none;
	// for a context fork, its parent's conversation, which a rule that
	// rewrites Context changes for the fork).
	Task    string
	Context []provider.Message

	// Result and IsError, at AfterResult, are what the model will read.
	Result  string
	IsError bool

	// Request, at BeforeModel, is the request to be sent: a rule that
	// rewrites it assigns new values to its fields.
	Request *provider.Request

	// known is what Decide looked up in the context of its last decision
	// on this Check; models counts the model calls it decided on it, and
	// memo is what the redactors found clean in their requests (see memo).
	known  known
	models int
	memo   *memo
}

// known is what a decision reads from its context: its depth, where it
// is recorded, and, once a rule or the record needs it (place), its place
// in the tree. A Check decided again under the same context (a tool
// call's, then its result's; a run's model calls, which share one Check)
// looks none of it up again.
type known struct {
	ctx   context.Context
	depth int
	em    event.Emitter
	span  trace.Span
	// events: em is enabled; spans: span is recording (a span that ends
	// records nothing more, whatever this says).
	events, spans bool
	// placed: path, runID, owner and thread are looked up (run.Place,
	// which works out a run's path the first time it is asked).
	placed                     bool
	path, runID, owner, thread string
}

// of returns what k holds of ctx, looked up afresh unless k holds it
// already, and clears c's place when it does. The context is known by its
// pointer: a context that is no pointer (every context this module and
// the standard library make is one) is looked up each time, and so is any
// other, which cannot share the pointer of one k still holds.
func (k *known) of(ctx context.Context, c *Check) *known {
	if t := reflect.TypeOf(ctx); t == nil || t.Kind() != reflect.Pointer || ctx != k.ctx {
		depth, em, span, ok := run.Observers(ctx)
		if !ok {
			em, span = event.From(ctx), trace.SpanFromContext(ctx)
		}
		*k = known{ctx: ctx, depth: depth, em: em, span: span, events: em.Enabled(), spans: span.IsRecording()}
		c.Path, c.RunID, c.Owner, c.Thread = "", "", "", ""
	}
	return k
}

// place fills in c's Path, RunID, Owner and Thread from ctx, the context
// of its decision (Decide looked up the rest).
func (c *Check) place(ctx context.Context) {
	k := &c.known
	if !k.placed {
		k.path, k.depth, k.runID, k.owner, k.thread = run.Place(ctx)
		k.placed = true
	}
	c.Path, c.RunID, c.Owner, c.Thread = k.path, k.runID, k.owner, k.thread
}

// A Rule decides at the points it cares about, and allows the rest.
// Decide is called for every check of every run the rule binds, from many
// goroutines at once: it must be safe for concurrent use, fast, and must
// not block (a rule that needs a person returns Asked).
type Rule interface {
	// Name names the rule in events, spans and errors.
	Name() string
	// Decide decides on c.
	Decide(ctx context.Context, c *Check) Decision
}

// Func returns a Rule named name that decides with fn.
func Func(name string, fn func(ctx context.Context, c *Check) Decision) Rule {
	return &funcRule{name: name, fn: fn}
}

type funcRule struct {
	name string
	fn   func(context.Context, *Check) Decision
}

func (f *funcRule) Name() string                                  { return f.name }
func (f *funcRule) Decide(ctx context.Context, c *Check) Decision { return f.fn(ctx, c) }

// same reports whether a and b are the same rule: equal values of one
// comparable type (a rule of a type that cannot be compared is the same
// only as itself, which this cannot tell, so never).
func same(a, b Rule) (eq bool) {
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) || !t.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			eq = false // an interface field holding a value that cannot be compared
		}
	}()
	return a == b
}

// contains reports whether rules holds r (same).
func contains(rules []Rule, r Rule) bool {
	return slices.ContainsFunc(rules, func(o Rule) bool { return same(o, r) })
}

// A Policy is an ordered set of rules. It never changes once made: Narrow
// returns a new one.
type Policy struct {
	rules []Rule
	// at holds, for each of the four points (pointIndex), the rules that
	// may decide there, in order: a ready-made rule that says at which
	// points it decides (pointed) is left out of the others, where it
	// would allow, and the others are asked everywhere. So a model call
	// under five rules asks only the redactor, not four rules that allow
	// it without a look.
	at [4][]Rule
	// topModels are the rules of at[BeforeModel] that may decide on a
	// model call of a top-level run: not a redactor, which leaves the
	// top-level agent's requests as they are. Under five rules, a lead's
	// model calls ask no rule.
	topModels []Rule
	// users says, for each point, whether a rule of the user's (not made
	// by this package) decides there: one that may read the whole Check,
	// which is then filled in and copied for it (decideCopy).
	users [4]bool
	// bound is how a context and the runs under it carry the policy
	// (run.Bound; its Policy is this one).
	bound run.Bound
}

// pointed is a ready-made rule that decides only at the points it names
// (a bit 1<<pointIndex for each), and allows everywhere else.
type pointed interface {
	points() uint8
}

// pointIndex is the index of pt in Policy.at, or -1 for a Point that is
// none of the four.
func pointIndex(pt Point) int {
	switch pt {
	case BeforeTool:
		return 0
	case BeforeDelegation:
		return 1
	case AfterResult:
		return 2
	case BeforeModel:
		return 3
	}
	return -1
}

// onlyTools is the points of a rule that decides before tool calls only.
const onlyTools = 1 << 0

// newPolicy returns the policy of rules, which it keeps.
func newPolicy(rules []Rule) *Policy {
	p := &Policy{rules: rules}
	p.bound.Policy, p.bound.Narrows = p, p.narrows
	for _, r := range rules {
		if _, ok := r.(*redactor); ok {
			p.bound.Scrub = p.scrub
		}
		pts := uint8(0b1111)
		if pr, ok := r.(pointed); ok {
			pts = pr.points()
		}
		for i := range p.at {
			if pts&(1<<i) != 0 {
				p.at[i] = append(p.at[i], r)
				p.users[i] = p.users[i] || !isReadyMade(r)
			}
		}
		if _, ok := r.(*redactor); !ok && pts&(1<<pointIndex(BeforeModel)) != 0 {
			p.topModels = append(p.topModels, r)
		}
	}
	return p
}

// scrub returns s as the policy's redactors leave it (run.Bound.Scrub).
func (p *Policy) scrub(s string) string {
	for _, r := range p.rules {
		if rd, ok := r.(*redactor); ok {
			s, _ = rd.text(s)
		}
	}
	return s
}

// isReadyMade reports whether r is one of this package's rules, which
// read of a Check's place only its Depth (askBefore fills in the rest
// for its question: Check.place).
func isReadyMade(r Rule) bool {
	switch r.(type) {
	case *toolList, *askBefore, *redactor, *pathUnder:
		return true
	}
	return false
}

// New returns a policy of rules. It refuses a nil rule, a rule without a
// name and two rules of one name (the name is how events and errors tell
// them apart).
func New(rules ...Rule) (*Policy, error) {
	return (*Policy)(nil).Narrow(rules...)
}

// Narrow returns a policy of p's rules followed by rules: it binds
// everything p binds and more. It refuses, as New does, bad rules, and a
// rule that would allow what one of p's forbids (an allow list naming a
// tool p's allow lists leave out, at a depth both cover; a *Widening): a
// child's policy can only narrow its parent's. (Whatever a policy allows,
// the policy a run inherits still applies: With adds, and nothing
// removes.)
func (p *Policy) Narrow(rules ...Rule) (*Policy, error) {
	var have []Rule
	if p != nil {
		have = p.rules
	}
	out := slices.Clip(slices.Clone(have))
	for i, r := range rules {
		if r == nil {
			return nil, fmt.Errorf("policy: rule %d is nil: pass a Rule", i)
		}
		name := r.Name()
		if name == "" {
			return nil, fmt.Errorf("policy: rule %d (%T) has no name: name every rule, so that its decisions say which rule made them", i, r)
		}
		for _, o := range out {
			if o.Name() == name && !same(o, r) {
				return nil, fmt.Errorf("policy: two rules are named %q: give each its own name", name)
			}
		}
		if err := widens(have, r); err != nil {
			return nil, err
		}
		if !contains(out, r) {
			out = append(out, r)
		}
	}
	return newPolicy(out), nil
}

// Rules returns the policy's rules, in the order they are asked.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	return slices.Clone(p.rules)
}

// With returns ctx under which p binds every run started under it and
// everything those runs start, as far down the tree as it goes: tool
// calls, sub-agents of every form, background jobs, compaction calls,
// and the hand-off to a remote agent. If ctx already carries a policy,
// the one returned is that policy followed by p's rules it lacks: a run
// cannot shed the policy it was started under, only add to it. A p that
// would allow what the carried policy forbids (an allow list wider than
// its) is refused with a *Widening, and ctx is returned as it was: make p
// with Narrow of From(ctx). A nil p returns ctx as it is.
//
// The policy rides the context because it must cross every agent.Agent
// boundary, including agents deputy does not own; an agent that starts
// its work under a context not derived from the one it was given
// (context.Background) leaves the policy behind, and is a bug.
func With(ctx context.Context, p *Policy) (context.Context, error) {
	if p == nil || len(p.rules) == 0 {
		return ctx, nil
	}
	have := From(ctx)
	if have == nil {
		return run.WithBound(ctx, &p.bound), nil
	}
	// A child given its parent's policy again (a resident, a roster
	// member built with it) adds nothing, and costs no copy.
	if have == p || !slices.ContainsFunc(p.rules, func(r Rule) bool { return !contains(have.rules, r) }) {
		return ctx, nil
	}
	if err := have.narrows(p); err != nil {
		return ctx, err
	}
	merged := slices.Clone(have.rules)
	for _, r := range p.rules {
		if !contains(merged, r) {
			merged = append(merged, r)
		}
	}
	return run.WithBound(ctx, &newPolicy(merged).bound), nil
}

// From returns the policy binding ctx, or nil.
func From(ctx context.Context) *Policy {
	if b := run.BoundOf(ctx); b != nil {
		return b.Policy.(*Policy)
	}
	return nil
}

// Outcome is a policy's decision on one Check, all its rules asked: the
// first Deny, else the first Ask, else Rewrite if any rule rewrote, else
// Allow. Rule names the rule that decided ("" for Allow).
type Outcome struct {
	Verdict Verdict
	Rule    string
	Reason  string
}

// Err returns the outcome of a Deny as a *Denial for c, nil otherwise.
func (o Outcome) Err(c *Check) error {
	if o.Verdict != Deny {
		return nil
	}
	return &Denial{Rule: o.Rule, Reason: o.Reason, Point: c.Point, Tool: c.Tool, Path: c.Path}
}

// ErrDenied is what every *Denial matches with errors.Is.
var ErrDenied = errors.New("policy: denied")

// Denial is the error of a Deny: which rule denied what, where, and why.
// The model reads its text; a Go caller finds it with errors.As (in a
// tool.Result's Err, in a run's error when a model call is denied, in
// agent.Output.Denials).
type Denial struct {
	Rule   string
	Reason string
	Point  Point
	Tool   string // the tool or sub-agent tool, "" for a model call
	Path   string
}

func (e *Denial) Error() string {
	what := "the model call"
	switch e.Point {
	case BeforeTool:
		what = "the call to " + e.Tool
	case BeforeDelegation:
		what = "the hand-off to " + e.Tool
	case AfterResult:
		what = "the result of " + e.Tool
	}
	return fmt.Sprintf("policy: rule %q denied %s at %s: %s: do not try it again; do the work another way or answer without it", e.Rule, what, e.Path, e.Reason)
}

// Is reports that e is ErrDenied.
func (e *Denial) Is(target error) bool { return target == ErrDenied }

// EventName is the Name of the CUSTOM event every decision (and each
// question a person is put, and their answer) is recorded by, and of the
// span event on the span of the call it was made in.
const EventName = "deputy.policy"

// Decide asks each of p's rules about c, in order, and returns the outcome.
// It fills in c's place in the tree (Path, Depth, RunID, Owner, Thread)
// from ctx (the ready-made rules read only Depth: for them, the rest is
// filled in when the decision is recorded or is not Allow). It records
// each decision but an Ask: a CUSTOM event named EventName on ctx's event
// sink, and an event of that name on the span of ctx when it is
// recording; a Deny is also added to the run's agent.Output.Denials. An
// Ask is recorded when its question is put (Asking) and when it is
// answered (Answered), which tool.ApprovePolicy does.
//
// The sub-agent tools, the tool registry and the agent loop call it; a
// user's own agent that calls tools or models outside them calls it to
// be bound too.
func (p *Policy) Decide(ctx context.Context, c *Check) Outcome {
	k := c.known.of(ctx, c)
	if c.Point == BeforeModel {
		c.models++
	}
	c.Depth = k.depth
	i := pointIndex(c.Point)
	var out Outcome
	if i < 0 || p.users[i] {
		c.place(ctx)
		out = p.decideCopy(ctx, c, i)
	} else if rules := p.asked(c, i); len(rules) > 0 {
		out = p.decide(ctx, c, rules)
	}
	if out.Verdict != Allow || k.events || k.spans {
		c.place(ctx)
		if out.Verdict != Ask {
			// An Ask is recorded when its question is put to a person
			// (Asking), once, and then what they answered (Answered):
			// not again each time a resumed run decides the call anew.
			record(ctx, c, out, "", k.em, k.events, k.span, k.spans)
		}
	}
	return out
}

// An Answer is what a person answered a policy's question.
type Answer string

// What a person answered.
const (
	Approved  Answer = "approved"  // they approved: the call goes on
	Rejected  Answer = "rejected"  // they said no
	Cancelled Answer = "cancelled" // they cancelled the question
	Expired   Answer = "expired"   // nobody answered in time
)

// Asking records, as Decide records a decision, that the question of o,
// the Ask that Decide returned for c, is put to a person now: a record
// whose verdict is "ask". tool.ApprovePolicy calls it, and Answered, so
// that the audit trail holds each question once and its answer once,
// however many times a resumed run decides the call again; code that
// puts a policy's question its own way calls them too.
func Asking(ctx context.Context, c *Check, o Outcome) {
	k := c.known.of(ctx, c)
	if k.events || k.spans {
		c.place(ctx)
		record(ctx, c, o, "", k.em, k.events, k.span, k.spans)
	}
}

// Answered records, as Decide records a decision, the answer a person
// gave to the question of o, the Ask that Decide returned for c: a
// record by o's rule whose verdict is "allow" when they approved and
// "deny" otherwise, and whose "answer" (the span event's
// deputy.policy.answer) is a. (A person's no is not a *Denial: it is not
// added to agent.Output.Denials.)
func Answered(ctx context.Context, c *Check, o Outcome, a Answer) {
	k := c.known.of(ctx, c)
	if !k.events && !k.spans {
		return
	}
	c.place(ctx)
	o.Verdict = Allow
	if a != Approved {
		o.Verdict = Deny
	}
	record(ctx, c, o, a, k.em, k.events, k.span, k.spans)
}

// decide asks rules, all of them ready-made, about c (the Check stays
// where its caller put it: see decideCopy); a rule that panics denies.
func (p *Policy) decide(ctx context.Context, c *Check, rules []Rule) (out Outcome) {
	var t tally
	defer func() {
		if v := recover(); v != nil {
			out = t.panicked(v)
		}
	}()
	for _, t.rule = range rules {
		if t.add(readyMade(ctx, t.rule, c), c.Point) {
			break
		}
	}
	return t.outcome()
}

// asked returns the rules, all of them ready-made, that may decide on c at
// the point of index i: p.at[i], but for the model calls of a top-level
// run, which no redactor reads.
func (p *Policy) asked(c *Check, i int) []Rule {
	if c.Depth == 0 && c.Point == BeforeModel {
		return p.topModels
	}
	return p.at[i]
}

// readyMade asks r, one of this package's rules, about c. A rule of the
// user's, which decide never asks, is asked about a copy of c.
func readyMade(ctx context.Context, r Rule, c *Check) Decision {
	switch r := r.(type) {
	case *toolList:
		return r.Decide(ctx, c)
	case *askBefore:
		return r.Decide(ctx, c)
	case *redactor:
		return r.Decide(ctx, c)
	case *pathUnder:
		return r.Decide(ctx, c)
	}
	cp := new(Check)
	*cp = *c
	d := r.Decide(ctx, cp)
	*c = *cp
	return d
}

// decideCopy asks the rules at the point of index i (-1: all), some of
// them the user's, about a copy of c it then copies back. A Check passed
// to a Rule through its interface escapes to the heap: the copy does, and
// c, which callers keep on their stack, does not (where each write to a
// field of a Check on the heap costs a write barrier while the collector
// runs, and the Check a pool round trip).
func (p *Policy) decideCopy(ctx context.Context, c *Check, i int) Outcome {
	cp := copies.Get().(*Check)
	*cp = *c
	out := p.decideOn(ctx, cp, i)
	*c = *cp
	*cp = Check{} // nothing of the check is kept in the pool
	copies.Put(cp)
	return out
}

// copies holds the *Check of decideCopy not in use, cleared.
var copies = sync.Pool{New: func() any { return new(Check) }}

// decideOn is decide for decideCopy: it asks every rule through its
// interface.
func (p *Policy) decideOn(ctx context.Context, c *Check, i int) (out Outcome) {
	var t tally
	defer func() {
		if v := recover(); v != nil {
			out = t.panicked(v)
		}
	}()
	rules := p.rules
	if i >= 0 {
		rules = p.at[i]
	}
	for _, t.rule = range rules {
		if t.add(t.rule.Decide(ctx, c), c.Point) {
			break
		}
	}
	return t.outcome()
}

// tally is the outcome of the rules asked so far: the first Deny, else
// the first Ask, else Rewrite if any rule rewrote, else Allow.
type tally struct {
	rule    Rule // the rule being asked
	out     Outcome
	ask     Outcome
	rewrote string
}

// add adds d, rule's decision at pt, and reports whether the outcome is
// a Deny, which no later rule changes.
func (t *tally) add(d Decision, pt Point) bool {
	switch d.Verdict {
	case Allow:
		return false
	case Deny:
		t.out = Outcome{Verdict: Deny, Rule: t.rule.Name(), Reason: d.Reason}
	case Ask:
		if pt != BeforeTool && pt != BeforeDelegation {
			t.out = Outcome{Verdict: Deny, Rule: t.rule.Name(), Reason: "asking a person is only possible before a tool call or a hand-off; " + d.Reason}
		} else if t.ask.Verdict == Allow {
			t.ask = Outcome{Verdict: Ask, Rule: t.rule.Name(), Reason: d.Reason}
		}
	case Rewrite:
		if t.rewrote == "" {
			t.rewrote = t.rule.Name()
		}
		if t.ask.Verdict == Allow && t.out.Verdict == Allow {
			t.out = Outcome{Verdict: Rewrite, Rule: t.rewrote, Reason: d.Reason}
		}
	default:
		t.out = Outcome{Verdict: Deny, Rule: t.rule.Name(), Reason: fmt.Sprintf("the rule returned an unknown verdict %q", d.Verdict)}
	}
	return t.out.Verdict == Deny
}

// outcome is the outcome of the rules asked.
func (t *tally) outcome() Outcome {
	if t.out.Verdict != Deny && t.ask.Verdict == Ask {
		return t.ask
	}
	return t.out
}

// panicked is the outcome when the rule being asked panicked with v.
func (t *tally) panicked(v any) Outcome {
	return Outcome{Verdict: Deny, Rule: t.rule.Name(), Reason: fmt.Sprintf("the rule panicked: %v", v)}
}

// record is the audit trail of one decision, made under ctx, whose event
// sink is em (events: enabled) and span span (spans: recording).
func record(ctx context.Context, c *Check, o Outcome, answer Answer, em event.Emitter, events bool, span trace.Span, spans bool) {
	if o.Verdict == Deny && answer == "" {
		run.AddDenial(ctx, o.Err(c))
	}
	if !events && !spans {
		return
	}
	verdict := string(o.Verdict)
	if verdict == "" {
		verdict = "allow"
	}
	if events {
		v, _ := json.Marshal(auditRecord{Point: c.Point, Verdict: verdict, Answer: answer, Rule: o.Rule, Reason: o.Reason, Tool: c.Tool, CallID: c.CallID, Path: c.Path, Depth: c.Depth, RunID: c.RunID, Owner: c.Owner, Thread: c.Thread})
		em.Emit(event.Event{Type: event.Custom, Name: EventName, Value: v})
	}
	if spans {
		attrs := []attribute.KeyValue{
			attribute.String("deputy.policy.point", string(c.Point)),
			attribute.String("deputy.policy.verdict", verdict),
			attribute.String("deputy.policy.rule", o.Rule),
			attribute.String("deputy.policy.reason", o.Reason),
			attribute.String("deputy.policy.tool", c.Tool),
			attribute.String("deputy.policy.path", c.Path),
			attribute.String("deputy.policy.owner", c.Owner),
			attribute.String("deputy.policy.thread", c.Thread),
		}
		if answer != "" {
			attrs = append(attrs, attribute.String("deputy.policy.answer", string(answer)))
		}
		span.AddEvent(EventName, trace.WithAttributes(attrs...))
	}
}

// auditRecord is the value of the CUSTOM event of a decision.
type auditRecord struct {
	Point   Point  `json:"point"`
	Verdict string `json:"verdict"`
	// Answer is, for the record of a person's answer (Answered), what
	// they answered.
	Answer Answer `json:"answer,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"callId,omitempty"`
	Path   string `json:"path"`
	Depth  int    `json:"depth"`
	RunID  string `json:"runId,omitempty"`
	// Owner and Thread are the run's (Check.Owner, Check.Thread), so that
	// the trail says whose run each decision was made in.
	Owner  string `json:"owner,omitempty"`
	Thread string `json:"thread,omitempty"`
}
