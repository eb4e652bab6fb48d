package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/id"
	"github.com/deputy-go/deputy/internal/jsonvalue"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// holder is an agent whose turn a call can hold for all its runs, and
// whose conversation it can put back as it was when the turn was taken,
// such as *agent.React.
type holder interface {
	Hold(ctx context.Context) (context.Context, *agent.Turn, error)
}

// checkpointer is an agent whose conversation can be put back.
type checkpointer interface {
	Checkpoint() (restore func())
}

// Call runs the child for one call of the model.
//
// The Result's Content is the child's answer (validated, rendered and capped
// as configured), its Usage what the child spent, its Value the validated
// answer. Failures the model can act on are returned as errors marked
// tool.Correctable, which a registry turns into error Results; a
// cancellation of ctx is returned as an error wrapping context.Canceled. In
// every case the Result carries the usage spent.
func (t *SubAgentTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	name := t.def.Name
	depth := agent.Depth(ctx)
	if depth >= t.cfg.maxDepth {
		return tool.Result{}, tool.Correctable(fmt.Errorf("%w: %q cannot be called at depth %d (the cap is %d): do this work directly",
			ErrMaxDepth, name, depth, t.cfg.maxDepth))
	}
	args := tool.Arguments(call.Arguments)
	// The text is read once, for the schema and for the child's input.
	text := string(args)
	var err error
	if v, ok := jsonvalue.Decode(text); ok {
		err = t.params.ValidateValue(v)
	} else {
		err = t.params.Validate(args) // which says what is wrong with the JSON
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("%w for %s: %v: fix the arguments to match the tool's schema and call it again", tool.ErrInvalidArguments, name, err)
	}
	in := agent.Input{Text: text}
	if t.cfg.input != nil {
		if in, err = t.cfg.input(args); err != nil {
			return tool.Result{}, fmt.Errorf("%w for %s: %v", tool.ErrInvalidArguments, name, err)
		}
	}

	return t.invoke(ctx, call.ID, args, in)
}

// invoke runs one call whose arguments are checked, or, under a journal,
// answers it from the journal. The spawn tool shares it.
func (t *SubAgentTool) invoke(ctx context.Context, callID string, args json.RawMessage, in agent.Input) (tool.Result, error) {
	if js := journalFrom(ctx); js != nil {
		return t.journaled(ctx, js, callID, args, in)
	}
	return t.invokeNow(ctx, callID, args, in)
}

// invokeNow runs one call: the depth step, the events, the timeout, and
// the classification of failures.
func (t *SubAgentTool) invokeNow(ctx context.Context, callID string, args json.RawMessage, in agent.Input) (tool.Result, error) {
	name := t.def.Name
	em := event.From(ctx) // the scope is looked up once for the call's events
	events := em.Enabled()
	cctx := run.WithDepth(ctx, agent.Depth(ctx)+1)
	runID := "" // only events and a render see the invocation's id
	ann, _ := ctx.Value(announcedKey{}).(*announced)
	switch {
	case ann != nil && !ann.used:
		// A background job's: SUBAGENT_STARTED went out before the
		// receipt, and ctx is already in the sub-agent's scope.
		ann.used = true
		em, events, runID = ann.em, ann.em.Enabled(), ann.runID
		cctx = context.WithValue(cctx, announcedKey{}, nil)
	case events:
		if runID = stableRunID(ctx); runID != "" {
			cctx = event.WithSubagent(cctx, runID)
		} else {
			cctx, runID = event.NewSubagent(cctx, "sub_")
		}
		em.Emit(event.Event{
			Type: event.SubagentStarted, SubagentRunID: runID, Name: name, Description: t.def.Description,
			ParentSubagentRunID: em.SubagentRunID(), ParentToolCallID: callID,
		})
	case t.cfg.render != nil && stableRunID(ctx) != "":
		runID = stableRunID(ctx)
	case t.cfg.render != nil:
		runID = id.New("sub_")
	}
	cctx = context.WithValue(context.WithValue(cctx, stableRunKey{}, nil), pauseKey{}, stableRunID(ctx))
	if t.cfg.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, t.cfg.timeout)
		defer cancel()
	}

	// run itself refuses the answer of a child whose context ended, where
	// it can still put a resident's conversation back.
	res, err := t.run(cctx, args, in, runID)
	rid := runID
	if rid == "" {
		if rid = stableRunID(ctx); rid == "" {
			rid = id.New("sub_")
		}
	}
	if own, ok := suspend(err, rid); ok {
		if events {
			em.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: runID, Outcome: event.SuspendedOutcome(own)})
		}
		return tool.Result{Usage: res.Usage}, err
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			if !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("subagent %q: %w: %w", name, ctx.Err(), err)
			}
		case cctx.Err() != nil && t.cfg.timeout > 0:
			err = tool.Correctable(fmt.Errorf("%w: %q ran longer than %v: give it a smaller task: %w", ErrTimeout, name, t.cfg.timeout, err))
		}
		// The error's text reaches the parent's conversation, and is sent
		// again with every later request: it is capped like an answer.
		err = capError(err, t.cfg.maxOutput)
		if events {
			em.Emit(event.Event{Type: event.SubagentError, SubagentRunID: runID, Message: err.Error(), Code: errorCode(err)})
		}
		// A failed call hands back what it spent and nothing it said.
		return tool.Result{Usage: res.Usage}, err
	}
	if events {
		em.Emit(event.Event{Type: event.SubagentFinished, SubagentRunID: runID, Result: event.JSONString(res.Content)})
	}
	return res, nil
}

