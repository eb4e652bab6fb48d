package agentfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Definition is one loaded definition as the program resolved it.
type Definition struct {
	// Name is the sub-agent's tool name; Description what the delegating
	// model reads to choose it; SystemPrompt the body (or prompt).
	Name, Description, SystemPrompt string
	// File is the file it was read from, in the directory loaded.
	File string
	// Hash is "sha256:" and the hex SHA-256 of the file's bytes, and of
	// the schema file it names, if any: what the journal records with
	// each invocation.
	Hash string
	// Provider is the name of the provider it runs on (WithProvider), and
	// Model the model ("": the provider's choice).
	Provider, Model string
	// Tools are the names of the tools it is given; Delegates the
	// sub-agents of the roster it may delegate to (Agent(…) in tools).
	Tools, Delegates []string
	// Output is its result contract: "", "report", "type:<name>",
	// "schema" (inline) or "file:<path>".
	Output string
	// The limits its file sets (zero: not set): maxTurns, tokenLimit,
	// costLimit, timeout, maxDepth.
	MaxSteps   int
	TokenLimit int64
	CostLimit  float64
	Timeout    time.Duration
	MaxDepth   int
	// Background: the roster's spawn tool may start it as a job.
	Background bool
	// Color is the display color it names, for a program that shows one.
	Color string
}

// DefinitionEvent is the name of the AG-UI CUSTOM event each run of a
// loaded sub-agent emits, in the sub-agent's scope: its value is a JSON
// object with "name", "file" and "hash" (Definition.Hash).
const DefinitionEvent = "deputy.definition"

// ErrChanged is the error of a resumed invocation whose definition is not
// the one it started with: the file was edited, or another file took its
// name, after the turn began.
var ErrChanged = errors.New("agentfile: the sub-agent's definition changed since its turn started")

// ErrRefused is the error a hook's refusal of a tool call wraps; the
// model reads it.
var ErrRefused = errors.New("agentfile: a hook refused the tool call")

// Hook is code the program trusts (WithHook), run around the tool calls of
// the sub-agents whose files name it. On PreToolUse an error refuses the
// call; on PostToolUse an error replaces the call's result. Either way
// the model reads the error (it wraps ErrRefused). A hook must be safe for
// concurrent use.
type Hook func(ctx context.Context, in HookInput) error

// HookInput is what a Hook is called with.
type HookInput struct {
	// Event is "PreToolUse" or "PostToolUse".
	Event string
	// Agent is the name of the sub-agent making the call.
	Agent string
	// Call is the tool call.
	Call tool.Call
	// Result is the call's result, on PostToolUse.
	Result tool.Result
}

// Roster is one load's sub-agents. It does not change: a program that
// reloads a directory gets a new Roster, and a run that started with the
// old one keeps it (hold the current one in an atomic.Pointer and read it
// once per run).
type Roster struct {
	defs     []Definition
	members  []*subagent.SubAgentTool
	warnings []Problem
}

// Definitions returns the loaded definitions, by name.
func (r *Roster) Definitions() []Definition {
	out := make([]Definition, len(r.defs))
	for i, d := range r.defs {
		d.Tools, d.Delegates = slices.Clone(d.Tools), slices.Clone(d.Delegates)
		out[i] = d
	}
	return out
}

// Members returns one sub-agent tool per definition, by name: for
// subagent.WithRoster, or to give an agent one at a time.
func (r *Roster) Members() []*subagent.SubAgentTool { return slices.Clone(r.members) }

// Tools returns the members as tool.Tool, for agent.WithTools.
func (r *Roster) Tools() []tool.Tool {
	out := make([]tool.Tool, len(r.members))
	for i, m := range r.members {
		out[i] = m
	}
	return out
}

// Member returns the sub-agent tool of the definition named name.
func (r *Roster) Member(name string) (*subagent.SubAgentTool, bool) {
	i := slices.IndexFunc(r.defs, func(d Definition) bool { return d.Name == name })
	if i < 0 {
		return nil, false
	}
	return r.members[i], true
}

// SpawnOptions returns the options that give subagent.NewSpawner this
// roster: WithRoster with every member, and WithBackground when a
// definition says background: true.
func (r *Roster) SpawnOptions() []subagent.SpawnOption {
	opts := []subagent.SpawnOption{subagent.WithRoster(r.members...)}
	if slices.ContainsFunc(r.defs, func(d Definition) bool { return d.Background }) {
		opts = append(opts, subagent.WithBackground())
	}
	return opts
}

// Warnings returns what a load under WithUnsupported(Warn) ignored.
func (r *Roster) Warnings() []Problem { return slices.Clone(r.warnings) }

// member is one definition being turned into a sub-agent tool.
type member struct {
	def       *Definition
	p         provider.Provider
	tools     []tool.Tool
	hooks     []hook
	subOpts   []subagent.Option
	reactOpts []agent.Option // without the registry, added in build
	event     json.RawMessage
}

type hook struct {
	event string
	match *regexp.Regexp // nil: every tool
	fn    Hook
}

