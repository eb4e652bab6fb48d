package mcpbridge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/tool"
)

// Bounds on the calls a Server keeps waiting for a client's answers.
const (
	// maxWaiting bounds the calls waiting for answers across all sessions.
	maxWaiting = 1024
	// waitFor is how long a call waits for its answers before it is
	// forgotten.
	waitFor = 15 * time.Minute
	// maxRounds bounds the rounds of questions one call may ask.
	maxRounds = 8
)

// waiting is a served call that asked its client questions (tool.Ask) and
// waits for the answers: the turn's journal keeps what it did, and the
// retry that carries the answers resumes it.
type waiting struct {
	session string // the session that was asked: only it may answer
	tool    string
	args    [32]byte // the arguments' hash: an answer is for this call only
	callID  string
	turn    string
	asked   *tool.Interrupted
	rounds  int
	expires time.Time
}

// answerable reports whether the client of ss can be asked questions.
func answerable(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil
}

// multiRoundTrip reports whether the client of ss speaks a protocol
// version in which a call asks by returning its questions (MCP's
// multi-round-trip requests), which the client answers by calling again;
// with older versions the server asks with elicitation requests during
// the call.
func multiRoundTrip(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip == nil || ip.ProtocolVersion >= "2026-07-28"
}

// run runs call under the journal of its turn, resumed with answers to
// w's questions when w is not nil, until it finishes or asks questions the
// client must answer in a later request. Over an older protocol the
// questions are asked here, during the call, and the call resumed.
func (s *Server) run(ctx context.Context, ss *mcp.ServerSession, call tool.Call, w *waiting, answers []tool.Answer) (tool.Result, *mcp.CallToolResult, error) {
	if w == nil {
		w = &waiting{tool: call.Name, callID: call.ID, args: sha256.Sum256(call.Arguments), turn: "mcp/" + randomID()}
		if ss != nil {
			w.session = s.sessions.name(ss)
		}
	}
	for {
		j, err := s.st.Journal(ctx, w.turn)
		if err != nil {
			return tool.Result{}, nil, fmt.Errorf("the server could not open the call's journal: %w", err)
		}
		rctx := agent.WithJournal(ctx, j)
		if w.asked != nil {
			if rctx, err = tool.Resume(rctx, w.asked, answers...); err != nil {
				s.forget(w.turn)
				return tool.Result{}, errorResult(fmt.Sprintf("tool %s: the answer does not fit the question (%v): call the tool again and answer as asked", call.Name, err)), nil
			}
		}
		results, err := s.reg.Execute(rctx, []tool.Call{call})
		var asked *tool.Interrupted
		if !errors.As(err, &asked) {
			s.forget(w.turn)
			return results[0], nil, err
		}
		w.rounds++
		switch {
		case ss == nil || !answerable(ss):
			s.forget(w.turn)
			return tool.Result{}, errorResult(cannotAsk(call.Name, asked)), nil
		case w.rounds > maxRounds:
			s.forget(w.turn)
			return tool.Result{}, errorResult(fmt.Sprintf("tool %s asked more than %d rounds of questions in one call; it was stopped: call it again", call.Name, maxRounds)), nil
		}
		requests, err := questions(asked)
		if err != nil {
			s.forget(w.turn)
			return tool.Result{}, errorResult(fmt.Sprintf("tool %s needs an answer this server cannot ask over MCP (%v): ask the server's operator to serve it another way", call.Name, err)), nil
		}
		w.asked = asked
		if multiRoundTrip(ss) {
			token, err := s.wait(w)
			if err != nil {
				s.forget(w.turn)
				return tool.Result{}, errorResult(err.Error()), nil
			}
			return tool.Result{}, &mcp.CallToolResult{InputRequests: requests, RequestState: token}, nil
		}
		responses := make(mcp.InputResponseMap, len(requests))
		for id, r := range requests {
			res, err := ss.Elicit(ctx, r.(*mcp.ElicitParams))
			if err != nil {
				s.forget(w.turn)
				if ctx.Err() != nil {
					return tool.Result{}, nil, context.Cause(ctx)
				}
				return tool.Result{}, errorResult(fmt.Sprintf("tool %s asked a question the client did not answer (%v): call the tool again", call.Name, err)), nil
			}
			responses[id] = res
		}
		answers = answersOf(asked, responses)
	}
}

// cannotAsk is what a client that cannot answer reads: what the tool
// wanted to ask, and what its user can do.
func cannotAsk(name string, asked *tool.Interrupted) string {
	var qs []string
	for _, it := range asked.Interrupts {
		if it.Message != "" {
			qs = append(qs, fmt.Sprintf("%q", it.Message))
		}
	}
	what := "a person's answer"
	if asked.Interrupts[0].Reason == tool.ApprovalReason {
		what = "a person's approval"
	}
	msg := fmt.Sprintf("tool %s did not run: it needs %s first", name, what)
	if len(qs) > 0 {
		msg += " (" + strings.Join(qs, "; ") + ")"
	}
	return msg + ", and this MCP client cannot be asked questions (it does not support MCP elicitation). Use an MCP client that supports elicitation, or ask the server's operator to serve this tool without the question."
}

