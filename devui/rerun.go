package devui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
)

// rerunRequest asks to re-run a thread's turn from one of the lead's calls:
// with its task edited (Task) or its answer (Answer), exactly one.
//
// A model may give the same id to calls of different turns, or of
// different steps of one turn (call_0 again in every reply): FromRunID,
// the recorded run whose tree the call is in, names the turn, and Step,
// the lead's step that made the call (from 1, as its events number them),
// the message. Without them the id must be the thread's only one.
type rerunRequest struct {
	ThreadID   string  `json:"threadId"`
	RunID      string  `json:"runId"`
	FromRunID  string  `json:"fromRunId,omitempty"`
	Step       int     `json:"step,omitempty"`
	ToolCallID string  `json:"toolCallId"`
	Task       *string `json:"task,omitempty"`
	Answer     *string `json:"answer,omitempty"`
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
	if req.FromRunID != "" {
		if turn, err = d.turnOf(r.Context(), owner, req.ThreadID, req.FromRunID); err != nil {
			httpError(w, http.StatusBadRequest, "a re-run: "+err.Error())
			return
		}
	}
	msgs, err := cut(th.Messages, req, turn)
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
	ctx := event.WithThread(event.WithSink(r.Context(), event.Stamped(out)), req.ThreadID)
	_, err = lead.Run(ctx, agent.Input{Messages: msgs})
	if err != nil && r.Context().Err() == nil {
		d.log.Warn("devui: a re-run failed", "thread", req.ThreadID, "err", err)
	}
	if d.store != nil && len(out.events) > 0 {
		v, _ := json.Marshal(runLog{RunID: req.RunID, Turn: max(turn, 0), Events: out.events, Truncated: out.truncated, Rerun: &req})
		if err := d.store.Put(context.WithoutCancel(r.Context()), d.runKey(owner, req.ThreadID, req.RunID), v, 0); err != nil {
			d.log.Warn("devui: recording a re-run", "thread", req.ThreadID, "err", err)
		}
	}
}

// turnOf returns where the turn of the recorded run runID starts in the
// thread's conversation.
func (d *Handler) turnOf(ctx context.Context, owner, thread, runID string) (int, error) {
	if d.store == nil {
		return 0, errors.New("runs are not recorded here (WithStore): leave fromRunId out")
	}
	prefix := runPrefix(owner, thread)
	keys, err := d.store.Keys(ctx, prefix, "", MaxRunsListed)
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, "-"+url.PathEscape(runID)) {
			continue
		}
		v, _, err := d.store.Get(ctx, k)
		if err != nil {
			return 0, err
		}
		var l runLog
		if err := json.Unmarshal(v, &l); err != nil {
			return 0, fmt.Errorf("the record of run %q: %v", runID, err)
		}
		return l.Turn, nil
	}
	return 0, fmt.Errorf("no recorded run %q in thread %q", runID, thread)
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

// frames writes events as server-sent events, one frame each, flushed, and
// keeps them up to MaxRunLogBytes.
type frames struct {
	mu        sync.Mutex
	w         io.Writer
	rc        *http.ResponseController
	buf       []byte
	events    []json.RawMessage
	size      int
	truncated bool
}

func (f *frames) Emit(e event.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