// announced is a sub-agent invocation whose SUBAGENT_STARTED was emitted
// ahead of its run, by the spawning call: a background job's, announced
// before the call returns its receipt. invoke takes it over (used), and
// emits the terminal event with em; if the job ends before invoke ran, the
// job emits SUBAGENT_ERROR itself. Only the job's goroutine touches it after
// the announcement.
type announced struct {
	runID string
	em    event.Emitter // the spawning call's
	used  bool
}

type announcedKey struct{}

// announce emits SUBAGENT_STARTED for an invocation of t by the call callID
// under ctx that will run later, and returns the context it must run under
// (nil when events are off).
func (t *SubAgentTool) announce(ctx context.Context, callID string) (context.Context, *announced) {
	em := event.From(ctx)
	if !em.Enabled() {
		return ctx, nil
	}
	sctx, runID := event.NewSubagent(ctx, "sub_")
	em.Emit(event.Event{
		Type: event.SubagentStarted, SubagentRunID: runID, Name: t.def.Name, Description: t.def.Description,
		ParentSubagentRunID: em.SubagentRunID(), ParentToolCallID: callID,
	})
	a := &announced{runID: runID, em: em}
	return context.WithValue(sctx, announcedKey{}, a), a
}

// unannounce ends an announced invocation that never ran, with err.
func (a *announced) unannounce(err error) {
	if a == nil || a.used {
		return
	}
	a.used = true
	if err == nil {
		err = errors.New("the job ended before its sub-agent started")
	}
	a.em.Emit(event.Event{Type: event.SubagentError, SubagentRunID: a.runID, Message: err.Error(), Code: errorCode(err)})
}

func errorCode(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrNoJSON):
		return "invalid_output"
	case errors.Is(err, tool.ErrPanic), errors.Is(err, agent.ErrProviderPanic):
		return "panic"
	}
	return agent.ErrorCode(err)
}