// build makes the members' tools: each a FromFactory sub-agent whose
// factory checks the definition against the journal, then builds a ReAct
// agent with the member's tools (the program's, hooked, and the tools of
// the members it delegates to).
func (l *Loader) build(members []*member) (*Roster, *Problem) {
	r := &Roster{}
	byName := map[string]*subagent.SubAgentTool{}
	depth := delegationDepths(members)
	for _, m := range members {
		opts := slices.Clone(l.subOpts)
		d := m.def.MaxDepth
		if d == 0 {
			d = max(depth[m.def.Name], subagent.DefaultMaxDepth)
		}
		m.def.MaxDepth = d
		opts = append(opts, subagent.WithMaxDepth(d))
		opts = append(opts, m.subOpts...)
		m.event, _ = json.Marshal(map[string]string{"name": m.def.Name, "file": m.def.File, "hash": m.def.Hash})
		t, err := subagent.FromFactory(m.def.Name, m.def.Description, m.factory, opts...)
		if err != nil {
			return nil, &Problem{File: m.def.File, Message: fmt.Sprintf("the sub-agent cannot be built: %v", err)}
		}
		byName[m.def.Name] = t
		r.defs = append(r.defs, *m.def)
		r.members = append(r.members, t)
	}
	for _, m := range members {
		tools := slices.Clone(m.tools)
		for _, n := range m.def.Delegates {
			tools = append(tools, byName[n])
		}
		for i, t := range tools {
			if hs := m.hooksFor(t.Definition().Name); len(hs) > 0 {
				tools[i] = &hooked{Tool: t, agent: m.def.Name, hooks: hs}
			}
		}
		if len(tools) > 0 {
			reg, err := tool.NewRegistry(tools...)
			if err != nil {
				return nil, &Problem{File: m.def.File, Key: "tools", Message: fmt.Sprintf("%v: give each tool its own name", err)}
			}
			m.reactOpts = append(m.reactOpts, agent.WithRegistry(reg))
		}
		if _, err := agent.NewReact(m.p, m.reactOpts...); err != nil {
			return nil, &Problem{File: m.def.File, Message: fmt.Sprintf("the sub-agent cannot be built: %v", err)}
		}
	}
	return r, nil
}

// delegationDepths returns, for each member another delegates to, the
// depth it must be allowed to run at: one more than its deepest
// delegator's (a cycle is cut at 8).
func delegationDepths(members []*member) map[string]int {
	need := map[string]int{}
	for range 8 {
		changed := false
		for _, m := range members {
			from := max(need[m.def.Name], 1)
			for _, n := range m.def.Delegates {
				if v := min(from+1, 8); need[n] < v {
					need[n], changed = v, true
				}
			}
		}
		if !changed {
			break
		}
	}
	return need
}

func (m *member) hooksFor(name string) []hook {
	var out []hook
	for _, h := range m.hooks {
		if h.match == nil || h.match.MatchString(name) {
			out = append(out, h)
		}
	}
	return out
}

// definitionKey is where an invocation's scope of the journal holds the
// hash of the definition it started with.
const definitionKey = "~definition"

// factory builds one run's agent. Under a journal, the first run of an
// invocation records the definition's hash in the invocation's scope, and
// every later one (a corrective retry, a resumed run of the turn) checks
// it: an invocation never continues under another definition.
func (m *member) factory(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
	if js := journal.From(ctx); js != nil {
		key := js.Prefix + definitionKey
		if e, ok := js.J.Lookup(key); ok {
			if e.Content != m.def.Hash {
				return nil, fmt.Errorf("%w: %q started under %s and the loaded %s is %s: resume the turn with the roster it started with, or abandon the turn and run it again", ErrChanged, m.def.Name, e.Content, m.def.File, m.def.Hash)
			}
		} else if err := js.J.Record(ctx, key, journal.Entry{Content: m.def.Hash}); err != nil {
			return nil, fmt.Errorf("agentfile: recording the definition of %q in the journal: %w: run the turn again when the store is back", m.def.Name, err)
		}
	}
	if em := event.From(ctx); em.Enabled() {
		em.Emit(event.Event{Type: event.Custom, Name: DefinitionEvent, Value: m.event})
	}
	return agent.NewReact(m.p, m.reactOpts...)
}

// hooked runs a member's hooks around a tool's calls.
type hooked struct {
	tool.Tool
	agent string
	hooks []hook
}

func (h *hooked) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	for _, hk := range h.hooks {
		if hk.event != "PreToolUse" {
			continue
		}
		if err := hk.fn(ctx, HookInput{Event: hk.event, Agent: h.agent, Call: call}); err != nil {
			return tool.Result{}, tool.Correctable(fmt.Errorf("%w %s: %w", ErrRefused, call.Name, err))
		}
	}
	res, err := h.Tool.Call(ctx, call)
	if err != nil {
		return res, err
	}
	for _, hk := range h.hooks {
		if hk.event != "PostToolUse" {
			continue
		}
		if herr := hk.fn(ctx, HookInput{Event: hk.event, Agent: h.agent, Call: call, Result: res}); herr != nil {
			return tool.Result{Usage: res.Usage}, tool.Correctable(fmt.Errorf("%w %s after it ran: %w", ErrRefused, call.Name, herr))
		}
	}
	return res, nil
}

// Available keeps the hooked tool's own availability.
func (h *hooked) Available(ctx context.Context) bool {
	if c, ok := h.Tool.(tool.Conditional); ok {
		return c.Available(ctx)
	}
	return true
}

// RunsAgain keeps the hooked tool's own rule on resume.
func (h *hooked) RunsAgain(call tool.Call) bool {
	if r, ok := h.Tool.(tool.Rerunner); ok {
		return r.RunsAgain(call)
	}
	return false
}
