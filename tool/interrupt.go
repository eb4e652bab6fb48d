package tool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deputy-go/deputy/internal/errcode"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/jsonschema"
)

// Interrupt is a request for outside input (a person's approval, a missing
// value) that pauses a run until a caller answers it. Its JSON form is
// AG-UI's Interrupt.
type Interrupt struct {
	// ID names the interrupt; an answer gives it back.
	ID string `json:"id"`
	// Reason is a short machine-readable kind, such as ApprovalReason.
	Reason string `json:"reason"`
	// Message is what the person is asked.
	Message string `json:"message,omitempty"`
	// ToolCallID is the call that asked.
	ToolCallID string `json:"toolCallId,omitempty"`
	// ResponseSchema is the JSON Schema a resolved answer's payload must
	// satisfy (none: any payload).
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"`
	// ExpiresAt is when an unanswered interrupt stops being answerable
	// (zero: never).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// SubagentRunID is the sub-agent invocation whose tool asked (empty:
	// a tool of the top-level agent).
	SubagentRunID string `json:"subagentRunId,omitempty"`
}

// Interrupted is the error a run ends with when tools asked for outside
// input: the call that asked, the agent that made it and every ancestor up
// to the top-level run stop, and the top-level Run returns it (wrapped;
// find it with errors.As). Interrupts raised by calls of one model turn, at
// any depth, come back together. Resume answers them.
type Interrupted struct {
	Interrupts []Interrupt `json:"interrupts"`
}

func (e *Interrupted) Error() string {
	ids := make([]string, len(e.Interrupts))
	for i, it := range e.Interrupts {
		ids[i] = it.ID
	}
	return fmt.Sprintf("tool: run interrupted, waiting for answers to %s: answer them with tool.Resume and run the same turn again", strings.Join(ids, ", "))
}

// Status says how a person answered an interrupt.
type Status string

const (
	// Resolved: the person answered; the payload is their answer.
	Resolved Status = "resolved"
	// Cancelled: the person declined to answer; the call that asked fails
	// with an error its model reads.
	Cancelled Status = "cancelled"
)