// run makes the call's runs of the child: the first and, when the answer is
// rejected, the corrective one. It recovers a panicking child.
func (t *SubAgentTool) run(ctx context.Context, args json.RawMessage, in agent.Input, runID string) (res tool.Result, err error) {
	name := t.def.Name
	var usage provider.Usage
	var restore func() // puts a resident's conversation back
	holding := false   // the tool's turn is ours
	var held *agent.Turn

	// end ends a stored resident's turn (WithStore).
	var end func(ok bool) error
	// One deferred function, so that the order holds when the child
	// panics too: recover, store or undo the resident's runs, then give up
	// the turns.
	defer func() {
		if p := recover(); p != nil {
			res, err = tool.Result{}, tool.Correctable(tool.Panicked(name, p))
		}
		if end != nil {
			if e := end(err == nil); e != nil {
				res, err = tool.Result{}, e
			}
		}
		if err != nil && restore != nil {
			restore()
		}
		if held != nil {
			held.Release()
		}
		if holding {
			t.turn.Release(1)
		}
		res.Usage = usage
	}()

	if t.resident != nil {
		if err := t.pause.admit(ctx, name); err != nil {
			return tool.Result{}, err
		}
		defer func() { t.pause.after(ctx, err) }()
		if t.cfg.refuseBusy {
			if !t.turn.TryAcquire(1) {
				return tool.Result{}, tool.Correctable(fmt.Errorf("%w: %q is answering another call: wait for that answer, then ask again", ErrBusy, name))
			}
		} else if err := t.turn.Acquire(ctx, 1); err != nil {
			return tool.Result{}, fmt.Errorf("subagent %q: waiting for its previous call to end: %w", name, err)
		}
		holding = true
		// A stored resident is brought to the stored conversation first,
		// before its own turn is held (Restore takes that turn).
		if d := t.cfg.durable; d != nil {
			if end, err = d.begin(ctx, name, t.resident.(Persistent), t.cfg.refuseBusy); err != nil {
				return tool.Result{}, err
			}
		}
		// The agent's own turn is held for all the call's runs, so that
		// the conversation put back on failure is the one this call found,
		// with the runs of other callers of the same agent (another tool,
		// a direct Run) that finished before it.
		switch a := t.resident.(type) {
		case holder:
			var err error
			if ctx, held, err = a.Hold(ctx); err != nil {
				return tool.Result{}, fmt.Errorf("subagent %q: %w", name, err)
			}
			restore = held.Rollback
		case checkpointer:
			restore = a.Checkpoint()
		}
	}

	attempt := func(in agent.Input) (agent.Output, error) {
		a := t.resident
		switch {
		case a == nil && t.limited != nil:
			left := t.budget - usage.Tokens()
			if left <= 0 {
				return agent.Output{}, tool.Correctable(fmt.Errorf("%w: %w: %q spent its budget of %d tokens before it could try again: give it a smaller task",
					ErrChildFailed, agent.ErrUsageLimit, name, t.budget))
			}
			var err error
			if a, err = t.limited(left); err != nil {
				return agent.Output{}, fmt.Errorf("subagent %q: building the agent: %w", name, err)
			}
		case a == nil:
			var err error
			if a, err = t.factory(ctx, args); err != nil {
				if tool.IsCorrectable(err) {
					return agent.Output{}, fmt.Errorf("subagent %q: %w", name, err)
				}
				return agent.Output{}, fmt.Errorf("subagent %q: building the agent: %w", name, err)
			}
			if a == nil {
				return agent.Output{}, fmt.Errorf("subagent %q: the factory returned no agent and no error", name)
			}
			if c, ok := a.(io.Closer); ok {
				defer c.Close()
			}
		}
		out, err := a.Run(ctx, in)
		usage = usage.Add(out.TotalUsage())
		if err != nil && ctx.Err() == nil && !interrupted(err) {
			err = tool.Correctable(fmt.Errorf("%w: %q: %w", ErrChildFailed, name, err))
		}
		return out, err
	}

	task := in.Text
	if c := t.cfg.check; c != nil {
		// The child is told the shape on its first try: through the
		// provider's structured output where it has one, and in words.
		in.ResponseSchema = c.schema.Raw()
		if !t.shapeTold {
			in.Text = joinPrompts(in.Text, c.prompt)
		}
	}
	out, err := attempt(in)
	if err != nil {
		return tool.Result{}, err
	}
	o := Outcome{RunID: runID}
	content := out.Answer
	if c := t.cfg.check; c != nil {
		v, err := c.check(ctx, out.Answer)
		if err != nil {
			return tool.Result{}, fmt.Errorf("subagent %q: checking the answer: %w", name, err)
		}
		if v.problem != nil {
			retry := agent.Input{Text: c.correction(v.problem), ResponseSchema: in.ResponseSchema, CacheKey: in.CacheKey}
			if t.resident == nil {
				retry.Text = task + "\n\n" + retry.Text + "\nYour rejected answer was:\n" + out.Answer
				retry.Messages = in.Messages
			}
			if out, err = attempt(retry); err != nil {
				return tool.Result{}, err
			}
			if v, err = c.check(ctx, out.Answer); err != nil {
				return tool.Result{}, fmt.Errorf("subagent %q: checking the answer: %w", name, err)
			}
		}
		switch {
		case v.problem == nil:
			content, o.Value = v.raw, v.value
		case c.result && !v.found:
			return tool.Result{}, tool.Correctable(fmt.Errorf("%w: %q answered twice without the JSON result asked for: %s",
				ErrNoJSON, name, clip(out.Answer, 200)))
		case c.result:
			r := Result{Status: StatusFailed, Summary: out.Answer}
			content, o.Value = fitResult(r, t.cfg.maxOutput), r
		default:
			content = withNote(out.Answer, v.problem.Error(), t.cfg.maxOutput)
		}
	}
	o.Output, o.Usage, o.Content = out, usage, content
	if t.cfg.render != nil {
		if content, err = t.cfg.render(ctx, o); err != nil {
			return tool.Result{}, fmt.Errorf("subagent %q: rendering the result: %w", name, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// A child that ignored its cancellation does not get to answer, and
		// a resident's conversation does not keep the turn.
		return tool.Result{}, fmt.Errorf("subagent %q: %w", name, context.Cause(ctx))
	}
	if content == "" {
		content = "(the sub-agent gave an empty answer)"
	}
	return tool.Result{Content: capOutput(content, t.cfg.maxOutput), Value: o.Value}, nil
}

// capOutput makes s valid UTF-8 and at most max bytes, cutting on a rune
// boundary and saying so.
func capOutput(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	marker := "\n[output truncated: " + strconv.Itoa(len(s)) + " bytes, the first " // + kept + " shown]"
	// The count of bytes kept has no more digits than max.
	cut := max - len(marker) - len(" shown]") - len(strconv.Itoa(max))
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker + strconv.Itoa(cut) + " shown]"
}

// withNote returns the answer followed by the validation note, in at most
// limit bytes: the answer is cut, never the note, which the model needs to
// know that the answer is not what it asked for. A note longer than a
// quarter of limit is cut itself.
func withNote(answer, problem string, limit int) string {
	const open, end = "\n\n[validation failed: ", "]"
	room := max(limit/4-len(open)-len(end), 0)
	if len(problem) > room {
		cut := max(room-len("…"), 0)
		for cut > 0 && !utf8.RuneStart(problem[cut]) {
			cut--
		}
		problem = problem[:cut] + "…"
	}
	note := open + problem + end
	return capOutput(answer, limit-len(note)) + note
}

// cappedError is an error whose text is cut to the output cap; errors.Is
// and errors.As still see the whole chain.
type cappedError struct {
	err error
	msg string
}

func (e *cappedError) Error() string { return e.msg }
func (e *cappedError) Unwrap() error { return e.err }

// capError caps the text of err at limit bytes, like an answer.
func capError(err error, limit int) error {
	msg := err.Error()
	if len(msg) <= limit {
		return err
	}
	return &cappedError{err: err, msg: capOutput(msg, limit)}
}

// fitResult encodes r in at most max bytes, shortening its summary (and
// saying so) rather than cutting the JSON, so that what the model reads
// stays a Result.
func fitResult(r Result, limit int) string {
	b, _ := json.Marshal(r)
	for len(b) > limit && r.Summary != summaryCut {
		// Each byte of summary cut takes at least one byte of JSON away.
		keep := max(0, len(r.Summary)-(len(b)-limit)-len(summaryCut))
		for keep > 0 && !utf8.RuneStart(r.Summary[keep]) {
			keep--
		}
		r.Summary = r.Summary[:keep] + summaryCut
		b, _ = json.Marshal(r)
	}
	return string(b)
}

const summaryCut = " [truncated]"

func clip(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…"
}
