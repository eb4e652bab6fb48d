// Package bigtree builds the delegation tree the record, replay and
// assertion tests and benchmarks run: a lead that calls three researchers
// and a deploy tool a person must approve; each researcher fans out to 16
// analysts at once (one researcher also calls a publish tool that asks
// for approval); each analyst answers in subagent.ResultSchema, a few of
// them wrongly at first, so that they are asked again. That is 51
// sub-agent invocations on three levels. Its model (Model) answers by the
// agent that asks and what it was sent, as a live model would, naming its
// tool calls in one of three ways. It is imported by tests only.
package bigtree

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/event"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// How the model names its tool calls.
const (
	IDsFresh   = iota // a new id on every call of every request, as real models do
	IDsNone           // no ids at all
	IDsRestart        // call_0, call_1, … again in every response
)

// Shape of the tree.
const (
	Researchers = 3
	FanOut      = 16
	// Nodes is the number of sub-agent invocations of a run.
	Nodes = Researchers + Researchers*FanOut
)

// Model is the live model of the tree. Calls counts the calls it answered.
type Model struct {
	IDs   int
	Calls atomic.Int64
	ids   atomic.Int64
}

// Complete answers as the agent that asks would be answered.
func (m *Model) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	m.Calls.Add(1)
	msg := m.answer(agent.Name(ctx), req)
	in := 0
	for _, mm := range req.Messages {
		in += len(mm.Content) + len(mm.ToolCalls)*40
	}
	u := provider.Usage{InputTokens: int64(len(req.System)+in)/4 + 1, OutputTokens: int64(len(msg.Content))/4 + 1 + int64(10*len(msg.ToolCalls)), Requests: 1}
	stop := provider.StopEndTurn
	if len(msg.ToolCalls) > 0 {
		stop = provider.StopToolUse
	}
	return provider.Response{Message: msg, Usage: u, StopReason: stop, Model: "tree-model"}, nil
}

func (m *Model) answer(name string, req provider.Request) provider.Message {
	var results []string
	for _, mm := range req.Messages {
		if mm.Role == provider.RoleTool {
			results = append(results, mm.Content)
		}
	}
	task, asked := "", ""
	for _, mm := range req.Messages {
		if mm.Role == provider.RoleUser {
			asked = mm.Content
			task, _, _ = strings.Cut(asked, "\n")
			break
		}
	}
	var calls []provider.ToolCall
	call := func(name, args string) {
		id := ""
		switch m.IDs {
		case IDsFresh:
			id = "call_" + strconv.FormatInt(m.ids.Add(1), 10)
		case IDsRestart:
			id = "call_" + strconv.Itoa(len(calls))
		}
		calls = append(calls, provider.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)})
	}
	switch name {
	case "lead":
		if len(results) == 0 {
			for k := range Researchers {
				call("research", `{"task":"topic `+strconv.Itoa(k)+`"}`)
			}
			call("deploy", `{"target":"prod"}`)
			return provider.AssistantMessage("I will ask my researchers.", calls...)
		}
		return provider.AssistantMessage(fmt.Sprintf("Report on %d results: %s", len(results), digest(results)))
	case "researcher":
		if len(results) == 0 {
			for j := range FanOut {
				call("analyst", `{"task":"`+task+` part `+strconv.Itoa(j)+`"}`)
			}
			if strings.HasSuffix(task, "topic 1") {
				call("publish", `{"what":"`+task+`"}`)
			}
			return provider.AssistantMessage("", calls...)
		}
		return provider.AssistantMessage(fmt.Sprintf("Summary of %s from %d results: %s", task, len(results), digest(results)))
	case "analyst":
		j, _ := strconv.Atoi(task[strings.LastIndexByte(task, ' ')+1:])
		if j%4 == 1 && !strings.Contains(asked, "rejected") {
			return provider.AssistantMessage("It looks fine to me.") // not the report asked for: asked again
		}
		status := "success"
		switch {
		case j%7 == 3:
			status = "partial"
		case j == 6:
			status = "failed"
		}
		return provider.AssistantMessage(`{"status":"` + status + `","summary":"` + task + ` looked at","findings":{"part":` + strconv.Itoa(j) + `}}`)
	}
	return provider.AssistantMessage("I am " + name + ".")
}

// digest is a short, deterministic sum of results.
func digest(results []string) string {
	n := 0
	for _, r := range results {
		n += len(r)
	}
	return strconv.Itoa(n) + " bytes"
}

