package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// exchange sends msg and follows the remote task until it ends or waits
// for input, forwarding what it streams to ctx's event sink. When ctx
// ends first, the remote task is cancelled.
func (r *Remote) exchange(ctx context.Context, msg *sdk.Message) (round, error) {
	r.mu.Lock()
	client, card := r.client, r.card
	r.mu.Unlock()
	if client == nil {
		return round{}, fmt.Errorf("%w %s: the Remote is closed", ErrRemote, r.name)
	}
	if len(r.cfg.credentials) > 0 {
		ctx = a2aclient.AttachSessionID(ctx, credentialSession)
	}
	f := r.follower(ctx, msg)
	req := &sdk.SendMessageRequest{Message: msg}
	var err error
	if card.Capabilities.Streaming {
		err = f.stream(ctx, client, req)
	} else {
		err = f.poll(ctx, client, req)
	}
	f.endText()
	if err != nil && msg.TaskID != "" && ctx.Err() == nil {
		// An answer to the task's question that the remote agent refused
		// may have reached it before: sent by a run of this turn that
		// stopped (its process killed) before the journal kept what came
		// of it. A task that no longer waits for input took it then: it is
		// followed to where it stands, not sent the answer again, and not
		// cancelled.
		if t, gerr := client.GetTask(ctx, &sdk.GetTaskRequest{ID: msg.TaskID}); gerr == nil && t != nil && t.ID == msg.TaskID &&
			t.Status.State != sdk.TaskStateInputRequired && t.Status.State != sdk.TaskStateAuthRequired {
			f = r.follower(ctx, msg)
			err = f.follow(ctx, client, t)
			f.endText()
		}
	}
	if err != nil {
		if f.rd.TaskID != "" && !f.rd.State.Terminal() {
			r.cancelTask(ctx, client, sdk.TaskID(f.rd.TaskID))
		}
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return f.rd, err
	}
	switch {
	case f.rd.State == sdk.TaskStateCompleted:
		f.rd.Text, f.rd.Value = f.answerText(), f.value
	case f.rd.Text == "" && f.rd.State.Terminal():
		// A task that failed without saying why: what it answered may.
		f.rd.Text = clip(f.answerText(), 4000)
	}
	return f.rd, nil
}

// follower returns a follower of the task msg is sent on (none, for a
// message that starts one).
func (r *Remote) follower(ctx context.Context, msg *sdk.Message) *follower {
	f := &follower{r: r, em: event.From(ctx), sub: event.SubagentRunID(ctx), answer: map[sdk.ArtifactID]*artifactText{}}
	if pol := policy.From(ctx); pol != nil && f.em.Enabled() {
		f.redact = func(text string) (string, bool) {
			chk := &policy.Check{Point: policy.AfterResult, Tool: r.name, Result: text}
			if pol.Decide(ctx, chk).Verdict == policy.Deny {
				return "", false
			}
			return chk.Result, true
		}
	}
	f.rd.ContextID = msg.ContextID
	f.rd.TaskID = string(msg.TaskID)
	return f
}

// cancelTask asks the remote agent to cancel a task the caller no longer
// waits for, within a short time of its own.
func (r *Remote) cancelTask(ctx context.Context, client *a2aclient.Client, id sdk.TaskID) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = client.CancelTask(cctx, &sdk.CancelTaskRequest{ID: id})
}

// follower follows one message's task.
type follower struct {
	r      *Remote
	em     event.Emitter
	sub    string // the sub-agent run the events are attributed to
	rd     round
	events int
	named  atomic.Bool // the remote agent named the task

	order     []sdk.ArtifactID
	answer    map[sdk.ArtifactID]*artifactText
	value     json.RawMessage
	bytes     int
	messageID string // of the text being streamed, "" when none is open
	// redact, under a policy, passes the text the remote streamed through
	// it, as an answer coming back (false: denied, not shown); the text is
	// held in held until it ends, so that a secret split between two
	// pieces is redacted too. nil: no policy.
	redact func(string) (string, bool)
	held   strings.Builder

	// waiting: the next event may be the task as it stood when the answer
	// to its question was sent, still waiting for it.
	waiting bool
}

// maxArtifacts bounds the artifacts of one task: each is kept apart
// until the task ends, however little it holds.
const maxArtifacts = 256

