package devui

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/deputy-go/deputy/cassette"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/ledger"
	"github.com/deputy-go/deputy/provider"
)

// WithCassette lets the viewer draw the tree of a recorded run: c, a
// cassette (cassette.Load) whose calls are drawn as a run's, each place in
// the tree a node with what its model said, the tools it called and what
// it spent. The page lists it beside the stored threads; GET /cassette
// serves it, in the form GET /runs serves a thread's runs. It is shown to
// whoever may load the page.
func WithCassette(c *cassette.Cassette) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("devui: WithCassette(nil): pass a cassette (cassette.Load), or leave the option out")
		}
		cfg.cassette = c
		return nil
	}
}

// cassetteRun is a cassette as the events of one run, for the page.
func cassetteRun(c *cassette.Cassette) []event.Event {
	byPos := map[string][]cassette.Entry{}
	kids := map[string][]string{}
	var tops []string
	for _, e := range c.Entries() { // sorted by position, then step
		if _, ok := byPos[e.Position]; !ok {
			if i := strings.LastIndexByte(e.Position, '/'); i >= 0 {
				kids[e.Position[:i]] = append(kids[e.Position[:i]], e.Position)
			} else {
				tops = append(tops, e.Position)
			}
		}
		byPos[e.Position] = append(byPos[e.Position], e)
	}
	const runID = "cassette"
	evs := []event.Event{{Type: event.RunStarted, ThreadID: runID, RunID: runID}}
	var last string
	var total []provider.ModelUsage
	var walk func(pos, runID string) []provider.ModelUsage
	walk = func(pos, sub string) []provider.ModelUsage {
		var spent []provider.ModelUsage
		for _, e := range byPos[pos] {
			msg := pos + "#" + strconv.Itoa(e.Step)
			if e.Response.Content != "" {
				evs = append(evs, event.Event{Type: event.TextMessageContent, SubagentRunID: sub, MessageID: msg, Delta: e.Response.Content})
			}
			for i, tc := range e.Response.ToolCalls {
				id := callID(pos, e.Step+1, i)
				evs = append(evs,
					event.Event{Type: event.ToolCallStart, SubagentRunID: sub, ToolCallID: id, ToolCallName: tc.Name, ParentMessageID: msg},
					event.Event{Type: event.ToolCallArgs, SubagentRunID: sub, ToolCallID: id, Delta: tc.Arguments},
					event.Event{Type: event.ToolCallEnd, SubagentRunID: sub, ToolCallID: id})
			}
			spent = addUsage(spent, provider.ModelUsage{Provider: c.Provider(), Model: e.Response.Model, Usage: e.Response.Usage})
			if sub == "" {
				last = e.Response.Content
			}
		}
		for _, k := range kids[pos] {
			seg := k[len(pos)+1:]
			name, at, _ := strings.Cut(seg, "@")
			step, index, _ := strings.Cut(at, ".")
			s, _ := strconv.Atoi(step)
			i, _ := strconv.Atoi(index)
			evs = append(evs, event.Event{Type: event.SubagentStarted, SubagentRunID: k, Name: name, ParentSubagentRunID: sub, ParentToolCallID: callID(pos, s, i)})
			u := walk(k, k)
			for _, m := range u {
				spent = addUsage(spent, m)
			}
			fin := event.Event{Type: event.SubagentFinished, SubagentRunID: k, Usage: ledger.Encode(u, sum(u), false)}
			if es := byPos[k]; len(es) > 0 {
				end := es[len(es)-1]
				fin.Model = es[0].Response.Model
				if end.Error != "" {
					fin.Type, fin.Message = event.SubagentError, end.Error
				} else {
					fin.Result = event.JSONString(end.Response.Content)
				}
			}
			evs = append(evs, fin)
		}
		return spent
	}
	for _, top := range tops {
		for _, m := range walk(top, "") {
			total = addUsage(total, m)
		}
	}
	return append(evs, event.Event{Type: event.RunFinished, ThreadID: runID, RunID: runID, Result: event.JSONString(last), Usage: ledger.Encode(total, sum(total), false)})
}

// callID names the call of the agent at pos, in its step (from 1) and at
// index, that started a sub-agent at pos+"/name@step.index".
func callID(pos string, step, index int) string {
	return pos + "@" + strconv.Itoa(step) + "." + strconv.Itoa(index)
}

func addUsage(list []provider.ModelUsage, m provider.ModelUsage) []provider.ModelUsage {
	for i := range list {
		if list[i].Provider == m.Provider && list[i].Model == m.Model {
			list[i].Usage = list[i].Usage.Add(m.Usage)
			return list
		}
	}
	return append(list, m)
}

func sum(list []provider.ModelUsage) provider.Usage {
	var u provider.Usage
	for _, m := range list {
		u = u.Add(m.Usage)
	}
	return u
}

// serveCassette serves WithCassette's cassette as one run's events.
func (d *Handler) serveCassette(w http.ResponseWriter, r *http.Request) {
	if d.cassette == nil {
		httpError(w, http.StatusNotFound, "no cassette: serve the viewer WithCassette")
		return
	}
	evs := cassetteRun(d.cassette)
	raw := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		b, err := e.MarshalJSON()
		if err != nil {
			httpError(w, http.StatusInternalServerError, "encoding the cassette: "+err.Error())
			return
		}
		raw[i] = b
	}
	writeJSON(w, map[string]any{"runs": []map[string]any{{"runId": "cassette", "events": raw}}})
}