// Tree is one tree's agents, over a provider, and what its tools did.
type Tree struct {
	Lead *agent.React
	// Deploys and Publishes count the approved tools' runs.
	Deploys, Publishes atomic.Int64
	// AnalystPrompt, when it returns a non-empty prompt for an analyst's
	// task, replaces that analyst's system prompt.
	AnalystPrompt func(task string) string
}

// New builds the tree over p.
func New(p provider.Provider) (*Tree, error) {
	t := &Tree{}
	type taskArgs struct {
		Task string `json:"task"`
	}
	taskInput := func(args json.RawMessage) (agent.Input, error) {
		var a taskArgs
		if err := json.Unmarshal(args, &a); err != nil || a.Task == "" {
			return agent.Input{}, errors.New("give a task")
		}
		return agent.Input{Text: a.Task}, nil
	}
	analyst, err := subagent.FromFactory("analyst", "Looks closely at one part.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		in, err := taskInput(args)
		if err != nil {
			return nil, err
		}
		prompt := "You are a careful analyst."
		if t.AnalystPrompt != nil {
			if s := t.AnalystPrompt(in.Text); s != "" {
				prompt = s
			}
		}
		return agent.NewReact(p, agent.WithName("analyst"), agent.WithSystemPrompt(prompt))
	}, subagent.WithInputFromArgs(taskInput), subagent.WithReport(), subagent.WithMaxDepth(2))
	if err != nil {
		return nil, err
	}
	publish, err := tool.New("publish", "Publishes a finding.", func(ctx context.Context, in struct {
		What string `json:"what"`
	}) (string, error) {
		t.Publishes.Add(1)
		return "published " + in.What, nil
	})
	if err != nil {
		return nil, err
	}
	researcherTools, err := tool.NewRegistry(analyst, tool.RequireApproval(publish, "publishes outside", 0))
	if err != nil {
		return nil, err
	}
	researcher, err := subagent.FromFactory("research", "Researches a topic with a team of analysts.", func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(p, agent.WithName("researcher"), agent.WithSystemPrompt("You lead a team of analysts."), agent.WithRegistry(researcherTools))
	}, subagent.WithInputFromArgs(taskInput), subagent.WithMaxDepth(2))
	if err != nil {
		return nil, err
	}
	deploy, err := tool.New("deploy", "Deploys the result.", func(ctx context.Context, in struct {
		Target string `json:"target"`
	}) (string, error) {
		t.Deploys.Add(1)
		return "deployed to " + in.Target, nil
	})
	if err != nil {
		return nil, err
	}
	t.Lead, err = agent.NewReact(p, agent.WithName("lead"), agent.WithSystemPrompt("You plan research and deploy it."),
		agent.WithTools(researcher, tool.RequireApproval(deploy, "changes production", 0)))
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Run runs the tree's turn: a first run that stops for the approvals, and
// a resumed one that approves them all. sink sees the events of both
// runs (a subagent.Tree, say). It returns the resumed run's output and
// the interrupts the first run asked.
func (t *Tree) Run(ctx context.Context, sink event.Sink) (agent.Output, []tool.Interrupt, error) {
	st, err := store.New(memory.New())
	if err != nil {
		return agent.Output{}, nil, err
	}
	defer st.Close()
	j, err := st.Journal(ctx, "turn")
	if err != nil {
		return agent.Output{}, nil, err
	}
	in := agent.Input{Text: "Research the three topics and deploy."}
	ectx := event.WithSink(ctx, sink)
	_, err = t.Lead.Run(agent.WithJournal(ectx, j), in)
	var asked *tool.Interrupted
	if !errors.As(err, &asked) {
		return agent.Output{}, nil, fmt.Errorf("the first run should stop for approvals, it ended with %v", err)
	}
	var answers []tool.Answer
	for _, it := range asked.Interrupts {
		answers = append(answers, tool.Answer{InterruptID: it.ID, Status: tool.Resolved, Payload: json.RawMessage(`{"approved":true}`)})
	}
	rctx, err := tool.Resume(ectx, asked, answers...)
	if err != nil {
		return agent.Output{}, nil, err
	}
	if j, err = st.Journal(ctx, "turn"); err != nil {
		return agent.Output{}, nil, err
	}
	out, err := t.Lead.Run(agent.WithJournal(rctx, j), in)
	return out, asked.Interrupts, err
}