// artifactText is an artifact's text so far, and the bytes of its parts
// that count toward the answer's bound.
type artifactText struct {
	b     strings.Builder
	bytes int
}

func (f *follower) stream(ctx context.Context, client *a2aclient.Client, req *sdk.SendMessageRequest) error {
	sctx, stop := f.outlive(ctx)
	defer stop()
	// An agent may start the stream of an answer with the task as it
	// stood (the JavaScript SDK's agents must): still waiting for input.
	f.waiting = f.rd.TaskID != ""
	for ev, err := range client.SendStreamingMessage(sctx, req) {
		if err != nil {
			return f.failure(ctx, err)
		}
		done, err := f.take(ev)
		if err != nil || done {
			return err
		}
		if f.rd.TaskID != "" {
			f.named.Store(true)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if f.rd.State == sdk.TaskStateInputRequired || f.rd.State == sdk.TaskStateAuthRequired {
		// The stream ended on that task still waiting: its question stands.
		return nil
	}
	return fmt.Errorf("%w %s: the stream ended with task %s still %s: the remote agent stopped mid-task", ErrRemote, f.r.name, f.rd.TaskID, stateName(f.rd.State))
}

// cancelGrace is how long, at most, a request goes on after the caller's
// context ended, for the remote agent to name the task it started — so
// that the task can be cancelled rather than left running.
const cancelGrace = time.Second

// outlive returns the context of a request that starts a task: it ends
// with ctx once the remote agent has named the task (f.named), and
// otherwise a short while later (cancelGrace, or the idle timeout when it
// is shorter). stop releases it.
func (f *follower) outlive(ctx context.Context) (context.Context, func()) {
	if f.rd.TaskID != "" {
		f.named.Store(true)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu       sync.Mutex
		grace    *time.Timer
		finished bool
	)
	after := context.AfterFunc(ctx, func() {
		if f.named.Load() {
			cancel()
			return
		}
		mu.Lock()
		if !finished {
			grace = time.AfterFunc(min(cancelGrace, f.r.cfg.idle), cancel)
		}
		mu.Unlock()
	})
	return sctx, func() {
		after()
		mu.Lock()
		finished = true
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// poll sends without streaming, and reads the task until it ends, for an
// agent whose card says it does not stream. It asks the agent to answer
// at once with the task, rather than when the task ends, so that the task
// can be followed, and cancelled.
func (f *follower) poll(ctx context.Context, client *a2aclient.Client, req *sdk.SendMessageRequest) error {
	now := *req
	now.Config = &sdk.SendMessageConfig{ReturnImmediately: true}
	if req.Config != nil {
		c := *req.Config
		c.ReturnImmediately = true
		now.Config = &c
	}
	sctx, stop := f.outlive(ctx)
	res, err := client.SendMessage(sctx, &now)
	stop()
	if err != nil {
		return f.failure(ctx, err)
	}
	return f.follow(ctx, client, res)
}

// follow reads the task, as res has it, until it ends or waits for input.
func (f *follower) follow(ctx context.Context, client *a2aclient.Client, res sdk.SendMessageResult) error {
	// The task is read again and again, less often as time goes, but often
	// enough to see it change within the idle timeout: a task that does
	// not change for that long is given up on.
	wait := min(100*time.Millisecond, f.r.cfg.idle/4)
	changed, last := time.Now(), ""
	for {
		done, err := f.take(res)
		if err != nil || done {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if m := f.mark(res); m != last {
			changed, last = time.Now(), m
		} else if time.Since(changed) > f.r.cfg.idle {
			return fmt.Errorf("%w %s: task %s stayed %s, unchanged, for %v (WithIdleTimeout)", ErrRemote, f.r.name, f.rd.TaskID, stateName(f.rd.State), f.r.cfg.idle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second, f.r.cfg.idle/4)
		t, err := client.GetTask(ctx, &sdk.GetTaskRequest{ID: sdk.TaskID(f.rd.TaskID)})
		if err != nil {
			return f.failure(ctx, err)
		}
		res = t
	}
}

// mark sums up where a polled task stands, to tell whether it changed:
// its state, the time of its status, and its answer so far.
func (f *follower) mark(res sdk.SendMessageResult) string {
	t, ok := res.(*sdk.Task)
	if !ok {
		return ""
	}
	var at string
	if t.Status.Timestamp != nil {
		at = t.Status.Timestamp.String()
	}
	return fmt.Sprintf("%s|%s|%d|%d", t.Status.State, at, f.bytes, len(f.order))
}

func (f *follower) failure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return remoteError(f.r.name, err)
}

// remoteError says what went wrong with the remote agent named name: a
// bound it broke, or the connection it broke, before what the client
// library makes of it. What the remote said is cut short in it.
func remoteError(name string, err error) error {
	var be *boundError
	switch {
	case errors.As(err, &be):
		return fmt.Errorf("%w %s: %w", ErrRemote, name, be)
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("%w %s: sent an event over %d bytes, more than the A2A client reads: %w", ErrRemote, name, sseEventBytes, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w %s: the connection broke in the middle of a response: %w", ErrRemote, name, err)
	}
	return fmt.Errorf("%w %s: %w", ErrRemote, name, clipError(err, maxErrorBytes))
}

// maxErrorBytes bounds what a remote agent says in an error of the
// caller's.
const maxErrorBytes = 1000

// clippedError is an error whose text is cut short; errors.Is and
// errors.As still see the whole chain.
type clippedError struct {
	err error
	msg string
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// clipError cuts err's text to about n bytes.
func clipError(err error, n int) error {
	msg := err.Error()
	if len(msg) <= n {
		return err
	}
	return &clippedError{err: err, msg: clip(msg, n)}
}

// sseEventBytes is what the A2A client reads of one streamed event at most.
const sseEventBytes = 10 << 20

// take applies one event of the task, and reports whether the task ended
// or waits for input.
func (f *follower) take(ev sdk.Event) (done bool, err error) {
	f.events++
	if f.events > f.r.cfg.maxEvents {
		return false, fmt.Errorf("%w %s: over %d events for one message (WithMaxEvents)", ErrRemote, f.r.name, f.r.cfg.maxEvents)
	}
	waiting := f.waiting
	f.waiting = false
	switch e := ev.(type) {
	case *sdk.Message:
		// An agent that answers with a message makes no task; its ids are
		// held to the same bounds as a task's.
		if err := f.ids(e.TaskID, e.ContextID); err != nil {
			return false, err
		}
		f.rd.State = sdk.TaskStateCompleted
		return true, f.addParts("message", e.Parts, false)
	case *sdk.Task:
		if err := f.ids(e.ID, e.ContextID); err != nil {
			return false, err
		}
		f.rd.State = e.Status.State
		f.usage(e.Metadata)
		for _, a := range e.Artifacts {
			if a != nil {
				if err := f.addParts(a.ID, a.Parts, false); err != nil {
					return false, err
				}
			}
		}
		if waiting && (e.Status.State == sdk.TaskStateInputRequired || e.Status.State == sdk.TaskStateAuthRequired) {
			// The answer is yet to be taken: what the agent makes of it follows.
			f.rd.Text, f.rd.Questions = f.question(e.Status.Message)
			return false, nil
		}
		return f.status(e.Status)
	case *sdk.TaskStatusUpdateEvent:
		if err := f.ids(e.TaskID, e.ContextID); err != nil {
			return false, err
		}
		f.usage(e.Metadata)
		f.forward(e.Metadata[EventKey])
		return f.status(e.Status)
	case *sdk.TaskArtifactUpdateEvent:
		if err := f.ids(e.TaskID, e.ContextID); err != nil {
			return false, err
		}
		if e.Artifact == nil {
			return false, nil
		}
		return false, f.addParts(e.Artifact.ID, e.Artifact.Parts, e.Append)
	}
	return false, nil
}

// ids keeps the task's ids, and refuses an event of another task.
func (f *follower) ids(task sdk.TaskID, contextID string) error {
	if len(task) > maxIDBytes || len(contextID) > maxIDBytes {
		return fmt.Errorf("%w %s: a task or context id over %d bytes", ErrRemote, f.r.name, maxIDBytes)
	}
	if f.rd.TaskID == "" {
		f.rd.TaskID = string(task)
	} else if task != "" && string(task) != f.rd.TaskID {
		return fmt.Errorf("%w %s: sent an event of task %q while following task %q", ErrRemote, f.r.name, task, f.rd.TaskID)
	}
	if contextID != "" {
		f.rd.ContextID = contextID
	}
	return nil
}

// status takes the task's state; the end of the task, or a question,
// ends the message's stream.
func (f *follower) status(s sdk.TaskStatus) (bool, error) {
	f.rd.State = s.State
	switch {
	case s.State == sdk.TaskStateInputRequired || s.State == sdk.TaskStateAuthRequired:
		f.rd.Text, f.rd.Questions = f.question(s.Message)
		return true, nil
	case s.State.Terminal():
		if s.State != sdk.TaskStateCompleted && s.Message != nil {
			f.rd.Text = clip(messageText(s.Message), 4000)
		}
		if s.State == sdk.TaskStateCompleted && len(f.order) == 0 && s.Message != nil {
			// No artifact: the status message is the answer.
			return true, f.addParts("status", s.Message.Parts, false)
		}
		return true, nil
	}
	return false, nil
}

// question reads what a task waiting for input asks: its words, and the
// questions of a deputy remote (a data part {"interrupts":[…]}).
func (f *follower) question(m *sdk.Message) (string, []tool.Interrupt) {
	if m == nil {
		return "", nil
	}
	var qs []tool.Interrupt
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		if d, ok := p.Content.(sdk.Data); ok {
			raw, _ := json.Marshal(d.Value)
			var v struct {
				Interrupts []tool.Interrupt `json:"interrupts"`
			}
			if json.Unmarshal(raw, &v) == nil && len(v.Interrupts) > 0 && len(v.Interrupts) <= 64 {
				qs = askable(v.Interrupts)
			}
		}
	}
	return clip(messageText(m), 4000), qs
}

// askable keeps, of the questions a deputy remote sent, what the caller
// asks with — id, reason, words, schema — each within bounds, or none of
// them when one has no id or one too long to send back.
func askable(in []tool.Interrupt) []tool.Interrupt {
	qs := make([]tool.Interrupt, 0, len(in))
	for _, q := range in {
		if q.ID == "" || len(q.ID) > maxIDBytes {
			return nil
		}
		a := tool.Interrupt{ID: q.ID, Reason: clip(q.Reason, 64), Message: clip(q.Message, 4000)}
		// A schema the caller cannot use is left out: the answer then goes
		// back for the remote agent to judge.
		if usableSchema(q.ResponseSchema) {
			a.ResponseSchema = q.ResponseSchema
		}
		qs = append(qs, a)
	}
	return qs
}

func messageText(m *sdk.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		if t, ok := p.Content.(sdk.Text); ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(string(t))
		}
	}
	return b.String()
}

// addParts adds an artifact's parts to the answer, streaming its text.
func (f *follower) addParts(id sdk.ArtifactID, parts sdk.ContentParts, appendTo bool) error {
	a := f.answer[id]
	if a == nil {
		if len(id) > maxIDBytes {
			return fmt.Errorf("%w %s: an artifact id over %d bytes", ErrRemote, f.r.name, maxIDBytes)
		}
		if len(f.order) >= maxArtifacts {
			return fmt.Errorf("%w %s: over %d artifacts in one task", ErrRemote, f.r.name, maxArtifacts)
		}
		a = &artifactText{}
		f.answer[id] = a
		f.order = append(f.order, id)
	}
	if !appendTo {
		// The artifact is sent again in whole: what it held counts no more.
		f.bytes -= a.bytes
		a.bytes = 0
	}
	var text strings.Builder
	n := 0
	for _, p := range parts {
		if p == nil {
			continue
		}
		switch c := p.Content.(type) {
		case sdk.Text:
			text.WriteString(string(c))
			n += len(c)
		case sdk.Data:
			raw, err := json.Marshal(c.Value)
			if err != nil {
				continue
			}
			n += len(raw)
			f.value = raw
		case sdk.Raw:
			n += len(c)
		}
	}
	a.bytes += n
	f.bytes += n
	if f.bytes > f.r.cfg.maxAnswer {
		return fmt.Errorf("%w %s: its answer is over %d bytes (WithMaxAnswerBytes)", ErrRemote, f.r.name, f.r.cfg.maxAnswer)
	}
	t := text.String()
	if !appendTo {
		old := a.b.String()
		a.b.Reset()
		a.b.WriteString(t)
		// A replaced artifact that goes on from what was streamed streams
		// only what is new.
		if strings.HasPrefix(t, old) {
			t = t[len(old):]
		} else {
			t = ""
		}
	} else {
		a.b.WriteString(t)
	}
	f.text(t)
	return nil
}

func (f *follower) answerText() string {
	var b strings.Builder
	for _, id := range f.order {
		if s := f.answer[id].b.String(); s != "" {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(s)
		}
	}
	return b.String()
}

// text streams a piece of the answer as the run's text.
func (f *follower) text(t string) {
	if t == "" || !f.em.Enabled() {
		return
	}
	if f.redact != nil {
		f.held.WriteString(t) // bounded with the answer
		return
	}
	f.emitText(t)
}

// emitText emits t as the run's text, opening the message first.
func (f *follower) emitText(t string) {
	if f.messageID == "" {
		f.messageID = "msg_a2a_" + f.rd.TaskID
		f.em.Emit(event.Event{Type: event.TextMessageStart, MessageID: f.messageID, Role: "assistant"})
	}
	f.em.Emit(event.Event{Type: event.TextMessageContent, MessageID: f.messageID, Delta: t})
}

func (f *follower) endText() {
	if f.held.Len() > 0 {
		t, ok := f.redact(f.held.String())
		f.held.Reset()
		if ok && t != "" {
			f.emitText(t)
		}
	}
	if f.messageID != "" {
		f.em.Emit(event.Event{Type: event.TextMessageEnd, MessageID: f.messageID})
		f.messageID = ""
	}
}

// forward emits a deputy remote's event (a sub-agent of its, a tool call)
// in the caller's tree, under the run: the remote's sub-agent ids are
// prefixed with the run's, so that they cannot pass for the caller's own.
// Only what names and describes the event, and how a sub-agent ended, is
// kept, each within bounds; the remote's results and usage are not (the
// run reports its own).
func (f *follower) forward(v any) {
	if v == nil || !f.em.Enabled() {
		return
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return
	}
	var in event.Event
	if json.Unmarshal(raw, &in) != nil || !forwarded(in) || in.Type == event.TextMessageContent {
		return
	}
	e := event.Event{
		Type:             in.Type,
		MessageID:        clip(in.MessageID, maxIDBytes),
		Role:             clip(in.Role, 16),
		ToolCallID:       clip(in.ToolCallID, maxIDBytes),
		ToolCallName:     clip(in.ToolCallName, maxIDBytes),
		ParentMessageID:  clip(in.ParentMessageID, maxIDBytes),
		Content:          clip(in.Content, 4000),
		Name:             clip(in.Name, maxIDBytes),
		Description:      clip(in.Description, 1000),
		ParentToolCallID: clip(in.ParentToolCallID, maxIDBytes),
		Message:          clip(in.Message, 4000),
		Code:             clip(in.Code, 64),
		Model:            clip(in.Model, maxIDBytes),
	}
	if len(in.Outcome) <= 4000 {
		// How a sub-agent of the remote ended (suspended, cancelled).
		e.Outcome = in.Outcome
	}
	prefix := f.sub + "/"
	if in.SubagentRunID != "" {
		e.SubagentRunID = prefix + clip(in.SubagentRunID, maxIDBytes)
	}
	if in.ParentSubagentRunID != "" {
		e.ParentSubagentRunID = prefix + clip(in.ParentSubagentRunID, maxIDBytes)
	} else if e.Type == event.SubagentStarted {
		e.ParentSubagentRunID = f.sub
	}
	f.em.Emit(e)
}

// usage takes the usage a deputy remote reports in a task's metadata: the
// task's whole usage so far, so the last report stands.
func (f *follower) usage(meta map[string]any) {
	v, ok := meta[UsageKey].(map[string]any)
	if !ok {
		return
	}
	n := func(k string) int64 {
		x, _ := v[k].(float64)
		if x < 0 || math.IsNaN(x) {
			return 0
		}
		return int64(min(x, 1e12))
	}
	f.rd.Usage = provider.Usage{Requests: n("requests"), InputTokens: n("inputTokens"), OutputTokens: n("outputTokens"),
		CacheReadTokens: n("cachedInputTokens"), CacheWriteTokens: n("cacheWriteInputTokens")}
	// What it cost, when the remote is priced: a figure that is not a
	// finite number of dollars, at least 0, is no figure (unpriced); one
	// past maxTaskCost is refused as the round ends (Remote.Run).
	f.rd.Cost = 0
	if c, ok := v["costUsd"].(float64); ok && c >= 0 && !math.IsInf(c, 0) {
		f.rd.Cost = c
	}
}

// boundedClient returns the HTTP client every request of the Remote goes
// through: the user's (or a default one), with the Remote's headers, each
// response bounded in bytes and in idle time, and no redirect to another
// origin than the request's.
func (r *Remote) boundedClient() *http.Client {
	c := &http.Client{}
	if r.cfg.httpc != nil {
		*c = *r.cfg.httpc
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &boundedTransport{base: base, r: r}
	userCheck := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return fmt.Errorf("%w %s: more than 5 redirects", ErrRemote, r.base)
		}
		if o := req.URL.Scheme + "://" + req.URL.Host; o != via[0].URL.Scheme+"://"+via[0].URL.Host {
			return fmt.Errorf("%w: %s redirected to %s, another origin", ErrOrigin, r.base, o)
		}
		if userCheck != nil {
			return userCheck(req, via)
		}
		return nil
	}
	return c
}

type boundedTransport struct {
	base http.RoundTripper
	r    *Remote
}

// boundError is a bound of the Remote's that a response broke. It wraps
// ErrRemote, and says which bound, and the option that sets it.
type boundError struct{ what string }

func (e *boundError) Error() string { return e.what }
func (e *boundError) Unwrap() error { return ErrRemote }

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.r.allowed(req.URL.String()); err != nil {
		return nil, fmt.Errorf("%w: a request to %s: %v", ErrOrigin, req.URL.Redacted(), err)
	}
	if len(t.r.cfg.header) > 0 {
		req = req.Clone(req.Context())
		for k, vs := range t.r.cfg.header {
			req.Header[k] = append([]string(nil), vs...)
		}
	}
	// The idle timeout runs from the request on, not from the response's
	// headers: a remote that accepts the request and answers nothing is
	// given up on as one that stops in the middle of its answer.
	stalled := &boundError{fmt.Sprintf("sent nothing for %v (WithIdleTimeout)", t.r.cfg.idle)}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.r.cfg.idle, func() { cancel(stalled) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() && err == nil {
		// The timer fired as the headers came: the request is cancelled.
		resp.Body.Close()
		err = stalled
	}
	if err != nil {
		cancel(nil)
		if errors.Is(context.Cause(ctx), stalled) {
			return nil, stalled
		}
		return nil, err
	}
	resp.Body = newBoundedBody(resp.Body, t.r.cfg.maxStream, stalled, t.r.cfg.idle, cancel)
	return resp, nil
}

// boundedBody is a response body that fails once it has given max bytes,
// or once nothing arrived for idle; then, or when it is closed, it
// cancels its request.
type boundedBody struct {
	body    io.ReadCloser
	left    int64
	max     int64
	idle    time.Duration
	stalled *boundError
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	idled   atomic.Bool
}

func newBoundedBody(body io.ReadCloser, max int64, stalled *boundError, idle time.Duration, cancel context.CancelCauseFunc) *boundedBody {
	b := &boundedBody{body: body, left: max, max: max, idle: idle, stalled: stalled, cancel: cancel}
	b.timer = time.AfterFunc(idle, func() {
		b.idled.Store(true)
		cancel(stalled)
	})
	b.timer.Stop() // each Read runs it
	return b
}

// Read reads what the remote agent sent. The idle timeout runs while a
// read waits on the remote, not while the caller works on what it read.
func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, &boundError{fmt.Sprintf("a response over %d bytes (WithMaxStreamBytes)", b.max)}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	if b.idled.Load() {
		return 0, b.stalled
	}
	b.timer.Reset(b.idle)
	n, err := b.body.Read(p)
	b.timer.Stop()
	b.left -= int64(n)
	if b.idled.Load() {
		return n, b.stalled
	}
	return n, err
}

func (b *boundedBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}