// questions turns a round of interrupts into MCP's elicitation requests,
// keyed by interrupt id.
func questions(asked *tool.Interrupted) (mcp.InputRequestMap, error) {
	out := make(mcp.InputRequestMap, len(asked.Interrupts))
	for _, it := range asked.Interrupts {
		schema, err := formSchema(it.ResponseSchema)
		if err != nil {
			return nil, fmt.Errorf("question %q: %w", it.Message, err)
		}
		msg := it.Message
		if msg == "" {
			msg = it.Reason
		}
		out[it.ID] = &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: schema}
	}
	return out, nil
}

// freeAnswer is the form that asks a question without a response schema:
// one text field, whose text is the answer's payload.
const freeAnswer = `{"type":"object","properties":{"answer":{"type":"string","title":"Answer"}},"required":["answer"]}`

// formSchema returns the schema to ask with: the question's own when MCP
// elicitation can carry it (an object of properties of primitive types),
// or freeAnswer when the question has none.
func formSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage(freeAnswer), nil
	}
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Type != "object" {
		return nil, errors.New("its response schema is not an object schema, which is all MCP elicitation asks for")
	}
	for name, p := range s.Properties {
		var prop struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(p, &prop)
		switch prop.Type {
		case "string", "number", "integer", "boolean":
		case "array": // a multi-select enum
		default:
			return nil, fmt.Errorf("its property %q is not a string, number, integer, boolean or enum, which is all MCP elicitation asks for", name)
		}
	}
	return raw, nil
}

// answersOf turns a client's responses into answers. An accepted form is
// the answer; a declined approval is a refusal, any other decline or a
// cancel cancels the question. A question left without a response is
// asked again.
func answersOf(asked *tool.Interrupted, responses mcp.InputResponseMap) []tool.Answer {
	var out []tool.Answer
	for _, it := range asked.Interrupts {
		r, ok := responses[it.ID].(*mcp.ElicitResult)
		if !ok || r == nil {
			continue
		}
		a := tool.Answer{InterruptID: it.ID, Status: tool.Cancelled}
		switch {
		case r.Action == "accept" && len(it.ResponseSchema) == 0:
			a.Status = tool.Resolved
			a.Payload, _ = json.Marshal(r.Content["answer"])
		case r.Action == "accept":
			a.Status = tool.Resolved
			a.Payload, _ = json.Marshal(r.Content)
			if r.Content == nil {
				a.Payload = json.RawMessage("{}")
			}
		case r.Action == "decline" && it.Reason == tool.ApprovalReason:
			a.Status = tool.Resolved
			a.Payload = json.RawMessage(`{"approved":false,"note":"the person declined"}`)
		}
		out = append(out, a)
	}
	return out
}

// wait keeps w until its client answers, and returns the state the
// client echoes with its answers.
func (s *Server) wait(w *waiting) (string, error) {
	now := time.Now()
	w.expires = now.Add(waitFor)
	var expired []string
	defer func() {
		for _, turn := range expired {
			s.forget(turn)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) >= maxWaiting {
		for token, o := range s.waiting {
			if now.After(o.expires) {
				delete(s.waiting, token)
				expired = append(expired, o.turn)
			}
		}
	}
	if len(s.waiting) >= maxWaiting {
		return "", fmt.Errorf("tool %s asked a question, but the server has %d calls waiting for answers already: call it again later", w.tool, maxWaiting)
	}
	token := randomID()
	s.waiting[token] = w
	return token, nil
}

// resume takes the call that waits under token, if it is the call req
// makes from the session that was asked, once.
func (s *Server) resume(token string, ss *mcp.ServerSession, call tool.Call) (*waiting, error) {
	s.mu.Lock()
	w, ok := s.waiting[token]
	if ok && w.session == s.sessionName(ss) && w.tool == call.Name && w.args == sha256.Sum256(call.Arguments) {
		delete(s.waiting, token)
	} else {
		w = nil
	}
	s.mu.Unlock()
	if w == nil || time.Now().After(w.expires) {
		if w != nil {
			s.forget(w.turn)
		}
		return nil, fmt.Errorf("tool %s: these answers are for a question this server is not waiting on (answered already, expired after %v, or asked in another session or call): call the tool again", call.Name, waitFor)
	}
	return w, nil
}

func (s *Server) sessionName(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	return s.sessions.name(ss)
}

// forget deletes the journal of a call that will not be resumed.
func (s *Server) forget(turn string) {
	_ = s.st.DeleteJournal(context.Background(), turn)
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