// Answer answers one interrupt. Its JSON form is AG-UI's ResumeEntry.
type Answer struct {
	InterruptID string          `json:"interruptId"`
	Status      Status          `json:"status"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

// Question is what a tool asks with Ask.
type Question struct {
	// Reason is a short kind, such as ApprovalReason (default "input").
	Reason string
	// Message is what the person reads.
	Message string
	// ResponseSchema, when set, is the JSON Schema the answer must satisfy.
	ResponseSchema json.RawMessage
	// TTL, when positive, is how long the question may stay unanswered;
	// after it the call fails with ErrExpired.
	TTL time.Duration
}

// Errors of interrupts and their answers.
var (
	// ErrCancelled: the person cancelled the question; the model reads it.
	ErrCancelled = errors.New("tool: the person asked cancelled the request")
	// ErrRejected: the person did not approve the call; the model reads it.
	ErrRejected = errors.New("tool: the person asked did not approve the call")
	// ErrExpired: the question was not answered in time.
	ErrExpired = errors.New("tool: the question expired unanswered")
	// ErrUnknownInterrupt: an answer names no pending interrupt.
	ErrUnknownInterrupt = errors.New("tool: no such pending interrupt")
	// ErrAnsweredTwice: one interrupt has two answers.
	ErrAnsweredTwice = errors.New("tool: interrupt answered twice")
	// ErrBadAnswer: an answer has a bad status or a payload that fails the
	// interrupt's response schema.
	ErrBadAnswer = errors.New("tool: invalid answer")
	// ErrNothingSuspended: answers were given but nothing waits for them.
	ErrNothingSuspended = errors.New("tool: nothing is waiting for answers")
	// ErrUnusedAnswer: a resumed run ended without reaching the call an
	// answer was for (the turn run again is not the turn that asked, or
	// it was not run under the journal of the turn that asked).
	ErrUnusedAnswer = errcode.New("unused_answer", "tool: a resumed run did not use an answer it was given")
)

type resumeKey struct{}

// resumption is the answers a resumed run carries.
type resumption struct {
	now     func() time.Time
	pending map[string]Interrupt
	answers map[string]Answer

	mu   sync.Mutex
	used map[string]bool // answers a call has taken
}

// take returns the answer to the interrupt id, once (unless again): a
// second call asking under the same id asks again.
func (r *resumption) take(id string, again bool) (Answer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.answers[id]
	if !ok || (r.used[id] && !again) {
		return Answer{}, false
	}
	r.used[id] = true
	return a, true
}

// UnusedAnswers returns, sorted, the ids of the answers that the run under
// ctx, resumed with Resume, was given and has not used: after a resumed
// run ends, any is a mistake (the turn run again is not the turn that
// asked), which the ReAct loop reports as ErrUnusedAnswer.
func UnusedAnswers(ctx context.Context) []string {
	r, _ := ctx.Value(resumeKey{}).(*resumption)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	js := journal.From(ctx)
	var ids []string
	for id := range r.answers {
		if js != nil {
			// Under a journal, an answer is used once it is recorded, by
			// this run or one before it that stopped (whose call's result
			// is recorded too).
			if _, given := js.J.Lookup(journal.AnswerKey(id)); given {
				continue
			}
		} else if r.used[id] {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Resume checks answers against pending, the interrupts a run ended with,
// and returns a context under which the same turn, run again, continues:
// each call that asked finds its answer in Ask. A pending interrupt left
// unanswered is asked again (keeping its expiry). The error, when the
// answers cannot be used, says which is wrong: ErrNothingSuspended,
// ErrUnknownInterrupt, ErrAnsweredTwice, ErrExpired or ErrBadAnswer; pending
// is not changed.
func Resume(ctx context.Context, pending *Interrupted, answers ...Answer) (context.Context, error) {
	return resume(ctx, pending, time.Now, answers)
}

func resume(ctx context.Context, pending *Interrupted, now func() time.Time, answers []Answer) (context.Context, error) {
	if pending == nil || len(pending.Interrupts) == 0 {
		return ctx, fmt.Errorf("%w: run the turn without answers", ErrNothingSuspended)
	}
	r := &resumption{now: now, pending: map[string]Interrupt{}, answers: map[string]Answer{}, used: map[string]bool{}}
	for _, it := range pending.Interrupts {
		r.pending[it.ID] = it
	}
	t := now()
	for _, a := range answers {
		it, ok := r.pending[a.InterruptID]
		if !ok {
			return ctx, fmt.Errorf("%w %q: answer one of %s", ErrUnknownInterrupt, a.InterruptID, pendingIDs(pending))
		}
		if _, dup := r.answers[a.InterruptID]; dup {
			return ctx, fmt.Errorf("%w: %q: give one answer per interrupt", ErrAnsweredTwice, a.InterruptID)
		}
		if !it.ExpiresAt.IsZero() && !t.Before(it.ExpiresAt) {
			return ctx, fmt.Errorf("%w: %q expired at %s: run the turn again without answering it, and the call fails", ErrExpired, a.InterruptID, it.ExpiresAt.Format(time.RFC3339))
		}
		switch a.Status {
		case Cancelled:
		case Resolved:
			if len(it.ResponseSchema) > 0 {
				s, err := jsonschema.CompileUntrusted(it.ResponseSchema)
				if err != nil {
					return ctx, fmt.Errorf("%w: %q: its response schema does not compile: %v", ErrBadAnswer, a.InterruptID, err)
				}
				p := a.Payload
				if len(p) == 0 {
					p = json.RawMessage("null")
				}
				if err := s.Validate(p); err != nil {
					return ctx, fmt.Errorf("%w: %q: the payload does not match the response schema: %v", ErrBadAnswer, a.InterruptID, err)
				}
			}
		default:
			return ctx, fmt.Errorf("%w: %q: status %q: use %q or %q", ErrBadAnswer, a.InterruptID, a.Status, Resolved, Cancelled)
		}
		r.answers[a.InterruptID] = a
	}
	return context.WithValue(ctx, resumeKey{}, r), nil
}

func pendingIDs(p *Interrupted) string {
	ids := make([]string, len(p.Interrupts))
	for i, it := range p.Interrupts {
		ids[i] = fmt.Sprintf("%q", it.ID)
	}
	return strings.Join(ids, ", ")
}

// interruptID returns the id Ask gives a question asked by call outside a
// journaled turn. (The empty first part keeps the ids that suspended runs
// already hold.)
func interruptID(call Call) string {
	h := sha256.New()
	for _, s := range []string{"", call.ID, call.Name, string(call.Arguments)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return "int_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// Ask asks a person q on behalf of call, from inside the tool's Call. In a
// run that was resumed with an answer to it, Ask returns the answer's
// payload, or an error wrapping ErrCancelled or ErrExpired that the tool
// returns (it is Correctable: the model reads it). Otherwise it returns an
// *Interrupted error: the tool returns it as it is, and the run stops until
// the answer comes.
//
// An answer is used once: it answers the one call that asked, and another
// call asking the same question, even with the same id, name and
// arguments, is asked again. In a journaled turn (agent.WithJournal) the
// interrupt's id is derived from the call's place in the turn, not from
// the id the provider gave the call, so that the resumed run, whose model
// names its calls afresh, asks under the same id; and the answer, once
// taken, is recorded, so that a later round of questions or a recovery
// after a crash finds it given.
func Ask(ctx context.Context, call Call, q Question) (json.RawMessage, error) {
	payload, _, err := ask(ctx, call, q)
	return payload, err
}

// asked says how ask came by its answer or its question.
type asked int

const (
	askedNow    asked = iota // the question put now, or the person's answer taken now
	fromJournal              // the answer the turn's journal holds, taken by a run before
	askedAgain               // the question put again: the resumed run still waits for it
)

// ask is Ask, which also says how it came by its answer or its question.
func ask(ctx context.Context, call Call, q Question) (json.RawMessage, asked, error) {
	var id, key string
	js := journal.From(ctx)
	if js != nil {
		id = js.ID("int_", js.Next("ask"))
		key = journal.AnswerKey(id)
		if e, ok := js.J.Lookup(key); ok {
			payload, err := givenAnswer(call, e.Error != "", e.Value)
			return payload, fromJournal, err
		}
	} else {
		id = interruptID(call)
	}
	r, _ := ctx.Value(resumeKey{}).(*resumption)
	now := time.Now
	if r != nil {
		now = r.now
		// Under a journal the id is the call's place in the turn, which no
		// other call shares, and the answer, once taken, is recorded; a
		// run that recovers this one under the same answers may take it
		// again if the record did not land. Without one, an answer is
		// taken once.
		if a, ok := r.take(id, js != nil); ok {
			cancelled := a.Status == Cancelled
			if js != nil {
				e := journal.Entry{Value: a.Payload}
				if cancelled {
					e = journal.Entry{Error: string(Cancelled)}
				}
				if err := js.J.Record(ctx, key, e); err != nil {
					return nil, askedNow, fmt.Errorf("tool %s: recording the answer to %s in the journal: %w: resume the turn with the same answer when the store is back", call.Name, id, err)
				}
			}
			payload, err := givenAnswer(call, cancelled, a.Payload)
			return payload, askedNow, err
		}
	}
	if len(q.ResponseSchema) > 0 {
		// A schema no answer can meet would leave the run waiting for ever;
		// AG-UI carries only an object. Resume compiles it as a schema from
		// outside (a client echoes it), so it must pass those bounds here.
		if _, err := jsonschema.CompileUntrusted(q.ResponseSchema); err != nil || bytes.TrimSpace(q.ResponseSchema)[0] != '{' {
			return nil, askedNow, fmt.Errorf("tool %s: asking with a response schema that is not a JSON Schema object (%v): fix the tool's Question", call.Name, err)
		}
	}
	it := Interrupt{ID: id, Reason: q.Reason, Message: q.Message, ToolCallID: call.ID, ResponseSchema: q.ResponseSchema}
	if it.Reason == "" {
		it.Reason = "input"
	}
	if r != nil {
		if old, ok := r.pending[id]; ok {
			it.ExpiresAt = old.ExpiresAt
			if !it.ExpiresAt.IsZero() && !now().Before(it.ExpiresAt) {
				return nil, askedNow, Correctable(fmt.Errorf("%w: %s waited for an answer until %s", ErrExpired, call.Name, it.ExpiresAt.Format(time.RFC3339)))
			}
			return nil, askedAgain, &Interrupted{Interrupts: []Interrupt{it}}
		}
	}
	if q.TTL > 0 {
		it.ExpiresAt = now().Add(q.TTL).UTC()
	}
	return nil, askedNow, &Interrupted{Interrupts: []Interrupt{it}}
}

// givenAnswer is what Ask returns for an answer given: its payload, or the
// error of a cancelled question.
func givenAnswer(call Call, cancelled bool, payload json.RawMessage) (json.RawMessage, error) {
	if cancelled {
		return nil, Correctable(fmt.Errorf("%w: %s: do not try again unless the user asks", ErrCancelled, call.Name))
	}
	if len(payload) == 0 {
		return json.RawMessage("null"), nil
	}
	return payload, nil
}

// ApprovalSchema is the response schema RequireApproval asks with: an
// object whose boolean "approved" says yes or no, and an optional "note"
// the model reads when the call is rejected.
var ApprovalSchema = json.RawMessage(`{"type":"object","properties":{"approved":{"type":"boolean"},"note":{"type":"string"}},"required":["approved"]}`)

// Approval is the payload of an answer to RequireApproval's question.
type Approval struct {
	Approved bool   `json:"approved"`
	Note     string `json:"note,omitempty"`
}

// ApprovalReason is the Reason of every question RequireApproval asks, by
// which a client tells an approval from other questions.
const ApprovalReason = "tool_approval"

// RequireApproval returns t such that each call first asks a person
// whether it may run (answer: an Approval). The question's Reason is
// ApprovalReason; its Message names the call and its arguments, after why
// when why is set ("Sends mail to customers: Allow send_email with
// {…}?"). An approved call runs t; a rejected or cancelled one fails with
// an error the model reads (ErrRejected, ErrCancelled). A ttl above zero
// lets the question expire.
func RequireApproval(t Tool, why string, ttl time.Duration) Tool {
	return &approvalTool{Tool: t, why: why, ttl: ttl}
}

type approvalTool struct {
	Tool
	why string
	ttl time.Duration
}

// Available passes on the wrapped tool's availability.
func (a *approvalTool) Available(ctx context.Context) bool { return available(ctx, a.Tool) }

func (a *approvalTool) Call(ctx context.Context, call Call) (Result, error) {
	msg := fmt.Sprintf("Allow %s with %s?", call.Name, string(call.Arguments))
	if a.why != "" {
		msg = a.why + ": " + msg
	}
	payload, err := Ask(ctx, call, Question{Reason: ApprovalReason, Message: msg, ResponseSchema: ApprovalSchema, TTL: a.ttl})
	if err != nil {
		return Result{}, err
	}
	var ap Approval
	if err := json.Unmarshal(payload, &ap); err != nil {
		return Result{}, Correctable(fmt.Errorf("%w: %s: unreadable approval: %v", ErrRejected, call.Name, err))
	}
	if !ap.Approved {
		note := ""
		if ap.Note != "" {
			note = ": " + ap.Note
		}
		return Result{}, Correctable(fmt.Errorf("%w %s%s", ErrRejected, call.Name, note))
	}
	return a.Tool.Call(ctx, call)
}

// interruptSet gathers the interrupts of calls run together, in call
// order, so that one *Interrupted lists them all.
type interruptSet struct {
	mu  sync.Mutex
	got []*Interrupted // by call index
}

// keep records err of call i if it is an interrupt, and reports whether
// it was.
func (s *interruptSet) keep(i int, err error) bool {
	if err == nil {
		return false // and in, which errors.As makes escape, is not allocated
	}
	var in *Interrupted
	if !errors.As(err, &in) {
		return false
	}
	s.mu.Lock()
	s.got[i] = in
	s.mu.Unlock()
	return true
}

// err returns one *Interrupted with every interrupt kept, or nil.
func (s *interruptSet) err() error {
	var all []Interrupt
	for _, in := range s.got {
		if in != nil {
			all = append(all, in.Interrupts...)
		}
	}
	if all == nil {
		return nil
	}
	return &Interrupted{Interrupts: all}
}

// Once runs fn once per journaled turn (agent.WithJournal) and returns
// what it returned: the first run of the turn runs fn and records its
// value; every later run of the same turn, resumed after its questions
// were answered or after a crash, gets the recorded value back and fn is
// not called. It is how a tool or an agent that talks to something outside
// the program (a remote agent, a payment service) does a step exactly once
// when the step must happen before a question that suspends the turn: the
// remote task is created once, and the resumed run continues it.
//
// The place of each call is its order among the calls of Once with the
// same name under the same run or tool call (the way Ask finds its
// answer), never an id a model chose. A call whose fn fails, or whose
// process dies before fn returns, is not recorded, and runs again when the
// turn does: a step fn began may have taken effect, so fn should find
// what an earlier run of it did, or be safe to do twice. Outside a
// journaled turn Once simply calls fn. The value must be JSON, and is
// bounded by the store's record size; a nil value is recorded as null.
func Once(ctx context.Context, name string, fn func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	js := journal.From(ctx)
	if js == nil {
		return fn(ctx)
	}
	key := "once/" + js.ID("", js.Next("once:"+name))
	if e, ok := js.J.Lookup(key); ok {
		return e.Value, nil
	}
	v, err := fn(journal.WithOnce(ctx, js.Sum(key)))
	if err != nil {
		return v, err
	}
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	if !json.Valid(v) {
		return nil, fmt.Errorf("tool: Once %q: the step returned a value that is not JSON; nothing was recorded, and it will run again when the turn does", name)
	}
	if err := js.J.Record(ctx, key, journal.Entry{Value: v}); err != nil {
		return nil, fmt.Errorf("tool: Once %q: the step ran but recording it in the journal failed: %w: it will run again when the turn does", name, err)
	}
	return v, nil
}
